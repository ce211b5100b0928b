"""Fleet mode on Ray (`fleet --ray -- CMD`, `check --ray`): one verdict for every GPU node of the job's Ray cluster,
from where verl's driver would start.

verl's driver joins a Ray cluster and places its workers on every GPU node as Ray actors; no launcher starts the
doctor in front of them. So the doctor goes to the nodes: the Ray helper (probes/dsv4probe_ray.py, in the job's own
Python, whose ray can join the job's cluster: the CLI never imports ray) runs the doctor of each node's job
environment once per alive GPU node (`--no-distributed`: verl's workers set RANK/WORLD_SIZE themselves), each task
pinned to its node and bounded. Rank 0 is the driver's own report; ranks 1..N are the nodes, in the helper's order.
A node that died, could not be scheduled, lacks the doctor, hung, or is missing against the command's
`trainer.nnodes` is an entry of `fleet.ranks` naming the node; a node with fewer GPUs than
`trainer.n_gpus_per_node` too. The reports are admitted and merged with the torchrun fleet's typed merge.

With `--ray-hook` the command also gets Ray's `worker_process_setup_hook` through verl's
`ray_kwargs.ray_init.runtime_env` (Hydra `++` overrides): a worker process on a node the check did not cover (one
that joined after it) refuses to start, with the doctor's reason (probes/dsv4_doctor_rayhook).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model import Profile
    from ..report import Report

RAY_SCRIPT = "dsv4probe_ray.py"
HOOK_MODULE = "dsv4_doctor_rayhook"
HOOK = HOOK_MODULE + ".refuse_unchecked_node"
CHECKED_NODES_VARIABLE = "DSV4_DOCTOR_RAY_CHECKED_NODES"
NODE_VARIABLE = "DSV4_DOCTOR_RAY_NODE"  # set in a node task's doctor: its report carries its node and fingerprint
JOIN_S = 60.0  # the helper importing ray and joining the cluster
MAX_NODES = 10_000
RUNTIME_ENV_KEY = "ray_kwargs.ray_init.runtime_env"


def node_fields(node: str, host: str | None = None) -> dict:
    """profile.fleet of a node task's doctor (or the driver's): it makes the report carry its fingerprint."""
    return {"rank": 0, "world_size": 1, "local_rank": 0, "node_leader": True, "launcher": "ray",
            "host": host or socket.gethostname() or "unknown", "node": node[:16]}


def driver_profile(profile: Profile) -> Profile:
    return replace(profile, fleet=node_fields("driver", (socket.gethostname() or "unknown") + " (driver)"))


def node_profile(profile: Profile, environ) -> Profile:
    """The profile of a node task's doctor (NODE_VARIABLE set by the Ray helper's task), else `profile`."""
    node = str(environ.get(NODE_VARIABLE) or "")
    return replace(profile, fleet=node_fields(node)) if node.isalnum() else profile


def wanted(command: Sequence[str] | None) -> tuple[int | None, int | None]:
    """(trainer.nnodes, trainer.n_gpus_per_node) as the command states them, read by the job-command reader;
    None where it does not state one (or cannot be read)."""
    if not command:
        return None, None
    from ..job.command import parse
    from ..model import UsageError

    try:
        job = parse(list(command))
    except UsageError:
        return None, None

    def number(name: str) -> int | None:
        value = getattr(job.common.get(name), "value", None)
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_NODES else None

    return number("nnodes"), number("gpus_per_node")


def node_argv(opts: Any, command: Sequence[str] | None) -> list[str]:
    """The doctor's command line on each node: this run's selection and profile, single-host, as JSON."""
    argv = ["check", "--no-distributed", "-f", "json"]
    for flag, values in (("--only", opts.only), ("--skip", opts.skip)):
        for value in values or []:
            argv += [flag, str(value)]
    for flag, value in (("--cp", opts.cp), ("--dsa-backend", opts.dsa_backend), ("--gpu-arch", opts.gpu_arch),
                        ("--timeout", opts.timeout)):
        if value is not None:
            argv += [flag, str(value)]
    argv += [flag for flag, on in (("--strict", opts.strict), ("--no-smoke", opts.no_smoke),
                                   ("--static-only", opts.static_only)) if on]
    if command:
        argv += ["--job-args", shlex.join(command)]
    return argv


def take_part(opts: Any, own: Report, command: Sequence[str] | None, deliver: Callable[[Report], int],
              fleet_checks: tuple[str, ...]) -> tuple[int, list[str]]:
    """Check every GPU node of the job's Ray cluster, merge with the driver's own report (`own`), deliver the one
    report; (the exit code, the checked nodes' ids)."""
    from ..signals import GATE

    nnodes, per_node = wanted(command)
    budget = float(own.summary.budget_s or 60.0)
    task_s = budget + 30.0
    request = {"argv": node_argv(opts, command), "task_s": task_s, "limit": _limit(),
               "gpu_checks": not (opts.no_smoke or opts.static_only)}
    answer, folder, procs = _run_helper(str(opts.python), request, JOIN_S + task_s + 30.0)
    try:
        out, verdict, checked = _merged(own, answer, folder, nnodes, per_node, opts.strict, fleet_checks)
    finally:
        procs.close()
    with GATE.critical():
        written = deliver(out)
    final = int(verdict)
    return (max(final, written) if written else final), checked


def _limit() -> int:
    from .admit import MAX_REPORT_BYTES

    return MAX_REPORT_BYTES


def _run_helper(python: str, request: dict, timeout_s: float):
    from ..probes import PROBE_DIR, child_env
    from ..procs import Processes, read_bounded, start_helper

    procs = Processes()
    folder = procs.tempdir("dsv4-doctor-ray-")
    answer_path, log = os.path.join(folder, "answer.json"), os.path.join(folder, "helper.log")
    argv = [python, str(PROBE_DIR / RAY_SCRIPT), answer_path, json.dumps(dict(request, dir=folder))]
    try:
        helper = start_helper(procs, argv, log, child_env(timeout_s))
    except OSError as exc:
        return {"error": f"the Ray helper could not start ({exc.strerror or exc})"}, folder, procs
    end = helper.finish(time.monotonic() + timeout_s)
    raw = read_bounded(answer_path, 16 << 20)
    try:
        answer = json.loads(raw.decode("utf-8", "replace")) if raw else None
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict) or "probe_error" in answer:
        from ..redact import read_tail, shorten

        err = answer.get("probe_error") if isinstance(answer, dict) else None
        why = (f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else
               "it did not finish in time" if end.timed_out else
               f"it exited with code {end.returncode} without an answer")
        tail = read_tail(log, 600).strip().splitlines()
        answer = {"error": f"the Ray helper could not check the cluster ({shorten(str(why), 400)})"
                  + (f"; its last line: {shorten(tail[-1], 300)}" if tail and not isinstance(err, dict) else "")}
    return answer, folder, procs


def _merged(own_report: Report, answer: dict, folder: str, nnodes: int | None, per_node: int | None, strict: bool,
            fleet_checks: tuple[str, ...]) -> tuple[Report, int, list[str]]:
    from ..procs import read_bounded
    from . import admit as fleetadmit, merge as fleetmerge
    from .admit import _text

    own = fleetadmit.admit(0, own_report.to_dict())
    others: dict[int, Any] = {}
    problems: dict[int, str] = {}
    hints: dict[int, str] = {}
    info: dict[str, Any] = {"scope": "ray", "authenticated": False, "mode": "ray", "fleet_checks": fleet_checks,
                            "timings": answer.get("timings") if isinstance(answer.get("timings"), dict) else {}}
    nodes = [n for n in answer.get("nodes") or [] if isinstance(n, dict)][:MAX_NODES]
    if answer.get("error"):
        info["exchange_error"] = _text(answer["error"], 600)
    checked = []
    for i, node in enumerate(nodes):
        rank, node_id = i + 1, _text(node.get("node_id"), 64)
        label = f"{_text(node.get('host'), 255) or 'unknown'} (node {node_id[:8] or '?'})"
        hints[rank] = label
        why = node.get("why")
        if why:
            problems[rank] = _text(why, 400)
        else:
            payload = read_bounded(os.path.join(folder, "reports", f"{i}.json"), fleetadmit.MAX_REPORT_BYTES + 1)
            try:
                others[rank] = fleetadmit.admit(rank, _as_node(payload, rank, label, node_id))
                checked.append(node_id)
            except fleetadmit.BadReport as exc:
                problems[rank] = f"its report was rejected: {exc}"
        gpus = node.get("gpus")
        if per_node and isinstance(gpus, (int, float)) and gpus < per_node:
            problems[rank] = (f"it has {gpus:g} GPU(s), and the command asks trainer.n_gpus_per_node={per_node}"
                              + (f"; {problems[rank]}" if rank in problems else ""))
    if nnodes and len(nodes) < nnodes and not answer.get("error"):
        for rank in range(len(nodes) + 1, nnodes + 1):
            problems[rank] = (f"no such node: the Ray cluster has {len(nodes)} alive GPU node(s), and the command "
                              f"asks trainer.nnodes={nnodes}")
            hints[rank] = "no node"
    world = 1 + max(len(nodes), nnodes or 0, 1 if answer.get("error") else 0)
    if answer.get("error") and not nodes:
        problems.setdefault(1, "not checked: " + info["exchange_error"])
    out, verdict = fleetmerge.merge(own, others, world, problems, strict, info, hints)
    return out, int(verdict), checked


def _as_node(payload: bytes | None, rank: int, label: str, node_id: str) -> dict:
    """A node's report as a fleet rank's: its place (rank, host label, node) set by the driver, not by the node."""
    from .admit import MAX_REPORT_BYTES, BadReport

    if payload is None:
        raise BadReport("its report could not be read")
    if len(payload) > MAX_REPORT_BYTES:
        raise BadReport(f"its report is {len(payload)} bytes (at most {MAX_REPORT_BYTES})")
    try:
        data = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadReport("its report is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("environment"), dict):
        raise BadReport("its report is not a report")
    data["environment"]["fleet_rank"] = {"rank": rank, "local_rank": 0, "host": label, "node": node_id[:16]}
    return data


def hook_overrides(checked: Sequence[str]) -> list[str]:
    """The Hydra overrides that give verl's ray.init the doctor's worker_process_setup_hook: the hook (shipped with
    py_modules, so a node without the doctor runs it too) and the nodes the check covered."""
    from ..probes import PROBE_DIR

    ids = ",".join(n for n in checked if n.isalnum())
    return [f"++{RUNTIME_ENV_KEY}.worker_process_setup_hook={HOOK}",
            f"++{RUNTIME_ENV_KEY}.py_modules=['{PROBE_DIR / HOOK_MODULE}']",
            f"++{RUNTIME_ENV_KEY}.env_vars.{CHECKED_NODES_VARIABLE}='{ids}'"]
