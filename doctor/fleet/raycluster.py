"""Fleet mode on Ray (`fleet --ray -- CMD`, `check --ray`): one verdict for every GPU node of the job's Ray cluster,
from where verl's driver would start.

verl's driver joins a Ray cluster and places its workers on every GPU node as Ray actors; no launcher starts the
doctor in front of them. So the doctor goes to the nodes: the Ray helper (probes/dsv4probe_ray.py, in the job's own
Python, whose ray can join the job's cluster: the CLI never imports ray) runs the doctor of each node's job
environment once per alive GPU node (`--no-distributed`: verl's workers set RANK/WORLD_SIZE themselves), each task
pinned to its node and bounded. Rank 0 is the driver's own report; ranks 1..N are the nodes, in the helper's order.
A node that died, could not be scheduled, lacks the doctor, hung, or is missing against the command's
`trainer.nnodes` as verl composes it (plus `reward.reward_model.nnodes` where the reward model has its own pool; at
least one GPU node whatever the command says) is an entry of `fleet.ranks` naming the node; a node with fewer GPUs than
the command's GPUs per node too. `--ray-wait-nodes S` has the helper wait up to S seconds for those nodes to join.
The reports are admitted and merged with the torchrun fleet's typed merge.

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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .rayjob import (  # noqa: F401  (wanted and job_runtime_env: read from here by the tests)
    MAX_ENV_VARS, MAX_NODES, REWARD_KEY, RUNTIME_ENV_KEY, Wanted, job_runtime_env, read_runtime_env, wanted)
from .rayhelper import SHIP_PACKAGE, run_helper, static_request, report_limit
from .raynode import RAN_PROBES, NodeAnswer, helper_error, node_fields, not_seen, probe_report, take_node, timings
from .raywant import missing_nodes, needed_nodes, node_count_known, nodes_wanted, with_driver_node

if TYPE_CHECKING:
    from ..model.core import CheckReport, Profile
    from ..model.report import Report

HOOK_MODULE = "dsv4_doctor_rayhook"
HOOK = HOOK_MODULE + ".refuse_unchecked_node"
CHECKED_NODES_VARIABLE = "DSV4_DOCTOR_RAY_CHECKED_NODES"
NODE_VARIABLE = "DSV4_DOCTOR_RAY_NODE"  # set in a node task's doctor: its report carries its node and fingerprint
JOIN_S = 60.0  # the helper importing ray and joining the cluster


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
    from ..engine.accept import gather

    # The driver's acceptances, resolved here: a node's working folder holds none of the job's config files.
    for found in gather(getattr(opts, "accept", None), os.environ, os.getcwd()):
        argv += ["--accept", f"{found.id}:{found.reason}" if found.reason else found.id]
    argv += [flag for flag, on in (("--strict", opts.strict), ("--no-smoke", opts.no_smoke),
                                   ("--static-only", opts.static_only), ("--deep", opts.deep)) if on]
    return argv


def node_job_args(command: Sequence[str] | None) -> str | None:
    """The training command as the node's doctor takes it (`--job-args-file`: one shell-quoted string), or None."""
    return shlex.join(command) if command else None



def take_part(opts: Any, own: Report, command: Sequence[str] | None, deliver: Callable[[Report], int],
              fleet_checks: tuple[str, ...], probes_profile: Profile) -> tuple[int, list[str]]:
    """Check every GPU node of the job's Ray cluster, merge with the driver's own report (`own`), deliver the one
    report; (the exit code, the nodes the hook lets the job's workers start on: the checked GPU nodes and the
    driver's, with_driver_node). `probes_profile`: the profile a node that ran only the shipped
    probes is judged under (the driver's options, no device). A stop signal, during the driver's own checks or
    while the nodes are checked, ends it at once with the report of what finished (the driver's rows) and 128 + N."""
    import signal

    from ..model.core import ExitCode, Interrupted
    from ..hostio.signals import GATE

    want = nodes_wanted(command, own.job)
    job_env = read_runtime_env(command)
    runtime_env, env_notes = job_env.env, job_env.notes
    budget = float(own.summary.budget_s or 60.0)
    task_s = budget + 30.0
    wait_s = float(getattr(opts, "ray_wait_nodes", None) or 0.0)
    request = {"argv": node_argv(opts, command), "job_args": node_job_args(command), "task_s": task_s,
               "limit": report_limit(),
               "gpu_checks": not (opts.no_smoke or opts.static_only), "runtime_env": runtime_env,
               "verl_defaults": _is_verl(command), "static_request": static_request(),
               "ship_package": SHIP_PACKAGE}
    if wait_s:  # --ray-wait-nodes: the helper waits for the wanted GPU nodes to be alive before it checks them
        request["wait_nodes"] = {"count": needed_nodes(want), "s": wait_s}
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
                answer, folder, procs = run_helper(str(opts.python), request, JOIN_S + wait_s + task_s + 30.0)
        except Interrupted as exc:
            signum = exc.signum
            when = ("while the Ray helper checked the cluster's nodes" if procs is not None
                    else "before the Ray cluster's nodes were checked")
    if signum is not None:
        answer = {"error": f"interrupted by {signal.Signals(signum).name} {when}"}
    try:
        out, verdict, checked = _merged(own, answer, folder, want, opts.strict, fleet_checks,
                                        lambda payload: probe_report(payload, opts, probes_profile), env_notes,
                                        job_env.unapplied)
    except Exception as exc:  # noqa: BLE001 - the doctor's own merge broke: the report still goes out, exit 3
        out, verdict, checked = _merge_broke(own, exc, want, opts.strict, fleet_checks), int(ExitCode.INTERNAL), []
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
    return (max(final, written) if written else final), with_driver_node(checked, answer)


def _merge_broke(own: Report, exc: Exception, want: Wanted, strict: bool, fleet_checks: tuple[str, ...]) -> Report:
    """The report when the doctor's own merge of the nodes' answers broke (its bug): the driver's rows with every
    node an entry saying so, marked partial; failing that too, the driver's own report, marked partial. Exit 3."""
    from ..model.core import ExitCode
    from ..hostio.redact import shorten

    why = f"the doctor's merge of the nodes' answers broke ({type(exc).__name__}: {shorten(str(exc), 300)})"
    partial = why + ": the nodes' results are not in this report"
    try:
        out, _, _ = _merged(own, {"error": why}, "", want, strict, fleet_checks)
    except Exception:  # noqa: BLE001 - the merge itself is what breaks: the driver's own report goes out
        out = own
    return replace(out, summary=replace(out.summary, partial=partial, exit_code=int(ExitCode.INTERNAL)))


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
    from ..model.core import UsageError

    try:
        return bool(command) and parse(list(command or [])).kind == "verl"
    except UsageError:
        return False


def _merged(own_report: Report, answer: Any, folder: str, want: Wanted, strict: bool,
            fleet_checks: tuple[str, ...], from_probes: Callable[[bytes | None], dict | None] | None = None,
            env_notes: Sequence[str] = (), unapplied: Sequence[str] = ()) -> tuple[Report, int, list[str]]:
    """The Ray fleet's report: the driver's own (rank 0) and each node's (rank i+1, in the helper's order), merged.
    The helper's answer and each node's part of it are hostile input: a node whose answer is malformed (a field of
    the wrong type or out of range) or cannot be taken is that node's failing entry in fleet.ranks, saying what; the
    other nodes are kept. Everything here, the nodes' text included, goes into the report before the merge's one
    redaction pass (merge.merge). `unapplied`: the job's runtime_env fields the tasks did not take; every node's
    rows that depend on its Python environment are then not known (raynode.not_seen), and the verdict line names
    them. The driver's own report, when it fails admission (a plugin's 1,001 rows), is its own entry (rank 0)."""
    from ..hostio.redact import sanitize
    from . import admit as fleetadmit, merge as fleetmerge

    # Bounded depth and size, valid text, finite numbers (NaN becomes text): every check below is on JSON types.
    answer = sanitize(answer) if isinstance(answer, dict) else {"error": "the Ray helper's answer is not an object"}
    problems: dict[int, str] = {}
    info: dict[str, Any] = {"scope": "ray", "authenticated": False, "mode": "ray", "fleet_checks": fleet_checks,
                            "timings": timings(answer.get("timings"))}
    own_wire = own_report.to_dict()
    if unapplied:
        info["runtime_env_not_applied"] = list(unapplied)
    try:
        own = fleetadmit.admit(0, own_wire)
    except fleetadmit.BadReport as exc:  # a plugin's rows over the bounds: the driver's own entry, as a node's
        problems[0] = f"the driver's own report could not be merged: {exc}; its rows are left out"
        own = _driver_stand_in(own_wire)
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
            from ..hostio.redact import shorten

            taken, problem = None, (f"the doctor could not take its answer ({type(exc).__name__}: "
                                    f"{shorten(str(exc), 200)})")
        if taken is not None:
            not_seen(taken, unapplied)
            others[rank] = taken
            checked.append(node.node_id)
        if problem:
            problems[rank] = problem
    needed = needed_nodes(want)
    if len(nodes) < needed and not error:
        missing = missing_nodes(len(nodes), want, info["timings"].get("wait_s"))
        for rank in range(len(nodes) + 1, needed + 1):
            problems[rank] = missing
            hints[rank] = "no node"
    world = 1 + max(len(nodes), needed, 1 if error else 0)
    if error and not nodes:
        problems.setdefault(1, "not checked: " + error)
    out, verdict = fleetmerge.merge(own, others, world, problems, strict, info, hints,
                                    annotate=lambda rows: drift_not_known(node_count_known(
                                        _with_evidence(rows, answer, ran, want, env_notes), want), unapplied))
    return out, int(verdict), checked


def drift_not_known(rows: list[CheckReport], unapplied: Sequence[str]) -> list[CheckReport]:
    """fleet.drift compares the nodes' packages and sources as the check's tasks saw them: with runtime_env fields the
    tasks did not apply (pip, conda, ...), the job's workers may run others, so the row is not known (warn), saying
    what the tasks saw."""
    if not unapplied:
        return rows
    from ..model.core import Status
    from .admit import _text

    names = ", ".join(_text(n, 64) for n in list(unapplied)[:16])
    out = []
    for row in rows:
        if row.id == "fleet.drift" and row.status in (Status.PASS, Status.FAIL):
            row = replace(row, status=Status.WARN, summary=_text(
                f"not known: the job's runtime_env sets {names}, which the nodes' checks did not apply, so what its "
                f"workers run on each node was not seen; the tasks saw ({row.status.value}) {row.summary}", 2000))
        out.append(row)
    return out


def _driver_stand_in(wire: dict) -> Any:
    """The driver's place in the merge when its own report is not admitted: its host and fingerprint, no rows; or,
    when even those are not admitted, its host alone."""
    from . import admit as fleetadmit

    try:
        return fleetadmit.admit(0, dict(wire, checks=[]))
    except fleetadmit.BadReport:
        environment: dict = wire["environment"] if isinstance(wire.get("environment"), dict) else {}
        fleet_rank: dict = environment["fleet_rank"] if isinstance(environment.get("fleet_rank"), dict) else {}
        return fleetadmit.admit(0, {"schema": wire.get("schema"), "doctor": wire.get("doctor"),
                                    "environment": {"fleet_rank": {"rank": 0, "host": fleet_rank.get("host")}},
                                    "checks": []})


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
        "py_modules": texts(got.get("py_modules"), 600, 65),
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


def hook_overrides(checked: Sequence[str], job_modules: Sequence[str] = ()) -> list[str]:
    """The Hydra overrides that give verl's ray.init the doctor's worker_process_setup_hook: the hook (shipped with
    py_modules after the job's own, rayjob.job_py_modules, so a node without the doctor runs it too and the job keeps
    its modules) and the nodes the check covered."""
    from ..engine.probes import PROBE_DIR

    ids = ",".join(n for n in checked if n.isalnum())
    modules = ",".join(f"'{m}'" for m in [*job_modules, str(PROBE_DIR / HOOK_MODULE)])
    return [f"++{RUNTIME_ENV_KEY}.worker_process_setup_hook={HOOK}",
            f"++{RUNTIME_ENV_KEY}.py_modules=[{modules}]",
            f"++{RUNTIME_ENV_KEY}.env_vars.{CHECKED_NODES_VARIABLE}='{ids}'"]
