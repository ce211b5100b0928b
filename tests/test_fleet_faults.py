"""Fleet faults on loopback with real ranks (real subprocesses, torch's TCPStore, real torchrun): a rank stopped after
it sent its report and resumed after the deadline, two jobs whose ports meet, and a rank whose report is ~11 MB."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import doctor_command, free_port, has_torch, validate

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")
pytestmark = [needs_torch, pytest.mark.slow]

CHECK = ("check", "--no-smoke", "--only", "python.version", "-f", "json")


def _env(r: int, n: int, port: int, **extra: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return {**base, "RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(n),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **extra}


def _spawn(r: int, n: int, port: int, *args: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(doctor_command() + list(args), env=_env(r, n, port, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _rows(report: dict) -> dict:
    return {c["id"]: c for c in report["checks"]}


def _plugin(tmp_path: Path) -> Path:
    """A site with a plugin check `odd.rank`: it fails where ODD is set, and writes BIG_MB megabytes of evidence."""
    site = tmp_path / "site"
    (site / "odd_plugin-1.dist-info").mkdir(parents=True)
    (site / "odd_plugin-1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: odd-plugin\nVersion: 1\n")
    (site / "odd_plugin-1.dist-info" / "entry_points.txt").write_text("[dsv4_doctor.checks]\nodd = odd_checks\n")
    (site / "odd_checks.py").write_text(
        "import os\nfrom dsv4_doctor.model.core import Check, failed, passed\n"
        "def run(ctx):\n"
        "    if os.environ.get('ODD'):\n        return failed('odd rank')\n"
        "    mb = int(os.environ.get('BIG_MB') or 0)\n"
        "    return passed('fine', evidence={'blob': ['x' * 1000] * (mb * 1000)})\n"
        "CHECKS = [Check(id='odd.rank', title='t', explanation='x', applies_when='always', detects='x', run=run)]\n")
    return site


STORE_HOLDER = """
import sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, wait_for_workers=False)
print("up", flush=True)
time.sleep(600)
"""


def _hold_port(port: int) -> subprocess.Popen:
    """Another job's master store on `port` (as job B's rank 0 or torchrun agent holds its MASTER_PORT)."""
    holder = subprocess.Popen([sys.executable, "-c", STORE_HOLDER, str(port)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
    return holder


def test_a_rank_stopped_after_its_report_and_resumed_after_the_deadline_does_not_start(tmp_path):
    """Rank 1's exchange helper acknowledged the verdict when it read it, so a rank stopped (SIGSTOP) after it sent
    its report and resumed (SIGCONT) after the deadline exited 0 (started its job late), and rank 0 said every rank
    acknowledged. Now only the rank's own process acknowledges: it exits 5 (LATE) and says so, rank 0 names it."""
    port = free_port()
    scratch = tmp_path / "rank1-tmp"
    scratch.mkdir()
    args = (*CHECK, "--fleet-wait", "12")
    rank0 = _spawn(0, 2, port, *args)
    rank1 = _spawn(1, 2, port, *args, TMPDIR=str(scratch))
    end = time.monotonic() + 120
    while not glob.glob(str(scratch / "dsv4-doctor-fleet-*" / "report.json.ready")):
        assert time.monotonic() < end and rank1.poll() is None, "rank 1 never handed in its report"
        time.sleep(0.005)
    os.kill(rank1.pid, signal.SIGSTOP)  # the doctor process, not its exchange helper
    try:
        out0, err0 = rank0.communicate(timeout=150)
    finally:
        os.kill(rank1.pid, signal.SIGCONT)
    out1, err1 = rank1.communicate(timeout=150)
    assert rank1.returncode == 5, err1[-2000:]
    assert "not starting" in err1 and "after the acknowledgement deadline" in err1
    report = validate(json.loads(out0))
    assert report["fleet"]["not_acknowledged"] == "1", err0[-1500:]
    ranks = _rows(report)["fleet.ranks"]
    assert "every rank acknowledged" not in ranks["summary"] and "rank 1 did not acknowledge" in ranks["summary"]


def test_two_jobs_with_the_same_fleet_port_do_not_cross(tmp_path):
    """Two jobs given one --fleet-port shared the store scope `dsv4doctor/job`: job A merged job B's rank (here a
    failing one), whatever its world size. Now each job's keys carry its identity; job B, with no torchrun store
    to agree another port through, fails on every rank with the reason before anything starts."""
    site = _plugin(tmp_path)
    fleet_port = free_port()
    master_a, master_b = free_port(), free_port()
    args = ("check", "--no-smoke", "--only", "python.version,odd.rank", "-f", "json", "--fleet-port", str(fleet_port))
    a0 = _spawn(0, 2, master_a, *args, "--fleet-wait", "25", PYTHONPATH=str(site))
    _wait_for_port(fleet_port)
    b1 = _spawn(1, 2, master_b, *args, "--fleet-wait", "2", PYTHONPATH=str(site), ODD="1")  # reaches A's store
    b0 = _spawn(0, 2, master_b, *args, "--fleet-wait", "2", PYTHONPATH=str(site))
    time.sleep(3)
    a1 = _spawn(1, 2, master_a, *args, "--fleet-wait", "25", PYTHONPATH=str(site))
    done = {name: p.communicate(timeout=200) for name, p in (("a0", a0), ("a1", a1), ("b0", b0), ("b1", b1))}
    assert (a0.returncode, a1.returncode) == (0, 0), done["a0"][1][-1500:]
    report = validate(json.loads(done["a0"][0]))
    assert report["fleet"]["reported"] == 2 and _rows(report)["odd.rank"]["status"] == "pass"
    assert (b0.returncode, b1.returncode) == (1, 1)
    theirs = validate(json.loads(done["b0"][0]))
    why = _rows(theirs)["fleet.ranks"]["summary"]
    assert f"the fleet port {fleet_port} is already in use on rank 0's host" in why and "--fleet-port" in why
    assert "not starting" in done["b1"][1] and "--fleet-port" in done["b1"][1]


def _wait_for_port(port: int, seconds: float = 60.0) -> None:
    import socket

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port}")


def test_master_ports_p_and_p_plus_1_under_torchrun_agree_another_fleet_port(tmp_path):
    """Job A with MASTER_PORT P, job B with P + 1: job A's fleet port (P + 1) was job B's store, EADDRINUSE, and the
    healthy job A exited 1. Under torchrun the ranks now agree a free port through torchrun's own store."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun comes with torch"
    master = free_port()
    holder = _hold_port(master + 1)
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
        done = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", str(master), "-m", "dsv4_doctor",
                               *CHECK, "--fleet-wait", "30"], env=env, capture_output=True, text=True, timeout=240)
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    report = validate(json.loads(done.stdout[done.stdout.index("{"):]))
    assert report["fleet"]["reported"] == 2
    note = report["fleet"]["port_note"]
    assert f"the fleet port {master + 1} was in use" in note and "agreed through torchrun's store" in note
    assert note in _rows(report)["fleet.ranks"]["summary"]


def test_an_11_mb_report_is_bounded_on_its_own_rank_and_named_by_rank_0(tmp_path):
    """Only rank 0 applied the 4 MiB limit: rank 1's ~11 MB report reset the store connection and rank 0 said only
    "not heard from". Rank 1 now sends a short typed report saying so, and rank 0 names it and the reason."""
    site = _plugin(tmp_path)
    port = free_port()
    args = ("check", "--no-smoke", "--only", "python.version,odd.rank", "-f", "json", "--fleet-wait", "20")
    procs = [_spawn(0, 2, port, *args, PYTHONPATH=str(site)),
             _spawn(1, 2, port, *args, PYTHONPATH=str(site), BIG_MB="11")]
    done = [p.communicate(timeout=150) for p in procs]
    assert [p.returncode for p in procs] == [1, 1], done[0][1][-1500:]
    report = validate(json.loads(done[0][0]))
    ranks = _rows(report)["fleet.ranks"]
    assert ranks["status"] == "fail" and ranks["evidence"]["ranks"][0]["rank"] == 1
    why = ranks["evidence"]["ranks"][0]["why"]
    assert "its report was 11," in why and "over the 4,194,304-byte limit" in why, why
    assert "over the fleet's 4,194,304-byte limit" in done[1][1]
