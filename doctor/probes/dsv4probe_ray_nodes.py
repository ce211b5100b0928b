"""The Ray fleet helper's code (its entry, dsv4probe_ray.py, says what it does and who runs it): the runtime_env
composed (verl's defaults read with ast, under the command's overrides), the cluster joined, one pinned task per alive
GPU node (node_check, which runs on the node), each bounded, and each node's answer taken as its entry. Stdlib besides
ray; loaded by path (dsv4probe_common.load_module).
"""

import os
import sys

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import ReadRefused, cut_text, parse_python, read_bounded

import time

CANCEL_S = 5.0  # after the deadline: how long the cancelled stragglers get to go
VERL_SOURCE_LIMIT = 1 << 20  # verl's constants_ppo.py: 7 KB in verl 0.9.1


def _has_doctor():
    import importlib.util

    try:
        return importlib.util.find_spec("dsv4_doctor") is not None
    except (ImportError, ValueError):  # a finder that refuses it: the same as not installed
        return False


def _private_file(folder, name, text):
    """`text` in a new file of `folder` (mkdtemp's: mode 0700), mode 0600, created exclusively, never through a link:
    what a child takes instead of a word of its command line (world-readable in /proc/PID/cmdline). Its path."""
    path = os.path.join(folder, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags, 0o600), "wb") as fh:
        fh.write(text.encode("utf-8", "surrogateescape"))
    return path


def node_check(argv, limit, timeout_s, expected=None, static_request=None, ship_package=None, job_args=None):
    """On one node, in the job's runtime environment: the doctor's check of this node, as JSON bytes (bounded); on a
    node without the doctor, the shipped static probe's facts. The training command (`job_args`) and the probe's
    request reach the child in files of a private folder, never on its command line."""
    import shutil
    import socket
    import tempfile

    import ray

    node = ray.get_runtime_context().get_node_id()
    out = {"node_id": node, "host": socket.gethostname()[:255], "python": sys.executable,
           "runtime_env_seen": sorted(k for k, v in (expected or {}).items() if os.environ.get(k) == v)}
    env = dict(os.environ, DSV4_DOCTOR_RAY_NODE=node[:16])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID"):
        env.pop(name, None)
    folder = tempfile.mkdtemp(prefix="dsv4-doctor-node-")
    try:
        return _node_run(out, env, folder, argv, limit, timeout_s, static_request, ship_package, job_args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _node_run(out, env, folder, argv, limit, timeout_s, static_request, ship_package, job_args):
    import importlib.util
    import json
    import subprocess

    if _has_doctor():
        out["ran"] = "doctor"
        command = [sys.executable, "-m", "dsv4_doctor"] + list(argv)
        if job_args:
            command += ["--job-args-file", _private_file(folder, "job-args.txt", job_args)]
        answer_file = None
    else:
        shipped = None
        try:
            spec = importlib.util.find_spec(ship_package) if ship_package else None
            shipped = list(spec.submodule_search_locations or [])[0] if spec is not None else None
        except (ImportError, ValueError, IndexError, TypeError):
            shipped = None
        if not shipped or not os.path.isfile(os.path.join(shipped, "dsv4probe_static.py")):
            out["why"] = ("this node's job environment has no dsv4-doctor (%s cannot import dsv4_doctor), and the "
                          "doctor's probes shipped with the task are not there: install it in the job's image"
                          % sys.executable)
            return out
        out["ran"] = "probes"
        answer_file = os.path.join(folder, "static.json")
        env["DSV4_DOCTOR_PROBE_LIB"] = shipped
        env["DSV4_DOCTOR_PROBE_TIMEOUT"] = str(timeout_s)
        command = [sys.executable, os.path.join(shipped, "dsv4probe_launch.py"),
                   os.path.join(shipped, "dsv4probe_static.py"), answer_file,
                   _private_file(folder, "static.request.json", json.dumps(static_request or {}))]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out["why"] = "the %s on this node did not finish within %.0f s" % (
            "doctor" if answer_file is None else "doctor's shipped static probe", timeout_s)
        return out
    report = done.stdout
    if answer_file is not None:
        try:
            with open(answer_file, "rb") as fh:
                report = fh.read(limit + 1)
        except OSError:
            report = b""
    out["exit_code"] = done.returncode
    out["size"] = len(report)
    out["report"] = report if len(report) <= limit else b""
    # The tail from a line's start (a line cut in half could be the end of a secret whose start redaction needs);
    # inline, since this function runs on the node, where the probes' own modules may not be importable.
    tail = done.stderr[-2000:]
    if len(done.stderr) > 2000:
        tail = tail[tail.find(b"\n") + 1:] if b"\n" in tail else b""
    out["stderr"] = tail.decode("utf-8", "replace")
    return out


def verl_defaults():
    """verl's PPO_RAY_RUNTIME_ENV env_vars (verl/trainer/constants_ppo.py) of the job's verl, read with ast (verl is
    never imported: it imports torch): its constant entries, and (text, where). ({}, why) when not read: the file
    is the job's, so it is hostile input (a FIFO, a device, a file over VERL_SOURCE_LIMIT, one that does not parse
    or is nested 100,000 deep is "not read", with its reason, and the cluster is checked without verl's defaults)."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        spec = None
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    if not places:
        return {}, "verl's defaults not applied: the job's Python has no verl"
    path = os.path.join(places[0], "trainer", "constants_ppo.py")
    try:
        raw, size = read_bounded(path, VERL_SOURCE_LIMIT)
        if size > len(raw):
            raise ReadRefused("it is larger than %d bytes (%d bytes)" % (VERL_SOURCE_LIMIT, size))
        tree = parse_python(raw, path)
    except ReadRefused as exc:
        return {}, "verl's defaults not applied: %s was not read (%s)" % (path, cut_text(str(exc), 300))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == "PPO_RAY_RUNTIME_ENV" for t in stmt.targets) \
                and isinstance(stmt.value, ast.Dict):
            for key, value in zip(stmt.value.keys, stmt.value.values):
                if isinstance(key, ast.Constant) and key.value == "env_vars" and isinstance(value, ast.Dict):
                    found = {k.value: v.value for k, v in zip(value.keys, value.values)
                             if isinstance(k, ast.Constant) and isinstance(k.value, str)
                             and isinstance(v, ast.Constant) and isinstance(v.value, str)}
                    return found, "verl's PPO_RAY_RUNTIME_ENV env_vars from %s" % path
    return {}, "verl's defaults not applied: %s has no PPO_RAY_RUNTIME_ENV" % path


def compose_runtime_env(request):
    """ray.init's runtime_env as verl's run_ppo composes it (OmegaConf.merge(get_ppo_ray_runtime_env(), the
    command's ray_kwargs.ray_init.runtime_env)): verl's default variables not already set in this environment and its
    always-forwarded ones, under the command's; plus the doctor's shipped probes in py_modules."""
    given = request.get("runtime_env") if isinstance(request.get("runtime_env"), dict) else {}
    env_vars, where = {}, None
    if request.get("verl_defaults"):
        defaults, where = verl_defaults()
        env_vars = {k: v for k, v in defaults.items() if os.environ.get(k) is None}
        if defaults:
            for key in ("VERL_FULL_DETERMINISM", "VLLM_BATCH_INVARIANT", "VERL_RL_INSIGHT_ENABLE"):
                env_vars[key] = os.environ.get(key, "0")
    env_vars.update({str(k): str(v) for k, v in (given.get("env_vars") or {}).items()})
    runtime_env = {k: given[k] for k in ("working_dir", "py_executable") if isinstance(given.get(k), str)}
    if env_vars:
        runtime_env["env_vars"] = env_vars
    for key in ("py_modules", "excludes"):  # lists of text (the doctor validated the paths)
        if isinstance(given.get(key), list) and all(isinstance(v, str) for v in given[key]):
            runtime_env[key] = list(given[key])
    # The job's modules first, in its order, as Ray puts them on its workers' path; the doctor's own beside them.
    if request.get("ship") and os.path.isdir(request["ship"]):
        runtime_env["py_modules"] = list(runtime_env.get("py_modules") or []) + [request["ship"]]
    return runtime_env, where


# A node task's answer (node_check), field by field: it crossed Ray from the node, so each is checked for its type.
ANSWER_FIELDS = (("host", str), ("python", str), ("why", str), ("exit_code", int), ("size", int), ("stderr", str),
                 ("ran", str), ("runtime_env_seen", list), ("report", bytes))


def take_answer(entry, got, folder, limit):
    """A node task's answer into the node's entry, its report to `folder`/reports/<index>.json. An answer with a
    field of the wrong type is that node's entry saying which ("why"); the other nodes' answers are taken as usual."""
    if not isinstance(got, dict):
        entry["why"] = "its answer to the doctor is malformed: %s, not an object" % cut_text(repr(got), 80)
        return
    bad = ["%s is %s" % (name, cut_text(repr(got[name]), 80)) for name, kind in ANSWER_FIELDS
           if name in got and (not isinstance(got[name], kind) or isinstance(got[name], bool)
                               or (kind is list and not all(isinstance(n, str) for n in got[name])))]
    if bad:
        entry["why"] = "its answer to the doctor is malformed: " + "; ".join(bad)
        return
    entry.update({name: got[name] for name, _ in ANSWER_FIELDS if name in got and name != "report"})
    report, size = got.get("report") or b"", got.get("size") or 0
    if report:
        path = os.path.join(folder, "reports", "%d.json" % entry["index"])
        with open(path + ".tmp", "wb") as fh:
            fh.write(report)
        os.replace(path + ".tmp", path)
    elif "why" not in entry:
        entry["why"] = ("its report was %d bytes, over the %d-byte limit" % (size, limit) if size > limit else
                        "the doctor on the node wrote no report (exit %s)" % entry.get("exit_code"))


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


WAIT_POLL_S = 0.5  # --ray-wait-nodes: how often the cluster's nodes are listed again


def gpu_nodes(ray, wait, timings):
    """The alive nodes with GPUs. With `wait` ({"count", "s"}: --ray-wait-nodes), first up to `s` seconds for
    `count` of them to be alive (an autoscaling cluster coming up); the seconds waited go to `timings["wait_s"]`.
    The doctor's own wait on this helper is what answers its stop signals (it ends this process)."""
    def alive():
        return [n for n in ray.nodes() if n.get("Alive") and float((n.get("Resources") or {}).get("GPU") or 0) > 0]

    nodes = alive()
    if not isinstance(wait, dict):
        return nodes
    try:
        count, seconds = int(wait.get("count") or 0), min(3600.0, max(0.0, float(wait.get("s") or 0)))
    except (TypeError, ValueError, OverflowError):
        return nodes
    begun = time.monotonic()
    while len(nodes) < count and time.monotonic() - begun < seconds:
        time.sleep(min(WAIT_POLL_S, max(0.0, seconds - (time.monotonic() - begun))))
        nodes = alive()
    timings["wait_s"] = round(time.monotonic() - begun, 3)
    return nodes


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
    runtime_env, defaults_from = compose_runtime_env(request)
    shown = {"env_vars": sorted(runtime_env.get("env_vars") or {}), "working_dir": runtime_env.get("working_dir"),
             "py_executable": runtime_env.get("py_executable"), "py_modules": runtime_env.get("py_modules") or [],
             "verl_defaults": defaults_from}
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False,
                 runtime_env=runtime_env or None)
    except (ConnectionError, RuntimeError, ValueError, TypeError, OSError) as exc:
        return {"error": "could not join the Ray cluster at %s (%s: %s)" % (
            address, type(exc).__name__, cut_text(str(exc).strip().splitlines()[0], 300) if str(exc).strip() else "")}
    timings["join_s"] = round(time.monotonic() - started, 3)
    driver_node = ray.get_runtime_context().get_node_id()
    nodes = gpu_nodes(ray, request.get("wait_nodes"), timings)
    # The driver's node first, then by address: a stable order, so a node keeps its index between runs.
    nodes.sort(key=lambda n: (n.get("NodeID") != driver_node, str(n.get("NodeManagerAddress")), n.get("NodeID")))
    gpu_checks = bool(request.get("gpu_checks"))
    limit, task_s = int(request["limit"]), float(request["task_s"])
    # node_check runs on the nodes, where this module (loaded here by path) does not import: it travels by value, as
    # a function of a script's __main__ does, with the functions it calls.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
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
        refs[remote.options(**options).remote(request["argv"], limit, max(5.0, task_s - 5.0),
                                              runtime_env.get("env_vars") or {}, request.get("static_request"),
                                              request.get("ship_package"), request.get("job_args"))] = entry
    pending = list(refs)
    deadline = started + task_s + timings.get("wait_s", 0.0)  # the tasks' time starts after the wait for nodes
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
            try:
                take_answer(entry, got, folder, limit)
            except Exception as exc:  # noqa: BLE001 - an answer that cannot be taken fails its node alone
                entry["why"] = "its answer could not be taken (%s: %s)" % (type(exc).__name__, cut_text(str(exc), 200))
    for ref in pending:
        refs[ref]["why"] = "the node did not answer within %.0f s (its check was cancelled)" % task_s
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - a node already gone: nothing to cancel
            pass
    timings["total_s"] = round(time.monotonic() - started, 3)
    return {"nodes": entries, "driver_node": driver_node, "timings": timings, "runtime_env": shown}

