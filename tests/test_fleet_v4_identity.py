"""One job identity from the rendezvous, not from strings: two spellings of one master address are one job (torchrun's
own store agrees the identity; an address alone is normalised), an srun step is its Slurm ids, two jobs on one host
are two fleets, and ranks of one job that still disagree are named with the values each saw."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import doctor_command, free_port, has_torch, validate
from dsv4_doctor.fleet import identity as fleetaddress
from dsv4_doctor.fleet.env import detect, normalise_address

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")
CHECK = ("check", "--no-smoke", "--only", "python.version", "-f", "json")


# --- the address, normalised --------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["127.0.0.1", "127.0.1.1", "localhost", "LocalHost.", "[::1]", "::1",
                                      "::ffff:127.0.0.1", "ip6-test.localhost"])
def test_the_loopback_range_and_localhost_are_one_address(spelling):
    address, how = normalise_address(spelling)
    assert address == "loopback" and "loopback" in how and spelling in how


def test_an_address_is_written_one_way_and_a_name_that_does_not_resolve_is_kept():
    assert normalise_address("10.0.0.5")[0] == "10.0.0.5" == normalise_address("::ffff:10.0.0.5")[0]
    assert normalise_address("2001:DB8::1")[0] == "2001:db8::1"
    address, how = normalise_address("No-Such-Host.invalid")
    assert address == "no-such-host.invalid" and "does not resolve here" in how


def test_a_resolver_that_hangs_does_not_hold_the_doctor(monkeypatch):
    def hang(*_a, **_k):
        time.sleep(5)
        raise OSError("late")

    monkeypatch.setattr(fleetaddress.socket, "getaddrinfo", hang)
    monkeypatch.setattr(fleetaddress, "RESOLVE_S", 0.2)
    start = time.monotonic()
    address, how = normalise_address("slow-resolver-host")
    assert time.monotonic() - start < 2 and address == "slow-resolver-host" and "does not resolve" in how


def test_two_spellings_of_one_master_address_are_one_job_and_the_evidence_says_how():
    """The identity digested MASTER_ADDR as each rank received it: 127.0.0.1 and localhost were two jobs."""
    base = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "none",
            "TORCHELASTIC_RESTART_COUNT": "0"}
    a, b = detect(dict(base, MASTER_ADDR="127.0.0.1")), detect(dict(base, MASTER_ADDR="localhost", RANK="0"))
    assert a is not None and b is not None and a.job == b.job and a.scope == b.scope
    assert a.identity["master_addr"] == "127.0.0.1" and a.identity["address"] == "loopback"
    assert "taken as the loopback range" in a.identity["how"]
    other = detect(dict(base, MASTER_ADDR="localhost", MASTER_PORT="29402"))  # another job on the host
    assert other is not None and other.job != a.job


def test_an_srun_step_is_its_slurm_ids_whatever_address_each_task_was_given():
    step = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "gpu[03-04]", "SLURM_JOB_ID": "812",
            "SLURM_STEP_ID": "0", "MASTER_PORT": "29400"}
    a = detect(dict(step, SLURM_PROCID="0", MASTER_ADDR="gpu03"))
    b = detect(dict(step, SLURM_PROCID="1", MASTER_ADDR="gpu03.cluster.example"))
    c = detect(dict(step, SLURM_PROCID="1"))  # no MASTER_ADDR: the step's first host
    assert a is not None and b is not None and c is not None
    assert a.job == b.job == c.job and a.scope == b.scope and a.scope.startswith("dsv4doctor/slurm-812.0-")
    assert "SLURM_JOB_ID" in a.identity["how"]
    assert detect(dict(step, SLURM_PROCID="1", SLURM_STEP_ID="1")).job != a.job  # another step
    assert detect(dict(step, SLURM_PROCID="1", SLURM_JOB_ID="813")).job != a.job  # another job


def test_a_split_names_the_values_each_side_saw():
    from dsv4_doctor.fleet.identity import split_why

    ours = {"master_addr": "127.0.0.1", "address": "loopback", "port": "29400", "run_id": "none"}
    theirs = dict(ours, port="29405", master_addr="node\x1b[31m1")
    why = split_why(1, theirs, ours)
    assert "rank 1 is on the fleet port under another job identity" in why and "\x1b" not in why
    assert "MASTER_PORT 29405" in why and "MASTER_PORT 29400" in why
    assert "they differ in MASTER_ADDR, MASTER_PORT" in why


# --- real torchrun and real ranks ---------------------------------------------------------------------------------

def _environ() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}


def _torchrun() -> str:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun comes with torch"
    return torchrun


def _report(text: str) -> dict:
    return validate(json.loads(text[text.index("{"):]))


def _rows(report: dict) -> dict:
    return {c["id"]: c for c in report["checks"]}


@needs_torch
@pytest.mark.slow
def test_two_torchrun_agents_given_127_0_0_1_and_localhost_are_one_fleet():
    """Two agents of one job (torchrun's static rendezvous joins them), one given --master-addr 127.0.0.1 and the
    other localhost: each worker computed its own identity from the string it received, and both failed after the
    fleet's time with "did not report" and a port-clash hint."""
    port = free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-port", str(port)]
    tail = ["-m", "dsv4_doctor", *CHECK, "--fleet-wait", "20"]
    start = time.monotonic()
    node0 = subprocess.Popen([_torchrun(), *common, "--node-rank", "0", "--master-addr", "127.0.0.1", *tail],
                             env=_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node1 = subprocess.Popen([_torchrun(), *common, "--node-rank", "1", "--master-addr", "localhost", *tail],
                             env=_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out0, err0 = node0.communicate(timeout=180)
    _, err1 = node1.communicate(timeout=60)
    assert node0.returncode == 0 and node1.returncode == 0, (err0[-2000:], err1[-2000:])
    report = _report(out0)
    assert report["fleet"]["reported"] == 2 and report["fleet"]["missing"] == ""
    ranks = _rows(report)["fleet.ranks"]
    assert ranks["status"] == "pass" and ranks["summary"].startswith("all 2 ranks reported")
    identity = ranks["evidence"]["identity"]
    assert identity["master_addr"] == "127.0.0.1" and identity["address"] == "loopback"
    assert "torchrun's own store" in identity["agreed"]
    assert time.monotonic() - start < 60  # not after the fleet's time


@needs_torch
@pytest.mark.slow
def test_two_torchrun_jobs_on_one_host_with_one_fleet_port_are_two_fleets():
    """Two jobs on one host given the same --fleet-port: each is its own fleet of its own two ranks (the second to
    bind the port agrees another through its own torchrun store), and both pass."""
    fleet_port = free_port()
    jobs = [subprocess.Popen([_torchrun(), "--nproc-per-node", "2", "--master-port", str(free_port()), "-m",
                              "dsv4_doctor", *CHECK, "--fleet-port", str(fleet_port), "--fleet-wait", "20"],
                             env=_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    done = [job.communicate(timeout=180) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], [err[-2000:] for _, err in done]
    reports = [_report(out) for out, _ in done]
    assert [r["fleet"]["reported"] for r in reports] == [2, 2]
    assert reports[0]["fleet"]["scope"] != reports[1]["fleet"]["scope"]


@needs_torch
@pytest.mark.slow
def test_ranks_of_one_job_that_still_disagree_name_the_values_they_saw():
    """Ranks started by hand (no launcher store) with two MASTER_PORTs on one fleet port: each side names the
    values both saw, not "did not report within the fleet's time" and a hint about a port clash."""
    master, fleet_port = free_port(), free_port()
    base = dict(_environ(), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    ranks = [subprocess.Popen(doctor_command() + [*CHECK, "--fleet-port", str(fleet_port), "--fleet-wait", "6"],
                              env=dict(base, RANK=str(r), LOCAL_RANK=str(r), MASTER_PORT=str(master + 3 * r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    (out0, err0), (_, err1) = [p.communicate(timeout=180) for p in ranks]
    assert ranks[0].returncode == 1 and ranks[1].returncode == 1, (err0[-2000:], err1[-2000:])
    summary = _rows(_report(out0))["fleet.ranks"]["summary"]
    assert "rank 1 is on the fleet port under another job identity" in summary, summary
    assert f"MASTER_PORT {master + 3}" in summary and f"MASTER_PORT {master}" in summary
    assert "did not report within the fleet's time" not in summary
    assert "rank 0 is on the fleet port under another job identity" in err1 and f"MASTER_PORT {master}" in err1
    assert "--fleet-port (docs/fleet.md" not in err1  # the port-clash hint: not the cause here
