"""Fleet mode on the CPU: real ranks under torchrun (and by hand, as srun would start them) exchanging reports over
torch.distributed (TCPStore and gloo), drift between ranks with real published frontend wheels, a silent rank, a rank
that cannot join, and exit codes that follow the fleet verdict on every rank."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port, has_torch, run_ranks, validate
from fakes import ensure

from dsv4_doctor.fleet import FleetEnv, detect, first_host
from dsv4_doctor.model import UsageError
from dsv4_doctor.probes import fleetmerge

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")



# --- detection ----------------------------------------------------------------------------------------------------

def test_torchrun_and_srun_steps_turn_it_on_a_batch_script_does_not():
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29400"}
    assert detect(torchrun) == FleetEnv(3, 8, 1, "node01", 29401, "torchrun")
    assert detect(dict(torchrun, WORLD_SIZE="1")) is None  # one process: nothing to merge
    assert detect(torchrun, "off") is None
    assert detect(torchrun, port=31000).port == 31000
    srun = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "16", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16",
            "SLURM_STEP_NODELIST": "gpu[03-10]"}
    assert detect(srun) == FleetEnv(5, 16, 1, "gpu03", 29501, "srun")
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

def _report(rank: int, host: str, fe: str, status: str = "pass") -> dict:
    return {"schema": "dsv4-doctor.report/1", "doctor": {"name": "dsv4-doctor", "version": "0"}, "created": "",
            "profile": {"cp": 2, "dsa_backend": "cudnn", "gpu_arch": None, "gpu_arch_source": "unknown"},
            "environment": {"fleet_rank": {"rank": rank, "local_rank": rank % 8, "host": host},
                            "fingerprint": {"packages": {"nvidia-cudnn-frontend": fe}, "sources": {},
                                            "platform": {"driver": "580.1"}}},
            "plugins": [], "summary": {"exit_code": 0, "duration_s": 1.0, "budget_s": 75.0},
            "checks": [{"id": "cudnn-fe.version", "title": "t", "status": status, "summary": f"frontend {fe}",
                        "details": "", "evidence": {}, "fixes": [], "sources": [], "duration_s": 0.1,
                        "origin": "dsv4-doctor", "internal_error": False},
                       {"id": "torch.install", "title": "t", "status": "skip" if rank % 8 else "pass",
                        "summary": "node-level: imported once per host" if rank % 8 else "torch 2.11",
                        "details": "", "evidence": {}, "fixes": [], "sources": [], "duration_s": 0.1,
                        "origin": "dsv4-doctor", "internal_error": False}]}


def test_merge_groups_identical_results_and_names_the_odd_rank():
    reports = {r: _report(r, f"node{r // 8:02d}", "1.27.0") for r in range(16)}
    reports[11] = _report(11, "node01", "1.26.0", "fail")
    merged, code = fleetmerge.merge(reports, 16, [], False, 30.0)
    rows = {c["id"]: c for c in merged["checks"]}
    assert code == 1 and merged["fleet"]["hosts"] == {"node00": "0-7", "node01": "8-15"}
    fe = rows["cudnn-fe.version"]
    assert fe["status"] == "fail" and "rank 11 (node01)" in fe["summary"] and "pass on 15 rank(s)" in fe["summary"]
    assert [g["ranks"] for g in fe["evidence"]["groups"]] == ["11", "0-10,12-15"]
    # Checked by each node's local rank 0; the others' skips are left out, except rank 11's: its packages differ
    # from rank 8's (node01's local rank 0), so rank 8's import result does not answer for it.
    torch_row = rows["torch.install"]
    assert torch_row["status"] == "error" and "node-level" in torch_row["summary"]
    assert [(g["status"], g["ranks"]) for g in torch_row["evidence"]["groups"]] == [("error", "11"), ("pass", "0,8")]
    assert "not checked on this rank" in torch_row["evidence"]["groups"][0]["summary"]
    assert "differ from those of rank 8, the local rank 0" in torch_row["evidence"]["groups"][0]["summary"]
    drift = rows["fleet.drift"]
    assert drift["status"] == "fail"
    assert "package nvidia-cudnn-frontend: 1.26.0 on rank 11 (node01), vs 1.27.0 on the other 15 rank(s)" in \
        drift["summary"]
    assert rows["fleet.ranks"]["status"] == "pass"


def test_node_level_rows_are_vouched_for_only_by_a_leader_with_the_same_packages():
    reports = {r: _report(r, f"node{r // 8:02d}", "1.27.0") for r in range(16)}
    merged, code = fleetmerge.merge(reports, 16, [], False, 30.0)
    row = next(c for c in merged["checks"] if c["id"] == "torch.install")
    assert code == 0 and row["status"] == "pass" and "[pass on all 2 hosts; node-level" in row["summary"]
    del reports[8]  # node01's local rank 0 never reported: nobody checked node01's imports
    merged, code = fleetmerge.merge(reports, 16, [8], False, 30.0)
    row = next(c for c in merged["checks"] if c["id"] == "torch.install")
    assert code == 1 and row["status"] == "error"
    assert [(g["status"], g["ranks"]) for g in row["evidence"]["groups"]] == [("error", "9-15"), ("pass", "0")]
    assert "run on its local rank 0, which did not report" in row["evidence"]["groups"][0]["summary"]


def test_the_fleet_budget_is_the_helper_s_bound_not_rank_0_s_budget_plus_the_wait():
    """Found in review: summary.budget_s was rank 0's budget plus the wait (402.7 s where the bound was ~210 s),
    though the default wait is the rest of that budget. It is the bound the exchange helper computed, or absent."""
    reports = {r: _report(r, "node00", "1.27.0") for r in range(2)}  # each rank's own budget_s is 75.0
    merged, _ = fleetmerge.merge(reports, 2, [], False, 80.0, bound_s=128.04)
    assert merged["summary"]["budget_s"] == 128.0
    merged, _ = fleetmerge.merge(reports, 2, [], False, 80.0)
    assert "budget_s" not in merged["summary"]


def _missing(report: dict) -> set[int]:
    """The ranks fleet.ranks names as missing ("1-2,5" -> {1, 2, 5})."""
    row = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    out: set[int] = set()
    for part in filter(None, row["evidence"]["missing"].split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def test_merge_names_missing_ranks_and_anonymizes():
    reports = {r: _report(r, fleetmerge.host_label(f"node{r}", True), "1.27.0") for r in (0, 1, 3)}
    merged, code = fleetmerge.merge(reports, 5, [2, 4], False, 12.0)
    row = next(c for c in merged["checks"] if c["id"] == "fleet.ranks")
    assert code == 1 and row["status"] == "fail" and "ranks 2,4 did not report" in row["summary"]
    assert all(h.startswith("host-") for h in merged["fleet"]["hosts"])
    assert fleetmerge.ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_merged_report_size_grows_with_distinct_results_not_ranks():
    small = json.dumps(fleetmerge.merge({r: _report(r, f"n{r // 8}", "1.27.0") for r in range(16)}, 16, [], False,
                                        1)[0])
    big = json.dumps(fleetmerge.merge({r: _report(r, f"n{r // 8}", "1.27.0") for r in range(1024)}, 1024, [],
                                      False, 1)[0])
    assert len(big) < 3 * len(small)  # 64x the ranks; the host map grows, the rows do not


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
    assert report["fleet"]["world_size"] == 3 and report["fleet"]["mode"] == "gloo"
    assert done[1].stdout == done[2].stdout == ""  # the other ranks print nothing
    # The bound is rank 0's time until its join window opened, the 30 s window, and the exchange's timeouts: it
    # holds, and it is not rank 0's own budget (60 s timeouts: over 75 s) plus the wait counted again.
    assert seconds <= report["summary"]["budget_s"] <= seconds + 30 + 35


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_every_rank_exits_with_the_fleet_verdict(tmp_path, launcher):
    """Rank 1's PYTHONPATH carries a plugin whose check fails: all three ranks exit 1, the healthy ones too."""
    site = tmp_path / "site"
    (site / "bad_plugin-1.dist-info").mkdir(parents=True)
    (site / "bad_plugin-1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 1\n")
    (site / "bad_plugin-1.dist-info" / "entry_points.txt").write_text("[dsv4_doctor.checks]\nbad = bad_checks\n")
    (site / "bad_checks.py").write_text(
        "from dsv4_doctor.model import Check, failed, passed\nimport os\n"
        "CHECKS = [Check(id='bad.rank', title='t', explanation='x', applies_when='always', detects='x',\n"
        "                run=lambda ctx: failed('odd rank') if os.environ.get('ODD') else passed('fine'))]\n")
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
    assert done[2].returncode == 1 and "could not take part in the fleet run" in done[2].stderr
    assert "PASS    python.version" in done[2].stderr  # its own report, on stderr
    report = json.loads(done[0].stdout)
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert ranks["status"] == "fail" and 2 in _missing(report)  # rank 1 may be late too on a loaded machine
    assert report["fleet"]["mode"] == "store" and done[0].returncode == done[1].returncode == 1


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
    # The frontend's import check ran on local rank 0 only; it does not answer for rank 2, whose frontend differs.
    fe = next(c for c in report["checks"] if c["id"] == "cudnn-fe.version")
    assert fe["status"] == "error" and f"rank 2 ({host})" in fe["summary"] and "not checked" in fe["summary"]


@needs_torch
@pytest.mark.slow
def test_a_rank_that_cannot_join_under_torchrun_does_not_cost_the_report(tmp_path):
    """Found in review: under torchrun the broken rank exited 1 at once, torchrun stopped rank 0, and there was no
    report. The broken rank now stays until rank 0 has named it."""
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('this rank has a broken torch')\n")
    done, seconds = _torchrun(tmp_path, 3, {"FE_0": "", "FE_1": "", "FE_2": str(broken), "SILENT": "-"},
                              "check", "--no-smoke", "--only", "python.version", "--fleet-wait", "5", "-f", "json")
    report = validate(json.loads(done.stdout))
    ranks = next(c for c in report["checks"] if c["id"] == "fleet.ranks")
    assert ranks["status"] == "fail" and 2 in _missing(report)
    assert done.returncode != 0 and seconds < 90


# Makes the fleet helper of the rank that has DIE_IN_GATHER set die after it joined and left its report: the gloo
# exchange then fails on every rank (a node lost mid-exchange).
DIE_AFTER_JOIN = """
import os
if os.environ.get("DIE_IN_GATHER"):
    import torch.distributed as dist
    def _die(*a, **k):
        os._exit(9)
    dist.gather = _die
"""


@needs_torch
@pytest.mark.slow
def test_a_rank_lost_after_joining_does_not_cost_the_report(tmp_path):
    """Found in review: a rank dying after the join broke the gloo gather, and rank 0 wrote no report at all. The
    reports are in the store too, and rank 0 merges those."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DIE_AFTER_JOIN)
    start = time.monotonic()
    # Every rank must join for the gloo exchange to start (found in CI: with 5 s, rank 1 missed the join on a
    # loaded machine and this path never ran); the lost rank then stays until rank 0 could have named it.
    done = _ranks_by_hand(3, tmp_path, "check", "--no-smoke", "--only", "python.version", "-f", "json",
                          "--fleet-wait", "30", per_rank_env={1: {"PYTHONPATH": str(hook), "DIE_IN_GATHER": "1"}})
    report = validate(json.loads(done[0].stdout))
    assert report["fleet"]["mode"] == "store" and "gloo_error" in report["fleet"]["timings"], report["fleet"]
    assert {c["id"] for c in report["checks"]} >= {"fleet.ranks", "fleet.drift", "python.version"}
    assert done[0].returncode == 0 and time.monotonic() - start < 150


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
    assert "fleet.ranks" in done[0].stderr and done[1].stderr == ""  # rank 0 writes the fleet's report
    for p in tmp_path.glob("ran-*"):
        p.unlink()
    blocked = _ranks_by_hand(2, tmp_path, "preflight", "--no-smoke", "--only", "torch.install", "--",
                             sys.executable, str(job), marker)
    assert [d.returncode for d in blocked] == [1, 1] and not list(tmp_path.glob("ran-*"))


@needs_torch
@pytest.mark.slow
def test_a_fleet_rank_s_smoke_is_its_own_world_under_torchrun(tmp_path):
    """Found on the H200 (2026-12-01): under torchrun every probe inherited TORCHELASTIC_USE_AGENT_STORE, RANK and
    friends, so tier 2's one-process init_process_group joined torchrun's store as a client and hung until the probe
    timeout. Probes now start without the launcher's variables."""
    from fakes import Env, fake_megatron_importable, fake_te

    env = Env(tmp_path / "env").fake("megatron", fake_megatron_importable).fake("te", fake_te)
    path = os.pathsep.join(str(p) for p in env.sites.values())
    done, seconds = _torchrun(tmp_path, 2, {"FE_0": path, "FE_1": path, "SILENT": "-"},
                              "check", "--device", "cpu", "--only", "smoke.thd-cp", "--timeout", "40", "-f", "json",
                              timeout=300)
    report = validate(json.loads(done.stdout))
    row = next(c for c in report["checks"] if c["id"] == "smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    assert "DSv4 layer CP=1 packed output = each sequence alone" in row["summary"]
    assert seconds < 120
