"""The Ray fleet helper: joins the job's Ray cluster and runs the doctor once on every alive GPU node, in parallel.

Runs in the job's own Python (only the job's own ray can join its cluster: the doctor's CLI never imports ray):
`ray.init(address=RAY_ADDRESS or "auto")`, then `ray.nodes()`: the alive nodes with GPUs. One task per node, pinned
with NodeAffinitySchedulingStrategy(node_id, soft=False) (no placement group: one waits forever when a node is
missing, and reserves the GPUs the job needs). A task runs the doctor of the job's runtime environment (its env
vars, working_dir, py_executable: Ray's worker Python) with `--no-distributed`, since verl's workers set
RANK/WORLD_SIZE themselves. The static checks ask for no GPU; with GPU checks a task asks for the node's GPUs.

Every task is bounded with ray.wait; a straggler is cancelled (ray.cancel) before the doctor decides. A node that
dies (NodeDiedError), cannot be scheduled (TaskUnschedulableError), lacks the doctor or hangs is an entry with its
reason, never a missing one. The reports go to `dir`/reports/<i>.json (bounded, hostile: the doctor admits them).
Answer: {"nodes": [{"index", "node_id", "host", "ip", "gpus", "why"?, "exit_code"?, "size"?}], "driver_node",
"timings"} or {"error"}. Stdlib besides ray. `python dsv4probe_ray.py OUT REQ`.
"""

import os
import sys

# Before any other import: nothing beside a probe script is the job's (dsv4probe_common's docstring says why).
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]
if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
    import importlib.util

    _spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
        os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
    sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["dsv4probe_common"])
from dsv4probe_common import cut_text, serve

import time

CANCEL_S = 5.0  # after the deadline: how long the cancelled stragglers get to go


def node_check(argv, limit, timeout_s):
    """On one node, in the job's runtime environment: the doctor's check of this node, as JSON bytes (bounded)."""
    import importlib.util
    import socket
    import subprocess

    import ray

    node = ray.get_runtime_context().get_node_id()
    out = {"node_id": node, "host": socket.gethostname()[:255], "python": sys.executable}
    if importlib.util.find_spec("dsv4_doctor") is None:
        out["why"] = ("this node's job environment has no dsv4-doctor (%s cannot import dsv4_doctor): install it in "
                      "the job's image" % sys.executable)
        return out
    env = dict(os.environ, DSV4_DOCTOR_RAY_NODE=node[:16])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID"):
        env.pop(name, None)
    try:
        done = subprocess.run([sys.executable, "-m", "dsv4_doctor", *argv], stdin=subprocess.DEVNULL,
                              capture_output=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out["why"] = "the doctor on this node did not finish within %.0f s" % timeout_s
        return out
    out["exit_code"] = done.returncode
    out["size"] = len(done.stdout)
    out["report"] = done.stdout if len(done.stdout) <= limit else b""
    out["stderr"] = done.stderr[-2000:].decode("utf-8", "replace")
    return out


def _why(exc):
    import ray.exceptions as rex

    name = type(exc).__name__
    text = cut_text(str(exc).strip().splitlines()[0], 300) if str(exc).strip() else ""
    if isinstance(exc, getattr(rex, "NodeDiedError", ())):
        return "the node died during the check (%s: %s)" % (name, text)
    if isinstance(exc, getattr(rex, "TaskUnschedulableError", ())):
        return "the check could not be scheduled on the node (%s: %s)" % (name, text)
    if isinstance(exc, getattr(rex, "WorkerCrashedError", ())):
        return "the check's worker on the node died (%s: %s)" % (name, text)
    return "the check on the node failed (%s: %s)" % (name, text)


def answer(request):
    started = time.monotonic()
    folder = request["dir"]
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as exc:
        return {"error": "the job's Python (%s) cannot import ray (%s): run it with the job's --python"
                % (sys.executable, exc)}
    address = os.environ.get("RAY_ADDRESS") or "auto"
    timings = {}
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False,
                 runtime_env=request.get("runtime_env") or None)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        return {"error": "could not join the Ray cluster at %s (%s: %s)" % (
            address, type(exc).__name__, cut_text(str(exc).strip().splitlines()[0], 300) if str(exc).strip() else "")}
    timings["join_s"] = round(time.monotonic() - started, 3)
    driver_node = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive") and float((n.get("Resources") or {}).get("GPU") or 0) > 0]
    # The driver's node first, then by address: a stable order, so a node keeps its index between runs.
    nodes.sort(key=lambda n: (n.get("NodeID") != driver_node, str(n.get("NodeManagerAddress")), n.get("NodeID")))
    gpu_checks = bool(request.get("gpu_checks"))
    limit, task_s = int(request["limit"]), float(request["task_s"])
    remote = ray.remote(max_retries=0)(node_check)
    refs, entries = {}, []
    for i, n in enumerate(nodes):
        gpus = float((n.get("Resources") or {}).get("GPU") or 0)
        entry = {"index": i, "node_id": n.get("NodeID"), "ip": n.get("NodeManagerAddress"), "gpus": gpus,
                 "host": n.get("NodeManagerHostname")}
        entries.append(entry)
        options = {"num_cpus": 0, "num_gpus": gpus if gpu_checks else 0,
                   "scheduling_strategy": NodeAffinitySchedulingStrategy(n.get("NodeID"), soft=False)}
        if not gpu_checks:  # a task without GPUs gets CUDA_VISIBLE_DEVICES='': the static checks need none
            options["runtime_env"] = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}
        refs[remote.options(**options).remote(request["argv"], limit, max(5.0, task_s - 5.0))] = entry
    pending = list(refs)
    deadline = started + task_s
    os.makedirs(os.path.join(folder, "reports"), exist_ok=True)
    while pending and time.monotonic() < deadline:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        for ref in ready:
            entry = refs[ref]
            try:
                got = ray.get(ref, timeout=10)
            except Exception as exc:  # noqa: BLE001 - every failure of a node is an entry, never a missing row
                entry["why"] = _why(exc)
                continue
            report = got.pop("report", b"") if isinstance(got, dict) else b""
            if isinstance(got, dict):
                entry.update({k: got[k] for k in ("host", "python", "why", "exit_code", "size", "stderr") if k in got})
            if report:
                path = os.path.join(folder, "reports", "%d.json" % entry["index"])
                with open(path + ".tmp", "wb") as fh:
                    fh.write(report)
                os.replace(path + ".tmp", path)
            elif "why" not in entry:
                entry["why"] = ("its report was %d bytes, over the %d-byte limit" % (entry.get("size") or 0, limit)
                                if (entry.get("size") or 0) > limit else "the doctor on the node wrote no report "
                                "(exit %s)" % entry.get("exit_code"))
    for ref in pending:
        refs[ref]["why"] = "the node did not answer within %.0f s (its check was cancelled)" % task_s
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - a node already gone: nothing to cancel
            pass
    timings["total_s"] = round(time.monotonic() - started, 3)
    return {"nodes": entries, "driver_node": driver_node, "timings": timings}


if __name__ == "__main__":
    serve(answer)
