"""Hardening: a FIFO where the doctor reads a file its own helper wrote (the fleet exchange helper's log), or at a
path HOME names (the kernel cache's folders), never blocks the run; a SIGTERM while the exchange runs ends it at once.

The exchange helper's log is read when the exchange fails or ends (torchstore.Exchange.tail, from plan.py's
`finally`): a plain open() of a FIFO there waits for a writer forever. The code under test here is safeio.read_tail
(O_NONBLOCK, regular files only) and kernelcache.open_verified (O_DIRECTORY: a FIFO is refused without opening it)."""

from __future__ import annotations

import glob
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import doctor_command, free_port, run_doctor, validate

CHECK = ("check", "--no-smoke", "--only", "python.version", "-f", "json")

# Runs at the start of every interpreter on PYTHONPATH; acts only in the fleet exchange helper: its log (its stderr)
# becomes a FIFO nobody writes, then it exits without an answer, or (FIFO_HELPER=stay) stays.
FIFO_HELPER_LOG = """
import os


def _argv():
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return fh.read().split(b"\\0")
    except OSError:
        return []


if any(a.endswith(b"dsv4probe_fleet.py") for a in _argv()):
    try:
        log = os.readlink("/proc/self/fd/2")
        if log.endswith("helper.log") and os.path.isfile(log):
            os.unlink(log)
            os.mkfifo(log)
    except Exception:
        pass
    if os.environ.get("FIFO_HELPER") != "stay":
        os._exit(3)
    import time

    time.sleep(600)
"""


def _fleet_env(rank: int, port: int, **extra: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return {**base, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **extra}


def test_a_fifo_as_the_exchange_helper_s_log_does_not_block_the_doctor(site, tmp_path):
    site.file("sitecustomize.py", FIFO_HELPER_LOG)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    start = time.monotonic()
    proc = subprocess.Popen(doctor_command() + [*CHECK, "--fleet-wait", "20"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=_fleet_env(1, free_port(), PYTHONPATH=str(site.root), TMPDIR=str(scratch)))
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert time.monotonic() - start < 60, err[-1500:]
    assert "the fleet exchange failed (exited with code 3 without an answer)" in err, err[-1500:]
    assert "its own report follows" in err and "Verdict:" in err and proc.returncode == 1, err[-1500:]


def test_a_sigterm_while_the_exchange_runs_with_a_fifo_as_its_log_ends_the_run_at_once(site, tmp_path):
    site.file("sitecustomize.py", FIFO_HELPER_LOG)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen(doctor_command() + [*CHECK, "--fleet-wait", "120"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=_fleet_env(1, free_port(), PYTHONPATH=str(site.root), TMPDIR=str(scratch),
                                           FIFO_HELPER="stay"))
    try:
        end = time.monotonic() + 60
        while not any(stat.S_ISFIFO(os.lstat(p).st_mode)
                      for p in glob.glob(str(scratch / "dsv4-doctor-fleet-*" / "helper.log"))):
            assert time.monotonic() < end and proc.poll() is None, "the helper's log never became a FIFO"
            time.sleep(0.05)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert time.monotonic() - sent < 10, err[-1500:]
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err[-1500:])
    assert "interrupted" in err, err[-1500:]


@pytest.mark.parametrize("where", ["HOME", "HOME/.cache", "HOME/.cache/dsv4-doctor",
                                   "HOME/.cache/dsv4-doctor/cute-dsl"])
def test_a_fifo_on_the_home_derived_cache_path_neither_blocks_nor_is_used(tmp_path, where, monkeypatch):
    home = tmp_path / "home"
    fifo = Path(where.replace("HOME", str(home)))
    fifo.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    os.mkfifo(fifo)
    start = time.monotonic()
    run = run_doctor(*CHECK, env={"HOME": str(home), "XDG_CACHE_HOME": "", "DSV4_DOCTOR_KERNEL_CACHE": "",
                                  "CUTE_DSL_CACHE_DIR": ""}, timeout=60)
    assert time.monotonic() - start < 45 and run.returncode in (0, 1), run.stderr[-1500:]
    validate(json.loads(run.stdout))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # never replaced, never opened for reading

    from dsv4_doctor.kernels import cache as kernelcache

    monkeypatch.setenv("HOME", str(home))  # Path.home()
    cache = kernelcache.prepare({"HOME": str(home)})
    assert cache.source == "refused" and cache.env == {}, cache


# --- the smoke's rank-0 log tail: cut where a word ends (tail_text), never `[-1500:]` --------------------------------

SECRET = "hf_" + "Ab3dE" * 8  # a Hugging Face token: recognised by its start and its length


def test_a_probe_s_log_tail_never_starts_inside_a_secret(monkeypatch):
    """Before: the smoke's ranks harness kept `log[-1500:]` of rank 0's log, so a secret that straddled the cut left
    its end, which redaction does not recognise, in the answer."""
    import probe_modules

    common = probe_modules.common()
    text = "head " + SECRET + " the rest of the log"
    for limit in range(1, len(text) + 2):
        tail = common.tail_text(text, limit)
        assert len(tail) <= limit + 2 and ("Ab3dE" not in tail or SECRET in tail), (limit, tail)
    phrase = "correct horse battery staple"  # a pass phrase in the environment: replaced only whole
    monkeypatch.setenv("DSV4_TEST_PASS_PHRASE", phrase)
    text = "head " + phrase + " the end"
    for limit in range(1, len(text) + 2):
        tail = common.tail_text(text, limit)
        assert "battery" not in tail or phrase in tail, (limit, tail)


def test_the_ranks_harness_cuts_rank_0_s_log_with_tail_text():
    import probe_modules

    source = probe_modules.script("dsv4probe_smoke_ranks").read_text()
    assert "[-1500:]" not in source and "tail_text(" in source
