"""Fleet mode on the CPU: real ranks under torchrun (and by hand, as srun would start them) exchanging reports over
torch.distributed (TCPStore and gloo), drift between ranks with real published frontend wheels, a silent rank, a rank
that cannot join, and exit codes that follow the fleet verdict on every rank."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port, has_torch, run_ranks, validate
from fakes import ensure

from dsv4_doctor import fleet
from dsv4_doctor.fleet import merge as fleetmerge, plan as fleetrun
from dsv4_doctor.fleet import FleetEnv, detect, first_host
from dsv4_doctor.model.core import UsageError

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")



# --- detection ----------------------------------------------------------------------------------------------------

def test_torchrun_and_srun_steps_turn_it_on_a_batch_script_does_not():
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29400"}
    got = detect(torchrun)
    assert got == FleetEnv(3, 8, 1, "node01", 29401, "torchrun", scope=got.scope, job=got.job)
    assert got.scope == "dsv4doctor/job-" + got.job and len(got.job) == 16
    assert detect(dict(torchrun, WORLD_SIZE="1")) is None  # one process: nothing to merge
    assert detect(torchrun, "off") is None
    assert detect(torchrun, port=31000).port == 31000 and detect(torchrun, port=31000).port_given
    srun = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "16", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16",
            "SLURM_STEP_NODELIST": "gpu[03-10]"}
    got = detect(srun)
    assert got == FleetEnv(5, 16, 1, "gpu03", 29501, "srun", scope=got.scope, job=got.job)
    batch = {"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_JOB_NODELIST": "gpu[03-10]"}  # sbatch, no step
    assert detect(batch) is None
    with pytest.raises(UsageError, match="no multi-process launch"):
        detect(batch, "on")
    with pytest.raises(UsageError, match="not a whole number"):
        detect(dict(torchrun, RANK="x"))
    with pytest.raises(UsageError, match="outside a world"):
        detect(dict(torchrun, RANK="8"))
    with pytest.raises(UsageError, match="not a host name"):
        detect(dict(torchrun, MASTER_ADDR="a b;c"))
    assert first_host("gpu[03-05,07],cpu1") == "gpu03" and first_host("node7") == "node7"


# --- the merge, as data -------------------------------------------------------------------------------------------

def _report(rank: int, host: str, fe: str, status: str = "pass", local: int | None = None,
            node: str | None = None) -> dict:
    local = rank % 8 if local is None else local
    return {"schema": "dsv4-doctor.report/1", "doctor": {"name": "dsv4-doctor", "version": "0"}, "created": "",
            "profile": {"cp": 2, "dsa_backend": "cudnn", "gpu_arch": None, "gpu_arch_source": "unknown"},
            "environment": {"fleet_rank": {"rank": rank, "local_rank": local, "host": host, "node": node},
                            "fingerprint": {"packages": {"nvidia-cudnn-frontend": fe}, "sources": {},
                                            "platform": {"driver": "580.1"}}},
            "plugins": [], "summary": {"exit_code": 0, "duration_s": 1.0, "budget_s": 75.0},
            "checks": [{"id": "cudnn-fe.version", "title": "t", "status": status, "summary": f"frontend {fe}",
                        "details": "", "evidence": {}, "fixes": [], "sources": [], "duration_s": 0.1,
                        "origin": "dsv4-doctor", "internal_error": False},
                       {"id": "torch.install", "title": "t", "status": "skip" if local else "pass",
                        "summary": "node-level: imported once per host" if local else "torch 2.11",
                        "details": "", "evidence": {"node_level": True} if local else {}, "fixes": [],
                        "sources": [], "duration_s": 0.1, "origin": "dsv4-doctor", "internal_error": False}]}


def _merge(reports: dict, world: int, problems: dict | None = None, strict: bool = False, **kw):
    """The fleet report in its wire form (the JSON a fleet run writes), and its exit code."""
    merged, code = _merged(reports, world, problems, strict, **kw)
    return merged.to_dict(), code


def _merged(reports: dict, world: int, problems: dict | None = None, strict: bool = False, **kw):
    own = fleetmerge.admit(0, reports[0])
    others = {r: fleetmerge.admit(r, json.dumps(rep).encode()) for r, rep in reports.items() if r != 0}
    return fleetmerge.merge(own, others, world, problems or {}, strict, **kw)


def test_merge_groups_identical_results_and_names_the_odd_rank():
    reports = {r: _report(r, f"node{r // 8:02d}", "1.27.0") for r in range(16)}
    reports[11] = _report(11, "node01", "1.26.0", "fail")
    # Rank 11's packages differ from rank 8's, so it ran its host-level checks itself: a real row, no marker.
    reports[11]["checks"][1] = dict(reports[11]["checks"][1], status="fail", summary="torch 2.9 (stale image)",
                                    evidence={})
    merged, code = _merge(reports, 16)
    rows = {c["id"]: c for c in merged["checks"]}
    assert code == 1 and merged["fleet"]["hosts"] == {"node00": "0-7", "node01": "8-15"}
    fe = rows["cudnn-fe.version"]
    assert fe["status"] == "fail" and "rank 11 (node01)" in fe["summary"]
    assert "pass on ranks 0-10,12-15 (node00, node01): frontend 1.27.0" in fe["summary"]
    assert [g["ranks"] for g in fe["evidence"]["groups"]] == ["11", "0-10,12-15"]
    torch_row = rows["torch.install"]
    assert torch_row["status"] == "fail" and "torch 2.9 (stale image)" in torch_row["summary"]
    assert [(g["status"], g["ranks"]) for g in torch_row["evidence"]["groups"]] == [("fail", "11"), ("pass", "0,8")]
    # Rank 11 ran torch.install itself: the row does not claim it was checked once per host only.
    assert "node-level: checked once per host, and by rank 11 (node01) itself (its packages differ" in \
        torch_row["summary"]
    assert "node-level" not in fe["summary"]
    assert "not checked" not in json.dumps(merged)
    drift = rows["fleet.drift"]
    assert drift["status"] == "fail"
    assert "package nvidia-cudnn-frontend: 1.26.0 on rank 11 (node01), vs 1.27.0 on the other 15 rank(s)" in \
        drift["summary"]
    assert rows["fleet.ranks"]["status"] == "pass" and merged["fleet"]["odd_ranks"] == "11"


def test_node_level_rows_are_vouched_for_only_by_a_leader_with_the_same_packages():
    reports = {r: _report(r, f"node{r // 8:02d}", "1.27.0") for r in range(16)}
    merged, code = _merge(reports, 16)
    row = next(c for c in merged["checks"] if c["id"] == "torch.install")
    assert code == 0 and row["status"] == "pass" and "[pass on all 2 hosts; node-level" in row["summary"]
    del reports[8]  # node01's local rank 0 never reported: nobody checked node01's imports
    merged, code = _merge(reports, 16, {8: "did not report"})
    row = next(c for c in merged["checks"] if c["id"] == "torch.install")
    assert code == 1 and row["status"] == "error"
    assert [(g["status"], g["ranks"]) for g in row["evidence"]["groups"]] == [("error", "9-15"), ("pass", "0")]
    assert "local rank 0, which runs the import probes, did not report" in row["evidence"]["groups"][0]["summary"]


def test_hosts_are_keyed_by_the_launcher_s_node_id_not_the_host_name():
    """Two nodes whose containers share a host name: the launcher's node id tells their local rank 0s apart."""
    reports = {r: _report(r, "worker", "1.27.0", local=r % 2, node=str(r // 2)) for r in range(4)}
    reports[3] = _report(3, "worker", "1.26.0", local=1, node="1")
    merged, _ = _merge(reports, 4)
    row = next(c for c in merged["checks"] if c["id"] == "torch.install")
    # Rank 3's leader is rank 2 (node 1), not rank 0: their packages differ, so nobody answers for rank 3.
    assert "its packages differ from those of rank 2" in json.dumps(row["evidence"]["groups"])


def test_an_even_split_names_both_sides_and_assumes_neither_healthy():
    """1:1 ranks: a tie has no majority, so neither side is named odd by default (rank 0's could be the broken
    one)."""
    reports = {0: _report(0, "a", "1.27.0", local=0), 1: _report(1, "b", "1.26.0", local=0)}
    merged, code = _merge(reports, 2)
    drift = next(c for c in merged["checks"] if c["id"] == "fleet.drift")
    assert code == 1 and "split" in drift["summary"] and "which side is right is not known" in drift["summary"]
    assert "1.27.0 on rank 0 (a)" in drift["summary"] and "1.26.0 on rank 1 (b)" in drift["summary"]
    diff = next(d for d in drift["evidence"]["differences"] if d["what"] == "package nvidia-cudnn-frontend")
    assert "majority" not in diff and [s["ranks"] for s in diff["split"]] == ["0", "1"]


def test_fixes_of_every_group_are_kept():
    """Fixes came only from the worst group, so a warn's fix elsewhere vanished."""
    reports = {r: _report(r, f"n{r}", "1.27.0", local=0) for r in range(3)}
    fail_fix = {"description": "pin the frontend", "argv": [["pip", "install", "nvidia-cudnn-frontend==1.27.0"]],
                "id": "fe-pin", "phase": "pin"}
    warn_fix = {"description": "set NCCL_NVLS_ENABLE=0", "argv": [], "id": "nvls", "phase": "setting"}
    reports[1]["checks"][0] = dict(reports[1]["checks"][0], status="fail", summary="stale", fixes=[fail_fix])
    reports[2]["checks"][0] = dict(reports[2]["checks"][0], status="warn", summary="slow", fixes=[warn_fix])
    merged, _ = _merge(reports, 3)
    row = next(c for c in merged["checks"] if c["id"] == "cudnn-fe.version")
    assert [f["id"] for f in row["fixes"]] == ["fe-pin", "nvls"]


@pytest.mark.parametrize("damage, why", [
    (lambda rep: rep["checks"][0].update(status="catastrophic"), "unknown status"),
    (lambda rep: rep["checks"][0].update(id="x; rm -rf /"), "is not a check id"),
    (lambda rep: rep["environment"]["fleet_rank"].update(rank=0), "says it is rank 0"),
    (lambda rep: rep.update(checks={"not": "a list"}), "no list of checks"),
    (lambda rep: rep["checks"][0].update(evidence=_nested(60)), "nested deeper"),
    (lambda rep: rep["checks"][0].update(fixes=[{"description": "x", "argv": [["rm\n-rf"]]}]), "a fix is not valid"),
])
def test_a_bad_rank_report_becomes_a_finding_about_that_rank(damage, why):
    """A row with an unknown status, or a large report from one rank, crashed the merge and cost
    the fleet report."""
    bad = _report(1, "n1", "1.27.0", local=0)
    damage(bad)
    with pytest.raises(fleetmerge.BadReport, match=why):
        fleetmerge.admit(1, json.dumps(bad).encode())
    with pytest.raises(fleetmerge.BadReport, match="bytes"):
        fleetmerge.admit(1, b"{" + b" " * fleetmerge.MAX_REPORT_BYTES + b"}")
    own = fleetmerge.admit(0, _report(0, "n0", "1.27.0"))
    merged, code = fleetmerge.merge(own, {}, 2, {1: "its report was rejected: " + why}, False)
    ranks = next(c for c in merged.to_dict()["checks"] if c["id"] == "fleet.ranks")
    assert code == 1 and ranks["status"] == "fail" and why in ranks["summary"] and "rank 1" in ranks["summary"]


def _nested(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"x": out}
    return out


def test_the_fleet_budget_is_the_exchange_s_bound():
    reports = {r: _report(r, "node00", "1.27.0") for r in range(2)}
    merged, _ = _merge(reports, 2, exchange={"bound_s": 128.04})
    assert merged["summary"]["budget_s"] == 128.0
    merged, _ = _merge(reports, 2)
    assert "budget_s" not in merged["summary"]


def _missing(report: dict) -> set[int]:
    """The ranks fleet.ranks names as missing ("1-2,5" -> {1, 2, 5})."""
    row = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    out: set[int] = set()
    for part in filter(None, row["evidence"]["missing"].split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def test_a_missing_rank_s_host_comes_from_the_launcher_when_it_never_said_hello():
    srun = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "5", "SLURM_STEP_NODELIST": "gpu[08-09],cpu1",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}
    env = fleet.detect(srun)
    assert env is not None
    assert fleet.launcher_hosts(env, srun, {}) == {0: "gpu08", 1: "gpu08", 2: "gpu09", 3: "gpu09", 4: "cpu1"}
    assert fleet.launcher_hosts(env, dict(srun, SLURM_DISTRIBUTION="cyclic"), {}) == {}  # places unknown
    assert fleet.launcher_hosts(env, dict(srun, SLURM_STEP_TASKS_PER_NODE="2,2"), {}) == {}  # 4 tasks, not 5
    assert fleet.expand_nodelist("a[1-2,x]") == [] and fleet.expand_nodelist("n[1-1000000]") == []
    torchrun = {"RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2",
                "GROUP_RANK": "0", "LOCAL_RANK": "0"}
    env = fleet.detect(torchrun)
    assert env is not None
    # Rank 3 is on node 1, as rank 2 is: rank 2's host names it; with no report from node 1, its node id does.
    assert fleet.launcher_hosts(env, torchrun, {"0": "a", "1": "b"})[3] == "b"
    assert fleet.launcher_hosts(env, torchrun, {"0": "a"})[3] == "node 1"
    reports = {r: _report(r, "gpu08", "1.27.0", local=r) for r in (0, 1)}
    merged, _ = _merge(reports, 5, {r: "did not report" for r in (2, 3, 4)},
                       hosts_hint={r: h for r, h in fleet.launcher_hosts(fleet.detect(srun), srun, {}).items()
                                   if r > 1})
    row = next(c for c in merged["checks"] if c["id"] == "fleet.ranks")
    assert "ranks 2-4 (cpu1, gpu09)" in row["summary"]
    assert [e["host"] for e in row["evidence"]["ranks"]] == ["gpu09", "gpu09", "cpu1"]


def test_merge_names_missing_ranks_with_their_hosts_and_anonymizes_with_a_salt():
    reports = {r: _report(r, f"node{r}", "1.27.0") for r in (0, 1, 3)}
    problems = {2: "did not report", 4: "did not report"}
    merged, code = _merge(reports, 5, problems, hosts_hint={2: "node2"}, anonymize_salt="s1")  # hashes names
    row = next(c for c in merged["checks"] if c["id"] == "fleet.ranks")
    assert code == 1 and row["status"] == "fail" and "ranks 2,4" in row["summary"]
    assert all(h.startswith("host-") for h in merged["fleet"]["hosts"]) and "node" not in json.dumps(
        merged["fleet"]["hosts"])
    assert fleetmerge.host_label("node2", "s1") in row["summary"]  # rank 2 said hello: its host is known
    assert fleetmerge.host_label("node2", "s1") != fleetmerge.host_label("node2", "s2")  # salted per run
    assert fleetmerge.ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_skipped_fleet_rows_are_left_out_but_a_missing_rank_still_fails():
    reports = {r: _report(r, "n", "1.27.0") for r in range(2)}
    merged, code = _merge(reports, 3, {2: "did not report"}, exchange={"fleet_checks": ("fleet.drift",)})
    assert "fleet.ranks" not in {c["id"] for c in merged["checks"]} and code == 1


def test_merged_report_size_grows_with_distinct_results_not_ranks():
    small = json.dumps(_merge({r: _report(r, f"n{r // 8}", "1.27.0") for r in range(16)}, 16)[0])
    big = json.dumps(_merge({r: _report(r, f"n{r // 8}", "1.27.0") for r in range(1024)}, 1024)[0])
    assert len(big) < 3 * len(small)  # 64x the ranks; the host map grows, the rows do not


# --- launch shapes, secrets, stderr -------------------------------------------------------------------------------

def test_torchrun_inside_a_one_task_srun_step_is_one_fleet():
    """`srun -n1 torchrun ...`: a one-task step is torchrun's launcher, not the fleet; every worker must not be a
    fleet of one."""
    env = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0",
           "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29400",
           "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "none"}
    got = detect(env)
    assert got is not None and got.world_size == 4 and got.launcher == "torchrun" and got.node == "0"
    assert got.scope.startswith("dsv4doctor/slurm-77.0-")  # torchrun's run id is "none", its default: Slurm's ids
    assert detect(dict(env, TORCHELASTIC_RUN_ID="abc")).scope.startswith("dsv4doctor/run-abc-")


def test_two_concurrent_jobs_never_share_a_store_scope():
    """Two jobs given the same --fleet-port shared the scope `dsv4doctor/job` (torchrun's default run id "none"),
    and job A merged job B's rank. The scope now carries the job's rendezvous and the launcher's ids."""
    a = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
         "TORCHELASTIC_RUN_ID": "none"}
    scopes = {detect(a, port=31000).scope, detect(dict(a, MASTER_PORT="29401"), port=31000).scope,
              detect(dict(a, MASTER_ADDR="node2"), port=31000).scope,
              detect(dict(a, TORCHELASTIC_RESTART_COUNT="1"), port=31000).scope,
              detect(dict(a, SLURM_JOB_ID="5", SLURM_STEP_ID="0"), port=31000).scope,
              detect(dict(a, SLURM_JOB_ID="5", SLURM_STEP_ID="1"), port=31000).scope}
    assert len(scopes) == 6
    assert detect(a).scope == detect(dict(a, RANK="0")).scope  # every rank of one job agrees
    assert detect(a).agent_port is None  # by hand: no torchrun store
    assert detect(dict(a, TORCHELASTIC_USE_AGENT_STORE="True")).agent_port == 29400


def test_a_report_from_another_job_is_refused_whatever_its_world_size():
    mine = detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29400"})
    theirs = detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29401"})
    report = _report(1, "n1", "1.27.0")
    report["environment"]["fleet_rank"]["job"] = theirs.job
    with pytest.raises(fleetmerge.BadReport, match="from another job"):
        fleetmerge.admit(1, json.dumps(report).encode(), mine.job)
    report["environment"]["fleet_rank"]["job"] = mine.job
    assert fleetmerge.admit(1, json.dumps(report).encode(), mine.job).rank == 1


def test_an_over_limit_report_is_replaced_by_a_short_typed_one_on_its_own_rank():
    """A rank sent its report unbounded (~11 MB reset the store connection): it now bounds it before it sends."""
    from dsv4_doctor.fleet import admit as fleetadmit
    from dsv4_doctor.fleet.plan import bounded_report
    from dsv4_doctor.model.report import Report

    big = _report(1, "n1", "1.27.0")
    big["checks"][0]["evidence"] = {"blob": "x" * (11 * 1024 * 1024)}
    payload = bounded_report(Report.from_wire(big))
    assert len(payload) < 4096
    with pytest.raises(fleetadmit.BadReport, match=r"its report was 11,5\d\d,\d\d\d bytes, over the 4,194,304-byte"):
        fleetadmit.admit(1, payload)
    small = bounded_report(Report.from_wire(_report(1, "n1", "1.27.0")))
    assert fleetadmit.admit(1, small).rank == 1


def test_srun_steps_without_master_port_get_a_port_of_their_own():
    """srun jobs without MASTER_PORT all took 29501, and two jobs on a node read each other."""
    base = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "gpu1", "SLURM_NODEID": "0"}
    a = detect(dict(base, SLURM_JOB_ID="100", SLURM_STEP_ID="0"))
    b = detect(dict(base, SLURM_JOB_ID="101", SLURM_STEP_ID="0"))
    assert a is not None and b is not None and a.port != b.port and a.scope != b.scope
    assert a.port == detect(dict(base, SLURM_JOB_ID="100", SLURM_STEP_ID="0")).port  # every rank agrees
    assert 20000 <= a.port < 30000 and a.node == "0"


def test_the_fleet_secret_comes_from_the_variable_or_the_file(tmp_path):
    assert fleet.fleet_key({}) is None
    from_var = fleet.fleet_key({"DSV4_DOCTOR_FLEET_SECRET": "s3cr3t-value"})
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-value\n")
    assert fleet.fleet_key({"DSV4_DOCTOR_FLEET_SECRET_FILE": str(secret)}) == from_var and from_var
    with pytest.raises(UsageError, match="cannot read"):
        fleet.fleet_key({"DSV4_DOCTOR_FLEET_SECRET_FILE": str(tmp_path / "absent")})


def test_fleet_stderr_lines_are_cleaned_and_redacted(capsys, monkeypatch):
    """Fleet mode's own stderr lines carried a rank's raw import error: terminal escapes, a
    workflow command, an unmasked token."""
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz123456")
    fleetrun._say("could not import: \x1b]52;c;ZXZpbA==\x07 boom\n::error::forged\n"
                  "token hf_abcdefghijklmnopqrstuvwxyz123456")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\n::error::" not in err
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in err


# --- real ranks ---------------------------------------------------------------------------------------------------

def _ranks_by_hand(n: int, tmp_path: Path, *args: str, per_rank_env=None, launcher: str = "torchrun",
                   timeout: float = 180) -> list[subprocess.CompletedProcess]:
    """n doctor processes started with the launcher's environment set by hand (as torchrun or srun would)."""
    port = free_port()
    envs = []
    for r in range(n):
        if launcher == "torchrun":
            env = dict(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
        else:
            env = dict(SLURM_PROCID=str(r), SLURM_STEP_NUM_TASKS=str(n), SLURM_NTASKS=str(n), SLURM_LOCALID=str(r),
                       SLURM_STEP_NODELIST="localhost", MASTER_PORT=str(port))
        env.update((per_rank_env or {}).get(r, {}))
        envs.append(env)
    return run_ranks(args, envs, timeout)


@needs_torch
@pytest.mark.slow
def test_healthy_ranks_give_one_passing_report(tmp_path):
    start = time.monotonic()
    done = _ranks_by_hand(3, tmp_path, "check", "--no-smoke", "--only", "python.version", "-f", "json",
                          "--fleet-wait", "30")  # every rank must join; a healthy join takes a second
    seconds = time.monotonic() - start
    assert [d.returncode for d in done] == [0, 0, 0], done[0].stderr
    report = validate(json.loads(done[0].stdout))
    rows = {c["id"]: c for c in report["checks"]}
    assert rows["fleet.ranks"]["status"] == "pass" and rows["fleet.drift"]["status"] == "pass"
    assert rows["python.version"]["summary"].endswith("[pass on all 3 reporting ranks]")
    assert report["fleet"]["world_size"] == 3 and report["fleet"]["not_acknowledged"] == ""
    assert "every rank acknowledged the verdict" in rows["fleet.ranks"]["summary"]
    assert done[1].stdout == done[2].stdout == ""  # the other ranks print nothing
    # The bound is rank 0's time until its join window opened, the 30 s window, and the exchange's timeouts: it
    # holds, and it is not rank 0's own budget (60 s timeouts: over 75 s) plus the wait counted again.
    assert seconds <= report["summary"]["budget_s"] <= seconds + 30 + 35


def _odd_rank_plugin(tmp_path):
    """A site with a plugin whose check `bad.rank` fails on a rank whose environment sets ODD."""
    site = tmp_path / "site"
    (site / "bad_plugin-1.dist-info").mkdir(parents=True)
    (site / "bad_plugin-1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 1\n")
    (site / "bad_plugin-1.dist-info" / "entry_points.txt").write_text("[dsv4_doctor.checks]\nbad = bad_checks\n")
    (site / "bad_checks.py").write_text(
        "from dsv4_doctor.model.core import Check, failed, passed\nimport os\n"
        "CHECKS = [Check(id='bad.rank', title='t', explanation='x', applies_when='always', detects='x',\n"
        "                run=lambda ctx: failed('odd rank') if os.environ.get('ODD') else passed('fine'))]\n")
    return site


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_every_rank_exits_with_the_fleet_verdict(tmp_path, launcher):
    """Rank 1's PYTHONPATH carries a plugin whose check fails: all three ranks exit 1, the healthy ones too."""
    site = _odd_rank_plugin(tmp_path)
    env = {r: {"PYTHONPATH": str(site)} for r in range(3)}
    env[1]["ODD"] = "1"
    done = _ranks_by_hand(3, tmp_path, "check", "--no-smoke", "--only", "python.version,bad.rank", "-f", "json",
                          "--fleet-wait", "30", per_rank_env=env, launcher=launcher)
    assert [d.returncode for d in done] == [1, 1, 1], [d.stderr[-500:] for d in done]
    rows = {c["id"]: c for c in json.loads(done[0].stdout)["checks"]}
    assert rows["bad.rank"]["status"] == "fail" and "rank 1 (" in rows["bad.rank"]["summary"]
    assert "check bad.rank: fail on rank 1" in rows["fleet.drift"]["summary"]


@needs_torch
@pytest.mark.slow
def test_a_rank_that_cannot_join_reports_alone_and_is_named(tmp_path):
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('this rank has a broken torch')\n")
    done = _ranks_by_hand(3, tmp_path, "check", "--no-smoke", "--only", "python.version", "-f", "json",
                          "--fleet-wait", "6", per_rank_env={2: {"PYTHONPATH": str(broken)}})
    assert done[2].returncode == 1 and "did not take the fleet's verdict" in done[2].stderr
    assert re.search(r"\[.\] python  1 pass", done[2].stderr)  # its own report, on stderr
    report = json.loads(done[0].stdout)
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert ranks["status"] == "fail" and 2 in _missing(report)  # rank 1 may be late too on a loaded machine
    assert done[0].returncode == done[1].returncode == 1


TORCHRUN_RANK = """#!/bin/sh
# One torchrun worker: its own PYTHONPATH (FE_$RANK), and rank $SILENT stalls before the doctor starts.
eval "export PYTHONPATH=\\$FE_$RANK"
if [ "$RANK" = "$SILENT" ]; then sleep 300; fi
exec "$DOCTOR_PY" -m dsv4_doctor "$@"
"""


def _torchrun(tmp_path: Path, n: int, env: dict, *args: str, timeout: float = 240):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun comes with torch"
    worker = tmp_path / "rank.sh"
    worker.write_text(TORCHRUN_RANK)
    worker.chmod(0o755)
    full = dict(os.environ, DOCTOR_PY=sys.executable, **env)
    start = time.monotonic()
    done = subprocess.run([torchrun, "--nproc-per-node", str(n), "--master-port", str(free_port()), "--no-python",
                           str(worker), *args], env=full, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


@needs_torch
@pytest.mark.slow
def test_drift_under_torchrun_names_the_rank_with_another_frontend(tmp_path):
    new, old = ensure("nvidia-cudnn-frontend-1.27.0"), ensure("nvidia-cudnn-frontend-1.26.0")
    done, _ = _torchrun(tmp_path, 3, {"FE_0": str(new), "FE_1": str(new), "FE_2": str(old), "SILENT": "-"},
                        "check", "--no-smoke", "--cp", "2", "--only", "python.version,cudnn-fe.version", "-f", "json")
    assert done.returncode == 1 and done.stdout.startswith("{"), "\n".join(
        line for line in done.stderr.splitlines() if not line.startswith(("W1", "  ", "[", "=", "-")))[-3000:]
    report = validate(json.loads(done.stdout))
    drift = next(c for c in report["checks"] if c["id"] == "fleet.drift")
    host = socket.gethostname()
    assert drift["status"] == "fail"
    assert "package nvidia-cudnn-frontend: 1.26.0" in drift["summary"] and f"rank 2 ({host})" in drift["summary"]
    assert "1.27.0" in drift["summary"]
    odd = drift["evidence"]["differences"][0]
    assert odd["odd"][0]["ranks"] == "2" and odd["odd"][0]["hosts"] == [host]
    # Rank 2's frontend differs from its local rank 0's, so it ran the frontend's import check itself: its row
    # says what its frontend is, and no row is an `error` "not checked on this rank".
    fe = next(c for c in report["checks"] if c["id"] == "cudnn-fe.version")
    groups = {g["ranks"]: g for g in fe["evidence"]["groups"]}
    assert "1.26.0" in groups["2"]["summary"] and "1.27.0" in groups["0"]["summary"], groups  # rank 1: as rank 0
    assert f"node-level: checked once per host, and by rank 2 ({host}) itself" in fe["summary"]
    assert not [c["id"] for c in report["checks"] if c["status"] == "error"]
    assert "not checked" not in json.dumps(report)


@needs_torch
@pytest.mark.slow
def test_a_rank_that_cannot_join_under_torchrun_does_not_cost_the_report(tmp_path):
    """Under torchrun a rank that exits stops every other rank, rank 0 too: the broken rank stays until rank 0 has
    named it, so the fleet still gets its report."""
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('this rank has a broken torch')\n")
    done, seconds = _torchrun(tmp_path, 3, {"FE_0": "", "FE_1": "", "FE_2": str(broken), "SILENT": "-"},
                              "check", "--no-smoke", "--only", "python.version", "--fleet-wait", "5", "-f", "json")
    report = validate(json.loads(done.stdout))
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert ranks["status"] == "fail" and 2 in _missing(report)
    assert done.returncode != 0 and seconds < 90


# Makes the fleet helper of the rank that has DIE_AFTER_HELLO set die once it said hello (its host is known), before
# it sends its report: a rank lost mid-exchange.
DIE_AFTER_HELLO = """
import os, sys
if os.environ.get("DIE_AFTER_HELLO") and any(a.endswith("dsv4probe_fleet.py") for a in sys.argv[:2]):
    import torch.distributed as dist
    _Store = dist.TCPStore
    class TCPStore(_Store):
        def set(self, key, value):
            _Store.set(self, key, value)
            if "/hello/" in key:
                os._exit(9)
    dist.TCPStore = TCPStore
"""


@needs_torch
@pytest.mark.slow
def test_a_rank_lost_mid_exchange_is_named_with_its_host_and_the_others_keep_the_guarantee(tmp_path):
    """A crashed rank: rank 0 names it (with the host its hello gave) when the report deadline passes, and writes
    the report; the healthy rank takes the verdict, the crashed one exits 1 without starting."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DIE_AFTER_HELLO)
    start = time.monotonic()
    done = _ranks_by_hand(3, tmp_path, "check", "--no-smoke", "--only", "python.version", "-f", "json",
                          "--fleet-wait", "12", per_rank_env={1: {"PYTHONPATH": str(hook), "DIE_AFTER_HELLO": "1"}})
    report = validate(json.loads(done[0].stdout))
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert 1 in _missing(report) and f"rank 1 ({socket.gethostname()})" in ranks["summary"], ranks["summary"]
    assert done[1].returncode == 1 and "not starting" in done[1].stderr
    assert done[0].returncode == done[2].returncode == 1 and time.monotonic() - start < 120


@needs_torch
@pytest.mark.slow
def test_a_silent_rank_under_torchrun_is_named_within_the_budget(tmp_path):
    done, seconds = _torchrun(tmp_path, 3, {"FE_0": "", "FE_1": "", "FE_2": "", "SILENT": "2"},
                              "check", "--no-smoke", "--only", "python.version", "--fleet-wait", "5", "-f", "json")
    report = validate(json.loads(done.stdout))
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert ranks["status"] == "fail" and 2 in _missing(report)
    assert report["summary"]["exit_code"] == 1 and done.returncode != 0
    assert seconds < 60  # rank 0 waited 5 s, not for the stalled rank (torchrun then stops it)


@needs_torch
@pytest.mark.slow
def test_preflight_in_a_fleet_execs_every_rank_only_when_the_fleet_passed(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("import os, sys\nopen(sys.argv[1] + os.environ['RANK'], 'w').write(str(os.getpid()))\n")
    marker = str(tmp_path / "ran-")
    done = _ranks_by_hand(2, tmp_path, "preflight", "--no-smoke", "--only", "python.version", "--", sys.executable,
                          str(job), marker)
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-800:] for d in done]
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-0", "ran-1"]
    # Rank 0 writes the fleet's report (its fleet rows counted in the grouped summary); rank 1 prints nothing.
    assert "[✓] fleet 2 pass" in " ".join(done[0].stderr.split()) and done[1].stderr == "", done[1].stderr
    for p in tmp_path.glob("ran-*"):
        p.unlink()
    blocked = _ranks_by_hand(2, tmp_path, "preflight", "--no-smoke", "--only", "torch.install", "--",
                             sys.executable, str(job), marker)
    assert [d.returncode for d in blocked] == [1, 1] and not list(tmp_path.glob("ran-*"))


@needs_torch
@pytest.mark.slow
def test_a_fleet_rank_s_smoke_is_its_own_world_under_torchrun(tmp_path):
    """Under torchrun a probe that inherited TORCHELASTIC_USE_AGENT_STORE, RANK and friends would join torchrun's
    store as a client from tier 2's one-process init_process_group and hang until the probe timeout (seen on the
    H200): probes start without the launcher's variables."""
    from fakes import Env, fake_megatron_importable, fake_te

    env = Env(tmp_path / "env").fake("megatron", fake_megatron_importable).fake("te", fake_te)
    path = os.pathsep.join(str(p) for p in env.sites.values())
    done, seconds = _torchrun(tmp_path, 2, {"FE_0": path, "FE_1": path, "SILENT": "-"},
                              "smoke", "--deep", "--device", "cpu", "--timeout", "40", "-f", "json", timeout=300)
    report = validate(json.loads(done.stdout))
    rows = {c["id"]: c for c in report["checks"]}
    row = rows["smoke.thd-cp"]
    assert row["status"] == "pass", row["summary"]
    assert "DSv4 layer CP=1 packed output = each sequence alone" in row["summary"]
    # `smoke` runs as a fleet as `check` does: one report from rank 0, both ranks in it, the verdict obeyed by all.
    assert report["fleet"]["world_size"] == 2 and report["fleet"]["reported"] == 2
    assert rows["fleet.ranks"]["status"] == "pass" and "every rank acknowledged" in rows["fleet.ranks"]["summary"]
    assert {"smoke.dsv4-kernels", "fleet.drift"} <= set(rows) and row["summary"].endswith("reporting ranks]")
    assert done.returncode == report["summary"]["exit_code"] == 0, done.stderr[-2000:]
    assert seconds < 120


# --- the timeline, signals, trust ---------------------------------------------------------------------------------

def _rank_env(r: int, n: int, port: int, **extra: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return {**base, "RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(n),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **extra}


def _spawn(r: int, n: int, port: int, *args: str, **extra: str) -> subprocess.Popen:
    from conftest import doctor_command

    return subprocess.Popen(doctor_command() + list(args), env=_rank_env(r, n, port, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_port(port: int, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port}")


@needs_torch
@pytest.mark.slow
def test_a_late_rank_is_waited_for_by_every_rank_and_all_exit_alike(tmp_path):
    """A slow node: if each rank waited by its own clock, the others could give up while rank 0 still waits for the
    late one, and the job would start on some ranks: every rank waits by rank 0's published deadlines. Also: `--only`
    may name a fleet row under torchrun."""
    port = free_port()
    args = ("check", "--no-smoke", "--only", "python.version,fleet.ranks", "-f", "json", "--fleet-wait", "25")
    procs = [_spawn(r, 3, port, *args) for r in (0, 1)]
    time.sleep(8)  # rank 2's node is slow
    procs.append(_spawn(2, 3, port, *args))
    done = [p.communicate(timeout=150) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes == [0, 0, 0], [err[-800:] for _, err in done]
    report = validate(json.loads(done[0][0]))
    rows = {c["id"]: c for c in report["checks"]}
    assert set(rows) == {"python.version", "fleet.ranks"}  # fleet.drift was not asked for
    assert "all 3 ranks reported" in rows["fleet.ranks"]["summary"] and "acknowledged" in rows["fleet.ranks"]["summary"]


@needs_torch
@pytest.mark.slow
def test_sigterm_during_the_exchange_still_writes_rank_0_s_report(tmp_path):
    """Found under torchrun: a rank exiting non-zero makes torchrun SIGTERM every rank, and rank 0 then wrote
    nothing, even with -o."""
    import signal

    port = free_port()
    out = tmp_path / "fleet.json"
    # Two nodes of one rank each, as torchrun tells them: rank 1 never says hello, and its node still names it.
    nodes = {"LOCAL_WORLD_SIZE": "1", "GROUP_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    proc = _spawn(0, 2, port, "check", "--no-smoke", "--only", "python.version", "-f", "json", "-o", str(out),
                  "--fleet-wait", "60", **nodes)
    _wait_for_port(port + 1)  # rank 0's exchange is up and waiting for rank 1, which never comes
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-1000:]
    report = validate(json.loads(out.read_text()))
    assert 1 in _missing(report) and "interrupted by SIGTERM" in report["summary"]["partial"]
    assert report["summary"]["exit_code"] == 143 and report["summary"]["interrupted"] == "SIGTERM"
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert [(e["rank"], e["host"]) for e in ranks["evidence"]["ranks"]] == [(1, "node 1")]

    # SIGINT (Ctrl-C at a job's console) while rank 0 is still in its own checks, before any exchange.
    hook = tmp_path / "slow-static"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys, time\nif any(a.endswith('dsv4probe_static.py') for a in sys.argv[:2]):\n    time.sleep(60)\n")
    out.unlink()
    port = free_port()
    proc = _spawn(0, 2, port, "check", "--no-smoke", "--only", "python.version", "-f", "json", "-o", str(out),
                  "--fleet-wait", "60", PYTHONPATH=str(hook), **nodes)
    time.sleep(4.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-1000:]
    report = validate(json.loads(out.read_text()))
    assert "interrupted by SIGINT before the fleet exchange" in report["summary"]["partial"]
    assert report["summary"]["exit_code"] == 130 and 1 in _missing(report)
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert [(e["rank"], e["host"]) for e in ranks["evidence"]["ranks"]] == [(1, "node 1")]


@needs_torch
@pytest.mark.slow
def test_rank_0_whose_torch_cannot_import_still_writes_its_report(tmp_path):
    """Rank 0 whose exchange could not start (its torch does not import) never wrote -o."""
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('rank 0 has a broken torch')\n")
    out = tmp_path / "fleet.json"
    proc = _spawn(0, 2, free_port(), "check", "--no-smoke", "--only", "python.version", "-f", "json", "-o", str(out),
                  PYTHONPATH=str(broken))
    _, err = proc.communicate(timeout=120)
    report = validate(json.loads(out.read_text()))
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert proc.returncode == 1 and ranks["status"] == "fail", err[-800:]
    assert "the fleet exchange failed" in ranks["summary"] and "rank 0 has a broken torch" in ranks["summary"]
    assert 1 in _missing(report)


FORGER = r"""
import json, sys, time
from datetime import timedelta
import torch.distributed as dist
port, scope = int(sys.argv[1]), sys.argv[2]
store = dist.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=60), wait_for_workers=False)
store.wait([scope + "/plan"], timedelta(seconds=60))
nonce = json.loads(bytes(store.get(scope + "/plan")).partition(b".")[2])["nonce"]
passing = json.dumps({"checks": [], "environment": {"fleet_rank": {"rank": 0}}}).encode()
while True:  # a foreign writer: rank 0's own entry, and a go verdict for everyone
    store.set(scope + "/" + nonce + "/report/0", b"." + passing)
    for name in ("/verdict", "/verdict/1"):
        store.set(scope + "/" + nonce + name, b"." + json.dumps({"exit_code": 0, "nonce": nonce}).encode())
    time.sleep(0.3)
"""

REPLAY = r"""
import json, os, sys, time
from datetime import timedelta
import torch.distributed as dist
sys.path.insert(0, sys.argv[2])
import dsv4probe_fleet_exchange as ex
folder, key, scope = sys.argv[1], b"k" * 32, "dsv4doctor/job"
store = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=30), wait_for_workers=False)
# What a listener recorded from an earlier run of the same job (same scope, same secret): its signed plan and the
# go verdict rank 1 took then, replayed into this run's store before rank 0 is up.
old = ex.Channel(store, scope + "/oldnonce", key)
ex.Channel(store, scope, key).set("plan", json.dumps({"v": 1, "nonce": "oldnonce", "world_size": 2, "seq": 1,
    "report_left": 1.5, "verdict_left": 3.0, "ack_left": 3.5}).encode())
for name, extra in (("verdict", {}), ("verdict/1", {"challenge": "from-the-earlier-run"})):
    old.set(name, json.dumps(dict({"exit_code": 0, "nonce": "oldnonce"}, **extra)).encode())
open(os.path.join(folder, "report.json"), "w").write("{}")
open(os.path.join(folder, "report.json.ready"), "w").close()
ex.RELEASE_S = 0.5
request = {"rank": 1, "world_size": 2, "dir": folder, "connect_s": 5.0, "fingerprint_node": None}
answer = ex._other(request, ex.Channel(store, scope, key), store, key, b"{}", time.monotonic(), {})
print(json.dumps(answer))
"""


@needs_torch
@pytest.mark.slow
def test_a_foreign_writer_on_the_store_cannot_forge_rank_0_s_result_or_the_verdict(tmp_path):
    """Any process that reached rank 0's store port overwrote rank 0's own entry, which rank 0 read
    back, so its failing check became "pass on all reporting ranks", exit 0. Rank 0's own result no longer crosses
    the store, and with the job's secret a forged verdict is ignored: no rank starts on it."""
    site = _odd_rank_plugin(tmp_path)
    port = free_port()
    secret = {"DSV4_DOCTOR_FLEET_SECRET": "correct-horse-battery-staple", "PYTHONPATH": str(site)}
    scope = detect(_rank_env(0, 2, port)).scope  # the job's own scope: the forger writes where the ranks read
    forger = subprocess.Popen([sys.executable, "-c", FORGER, str(port + 1), scope],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    args = ("check", "--no-smoke", "--only", "python.version,bad.rank", "-f", "json", "--fleet-wait", "20")
    procs = [_spawn(0, 2, port, *args, ODD="1", **secret), _spawn(1, 2, port, *args, **secret)]
    done = [p.communicate(timeout=150) for p in procs]
    forger.kill()  # it forges until it is stopped or the store is gone
    forger.communicate(timeout=30)
    assert [p.returncode for p in procs] == [1, 1], [err[-800:] for _, err in done]
    report = validate(json.loads(done[0][0]))
    bad = next(c for c in report["checks"] if c["id"] == "bad.rank")
    assert bad["status"] == "fail" and "rank 0 (" in bad["summary"]
    assert report["fleet"]["authenticated"] is True
    assert "correct-horse-battery-staple" not in done[0][0] + done[0][1] + done[1][1]


@needs_torch
@pytest.mark.slow
def test_a_replayed_go_verdict_from_an_earlier_run_does_not_start_a_rank(tmp_path):
    """With the secret, an earlier run's signed plan and go verdict, read off the store by anyone
    who reaches its port and written back in a later run of the same job, made a rank start while rank 0 failed."""
    probes = Path(fleet.__file__).parent.parent / "probes"
    done = subprocess.run([sys.executable, "-c", REPLAY, str(tmp_path), str(probes)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.splitlines()[-1])
    assert "exit_code" not in answer and "no verdict from rank 0" in answer["missed"]


def test_anonymized_host_labels_are_salted_by_the_job_and_its_secret():
    a = FleetEnv(0, 2, 0, "h", 1, "torchrun", scope="dsv4doctor/run-a")
    b = FleetEnv(0, 2, 0, "h", 1, "torchrun", scope="dsv4doctor/run-b")
    same = fleet.host_label(True, a, {})
    assert same == fleet.host_label(True, a, {}) and same.startswith("host-")  # every rank of the job agrees
    assert same != fleet.host_label(True, b, {})  # another job cannot match labels to names
    assert same != fleet.host_label(True, a, {"DSV4_DOCTOR_FLEET_SECRET": "s3cr3t-value"})
    assert fleet.host_label(False, a, {}) == socket.gethostname()


def test_the_text_report_leads_with_the_odd_ranks_and_what_to_do():
    from dsv4_doctor.report.dispatch import render

    reports = {r: _report(r, f"node{r // 8:02d}", "1.27.0") for r in range(16)}
    reports[11] = _report(11, "node01", "1.26.0")
    del reports[5]
    merged, _ = _merged(reports, 16, {5: "did not report within the fleet's time"}, hosts_hint={5: "node00"})
    text = render(merged, "text", width=120)
    lead = text[:re.search(r"^\[", text, re.M).start()]  # type: ignore[union-attr]  # before the first area
    assert "Fleet: look first at" in lead
    assert "rank 5 (node00): did not report within the fleet's time" in lead
    assert "rank(s) 11 (node01): package nvidia-cudnn-frontend is 1.26.0, not 1.27.0" in lead
    assert "re-pull that node's image" in lead


def test_smoke_and_preflight_take_the_fleet_options_as_check_does():
    """Without it, `smoke` had no fleet mode, so under torchrun each rank wrote its own report."""
    from dsv4_doctor.cli.main import parser

    _, commands = parser()
    for name, extra in (("check", []), ("smoke", []), ("preflight", ["--", "true"])):
        args = commands[name].parse_args(["--fleet-port", "31000", "--anonymize-hosts", *extra])
        assert args.distributed == "auto" and args.fleet_port == 31000 and args.anonymize_hosts, name


def test_only_and_skip_of_the_fleet_rows():
    """Without it, `--only ...,fleet.drift` was refused under torchrun and `--skip fleet.drift` was ignored."""
    from dsv4_doctor.commands.usecases import fleet_selection as _fleet_selection

    env = FleetEnv(0, 2, 0, "h", 1, "torchrun")
    assert _fleet_selection(env, ["python.version", "fleet.drift"], []) == (["python.version"], ("fleet.drift",))
    assert _fleet_selection(env, ["fleet.*"], []) == (["python.version"], ("fleet.drift", "fleet.ranks"))
    assert _fleet_selection(env, [], ["fleet.drift"]) == ([], ("fleet.ranks",))
    assert _fleet_selection(env, ["cudnn-fe.*"], []) == (["cudnn-fe.*"], ("fleet.drift", "fleet.ranks"))


@needs_torch
@pytest.mark.slow
def test_the_fingerprint_waits_for_the_static_facts_with_only_an_import_check(tmp_path):
    """`--only cudnn-fe.version`: rank 1 leaves that check to its local rank 0, so none of its own checks waits for
    the static probe; its fingerprint must wait for it, or it is empty ("python: None on rank 1") and the frontend's
    1.26.0 vs 1.27.0 is not seen."""
    new, old = ensure("nvidia-cudnn-frontend-1.27.0"), ensure("nvidia-cudnn-frontend-1.26.0")
    done = _ranks_by_hand(2, tmp_path, "check", "--no-smoke", "--only", "cudnn-fe.version", "-f", "json",
                          "--fleet-wait", "40", per_rank_env={0: {"PYTHONPATH": str(new), "LOCAL_WORLD_SIZE": "2"},
                                                              1: {"PYTHONPATH": str(old), "LOCAL_WORLD_SIZE": "2"}})
    report = validate(json.loads(done[0].stdout))
    drift = next(c for c in report["checks"] if c["id"] == "fleet.drift")
    assert "package nvidia-cudnn-frontend: split, 1.27.0" in drift["summary"] and "1.26.0" in drift["summary"]
    assert "python: None" not in drift["summary"] and "None" not in json.dumps(drift["evidence"])
    fe = next(c for c in report["checks"] if c["id"] == "cudnn-fe.version")
    assert {g["ranks"] for g in fe["evidence"]["groups"]} == {"0", "1"}  # rank 1 ran it itself


@needs_torch
@pytest.mark.slow
def test_another_job_on_the_same_port_does_not_take_part(tmp_path):
    """Two srun jobs on one port: the store keys carry the job's identity, so the jobs never read each other's. A
    rank of job B that reaches job A's store finds no plan of its own job and exits 1; job A's report is its own."""
    port, start = free_port(), time.monotonic()
    args = ("check", "--no-smoke", "--only", "python.version", "-f", "json")
    job_a = [_spawn(r, 2, port, *args, "--fleet-wait", "20", TORCHELASTIC_RUN_ID="job-a") for r in (0, 1)]
    _wait_for_port(port + 1)
    job_b = _spawn(1, 2, port, *args, "--fleet-wait", "1", TORCHELASTIC_RUN_ID="job-b")
    done_a = [p.communicate(timeout=150) for p in job_a]
    assert [p.returncode for p in job_a] == [0, 0], [e[-800:] for _, e in done_a]
    report = validate(json.loads(done_a[0][0]))
    assert report["fleet"]["scope"].startswith("dsv4doctor/run-job-a-") and report["fleet"]["reported"] == 2
    assert "every rank acknowledged" in next(c for c in report["checks"] if c["id"] == "fleet.ranks")["summary"]
    # Job B's rank waits for a plan of its own job (bounded by its own wait), never takes job A's verdict.
    assert job_b.poll() in (None, 1)
    job_b.kill()
    job_b.communicate(timeout=30)
    assert time.monotonic() - start < 60


@needs_torch
@pytest.mark.slow
def test_a_fleet_secret_given_as_a_pipe_is_read_once_and_authenticates_the_run(tmp_path):
    """`DSV4_DOCTOR_FLEET_SECRET_FILE=<(...)`: a pipe gives its text once. The secret was read three times, so the
    second read found the pipe empty and the run failed with "the file is empty" after the checks."""
    import threading

    port = free_port()
    procs, writers = [], []
    for r in range(2):
        fifo = tmp_path / f"secret{r}"
        os.mkfifo(fifo)

        def write(path=fifo):
            with open(path, "w") as fh:  # once, as a shell's process substitution does
                fh.write("correct-horse-battery-staple\n")

        writers.append(threading.Thread(target=write, daemon=True))
        writers[-1].start()
        procs.append(_spawn(r, 2, port, "check", "--no-smoke", "--only", "python.version", "-f", "json",
                            "--fleet-wait", "30", DSV4_DOCTOR_FLEET_SECRET_FILE=str(fifo)))
    done = [p.communicate(timeout=150) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-800:] for _, err in done]
    report = validate(json.loads(done[0][0]))
    assert report["fleet"]["authenticated"] is True


@needs_torch
@pytest.mark.slow
def test_an_accepted_warning_passes_strict_on_every_rank_and_the_merge_keeps_it_accepted():
    """kernels.triton warns here (no triton in this interpreter). Accepted on the shared command line, the fleet's
    merged row stays a warning, marked accepted, and --strict lets every rank go; without it every rank stops."""
    base = ("check", "--no-smoke", "--only", "kernels.triton", "--strict", "-f", "json", "--fleet-wait", "30")
    for accept, expected in ((("--accept", "kernels.triton:no RoPE fusion here"), 0), ((), 1)):
        port = free_port()
        procs = [_spawn(r, 2, port, *base, *accept) for r in (0, 1)]
        done = [p.communicate(timeout=150) for p in procs]
        assert [p.returncode for p in procs] == [expected, expected], [err[-800:] for _, err in done]
        report = validate(json.loads(done[0][0]))
        row = next(c for c in report["checks"] if c["id"] == "kernels.triton")
        assert row["status"] == "warn" and report["summary"]["left_out"]["by"] == "--only"
        if accept:
            assert row["accepted"] == {"reason": "no RoPE fusion here", "from": "--accept"}
            assert report["summary"]["accepted"][0]["applied"] is True
        else:
            assert "accepted" not in row and "accepted" not in report["summary"]
