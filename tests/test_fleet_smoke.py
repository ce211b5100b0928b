"""Fleet mode's smoke forward across real ranks, on the CPU: with --cp N, consecutive groups of N fleet ranks form
CP groups over gloo (each rank's own smoke probe plays one CP rank, as one process of the smoke's own multi-process
run does), each rank reports its own CP rank's rows, a rank with a wrong kernel fails alone, a member that never
joins is named instead of waited for; and the fleet CLI options --anonymize-hosts and --no-distributed end to end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import doctor_command, free_port, has_torch, run_ranks, validate

from dsv4_doctor.fleet import cp_plan, detect, tasks_per_node

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")



def ranks_by_hand(n: int, *args: str, per_rank_env: dict | None = None, extra_env: dict | None = None,
                  timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """n doctor processes with torchrun's variables set by hand (one host, LOCAL_WORLD_SIZE n)."""
    port = free_port()
    envs = []
    for r in range(n):
        env = dict(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n), GROUP_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **(extra_env or {}))
        env.update((per_rank_env or {}).get(r, {}))
        envs.append(env)
    return run_ranks(args, envs, timeout)


# --- the plan, as data --------------------------------------------------------------------------------------------

TORCHRUN = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "node01", "MASTER_PORT": "29400"}


def _fields(environ: dict) -> dict:
    env = detect(environ)
    assert env is not None
    return {"rank": env.rank, "world_size": env.world_size, "port": env.port,
            "local_world_size": env.local_world_size, "nodes": env.nodes}


def test_consecutive_ranks_form_cp_groups_on_their_own_port():
    plan = cp_plan(_fields(TORCHRUN), 2, TORCHRUN)
    assert plan == {"mode": "fleet", "rank": 5, "world": 8, "cp_rank": 1, "group": 2, "first_rank": 4,
                    "store_host": "node01", "store_port": 29402}  # the exchange has 29401
    assert cp_plan(_fields(TORCHRUN), 4, TORCHRUN)["first_rank"] == 4
    srun = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "3", "SLURM_STEP_NODELIST": "gpu[1-2]",
            "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_STEP_NUM_NODES": "2"}
    assert cp_plan(_fields(srun), 4, srun)["store_host"] == "gpu1"
    assert tasks_per_node("4(x2)") == 4 and tasks_per_node("4,3") is None and tasks_per_node("") is None


def test_a_fleet_that_does_not_divide_into_cp_groups_simulates_and_says_why():
    odd = dict(TORCHRUN, WORLD_SIZE="6", RANK="2", LOCAL_WORLD_SIZE="3")
    plan = cp_plan(_fields(odd), 4, odd)
    assert plan["mode"] == "simulated" and "6 ranks do not divide into CP groups of 4" in plan["reason"]
    plan = cp_plan(_fields(odd), 2, odd)  # 6 = 3 groups of 2, but a group would straddle the 2 hosts
    assert plan["mode"] == "simulated" and "several hosts with 3 ranks per host" in plan["reason"]
    assert cp_plan(_fields(TORCHRUN), 8, TORCHRUN)["mode"] == "simulated"  # 4 per host
    one_per_node = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NODELIST": "gpu[1-8]",
                    "SLURM_STEP_TASKS_PER_NODE": "1(x8)", "SLURM_STEP_NUM_NODES": "8"}  # README's Slurm example
    assert "several hosts with 1 rank per host" in cp_plan(_fields(one_per_node), 2, one_per_node)["reason"]
    assert cp_plan(_fields(TORCHRUN), 1, TORCHRUN)["mode"] == "simulated"


# --- real ranks ---------------------------------------------------------------------------------------------------

# The probe timeout is generous for a loaded CI machine; a healthy run takes seconds.
SMOKE = ("check", "--distributed", "--device", "cpu", "--cp", "2", "--only", "smoke.thd-cp", "--timeout", "90",
         "-f", "json")

# A wrong attention kernel in one rank's distributed run only (its one-process smoke stays right): its output rows
# shifted by one, as an off-by-one in a kernel's sequence offsets would. No release shows this, so it is a fake.
WRONG_KERNEL = """
import sys
if any(a.endswith("dsv4probe_smoke.py") for a in sys.argv[:2]):
    import torch
    import torch.nn.functional as F
    _right = F.scaled_dot_product_attention

    def _wrong(*args, **kwargs):
        out = _right(*args, **kwargs)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return out.roll(1, dims=-2)
        return out

    F.scaled_dot_product_attention = _wrong
"""

# A rank whose smoke probe dies before it joins its CP group (a node lost at the worst moment).
DIES_BEFORE_JOIN = """
import os, sys
if any(a.endswith("dsv4probe_smoke.py") for a in sys.argv[:2]):
    import torch.distributed as dist

    class _Gone:
        def __init__(self, *a, **k):
            os._exit(9)

    dist.TCPStore = _Gone
"""


def _hook(tmp_path: Path, text: str) -> str:
    site = tmp_path / "hook"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(text)
    return str(site)


def _row(done: list[subprocess.CompletedProcess]) -> dict:
    assert done[0].stdout.startswith("{"), [d.stderr[-3000:] for d in done]
    report = validate(json.loads(done[0].stdout))
    return next(c for c in report["checks"] if c["id"] == "smoke.thd-cp")


@needs_torch
@pytest.mark.slow
def test_the_smoke_runs_across_two_fleet_ranks_over_gloo():
    done = ranks_by_hand(2, *SMOKE, "--verbose-ranks")
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-1500:] for d in done]
    row = _row(done)
    assert row["status"] == "pass", row["summary"]
    assert "2 CP ranks as a group of 2 fleet ranks over GLOO, each rank's own rows checked" in row["summary"]
    assert row["summary"].endswith("[pass on all 2 reporting ranks]")  # both ranks' rows, the same words
    dist = row["evidence"]["first_rank_evidence"]["distributed"]
    assert dist["ran"] and dist["world"] == 2 and dist["process_backend"] == "gloo" and dist["ranks_per_process"] == 1
    assert dist["fleet"] == {"rank": 0, "world": 2, "group": 0, "cp_rank": 0, "members": "0-1"}
    causal = dist["comparisons"]["causal"]
    assert len(causal["per_rank"]) == 2 and all(r["max_abs_error"] <= causal["tolerance"] for r in causal["per_rank"])
    assert causal["negative_control_zigzag_error"] > 10 * causal["tolerance"]
    # Rank 1's own report (--verbose-ranks, on its stderr) says the same: it was CP rank 1 of the group.
    assert "2 CP ranks as a group of 2 fleet ranks over GLOO" in " ".join(done[1].stderr.split())


@needs_torch
@pytest.mark.slow
def test_a_wrong_kernel_on_one_fleet_rank_fails_that_rank(tmp_path):
    done = ranks_by_hand(2, *SMOKE, per_rank_env={1: {"PYTHONPATH": _hook(tmp_path, WRONG_KERNEL)}})
    assert [d.returncode for d in done] == [1, 1], [d.stderr[-1500:] for d in done]
    row = _row(done)
    assert row["status"] == "fail"
    groups = {g["ranks"]: g for g in row["evidence"]["groups"]}
    assert groups["1"]["status"] == "fail"
    assert "on CP rank 1 of 2 (the CP group of fleet ranks 0-1, gloo) differs from the float32 reference" in \
        groups["1"]["summary"] and "in its rows [128, 256)" in groups["1"]["summary"]
    # Rank 0's own rows are right; it passes and points at rank 1.
    assert groups["0"]["status"] == "pass"
    assert "the rows of fleet rank(s) 1 in this CP group differ (see theirs)" in groups["0"]["summary"]


@needs_torch
@pytest.mark.slow
def test_a_cp_group_member_that_never_joins_is_named_not_waited_for(tmp_path):
    start = time.monotonic()
    done = ranks_by_hand(2, *SMOKE[:-4], "--timeout", "30", "-f", "json",
                         per_rank_env={1: {"PYTHONPATH": _hook(tmp_path, DIES_BEFORE_JOIN)}})
    row = _row(done)
    groups = {g["ranks"]: g for g in row["evidence"]["groups"]}
    assert groups["0"]["status"] == "error"
    assert groups["0"]["summary"].startswith("CP group incomplete: rank 1 did not join")
    assert groups["1"]["status"] == "error"  # its probe died: an error of its own
    assert done[0].returncode == 1 and time.monotonic() - start < 150


@needs_torch
@pytest.mark.slow
def test_tier2_crosses_the_fleet_ranks_too(tmp_path):
    """Megatron's layer (a fake on the CPU: no CPU release runs it) at CP=2 over the two fleet ranks, against each
    rank's own CP=1 output."""
    from fakes import Env, fake_megatron_importable, fake_te

    env = Env(tmp_path / "env").fake("megatron", fake_megatron_importable).fake("te", fake_te)
    path = os.pathsep.join(str(p) for p in env.sites.values())
    done = ranks_by_hand(2, *SMOKE, "--deep", per_rank_env={r: {"PYTHONPATH": path} for r in range(2)})
    row = _row(done)
    assert row["status"] == "pass", (row["summary"], row["details"])
    assert "CP=2 = CP=1 (max |diff|" in row["summary"] and row["summary"].endswith("[pass on all 2 reporting ranks]")
    assert row["evidence"]["first_rank_evidence"]["tier2"]["cpN"]["max_abs_diff_vs_cp1"] <= 2e-2


# --- the fleet options, end to end ---------------------------------------------------------------------------------

@needs_torch
@pytest.mark.slow
def test_anonymize_hosts_leaves_no_hostname_in_the_fleet_report():
    """The smoke's CP groups too: their members' host names go through the store, never into a report."""
    import re

    done = ranks_by_hand(2, "check", "--anonymize-hosts", "--device", "cpu", "--cp", "2", "--only",
                         "python.version,smoke.thd-cp", "--timeout", "90", "-f", "json")
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-1500:] for d in done]
    report = validate(json.loads(done[0].stdout))
    hosts = report["fleet"]["hosts"]
    assert list(hosts.values()) == ["0-1"] and all(re.fullmatch(r"host-[0-9a-f]{10}", h) for h in hosts)
    rows = {c["id"]: c for c in report["checks"]}
    assert rows["smoke.thd-cp"]["status"] == "pass" and "fleet ranks over GLOO" in rows["smoke.thd-cp"]["summary"]
    name = socket.gethostname()
    assert not re.search(r"(?<![A-Za-z0-9])%s(?![A-Za-z0-9])" % re.escape(name), done[0].stdout), name
    assert report["environment"]["fleet_rank"]["host"].startswith("host-")


@needs_torch
@pytest.mark.slow
def test_no_distributed_under_torchrun_variables_gives_a_single_host_report():
    """One process with torchrun's variables (rank 0 of 2, rank 1 never started) and --no-distributed: it waits for
    nobody and writes a single-host report."""
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    start = time.monotonic()
    done = subprocess.run(doctor_command() + ["check", "--no-distributed", "--no-smoke", "--only", "python.version",
                                              "-f", "json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    report = validate(json.loads(done.stdout))
    assert "fleet" not in report and "fleet" not in report["profile"]
    assert "fleet_rank" not in report["environment"] and "fingerprint" not in report["environment"]
    assert [c["id"] for c in report["checks"]] == ["python.version"]
    assert time.monotonic() - start < 60  # no fleet wait


@needs_torch
@pytest.mark.slow
def test_a_fleet_that_does_not_divide_into_cp_groups_simulates_them_and_the_evidence_says_why():
    args = list(SMOKE)
    args[args.index("--cp") + 1] = "4"
    done = ranks_by_hand(2, *args)
    row = _row(done)
    assert row["status"] == "pass" and "4 simulated rank(s)" in row["summary"], row["summary"]
    dist = row["evidence"]["first_rank_evidence"]["distributed"]
    assert dist == {"ran": False, "reason": "the fleet's 2 ranks do not divide into CP groups of 4, so each rank "
                                            "simulated the 4 CP ranks on its own device"}
