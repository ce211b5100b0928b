"""Hardening v4, "no request on the command line": every probe, helper and plugin host the doctor starts gets its
request in a file only the doctor's user can read, never as a word of its command line (world-readable in
/proc/PID/cmdline, and capped at 128 KiB a word by Linux). Each test runs the real CLI and reads the command line of
every process it starts from /proc while they run."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dsv4_doctor.engine.probes import LAUNCHER

from conftest import doctor_command, free_port, has_torch, validate
from test_fleet_ray import ray_cluster  # noqa: F401 - a local Ray cluster of this module's own (the fixture)

WORD_LIMIT = 1024  # the longest word a child of the doctor may have (the handshake's code is ~450 characters)
LINE_LIMIT = 4096  # and its whole command line
NAMES = ("dsv4_doctor", "dsv4probe", "dsv4-doctor")  # a node task's doctor or shipped probe, by what it runs


def _read(path: str, limit: int = 1 << 20) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _ppid(pid: int) -> int | None:
    raw = _read(f"/proc/{pid}/stat", 4096)
    try:
        return int(raw.rsplit(b")", 1)[1].split()[1]) if raw else None
    except (IndexError, ValueError):
        return None


def _argv(pid: int) -> list[str] | None:
    raw = _read(f"/proc/{pid}/cmdline")
    return [w.decode("utf-8", "surrogateescape") for w in raw.split(b"\0")[:-1]] if raw else None


class CommandLines:
    """Every command line, read from /proc while they run, of the processes whose parent chain leads to a root, and
    of those whose environment holds `marker` and that run the doctor or a probe (a Ray node task's doctor, whose
    parent is Ray's worker), and of their children. A child seen before its exec shows its parent's command line:
    that one is not its own and is left out."""

    def __init__(self, marker: str | None = None):
        self.marker = marker.encode() if marker else None
        self.roots: set[int] = set()
        self.ours: dict[int, int] = {}  # pid -> its parent
        self.seen: dict[int, list[list[str]]] = {}
        self.modes: dict[str, tuple[int, int]] = {}  # a request file a child was given -> (its mode, its folder's)
        self._others: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self, *roots: int) -> None:
        self.roots = set(roots)
        self.ours.update(dict.fromkeys(roots, 0))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        turn = 0
        while not self._stop.is_set():
            turn += 1
            pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
            for pid in pids:
                if pid not in self.ours and pid not in self._others:
                    parent = _ppid(pid)
                    if parent in self.ours:
                        self.ours[pid] = parent
                    elif parent is not None:
                        self._others.add(pid)
            if self.marker and turn % 10 == 0:  # a Ray node's task: looked for less often (every process's text)
                for pid in list(self._others):
                    argv = _argv(pid)
                    if argv and any(n in " ".join(argv) for n in NAMES) and \
                            self.marker in (_read(f"/proc/{pid}/environ", 4 << 20) or b""):
                        self._others.discard(pid)
                        self.ours[pid] = _ppid(pid) or 0
            self._others &= set(pids)
            for pid in list(self.ours):
                argv = _argv(pid)
                if argv and argv not in self.seen.setdefault(pid, []):
                    self.seen[pid].append(argv)
                    if argv[-1].endswith("request.json") and argv[-1] not in self.modes:
                        try:
                            self.modes[argv[-1]] = (os.lstat(argv[-1]).st_mode & 0o7777,
                                                    os.lstat(os.path.dirname(argv[-1])).st_mode & 0o7777)
                        except OSError:
                            pass
            time.sleep(0.003)

    def children(self) -> list[list[str]]:
        """Each command line a process other than a root had, its pre-exec copies of its parent's left out."""
        out = []
        for pid, argvs in self.seen.items():
            if pid in self.roots:
                continue
            inherited = self.seen.get(self.ours.get(pid, 0), [])
            out += [argv for argv in argvs if argv not in inherited]
        return out


def assert_clean(lines: list[list[str]], secret_words: list[str]) -> None:
    """No secret, no JSON request, nothing long, in any of the command lines."""
    for argv in lines:
        text = " ".join(argv)
        for word in secret_words:
            assert word not in text, f"a secret in a child's command line: {text[:300]}"
        assert len(text) <= LINE_LIMIT and max(map(len, argv)) <= WORD_LIMIT, \
            f"a command line of {len(text)} characters: {text[:300]}"
        for word in argv:
            try:
                value = json.loads(word)
            except ValueError:
                continue
            assert not isinstance(value, (dict, list)), f"a JSON request on a command line: {text[:300]}"


def _env(sites: tuple[Path, ...], **extra: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "FORCE_COLOR",
                                                             "NO_COLOR")}
    return dict(base, PYTHONPATH=os.pathsep.join(map(str, sites)), **extra)


def _watched(argv: list[str], env: dict, watcher: CommandLines, timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher.start(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        watcher.stop()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


# A third-party plugin whose probe script is written as docs/plugins.md says (the bootstrap of dsv4probe_common's
# docstring, then serve()): its request is 200 KB, more than one command-line word may hold.
PLUGIN = '''
from dsv4_doctor.model.core import Check, passed
from dsv4_doctor.engine.probes import Probe

PROBE = Probe.beside(__file__, "echo:big", "echo_probe.py", {"blob": "b" * 200000, "word": "echoed"})


def _run(ctx):
    answer = ctx.require(PROBE)
    return passed("the probe read %d characters and said %s" % (answer["blob"], answer["word"]))


CHECKS = [Check(id="echo.big", title="A plugin probe with a large request", explanation="x", applies_when="always",
                detects="x", run=_run, probes=(PROBE,))]
'''

PLUGIN_PROBE = '''
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]
if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
    import importlib.util
    spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
        os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
    sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["dsv4probe_common"])
from dsv4probe_common import serve

import time


def answer(request):
    time.sleep(0.5)  # long enough to be seen in /proc
    return {"blob": len(request["blob"]), "word": request["word"]}


serve(answer)
'''


@pytest.mark.slow
def test_no_child_of_a_check_carries_the_job_command_or_a_request_on_its_command_line(site, bare_python, tmp_path):
    from wheels import ensure

    hydra_sites = (ensure("hydra-core-1.3.2"), ensure("verl-0.9.1"))
    site.dist("echo-plugin", "1.0", entry_points="[dsv4_doctor.checks]\necho = echo_checks\n")
    site.file("echo_checks.py", PLUGIN)
    site.file("echo_probe.py", PLUGIN_PROBE)
    token, key, env_key = "hf_" + secrets.token_hex(16), secrets.token_hex(12), secrets.token_hex(12)
    job = shlex.join([f"HF_TOKEN={token}", "python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron",
                      "actor_rollout_ref.actor.megatron.context_parallel_size=2", f"+trainer.wandb_api_key={key}"])
    watcher = CommandLines()
    done = _watched(doctor_command() + ["check", "-f", "json", "--no-smoke", "--only", "job.*,echo.big,python.version",
                                        "--python", bare_python, "--job-args", job],
                    _env((site.root, *hydra_sites), WANDB_API_KEY=env_key), watcher, 180)
    report = validate(json.loads(done.stdout))
    rows = {c["id"]: c for c in report["checks"]}
    # The plugin's probe got its 200 KB request whole; the job was read and composed in the target.
    assert rows["echo.big"]["status"] == "pass" and "200000 characters and said echoed" in rows["echo.big"]["summary"]
    assert report["profile"]["job"]["read_by"].startswith("composed with Hydra"), report["profile"]["job"]
    lines = watcher.children()
    ran = [" ".join(argv) for argv in lines]
    for name in ("dsv4probe_static.py", "dsv4probe_hydra.py", "echo_probe.py", "dsv4_doctor.engine.pluginhost"):
        assert any(name in text for text in ran), f"{name} was never seen running: {ran}"
    assert_clean(lines, [token, key, env_key])
    # Each Python child's request is a file of the doctor's own: mode 0600, in a folder only its user can enter.
    assert all(argv[-1].endswith("request.json") for argv in lines
               if any(a.endswith(("dsv4probe_static.py", "dsv4probe_hydra.py", "echo_probe.py")) for a in argv))
    assert watcher.modes and set(watcher.modes.values()) == {(0o600, 0o700)}, watcher.modes


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the image-wide kernel store is root's: warm runs as root")
def test_warm_takes_more_recipes_than_one_command_line_word_holds(tmp_path):
    from test_kernel_store import _sites

    from dsv4_doctor.kernels.warm import MAX_RECIPES, shipped_recipes

    shipped = json.loads(shipped_recipes().read_text())
    recipes = (shipped * (300 // len(shipped) + 1))[:300]
    (tmp_path / "recipes.json").write_text(json.dumps(recipes))
    assert len(json.dumps(recipes[:MAX_RECIPES])) > 2 * 128 * 1024  # over Linux's cap on one argument, twice
    watcher = CommandLines()
    # 10.0: every recipe was recorded for sm_90a, so each is "other arch" (nothing compiles), after the probe read
    # every one of them.
    done = _watched(doctor_command() + ["warm", "--gpu-arch", "10.0", "--into", str(tmp_path / "store"),
                                        "--recipes", str(tmp_path / "recipes.json"), "-f", "json"],
                    _env(tuple(_sites())), watcher, 300)
    assert "Argument list too long" not in done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert len(data["kernels"]) == MAX_RECIPES, data["summary"]
    assert {k["result"] for k in data["kernels"]} <= {"other arch", "not warmed"}, data["kernels"][:3]
    lines = watcher.children()
    assert any("dsv4probe_warm.py" in " ".join(argv) for argv in lines), lines
    assert_clean(lines, [])


def test_a_request_file_the_probe_cannot_read_is_a_probe_error_never_a_traceback(tmp_path):
    """serve() reads its request bounded and without blocking, and every decoder error is an answer."""
    from dsv4_doctor.engine.probes import PROBE_DIR

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(deep)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    env = dict(os.environ, DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR))
    for request, why in ((deep, "deeply"), (fifo, "it is a FIFO, not a regular file"),
                         (link, "Too many levels of symbolic links"), (bad, "not UTF-8"),
                         (tmp_path / "missing.json", "No such file")):
        out = tmp_path / "answer.json"
        started = time.monotonic()
        done = subprocess.run([sys.executable, str(LAUNCHER),
                               str(PROBE_DIR / "dsv4probe_import.py"), str(out), str(request)],
                              env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert time.monotonic() - started < 20
        error = json.loads(out.read_text())["probe_error"]
        assert error["type"] == "RequestUnreadable" and why in error["message"], error
        out.unlink()



@pytest.mark.slow
@pytest.mark.skipif(not has_torch(), reason="the fleet exchange runs in a Python with torch")
def test_no_rank_s_exchange_helper_carries_a_request_on_its_command_line(tmp_path):
    """Two ranks of a torchrun-style fleet, with a token in the job command: each rank's fleet exchange helper (and
    every probe) gets its request in a file."""
    token = "hf_" + secrets.token_hex(16)
    job = shlex.join(["python3", "-m", "verl.trainer.main_ppo", f"+trainer.hf_token={token}"])
    port = free_port()
    ranks = [dict(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(port)) for r in range(2)]
    argv = doctor_command() + ["check", "--no-smoke", "--only", "python.version,job.*", "-f", "json",
                               "--fleet-wait", "30", "--job-args", job]
    procs = [subprocess.Popen(argv, env=_env((), **rank), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in ranks]
    watcher = CommandLines()
    watcher.start(*(p.pid for p in procs))
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        watcher.stop()
    report = validate(json.loads(outs[0][0]))
    assert report["fleet"]["world_size"] == 2 == report["fleet"]["reported"], outs[0][1][-3000:]
    lines = watcher.children()
    helpers = [argv for argv in lines if any(w.endswith("dsv4probe_fleet.py") for w in argv)]
    assert len({tuple(a) for a in helpers}) >= 2, [" ".join(a) for a in lines]  # each rank's own
    assert_clean(lines, [token])


# ------------------------------------------------------------------------------------------- the Ray fleet mode

RUNTIME_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars"


@pytest.mark.slow
def test_the_ray_helper_and_each_nodes_doctor_get_the_command_and_a_large_runtime_env_off_their_command_lines(
        ray_cluster, tmp_path):  # noqa: F811 - the fixture imported above
    """`fleet --ray --dry-run -- CMD` with ~112 KB of valid runtime_env (28 variables of 4,000 characters) and a
    token in the command: the Ray helper starts (its request holds the runtime_env, and the command that holds it
    again: 224 KB), the node's doctor reads the command from a file and reports, and no process the doctor or its
    node task started has the token, the runtime_env or a request on its command line. (Ray itself hands a worker
    its runtime_env in one command-line word, so a task's worker starts only below 128 KiB of it.)"""
    from test_fleet_ray import _env as ray_env

    token, run = "hf_" + secrets.token_hex(16), secrets.token_hex(8)
    pads = [f"{RUNTIME_ENV}.PAD_{i}={secrets.token_hex(2000)}" for i in range(28)]
    command = ["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=1", "trainer.n_gpus_per_node=1",
               f"+trainer.hf_token={token}", f"{RUNTIME_ENV}.TRANSPORT_RUN={run}", *pads]
    assert len(json.dumps(pads)) > 110_000
    report = tmp_path / "report.json"
    watcher = CommandLines(marker=f"TRANSPORT_RUN={run}")
    done = _watched(doctor_command() + ["fleet", "--ray", "--dry-run", "--no-smoke", "--only", "python.version",
                                        "--python", sys.executable, "--report", str(report), "--", *command],
                    ray_env(ray_cluster), watcher, 300)
    data = validate(json.loads(report.read_text()))
    rows = {c["id"]: c for c in data["checks"]}
    evidence = rows["fleet.ranks"]["evidence"]
    assert data["fleet"]["world_size"] == 2 == data["fleet"]["reported"], (rows["fleet.ranks"], done.stderr[-3000:])
    assert rows["fleet.ranks"]["status"] == "pass", rows["fleet.ranks"]
    assert len(evidence["runtime_env"]["env_vars"]) == 29 and all("PAD_0" in r["runtime_env_seen"]
                                                                 for r in evidence["ran"]), evidence
    lines = watcher.children()
    ran = [" ".join(argv) for argv in lines]
    assert any("dsv4probe_ray.py" in text for text in ran), ran
    # The node's doctor, as `python -m dsv4_doctor check --no-distributed ...` and once it started again with -E
    # (launch.py: its PYTHONPATH is set), `python -E -c BOOT check --no-distributed ...`.
    node_doctor = [argv for argv in lines if "--no-distributed" in argv and any("dsv4_doctor" in w for w in argv)]
    assert node_doctor and all("--job-args-file" in argv and "--job-args" not in argv for argv in node_doctor), ran
    assert_clean(lines, [token, run, pads[0][-200:]])


# ------------------------------------------------------------------------------------------- --job-args-file

def test_job_args_file_gives_the_command_as_job_args_would_and_is_the_one_or_the_other(tmp_path):
    from dsv4_doctor.cli.main import parse_command_line, with_job_args_file
    from dsv4_doctor.model.core import UsageError

    def given(*words: str) -> str | None:
        return with_job_args_file(parse_command_line(list(words))).job_args

    command = "HF_TOKEN=hf_x python3 -m verl.trainer.main_ppo 'trainer.project_name=a b'\n"
    path = tmp_path / "cmd.txt"
    path.write_text(command)
    for name in ("check", "fix"):
        assert given(name, "--job-args-file", str(path)) == command
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (4 * 1024 * 1024 + 1))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"python3 -m x\0")
    for words, why in ((["--job-args-file", str(path), "--job-args", "x"], "once"), (["--job-args-file", str(big)],
                       "larger than"), (["--job-args-file", str(nul)], "NUL"),
                       (["--job-args-file", str(tmp_path / "missing")], "No such file")):
        with pytest.raises(UsageError, match=why):
            given("check", *words)
    # A pipe (`<(...)`) is read until its writer closes it.
    writer = threading.Thread(target=lambda: fifo.write_text(command))
    writer.start()
    assert given("check", "--job-args-file", str(fifo)) == command
    writer.join(10)
    # For real: the usage error is exit 2, said on stderr.
    done = subprocess.run(doctor_command() + ["check", "--job-args-file", str(path), "--job-args", "x"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--job-args or --job-args-file" in done.stderr, done.stderr
