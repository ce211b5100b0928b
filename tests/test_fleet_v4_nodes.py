"""A go needs the nodes the job will use (issue 46, item 1): `check --ray` / `fleet --ray` against a real local Ray
cluster (ray.cluster_utils.Cluster, logical GPUs) whose head has no GPU, as an autoscaling cluster's does before its
GPU workers join.

- Without `--ray-wait-nodes`, a verl command that does not state trainer.nnodes counts verl's default (1, from the
  installed verl's config as Hydra composes it): the cluster has no GPU node yet, so fleet.ranks fails and the job is
  not started.
- The hook with an empty list of checked nodes refuses every worker.
- With `--ray-wait-nodes S`, a GPU node that joins while the check waits (added once the doctor's Ray helper runs)
  is checked, and the job starts: its work runs
  on the checked GPU node and on the driver's (CPU-only) node.
- A stop signal during the wait ends the run at once with a report.

One module-scoped cluster, the cases in order (pytest-xdist would split separate tests across workers)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import doctor_command, validate
from test_fleet_ray import JOIN_WITH_RUNTIME_ENV
from wheels import ensure

# The job: verl's driver merges `ray_kwargs.ray_init.runtime_env` overrides (Hydra) into ray.init; this one does the
# same for the `++` overrides the doctor appends, then runs one task on every alive node, GPU or not.
JOB = r"""
import ast, json, os, sys, time
""" + JOIN_WITH_RUNTIME_ENV + r"""
@ray.remote(num_cpus=0, max_retries=0)
def work():
    return "ok"

out = {}
for node in ray.nodes():
    if node["Alive"]:
        ref = work.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote()
        try:
            out[node["NodeID"]] = ray.get(ref, timeout=60)
        except Exception as exc:
            out[node["NodeID"]] = type(exc).__name__
time.sleep(1.0)  # the raylets' lines (the hook's reason) reach this driver's stderr
print("JOB " + json.dumps(out), flush=True)
"""

VERL_NO_NNODES = ["python3", "-m", "verl.trainer.main_ppo", "trainer.n_gpus_per_node=1"]


@pytest.fixture(scope="module")
def cpu_head():
    """A local Ray cluster of one CPU-only head (no GPU node yet)."""
    import shutil
    import tempfile

    pytest.importorskip("ray", reason="the Ray fleet tests need ray (the test extra installs it)")
    from ray.cluster_utils import Cluster

    # A short folder: Ray's Unix sockets live under it (AF_UNIX paths end at 107 bytes); Cluster writes its address
    # file into $RAY_TMPDIR/ray, which must exist (see tests/test_fleet_ray.py).
    ray_dir = Path(tempfile.mkdtemp(prefix="dsv4rayn-", dir="/tmp" if os.path.isdir("/tmp") else None))
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(RAY_TMPDIR=str(ray_dir), RAY_USAGE_STATS_ENABLED="0")
    (ray_dir / "ray").mkdir()
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "num_gpus": 0, "include_dashboard": False, "temp_dir": str(ray_dir)})
        yield cluster
    finally:
        if cluster is not None:
            cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(ray_dir, ignore_errors=True)


def _env(cluster, verl: bool = True) -> dict:
    """The doctor's environment: the cluster's address and, with `verl`, Hydra and verl 0.9.1 for the driver's
    composition (else the nodes' environment: a driver with verl would drift from them)."""
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "PYTHONPATH")}
    sites = os.pathsep.join(str(ensure(k)) for k in ("hydra-core-1.3.2", "verl-0.9.1"))
    return {**base, "RAY_ADDRESS": cluster.address, **({"PYTHONPATH": sites} if verl else {})}


def _rows(report: dict) -> dict:
    return {c["id"]: c for c in report["checks"]}


def _helper_running(pid: int) -> bool:
    """Whether the doctor `pid` has started its Ray helper (a descendant running dsv4probe_ray.py)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if b"dsv4probe_ray.py" not in fh.read():
                    continue
            child = int(entry)
            for _ in range(6):  # up the parent chain to the doctor
                with open(f"/proc/{child}/stat") as fh:
                    child = int(fh.read().rsplit(")", 1)[1].split()[1])
                if child == pid:
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def _await_helper(proc: subprocess.Popen, within: float = 120.0) -> None:
    end = time.monotonic() + within
    while not _helper_running(proc.pid):
        assert time.monotonic() < end and proc.poll() is None, "the doctor never started its Ray helper"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_go_needs_the_gpu_nodes_the_job_uses_and_waits_for_them(cpu_head, tmp_path):
    from dsv4_doctor.fleet.raycluster import hook_overrides

    started = time.monotonic()
    cluster = cpu_head
    head = cluster.head_node.node_id
    base = ["--no-smoke", "--only", "python.version", "--python", sys.executable]

    # 1. No wait, no GPU node yet, a verl command without trainer.nnodes: verl's default (trainer.nnodes: 1, composed
    # from the installed verl 0.9.1's config) is counted, the missing node fails fleet.ranks, and the job does not
    # start (before: "all 1 ranks reported", a go over zero GPU nodes).
    report_a = tmp_path / "a.json"
    done = subprocess.run(doctor_command() + ["fleet", "--ray", "--ray-hook", "--dry-run", *base, "--report",
                                              str(report_a), "--", *VERL_NO_NNODES],
                          env=_env(cluster), capture_output=True, text=True, timeout=180)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "not starting the job" in done.stderr and "dry run" not in done.stderr
    report = validate(json.loads(report_a.read_text()))
    ranks = _rows(report)["fleet.ranks"]
    assert report["profile"]["job"]["common"]["nnodes"]["source"] == "default", report["profile"]["job"]
    assert ranks["status"] == "fail" and report["fleet"]["world_size"] == 2, ranks
    assert [e["why"] for e in ranks["evidence"]["ranks"]] == [
        "no such node: the Ray cluster has 0 alive GPU node(s), and the command asks trainer.nnodes=1 (verl's "
        "default: the command does not state it)"], ranks["evidence"]
    assert ranks["evidence"]["wanted"]["trainer.nnodes"] == 1

    # 2. The hook with an empty list of checked nodes refuses every worker: the job's task on the head never runs
    # (before: an empty list refused nothing).
    job = tmp_path / "job.py"
    job.write_text(JOB)
    done = subprocess.run([sys.executable, str(job), *hook_overrides([])], env=_env(cluster), capture_output=True,
                          text=True, timeout=120)
    results = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("JOB "))[4:])
    assert results == {head: "WorkerCrashedError"}, (results, done.stderr[-2000:])
    assert "list of checked nodes (DSV4_DOCTOR_RAY_CHECKED_NODES) is empty" in done.stdout + done.stderr

    # 3. With --ray-wait-nodes, a GPU node that joins while the check waits is checked, and the job starts with the
    # hook: its work runs on the checked GPU node and on the driver's own node (the CPU-only head).
    report_b = tmp_path / "b.json"
    proc = subprocess.Popen(doctor_command() + ["fleet", "--ray", "--ray-hook", "--ray-wait-nodes", "90", *base,
                                                "--report", str(report_b), "--", sys.executable, str(job),
                                                "trainer.nnodes=1", "trainer.n_gpus_per_node=1"],
                            env=_env(cluster, verl=False), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The node joins while the doctor waits (from this thread: Cluster.add_node installs signal handlers).
    _await_helper(proc)
    time.sleep(4.0)  # the helper has joined the cluster and found no GPU node: it is waiting
    late = cluster.add_node(num_cpus=1, num_gpus=1).node_id
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    report = validate(json.loads(report_b.read_text()))
    ranks = _rows(report)["fleet.ranks"]
    assert ranks["status"] == "pass" and report["fleet"]["world_size"] == 2 == report["fleet"]["reported"], ranks
    assert any(f"(node {late[:8]})" in h for h in report["fleet"]["hosts"]), report["fleet"]["hosts"]
    assert report["fleet"]["timings"]["wait_s"] > 0.5, report["fleet"]["timings"]
    results = json.loads(next(line for line in out.splitlines() if line.startswith("JOB "))[4:])
    assert results == {head: "ok", late: "ok"}, (results, err[-2000:])

    # 4. A stop signal during the wait (the job wants 3 nodes, the cluster has 1): the run ends at once, 128 + 15,
    # with the report of what finished.
    proc = subprocess.Popen(doctor_command() + ["check", "--ray", "--ray-wait-nodes", "300", *base, "-f", "json",
                                                "--job-args", shlex.join(["python3", "-m", "verl.trainer.main_ppo",
                                                                          "trainer.nnodes=3",
                                                                          "trainer.n_gpus_per_node=1"])],
                            env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _await_helper(proc)
    time.sleep(3.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and time.monotonic() - sent < 10, err[-3000:]
    report = validate(json.loads(out))
    assert report["summary"]["interrupted"] == "SIGTERM" and "Ray" in report["summary"]["partial"], report["summary"]
    assert time.monotonic() - started < 150


# ----------------------------------------------------------------------------- the node count, without a cluster

def test_the_node_count_needs_one_gpu_node_and_warns_when_it_is_not_known(tmp_path):
    """The merge's decision on a helper answer of no GPU node, and on nodes checked against a count not known."""
    from dsv4_doctor.fleet import raycluster
    from test_hardening_v4_merge import NODE_A, _driver, _node, _node_report

    folder = tmp_path / "helper"
    (folder / "reports").mkdir(parents=True)

    def merged(answer: dict, command: list[str] | None, job: dict | None = None):
        want = raycluster.nodes_wanted(command, job)
        return raycluster._merged(_driver(), answer, str(folder), want, False, ("fleet.ranks", "fleet.drift"))

    # `check --ray` with no command, on a cluster of no GPU node: a failing entry, never "all 1 ranks reported".
    report, code, checked = merged({"nodes": [], "driver_node": NODE_A, "timings": {}}, None)
    row = report.row("fleet.ranks")
    assert code == 1 and row.status.value == "fail" and checked == [], row
    assert row.evidence["ranks"][0]["why"].startswith("no such node: the Ray cluster has 0 alive GPU node(s), and a "
                                                       "go needs at least one checked GPU node")
    # After a wait, the entry says how long it waited.
    report, code, _ = merged({"nodes": [], "timings": {"wait_s": 12.3}}, None)
    assert "after waiting 12 s for nodes to join" in report.row("fleet.ranks").evidence["ranks"][0]["why"]

    # A verl command whose trainer.nnodes is not known (an unexpanded word): one checked node is not a pass.
    (folder / "reports" / "0.json").write_text(json.dumps(_node_report()))
    hidden = ["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=$NNODES", "trainer.n_gpus_per_node=8"]
    report, code, checked = merged({"nodes": [_node(NODE_A)], "timings": {}}, hidden, {"kind": "verl"})
    row = report.row("fleet.ranks")
    assert checked == [NODE_A] and row.status.value == "warn" and "not known: how many nodes" in row.summary, row
    # A composed config's default stands where the command does not state it, and the default is said.
    composed = {"kind": "verl", "composed": {"verl": "0.9.1"},
                "common": {"nnodes": {"value": 2, "type": "int", "source": "default"},
                           "gpus_per_node": {"value": 8, "type": "int", "source": "default"}}}
    want = raycluster.nodes_wanted(["python3", "-m", "verl.trainer.main_ppo"], composed)
    assert (want.nnodes, want.per_node, want.nnodes_from) == (2, 8, "verl's default")
    report, code, _ = merged({"nodes": [_node(NODE_A)], "timings": {}}, ["python3", "-m", "verl.trainer.main_ppo"],
                             composed)
    entries = [e["why"] for e in report.row("fleet.ranks").evidence["ranks"]]
    assert code == 1 and entries == [
        "no such node: the Ray cluster has 1 alive GPU node(s), and the command asks trainer.nnodes=2 (verl's default: "
        "the command does not state it)"], entries


def test_ray_wait_nodes_needs_ray(tmp_path):
    done = subprocess.run(doctor_command() + ["check", "--ray-wait-nodes", "5", "--only", "python.version"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--ray-wait-nodes" in done.stderr and "--ray" in done.stderr, done.stderr
    done = subprocess.run(doctor_command() + ["check", "--ray", "--ray-wait-nodes", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "between 1 and 3600" in done.stderr, done.stderr
