"""`check --ray` and `fleet --ray -- CMD` against a real local Ray cluster: one shared ray.cluster_utils.Cluster of
logical GPU nodes (num_gpus=1 each) on this machine, each node a raylet with its own environment (its PYTHONPATH
carries the frontend wheel that node has). One test walks the cluster through its states in order (pytest-xdist
would split separate tests across workers, each with a cluster of its own): a healthy fleet; a drifted node, a node
removed mid-check and a node missing against trainer.nnodes, in one run; and a node that joins after the check,
refused by the doctor's worker_process_setup_hook when the job starts."""

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
from fakes import ensure

pytestmark = pytest.mark.slow

# The job: verl's driver merges `ray_kwargs.ray_init.runtime_env` overrides (Hydra) into ray.init; this one does
# the same for the `++` overrides the doctor appends, then runs one task on every alive GPU node.
JOB = r"""
import ast, json, os, sys, time
open(os.environ["JOB_STARTED"], "w").close()
while not os.path.exists(os.environ["JOB_GO"]):
    time.sleep(0.05)
runtime_env = {}
prefix = "++ray_kwargs.ray_init.runtime_env."
for arg in sys.argv[1:]:
    if arg.startswith(prefix):
        key, _, value = arg[len(prefix):].partition("=")
        value = ast.literal_eval(value) if value[:1] in "['" else value
        where = runtime_env
        for part in key.split(".")[:-1]:
            where = where.setdefault(part, {})
        where[key.split(".")[-1]] = value
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=os.environ["RAY_ADDRESS"], runtime_env=runtime_env, logging_level="ERROR")

@ray.remote(num_cpus=0, max_retries=0)
def work():
    return "ok"

out = {}
for node in ray.nodes():
    if node["Alive"] and node["Resources"].get("GPU"):
        ref = work.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote()
        try:
            out[node["NodeID"]] = ray.get(ref, timeout=90)
        except Exception as exc:
            out[node["NodeID"]] = type(exc).__name__
time.sleep(1.0)  # the raylets' lines (the hook's reason) reach this driver's stderr
print("JOB " + json.dumps(out), flush=True)
"""

SLOW_STATIC = """import os, sys, time
if sys.argv and sys.argv[0].endswith("dsv4probe_static.py") and os.environ.get("DSV4_DOCTOR_RAY_NODE"):
    with open(os.environ["SLOW_MARK"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(40)
"""


class RayCluster:
    """The shared cluster; nodes are added with their own environment (a raylet and its workers inherit it)."""

    def __init__(self, ray_dir: Path):
        from ray.cluster_utils import Cluster

        self.new = str(ensure("nvidia-cudnn-frontend-1.27.0"))
        self.old = str(ensure("nvidia-cudnn-frontend-1.26.0"))
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        with self._environment(self.new):
            self.cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "num_gpus": 1, "include_dashboard": False, "temp_dir": str(ray_dir)})
        self.address = self.cluster.address
        self.nodes = {"head": self.cluster.head_node}

    @staticmethod
    def _environment(pythonpath: str, **extra: str):
        import contextlib

        @contextlib.contextmanager
        def scope():
            saved = {k: os.environ.get(k) for k in ("PYTHONPATH", *extra)}
            os.environ.update(PYTHONPATH=pythonpath, **extra)
            try:
                yield
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

        return scope()

    def add(self, name: str, pythonpath: str, **extra: str) -> str:
        with self._environment(pythonpath, **extra):
            node = self.cluster.add_node(num_cpus=1, num_gpus=1)
        self.cluster.wait_for_nodes()
        self.nodes[name] = node
        return node.node_id

    def remove(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name))

    def shutdown(self) -> None:
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def ray_cluster():
    import shutil
    import tempfile

    pytest.importorskip("ray", reason="the Ray fleet test needs ray (the test extra installs it)")
    # A short folder: Ray's Unix sockets live under it, and AF_UNIX paths end at 107 bytes (pytest-xdist's tmp_path
    # is longer than that allows).
    ray_dir = Path(tempfile.mkdtemp(prefix="dsv4ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
    # ray.cluster_utils.Cluster writes the address file `ray_current_cluster` into Ray's default folder
    # ($RAY_TMPDIR/ray, else /tmp/ray) whatever temp_dir the head node got, and does not create that folder: on a
    # machine where no Ray ran before, the head node fails with FileNotFoundError. Point it into ray_dir.
    saved_tmpdir = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(ray_dir)
    (ray_dir / "ray").mkdir()
    cluster = None
    try:
        cluster = RayCluster(ray_dir)
        yield cluster
    finally:
        if cluster is not None:
            cluster.shutdown()
        if saved_tmpdir is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved_tmpdir
        shutil.rmtree(ray_dir, ignore_errors=True)


def _env(cluster: RayCluster, **extra: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return {**base, "RAY_ADDRESS": cluster.address, "PYTHONPATH": cluster.new, **extra}


def _verl(nnodes: int) -> str:
    return shlex.join(["python3", "-m", "verl.trainer.main_ppo", f"trainer.nnodes={nnodes}",
                       "trainer.n_gpus_per_node=1"])


CHECK = ("check", "--ray", "--no-smoke", "--only", "python.version,cudnn-fe.version", "-f", "json",
         "--python", sys.executable)


def _rows(report: dict) -> dict:
    return {c["id"]: c for c in report["checks"]}


def _entries(report: dict) -> dict:
    return {e["host"]: e["why"] for e in _rows(report)["fleet.ranks"]["evidence"]["ranks"]}


def test_the_ray_fleet_from_a_healthy_cluster_to_a_late_node(ray_cluster, tmp_path):
    started = time.monotonic()
    cluster = ray_cluster
    head = cluster.nodes["head"].node_id
    second = cluster.add("second", cluster.new)

    # 1. A healthy fleet: the driver and both nodes report, nothing drifts, exit 0.
    done = subprocess.run(doctor_command() + [*CHECK, "--job-args", _verl(2)], env=_env(cluster),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = validate(json.loads(done.stdout))
    rows = _rows(report)
    assert report["fleet"]["mode"] == "ray" and report["fleet"]["world_size"] == 3 == report["fleet"]["reported"]
    assert rows["fleet.ranks"]["status"] == "pass" and rows["fleet.drift"]["status"] == "pass"
    hosts = set(report["fleet"]["hosts"])
    assert any(f"(node {head[:8]})" in h for h in hosts) and any(f"(node {second[:8]})" in h for h in hosts)
    assert any(h.endswith("(driver)") for h in hosts)

    # 2. One run, three faults: a node with a stale frontend on its PYTHONPATH, a node removed while its check
    # runs, and trainer.nnodes asking one node more than the cluster has.
    stale = cluster.add("stale", cluster.old)
    slow_dir = tmp_path / "slow"
    slow_dir.mkdir()
    (slow_dir / "sitecustomize.py").write_text(SLOW_STATIC)
    mark = tmp_path / "slow.pid"
    doomed = cluster.add("doomed", f"{cluster.new}{os.pathsep}{slow_dir}", SLOW_MARK=str(mark))
    proc = subprocess.Popen(doctor_command() + [*CHECK, "--job-args", _verl(5)], env=_env(cluster),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not mark.exists():
        assert time.monotonic() < end and proc.poll() is None, "the doomed node's check never started"
        time.sleep(0.05)
    cluster.remove("doomed")
    with _suppress():
        os.kill(int(mark.read_text() or 0), signal.SIGKILL)  # the probe the dead node's raylet left behind
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err[-3000:]
    report = validate(json.loads(out))
    rows, entries = _rows(report), _entries(report)
    assert report["fleet"]["world_size"] == 6 and report["fleet"]["reported"] == 4
    died = next(why for host, why in entries.items() if f"(node {doomed[:8]})" in host)
    assert "the node died during the check" in died
    assert [why for host, why in entries.items() if host == "no node"] == [
        "no such node: the Ray cluster has 4 alive GPU node(s), and the command asks trainer.nnodes=5"]
    drift = rows["fleet.drift"]
    assert drift["status"] == "fail" and "1.26.0" in drift["summary"] and f"(node {stale[:8]})" in drift["summary"]
    fe = rows["cudnn-fe.version"]["evidence"]["groups"]
    assert any("1.26.0" in g["summary"] and f"(node {stale[:8]})" in json.dumps(g) for g in fe)

    # 3. `fleet --ray --ray-hook -- CMD`: a go verdict execs the job with the hook; a node that joins after the
    # check refuses the job's workers with the doctor's reason, the checked nodes run them.
    cluster.remove("stale")
    started_mark, go = tmp_path / "job-started", tmp_path / "job-go"
    job = tmp_path / "job.py"
    job.write_text(JOB)
    proc = subprocess.Popen(doctor_command() + ["fleet", "--ray", "--ray-hook", "--no-smoke", "--only",
                                                "python.version", "--python", sys.executable, "--", sys.executable,
                                                str(job), "trainer.nnodes=2", "trainer.n_gpus_per_node=1"],
                            env=_env(cluster, JOB_STARTED=str(started_mark), JOB_GO=str(go)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 180
    while not started_mark.exists():
        assert time.monotonic() < end and proc.poll() is None, "the job never started"
        time.sleep(0.05)
    late = cluster.add("late", cluster.new)
    go.touch()
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    results = json.loads(next(line for line in out.splitlines() if line.startswith("JOB "))[4:])
    assert results[head] == results[second] == "ok" and results[late] == "WorkerCrashedError", results
    assert f"dsv4-doctor: node {late} joined the Ray cluster after" in out + err  # the job's output: Ray's line
    assert time.monotonic() - started < 240


def _suppress():
    import contextlib

    return contextlib.suppress(OSError, ValueError)
