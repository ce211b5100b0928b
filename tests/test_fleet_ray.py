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


# What verl's driver does with the command's `ray_kwargs.ray_init.runtime_env` overrides (Hydra), in a test job: the
# `++` overrides the doctor appends merged into ray.init's runtime_env (each test job's script includes it).
JOIN_WITH_RUNTIME_ENV = r"""
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
"""

# The job: verl's driver merges `ray_kwargs.ray_init.runtime_env` overrides (Hydra) into ray.init; this one does
# the same for the `++` overrides the doctor appends, then runs one task on every alive GPU node.
JOB = r"""
import ast, json, os, sys, time
open(os.environ["JOB_STARTED"], "w").close()
while not os.path.exists(os.environ["JOB_GO"]):
    time.sleep(0.05)
""" + JOIN_WITH_RUNTIME_ENV + r"""
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
if any(a.endswith("dsv4probe_static.py") for a in sys.argv[:2]) and os.environ.get("DSV4_DOCTOR_RAY_NODE"):
    with open(os.environ["SLOW_MARK"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(40)
"""


# A node whose job environment has no dsv4-doctor: its workers cannot import dsv4_doctor (whatever finds it).
HIDE_DOCTOR = """import sys
class _NoDoctor:
    def find_spec(self, name, path=None, target=None):
        if name == "dsv4_doctor" or name.startswith("dsv4_doctor."):
            raise ModuleNotFoundError("hidden by the test", name=name)
        return None
sys.meta_path.insert(0, _NoDoctor())
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


@pytest.mark.slow
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

    # 1b. The job's runtime_env, a node without the doctor and the reward model's own pool, in one run: the
    # command's env var reaches every task; the node whose job environment cannot import dsv4_doctor reports through
    # the doctor's probes shipped with the task (its static facts compared like any node's); trainer.nnodes=2 plus
    # reward.reward_model.nnodes=1 (its own pool) is the 3 nodes the cluster has.
    hide_dir = tmp_path / "hide"
    hide_dir.mkdir()
    (hide_dir / "sitecustomize.py").write_text(HIDE_DOCTOR)
    hidden = cluster.add("hidden", f"{cluster.new}{os.pathsep}{hide_dir}")
    job = shlex.join(["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
                      "reward.reward_model.enable_resource_pool=True", "reward.reward_model.nnodes=1",
                      "reward.reward_model.n_gpus_per_node=1", "+ray_kwargs.ray_init.runtime_env.env_vars.FOO=bar"])
    done = subprocess.run(doctor_command() + ["check", "--ray", "--no-smoke", "--only", "cudnn-fe.version", "-f",
                                              "json", "--python", sys.executable, "--job-args", job],
                          env=_env(cluster), capture_output=True, text=True, timeout=240)
    report = validate(json.loads(done.stdout))
    rows = _rows(report)
    evidence = rows["fleet.ranks"]["evidence"]
    assert "FOO" in evidence["runtime_env"]["env_vars"], evidence
    assert all("FOO" in r["runtime_env_seen"] for r in evidence["ran"]), evidence["ran"]
    ran = {r["host"]: r["ran"] for r in evidence["ran"]}
    assert [h for h, how in ran.items() if how == "the doctor's probes shipped with the task"] == [
        next(h for h in ran if f"(node {hidden[:8]})" in h)], ran
    assert evidence["wanted"]["nodes"] == 3 and evidence["wanted"]["reward.reward_model.nnodes"] == 1
    assert report["fleet"]["world_size"] == 4 == report["fleet"]["reported"], done.stderr[-3000:]
    # What the static facts alone cannot settle on that node is not known there (an error), never a pass; the nodes
    # with the doctor pass.
    groups = rows["cudnn-fe.version"]["evidence"]["groups"]
    assert any(f"(node {hidden[:8]})" in json.dumps(g) and g["status"] != "pass" for g in groups), groups
    assert any(f"(node {second[:8]})" in json.dumps(g) and g["status"] == "pass" for g in groups), groups
    assert done.returncode == 1 and rows["fleet.ranks"]["status"] == "pass", done.stderr[-3000:]
    cluster.remove("hidden")

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


# ------------------------------------------------------------------- the command's reading, without a cluster

def test_wanted_counts_the_reward_models_own_pool_and_says_what_is_out_of_range():
    from dsv4_doctor.fleet.raycluster import wanted

    base = ["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
    want = wanted(base + ["reward.reward_model.enable_resource_pool=True", "reward.reward_model.nnodes=3",
                          "reward.reward_model.n_gpus_per_node=1"])
    assert (want.nodes, want.least_gpus, want.notes) == (5, 1, [])
    assert "reward.reward_model.nnodes=3 (the reward model's own pool) = 5" in want.asks
    assert wanted(base + ["reward.reward_model.nnodes=3"]).nodes == 2  # no pool of its own: it shares the trainer's
    assert wanted(base + ["reward.reward_model={enable_resource_pool:true,nnodes:1}"]).nodes == 3
    zero = wanted(base + ["reward.reward_model.enable_resource_pool=True"])
    assert zero.nodes == 2 and "verl" in zero.notes[0] and "greater than 0" in zero.notes[0]
    big = wanted(["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=50000"])
    assert big.nnodes == 50000  # bounds.py's range, up to 100000
    over = wanted(["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=100001"])
    assert over.nnodes is None and over.notes


def test_job_runtime_env_takes_env_vars_working_dir_and_py_executable_and_nothing_hostile(tmp_path):
    from dsv4_doctor.fleet.raycluster import job_runtime_env

    head = "+ray_kwargs.ray_init.runtime_env."
    env, notes = job_runtime_env(["python3", "-m", "verl.trainer.main_ppo", f"{head}env_vars.FOO=bar",
                                  f"++{head[1:]}env_vars={{A:1,B:x}}", f"{head}working_dir={tmp_path}",
                                  f"{head}py_executable={sys.executable}", f"{head}env_vars.BAD-NAME=1",
                                  f"{head}py_executable=python -c 'import os; os.system(\"x\")'",
                                  f"{head}working_dir=/no/such/dir", f"{head}pip=[evil]",
                                  f"{head}env_vars.LONG={'x' * 5000}", f"~{head[1:]}env_vars.A"])
    assert env == {"env_vars": {"FOO": "bar", "B": "x"}, "working_dir": str(tmp_path),
                   "py_executable": sys.executable}
    assert len(notes) == 5 and all("not applied" in n for n in notes) and not any("evil" in n for n in notes)
    assert job_runtime_env(["bash", "run.sh", f"{head}env_vars.FOO=bar"]) == ({}, [])
