"""Probes: everything that touches the inspected environment runs here, in a subprocess with a timeout.

A Python probe is a stdlib-only script in this folder, run by the *target* interpreter as
``python SCRIPT OUT_JSON REQUEST_JSON``; it writes its JSON answer to OUT_JSON. stdout and stderr of the child go to a
file (not a pipe), so a grandchild that keeps a pipe open can never hang the doctor, and library chatter on stdout never
corrupts the answer. A segfault, abort or hang becomes a `ProbeResult` with the signal or the timeout, never an
exception in the doctor.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

PROBE_DIR = Path(__file__).resolve().parent
STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class StaticRequest:
    """What a check wants from the one fast static probe: metadata, module locations, `ast` summaries."""

    distributions: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # located without importing any package
    sources: tuple[str, ...] = ()  # modules whose source is summarised with ast (classes, fields, functions)
    contains: tuple[str, ...] = ()  # strings searched for in those sources

    def __init__(self, distributions: Iterable[str] = (), modules: Iterable[str] = (),
                 sources: Iterable[str] = (), contains: Iterable[str] = ()):
        object.__setattr__(self, "distributions", tuple(distributions))
        object.__setattr__(self, "modules", tuple(modules))
        object.__setattr__(self, "sources", tuple(sources))
        object.__setattr__(self, "contains", tuple(contains))

    @staticmethod
    def merge(requests: Iterable["StaticRequest | None"]) -> "StaticRequest":
        dists: dict[str, None] = {}
        mods: dict[str, None] = {}
        srcs: dict[str, None] = {}
        text: dict[str, None] = {}
        for r in requests:
            if r is None:
                continue
            dists.update(dict.fromkeys(r.distributions))
            mods.update(dict.fromkeys(r.modules))
            srcs.update(dict.fromkeys(r.sources))
            text.update(dict.fromkeys(r.contains))
        return StaticRequest(dists, mods, srcs, text)

    def to_json(self) -> dict:
        return {
            "distributions": list(self.distributions),
            "modules": list(self.modules),
            "sources": list(self.sources),
            "contains": list(self.contains),
        }


@dataclass(frozen=True)
class Probe:
    """One isolated subprocess. Probes with the same key run once per doctor run and are shared by checks."""

    key: str
    script: str | None = None  # a file in this folder, run by the target interpreter
    request: str = "{}"  # JSON text handed to the script
    argv: tuple[str, ...] = ()  # for a command probe (e.g. nvidia-smi), run as is
    timeout_s: float | None = None  # None: the run's default probe timeout

    @staticmethod
    def python(key: str, script: str, request: Any = None, timeout_s: float | None = None) -> "Probe":
        return Probe(key=key, script=script, request=json.dumps(request or {}, sort_keys=True), timeout_s=timeout_s)

    @staticmethod
    def command(key: str, argv: Sequence[str], timeout_s: float | None = None) -> "Probe":
        return Probe(key=key, argv=tuple(argv), timeout_s=timeout_s)


def import_probe(*targets: str, signatures: Sequence[str] = (), timeout_s: float | None = None) -> Probe:
    """Import modules and resolve ``module:attr.path`` targets in a fresh interpreter, reporting each separately."""
    request = {"targets": list(targets), "signatures": list(signatures)}
    return Probe.python("import:" + ",".join(targets), "dsv4probe_import.py", request, timeout_s)


@dataclass
class ProbeResult:
    key: str
    ok: bool  # the probe ran to the end and answered
    data: Any = None  # the JSON answer (Python probe) or stdout text (command probe)
    returncode: int | None = None
    signal: str | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    stderr_tail: str = ""
    error: str | None = None  # one line: why there is no answer

    def evidence(self) -> dict:
        """What a report shows about a probe that gave no answer."""
        return {
            "probe": self.key,
            "returncode": self.returncode,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "stderr_tail": self.stderr_tail,
        }


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 4 * STDERR_TAIL_CHARS))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return text[-STDERR_TAIL_CHARS:].strip()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass


def run_probe(probe: Probe, python: str, default_timeout_s: float) -> ProbeResult:
    """Run one probe; never raises, never outlives its timeout."""
    start = time.monotonic()
    try:
        result = _run_probe(probe, python, default_timeout_s)
    except Exception as exc:  # no temp dir (disk full), fork failure, ...: still an answer
        return ProbeResult(probe.key, ok=False, duration_s=time.monotonic() - start,
                           error=f"could not run: {type(exc).__name__}: {exc}")
    # A Python probe whose own code broke answers {"probe_error": ...}: no answer a check can read.
    if result.ok and probe.script and (not isinstance(result.data, dict) or "probe_error" in result.data):
        err = result.data.get("probe_error", {}) if isinstance(result.data, dict) else {}
        result.ok = False
        result.error = (f"broke inside the probe: {err.get('type')}: {err.get('message')}" if err
                        else f"answered {type(result.data).__name__}, not an object")
        where = "\n".join(err.get("where", [])) if isinstance(err, dict) else ""
        result.stderr_tail = "\n".join(x for x in (result.stderr_tail, where) if x)
    return result


def _run_probe(probe: Probe, python: str, default_timeout_s: float) -> ProbeResult:
    timeout = probe.timeout_s if probe.timeout_s is not None else default_timeout_s
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dsv4-doctor-") as tmp:
        out_path = os.path.join(tmp, "answer.json")
        log_path = os.path.join(tmp, "output.log")
        if probe.script:
            argv = [python, str(PROBE_DIR / probe.script), out_path, probe.request]
        else:
            argv = list(probe.argv)
        try:
            # A Python probe answers in out_path, so its stdout joins stderr in the log; a command's stdout is
            # its answer and goes to out_path.
            with open(log_path, "wb") as log, open(os.devnull, "rb") as devnull, \
                    open(out_path if not probe.script else os.devnull, "wb") as cmd_out:
                proc = subprocess.Popen(
                    argv, stdin=devnull, stdout=log if probe.script else cmd_out, stderr=log,
                    # The caller's cwd, as the job would have it: relative PYTHONPATH entries resolve the same way.
                    start_new_session=True, env=_probe_env(timeout), close_fds=True,
                )
        except FileNotFoundError:
            return ProbeResult(probe.key, ok=False, duration_s=time.monotonic() - start,
                               error=f"{argv[0]} not found")
        except OSError as exc:
            return ProbeResult(probe.key, ok=False, duration_s=time.monotonic() - start,
                               error=f"could not start {argv[0]}: {exc}")
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait()
        duration = time.monotonic() - start
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"signal {-rc}"
        tail = _tail(log_path)
        result = ProbeResult(probe.key, ok=False, returncode=rc, signal=sig, timed_out=timed_out,
                             duration_s=duration, stderr_tail=tail)
        if timed_out:
            result.error = f"timed out after {timeout:g} s and was killed"
            return result
        if sig:
            result.error = f"killed by {sig}"
            return result
        if not probe.script and rc != 0:
            result.error = f"{argv[0]} exited with code {rc}"
            return result
        try:
            with open(out_path, "rb") as fh:
                raw = fh.read()
        except OSError:
            raw = b""
        if not raw and probe.script:
            result.error = f"exited with code {rc} without an answer"
            return result
        if not probe.script:
            result.data = raw.decode("utf-8", errors="replace")
            result.ok = True
            return result
        try:
            result.data = json.loads(raw.decode("utf-8", errors="replace"))
        except ValueError as exc:
            result.error = f"answered invalid JSON ({exc})"
            return result
        result.ok = True
        return result


def _probe_env(timeout: float) -> dict:
    env = dict(os.environ)
    env["DSV4_DOCTOR_PROBE_TIMEOUT"] = str(timeout)
    # The probe's answer goes to a file; these keep library output plain and the probe's own encoding fixed.
    env.setdefault("PYTHONIOENCODING", "utf-8")
    env["NO_COLOR"] = "1"
    env.pop("FORCE_COLOR", None)
    return env


# The one GPU query that needs no torch; the profile's detected --gpu-arch comes from it.
NVIDIA_SMI = Probe.command(
    "nvidia-smi",
    ["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,driver_version",
     "--format=csv,noheader,nounits"],
    timeout_s=15,
)

STATIC_SCRIPT = "dsv4probe_static.py"
TORCH = Probe.python("torch", "dsv4probe_torch.py")


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version` (csv, no units)."""
    gpus = []
    for line in (text or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 5:
            continue
        index, name, cc, mem, driver = cells[:5]
        if not re.fullmatch(r"[0-9]+", index):
            continue
        gpus.append({
            "index": int(index),
            "name": name,
            "compute_capability": cc if re.fullmatch(r"[0-9]+\.[0-9]+", cc) else None,
            "memory_mib": int(mem) if re.fullmatch(r"[0-9]+", mem) else None,
            "driver_version": driver,
        })
    return gpus
