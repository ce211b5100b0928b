"""Fleet mode on Ray (`fleet --ray -- CMD`, `check --ray`): one verdict for every GPU node of the job's Ray cluster,
from where verl's driver would start.

verl's driver joins a Ray cluster and places its workers on every GPU node as Ray actors; no launcher starts the
doctor in front of them. So the doctor goes to the nodes: the Ray helper (probes/dsv4probe_ray.py, in the job's own
Python, whose ray can join the job's cluster: the CLI never imports ray) runs the doctor of each node's job
environment once per alive GPU node (`--no-distributed`: verl's workers set RANK/WORLD_SIZE themselves), each task
pinned to its node and bounded. Rank 0 is the driver's own report; ranks 1..N are the nodes, in the helper's order.
A node that died, could not be scheduled, lacks the doctor, hung, or is missing against the command's
`trainer.nnodes` (plus `reward.reward_model.nnodes` where the reward model has its own pool) is an entry of
`fleet.ranks` naming the node; a node with fewer GPUs than the command's GPUs per node too. The reports are admitted
and merged with the torchrun fleet's typed merge.

The tasks run in the job's runtime environment: verl's defaults (PPO_RAY_RUNTIME_ENV of the job's verl, read with
ast where the helper finds it) merged with the command's `ray_kwargs.ray_init.runtime_env.*` overrides (env_vars,
working_dir, py_executable; validated, bounded, never through a shell: job_runtime_env). A node whose job
environment lacks the doctor runs the doctor's stdlib-only static probe, shipped with the task (py_modules); the
driver's doctor then runs the selected checks on that node's static facts, and every check that needs more than them
is an error that says it was not checked there (never a pass it did not earn). fleet.ranks' evidence says which ran
on each node and what runtime_env the tasks got.

With `--ray-hook` the command also gets Ray's `worker_process_setup_hook` through verl's
`ray_kwargs.ray_init.runtime_env` (Hydra `++` overrides): a worker process on a node the check did not cover (one
that joined after it) refuses to start, with the doctor's reason (probes/dsv4_doctor_rayhook).
"""

from __future__ import annotations

import os
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .rayjob import (  # noqa: F401  (wanted and job_runtime_env: read from here by the tests)
    MAX_ENV_VARS, MAX_NODES, REWARD_KEY, RUNTIME_ENV_KEY, Wanted, job_runtime_env, wanted)
from .raynode import NodeAnswer, helper_error, probe_report, take_node, timings

if TYPE_CHECKING:
    from ..model import CheckReport, Profile
    from ..report import Report

RAY_SCRIPT = "dsv4probe_ray.py"
HOOK_MODULE = "dsv4_doctor_rayhook"
HOOK = HOOK_MODULE + ".refuse_unchecked_node"
CHECKED_NODES_VARIABLE = "DSV4_DOCTOR_RAY_CHECKED_NODES"
NODE_VARIABLE = "DSV4_DOCTOR_RAY_NODE"  # set in a node task's doctor: its report carries its node and fingerprint
JOIN_S = 60.0  # the helper importing ray and joining the cluster


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


def node_argv(opts: Any, command: Sequence[str] | None) -> list[str]:
    """The doctor's command line on each node: this run's selection and profile, single-host, as JSON. The training
    command is never on it (a command line is world-readable, and the command may hold secrets): the task writes it
    to a file of its own and adds `--job-args-file PATH` (`node_job_args`)."""
    argv = ["check", "--no-distributed", "-f", "json"]
    for flag, values in (("--only", opts.only), ("--skip", opts.skip)):
        for value in values or []:
            argv += [flag, str(value)]
    for flag, value in (("--cp", opts.cp), ("--dsa-backend", opts.dsa_backend), ("--gpu-arch", opts.gpu_arch),
                        ("--timeout", opts.timeout)):
        if value is not None:
            argv += [flag, str(value)]
    argv += [flag for flag, on in (("--strict", opts.strict), ("--no-smoke", opts.no_smoke),
                                   ("--static-only", opts.static_only), ("--deep", opts.deep)) if on]
    return argv


def node_job_args(command: Sequence[str] | None) -> str | None:
    """The training command as the node's doctor takes it (`--job-args-file`: one shell-quoted string), or None."""
    return shlex.join(command) if command else None


SHIP_PACKAGE = "dsv4_doctor_shipped_probes"  # the py_modules folder a node without the doctor runs the probe from
SHIPPED = ("dsv4probe_common.py", "dsv4probe_read.py", "dsv4probe_static.py")  # and its dsv4probe_static_*.py
RAN_DOCTOR = "doctor from the job's environment"
RAN_PROBES = "the doctor's probes shipped with the task"


def take_part(opts: Any, own: Report, command: Sequence[str] | None, deliver: Callable[[Report], int],
              fleet_checks: tuple[str, ...], probes_profile: Profile) -> tuple[int, list[str]]:
    """Check every GPU node of the job's Ray cluster, merge with the driver's own report (`own`), deliver the one
    report; (the exit code, the checked nodes' ids). `probes_profile`: the profile a node that ran only the shipped
    probes is judged under (the driver's options, no device). A stop signal, during the driver's own checks or
    while the nodes are checked, ends it at once with the report of what finished (the driver's rows) and 128 + N."""
    import signal

    from ..model import Interrupted
    from ..signals import GATE

    want = wanted(command)
    runtime_env, env_notes = job_runtime_env(command)
    budget = float(own.summary.budget_s or 60.0)
    task_s = budget + 30.0
    request = {"argv": node_argv(opts, command), "job_args": node_job_args(command), "task_s": task_s,
               "limit": _limit(),
               "gpu_checks": not (opts.no_smoke or opts.static_only), "runtime_env": runtime_env,
               "verl_defaults": _is_verl(command), "static_request": _static_request(),
               "ship_package": SHIP_PACKAGE}
    answer: Any = None
    folder, procs = "", None
    # The driver's own checks were interrupted (their report says so): the nodes are not checked at all.
    signum = own.exit_code - 128 if own.exit_code >= 128 else None
    when = "during the driver's own checks, before the Ray cluster's nodes were checked"
    if signum is None:
        try:
            # The nodes' checks are part of the run, so the gate is armed again for them. The helper is started,
            # waited for and read in one piece (critical: its process registry and folder come back to be closed):
            # a signal meanwhile ends its wait at once (GATE.wait) and interrupts as the piece ends.
            with GATE.armed(), GATE.critical():
                answer, folder, procs = _run_helper(str(opts.python), request, JOIN_S + task_s + 30.0)
        except Interrupted as exc:
            signum = exc.signum
            when = ("while the Ray helper checked the cluster's nodes" if procs is not None
                    else "before the Ray cluster's nodes were checked")
    if signum is not None:
        answer = {"error": f"interrupted by {signal.Signals(signum).name} {when}"}
    try:
        out, verdict, checked = _merged(own, answer, folder, want, opts.strict, fleet_checks,
                                        lambda payload: probe_report(payload, opts, probes_profile), env_notes)
    finally:
        if procs is not None:
            procs.close()
    if signum is not None:
        with GATE.critical():
            deliver(_interrupted(out, signum, when))
        return 128 + signum, []
    with GATE.critical():
        written = deliver(out)
    final = int(verdict)
    return (max(final, written) if written else final), checked


def _interrupted(out: Report, signum: int, when: str) -> Report:
    """The report of a Ray fleet check cut short by a signal: what finished (the driver's own rows; no node's, which
    come only with the helper's answer), marked partial, with exit 128 + N, as a single host's interrupted report."""
    import signal

    name = signal.Signals(signum).name
    partial = (f"interrupted by {name} {when}: only the driver's own results are here (the nodes' come only with the "
               "Ray helper's answer)")
    return replace(out, summary=replace(out.summary, partial=partial, interrupted=name, exit_code=128 + signum))


def _is_verl(command: Sequence[str] | None) -> bool:
    from ..job.command import parse
    from ..model import UsageError

    try:
        return bool(command) and parse(list(command or [])).kind == "verl"
    except UsageError:
        return False


def _static_request() -> dict:
    """The static probe's request of every built-in check: what a node without the doctor answers."""
    from .. import registry
    from ..probes import StaticRequest

    try:
        return StaticRequest.merge(c.static for c in registry.load().checks).to_json()
    except Exception:  # noqa: BLE001 - no request: a node without the doctor then reports nothing checked
        return {}


def _limit() -> int:
    from .admit import MAX_REPORT_BYTES

    return MAX_REPORT_BYTES


def ship_probes(folder: str) -> str:
    """The py_modules folder a task ships to its node: the doctor's stdlib-only static probe (dsv4probe_common and
    dsv4probe_static*.py), as a package of its own name. Its path."""
    import shutil

    from ..probes import PROBE_DIR

    target = os.path.join(folder, SHIP_PACKAGE)
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "__init__.py"), "w", encoding="utf-8") as fh:
        fh.write('"""dsv4-doctor\'s stdlib-only probes, shipped with a Ray fleet check\'s task."""\n')
    for path in sorted(PROBE_DIR.glob("dsv4probe_*.py")):
        if path.name in SHIPPED or path.name.startswith("dsv4probe_static_"):
            shutil.copyfile(path, os.path.join(target, path.name))
    return target


def _run_helper(python: str, request: dict, timeout_s: float):
    from ..probes import PROBE_DIR, child_env
    from ..procs import REQUEST_FILE, Processes, read_bounded, start_helper, write_request
    from ..safeio import ReadRefused, decode_json

    procs = Processes()
    folder = procs.tempdir("dsv4-doctor-ray-")
    answer_path, log = os.path.join(folder, "answer.json"), os.path.join(folder, "helper.log")
    try:
        shipped = ship_probes(folder)
    except OSError:
        shipped = ""
    try:
        # The request (the training command, the runtime_env's values) in a file of this private folder, as every
        # child's: never on the helper's command line (procs.write_request).
        argv = [python, str(PROBE_DIR / RAY_SCRIPT), answer_path,
                write_request(os.path.join(folder, REQUEST_FILE), dict(request, dir=folder, ship=shipped))]
        helper = start_helper(procs, argv, log, child_env(timeout_s))
    except OSError as exc:
        return {"error": f"the Ray helper could not start ({exc.strerror or exc})"}, folder, procs
    end = helper.finish(time.monotonic() + timeout_s)
    raw = read_bounded(answer_path, 16 << 20)
    try:
        answer = decode_json(raw, "replace") if raw else None
    except ReadRefused:  # not JSON, or nested too deeply
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


def _merged(own_report: Report, answer: Any, folder: str, want: Wanted, strict: bool,
            fleet_checks: tuple[str, ...], from_probes: Callable[[bytes | None], dict | None] | None = None,
            env_notes: Sequence[str] = ()) -> tuple[Report, int, list[str]]:
    """The Ray fleet's report: the driver's own (rank 0) and each node's (rank i+1, in the helper's order), merged.
    The helper's answer and each node's part of it are hostile input: a node whose answer is malformed (a field of
    the wrong type or out of range) or cannot be taken is that node's failing entry in fleet.ranks, saying what; the
    other nodes are kept. Everything here, the nodes' text included, goes into the report before the merge's one
    redaction pass (merge.merge)."""
    from ..redact import sanitize
    from . import admit as fleetadmit, merge as fleetmerge

    # Bounded depth and size, valid text, finite numbers (NaN becomes text): every check below is on JSON types.
    answer = sanitize(answer) if isinstance(answer, dict) else {"error": "the Ray helper's answer is not an object"}
    problems: dict[int, str] = {}
    info: dict[str, Any] = {"scope": "ray", "authenticated": False, "mode": "ray", "fleet_checks": fleet_checks,
                            "timings": timings(answer.get("timings"))}
    own_wire = own_report.to_dict()
    try:
        own = fleetadmit.admit(0, own_wire)
    except fleetadmit.BadReport as exc:  # the doctor's own rows: cannot happen unless a plugin slipped through
        info["exchange_error"] = f"the driver's own report could not be merged: {exc}"
        own = fleetadmit.admit(0, dict(own_wire, checks=[]))
    error = helper_error(answer)
    if error:
        info["exchange_error"] = "; ".join(filter(None, (info.get("exchange_error"), error)))
    nodes = answer["nodes"][:MAX_NODES] if isinstance(answer.get("nodes"), list) else []
    others: dict[int, Any] = {}
    hints: dict[int, str] = {}
    checked: list[str] = []
    ran: list[dict] = []
    for i, raw in enumerate(nodes):
        rank = i + 1
        node = NodeAnswer.read(raw)
        hints[rank] = node.label
        ran.append({"rank": rank, "host": node.label, "ran": node.how or "nothing (the task did not run)",
                    "runtime_env_seen": node.seen})
        try:
            taken, problem = take_node(node, rank, os.path.join(folder, "reports", f"{i}.json"), want, from_probes)
        except Exception as exc:  # noqa: BLE001 - one node's answer, whatever it holds, fails that node alone
            from ..redact import shorten

            taken, problem = None, (f"the doctor could not take its answer ({type(exc).__name__}: "
                                    f"{shorten(str(exc), 200)})")
        if taken is not None:
            others[rank] = taken
            checked.append(node.node_id)
        if problem:
            problems[rank] = problem
    needed = want.nodes
    if needed and len(nodes) < needed and not error:
        for rank in range(len(nodes) + 1, needed + 1):
            problems[rank] = (f"no such node: the Ray cluster has {len(nodes)} alive GPU node(s), and the command "
                              f"asks {want.asks}")
            hints[rank] = "no node"
    world = 1 + max(len(nodes), needed or 0, 1 if error else 0)
    if error and not nodes:
        problems.setdefault(1, "not checked: " + error)
    out, verdict = fleetmerge.merge(own, others, world, problems, strict, info, hints,
                                    annotate=lambda rows: _with_evidence(rows, answer, ran, want, env_notes))
    return out, int(verdict), checked


def _with_evidence(rows: list[CheckReport], answer: dict, ran: list[dict], want: Wanted,
                   env_notes: Sequence[str]) -> list[CheckReport]:
    """fleet.ranks' evidence: what ran on each node, the runtime_env the tasks got (env var names only: values may
    hold secrets) and what of the command could not be compared or applied. The merge's `annotate`: it runs before
    the merged report's redaction pass, so the nodes' text here is redacted with the rest."""
    from .admit import _text

    got: dict = answer.get("runtime_env") if isinstance(answer.get("runtime_env"), dict) else {}  # type: ignore

    def texts(value: Any, limit: int, most: int) -> list[str]:
        return [_text(v, limit) for v in value[:most] if isinstance(v, str)] if isinstance(value, list) else []

    shown = {
        "env_vars": sorted(texts(got.get("env_vars"), 128, MAX_ENV_VARS)),
        "working_dir": _text(got.get("working_dir"), 600) or None,
        "py_executable": _text(got.get("py_executable"), 600) or None,
        "py_modules": texts(got.get("py_modules"), 600, 8),
        "verl_defaults": _text(got.get("verl_defaults"), 300) or None,
        "not_applied": [_text(n, 300) for n in list(env_notes)[:32]],
    }
    nodes = {"nodes": want.nodes, "trainer.nnodes": want.nnodes, "trainer.n_gpus_per_node": want.per_node,
             f"{REWARD_KEY}.nnodes": want.reward_nnodes, f"{REWARD_KEY}.n_gpus_per_node": want.reward_per_node,
             "not_compared": [_text(n, 300) for n in want.notes[:16]]}
    out = []
    for row in rows:
        if row.id == "fleet.ranks":
            evidence = dict(row.evidence or {}, runtime_env=shown, ran=ran[:200], wanted=nodes)
            summary = row.summary
            probes = [r["host"] for r in ran if r["ran"] == RAN_PROBES]
            if probes:
                summary += (f"; {len(probes)} node(s) without the doctor in the job's environment were checked by the "
                            "doctor's probes shipped with the task (static facts only)")
            if want.notes:
                summary += "; not compared: " + "; ".join(_text(n, 200) for n in want.notes[:3])
            row = replace(row, evidence=evidence, summary=summary)
        out.append(row)
    return out


def hook_overrides(checked: Sequence[str]) -> list[str]:
    """The Hydra overrides that give verl's ray.init the doctor's worker_process_setup_hook: the hook (shipped with
    py_modules, so a node without the doctor runs it too) and the nodes the check covered."""
    from ..probes import PROBE_DIR

    ids = ",".join(n for n in checked if n.isalnum())
    return [f"++{RUNTIME_ENV_KEY}.worker_process_setup_hook={HOOK}",
            f"++{RUNTIME_ENV_KEY}.py_modules=['{PROBE_DIR / HOOK_MODULE}']",
            f"++{RUNTIME_ENV_KEY}.env_vars.{CHECKED_NODES_VARIABLE}='{ids}'"]
