"""Shared test helpers: fake site directories, the real console script in a subprocess, schema validation."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from dsv4_doctor.model.report import SCHEMA_FILE

SCHEMA = json.loads(SCHEMA_FILE.read_text())
REPO = Path(__file__).resolve().parent.parent


def validate(report: dict) -> dict:
    jsonschema.validate(report, SCHEMA)
    return report


class FakeSite:
    """A temporary site directory: dist-infos and module files, put in front of the target with PYTHONPATH."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def dist(self, name: str, version: str | None, *, metadata: bytes | None = None, entry_points: str = "",
             requires: tuple[str, ...] = (), dirname: str | None = None, requires_python: str | None = None,
             direct_url: str | None = None) -> Path:
        d = self.root / (dirname or f"{name.replace('-', '_')}-{version or '0'}.dist-info")
        d.mkdir(parents=True, exist_ok=True)
        if metadata is None:
            lines = ["Metadata-Version: 2.1", f"Name: {name}"] + ([f"Version: {version}"] if version else [])
            lines += [f"Requires-Dist: {r}" for r in requires]
            lines += [f"Requires-Python: {requires_python}"] if requires_python else []
            metadata = ("\n".join(lines) + "\n").encode()
        (d / "METADATA").write_bytes(metadata)
        (d / "INSTALLER").write_text("pip\n")
        if direct_url is not None:
            (d / "direct_url.json").write_text(direct_url)
        if entry_points:
            (d / "entry_points.txt").write_text(textwrap.dedent(entry_points))
        return d

    def file(self, relpath: str, text: str | bytes) -> Path:
        p = self.root / relpath
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(textwrap.dedent(text))
        return p


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def report(self) -> dict:
        return validate(json.loads(self.stdout))

    def check(self, check_id: str) -> dict:
        return next(c for c in self.report["checks"] if c["id"] == check_id)


def doctor_command() -> list[str]:
    exe = shutil.which("dsv4-doctor", path=str(Path(sys.executable).parent)) or shutil.which("dsv4-doctor")
    return [exe] if exe else [sys.executable, "-m", "dsv4_doctor"]


def run_doctor(*args: str, sites: tuple[Path, ...] = (), env: dict | None = None, timeout: float = 120,
               python: str | None = None, cwd: Path | None = None, **popen) -> Run:
    """The installed console script, for real, in a subprocess."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY",
                                                                  "FORCE_COLOR", "NO_COLOR")}
    full_env["PYTHONPATH"] = os.pathsep.join(str(s) for s in sites)
    full_env.update(env or {})
    argv = doctor_command() + list(args) + (["--python", python] if python else [])
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd, **popen)
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


# Each test's doctor runs its probes concurrently; past 8 workers the shared wheel cache and process start-up, not the
# cores, are the limit. The fast suite's tests mostly wait on their probes' subprocesses, so one worker more than the
# cores keeps the cores busy (2 cores: 77 s against 84 s); the slow suite's multi-process torch tests and timeouts get
# one worker per core, so that contention does not stretch what they time.
MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config) -> int:
    cores = os.cpu_count() or 1
    slow = "slow" in (config.getoption("markexpr", "") or "").replace("not slow", "")
    return max(1, min(cores if slow else cores + 1, MAX_WORKERS))


@pytest.fixture
def site(tmp_path) -> FakeSite:
    return FakeSite(tmp_path / "site")


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> str:
    """An interpreter with a bare site-packages (pip, as a venv has it: the fix plans install with it): no torch,
    nothing else but what PYTHONPATH adds."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(root)
    return str(root / "bin" / "python")


def has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def free_port(neighbours: int = 2) -> int:
    """A MASTER_PORT with its next `neighbours` ports free too: the fleet exchange takes + 1, the smoke's CP groups
    + 2.

    Picked below Linux's ephemeral range (32768+), from a block of its own per xdist worker: a port the kernel
    hands out for bind(0) or an outgoing connection could be taken by the other worker's ranks before ours bind it.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = 20000 + (index % 8) * 1500
    for _ in range(200):
        port = random.randrange(low, low + 1500 - neighbours)
        try:
            for near in range(port, port + 1 + neighbours):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", near))
        except OSError:
            continue
        return port
    raise RuntimeError("no free run of ports")


def run_ranks(args: tuple[str, ...] | list[str], rank_envs: list[dict],
              timeout: float) -> list[subprocess.CompletedProcess]:
    """One doctor process per rank at once, each with the test's environment plus its launcher variables (as torchrun
    or srun would set them), GitHub's variables left out; their results in rank order."""
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    procs = [subprocess.Popen(doctor_command() + list(args), env={**base, **extra}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for extra in rank_envs]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out
