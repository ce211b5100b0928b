"""One rank's part in a fleet run, on rank 0's timeline: rank 0 gathers, merges and publishes the verdict; every
other rank hands in its report and takes the verdict, or exits 1 without starting.

`take_part` is the entry; `_rank0` admits the others' reports as they arrive and writes the one report, `_other` is
every other rank's side (it may run its host-level checks itself when its packages differ from its local rank 0's).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .env import FleetEnv, fleet_key, launcher_hosts
from .identity import identity_evidence, split_why
from ..hostio.redact import shorten
from ..hostio.safeio import ReadRefused, read_file
from .deadlines import _late, _take_verdict, bounded_report
from .torchstore import Exchange, _now

if TYPE_CHECKING:
    from ..model.report import Report

SKEW_S = 15.0  # launcher skew: how much later than rank 0 another rank may start
SETUP_S = 20.0  # a helper starting, importing torch and joining the store
VERDICT_S = 15.0  # after the report deadline: rank 0's merge and the verdict's publication (plus VERDICT_PER_RANK_S)
VERDICT_PER_RANK_S = 0.02
ACK_S = 10.0  # after the verdict deadline: the ranks' acknowledgements
RELEASE_S = 60.0  # the helper's bound for rank 0's report to be written (probes/dsv4probe_fleet_exchange.RELEASE_S)
FLEET_CHECKS = ("fleet.drift", "fleet.ranks")


def _obj(value) -> dict:
    return value if isinstance(value, dict) else {}


def wait_seconds(budget_s: float, elapsed_s: float, override: float | None, reruns: bool = False) -> float:
    """How long rank 0 waits for the others' reports, from when its store is up: the rest of the run's budget plus
    the launcher skew (every rank has the same budget), plus one more budget when a rank may have to run its
    host-level checks itself (its packages differ from its local rank 0's); or --fleet-wait."""
    if override is not None:
        return max(1.0, override)
    return max(5.0, budget_s * (2 if reruns else 1) + SKEW_S - elapsed_s)


def node_level_ids(report: Report) -> list[str]:
    """The checks this rank left to its host's local rank 0 (runner.left_to_leader marks them in evidence)."""
    return [row.id for row in report.checks if row.status.value == "skip" and row.evidence.get("node_level") is True]


def _hello(env: FleetEnv, report: Report) -> dict:
    environment = report.environment
    fr = _obj(environment.get("fleet_rank"))
    return {"rank": env.rank, "host": fr.get("host"), "node": env.node, "local_rank": env.local_rank,
            "job": env.job, "fingerprint": environment.get("fingerprint")}


def _fingerprint_node(env: FleetEnv, report: Report) -> str:
    """Where local rank 0's fingerprint is found: the launcher's node id, else the host name."""
    host = str(_hello(env, report).get("host") or "unknown")
    return hashlib.sha256(f"{env.node}" .encode() if env.node is not None else host.encode("utf-8", "replace")
                          ).hexdigest()[:16]


def take_part(env: FleetEnv, report: Report, python: str, started: float, strict: bool,
              deliver: Callable[[Report], int], fleet_wait: float | None = None, verbose: bool = False,
              rerun: Callable[[list[str], float], Report | None] | None = None, anonymize: bool = False,
              fleet_checks: tuple[str, ...] = FLEET_CHECKS) -> int:
    """Take part in the fleet run with this rank's report; the exit code this rank returns. On rank 0,
    `deliver(merged)` writes the fleet report (and returns its exit code) while the other ranks wait, so that none
    of them exits (and makes torchrun stop rank 0) before the report is out; rank 0 writes it whatever happens
    (a signal, a failed exchange). A non-leader rank whose packages differ from its local rank 0's runs its
    host-level checks with `rerun(ids, seconds)` before it reports. A rank that misses the timeline exits 1."""
    code = report.exit_code
    key = fleet_key(os.environ)
    if env.rank == 0 and code >= 128:  # interrupted during its own checks: its report now, no waiting for others
        return _rank0_interrupted(env, report, strict, deliver, fleet_checks, key, code)
    if env.rank == 0:
        return _rank0(env, report, python, started, strict, deliver, fleet_wait, anonymize, fleet_checks, key)
    if code >= 128:  # interrupted before the exchange: leave now, rank 0 names this rank
        return code
    return _other(env, report, python, started, fleet_wait, verbose, rerun, key)


def _rank0(env, report, python, started, strict, deliver, fleet_wait, anonymize, fleet_checks, key) -> int:
    import contextlib

    from . import admit as fleetadmit, merge as fleetmerge
    from ..model.core import ExitCode, Interrupted
    from ..hostio.signals import GATE

    budget = float(report.summary.budget_s or 60.0)
    reruns = env.local_world_size != 1
    join_s = wait_seconds(budget, _now() - started, fleet_wait, reruns)
    verdict_s = VERDICT_S + VERDICT_PER_RANK_S * env.world_size
    request = {"rank": 0, "world_size": env.world_size, "master_addr": env.master_addr, "port": env.port,
               "scope": env.scope, "job": env.job, "agent_port": env.agent_port, "identity": env.identity,
               "join_s": join_s, "verdict_s": verdict_s, "ack_s": ACK_S,
               "connect_s": SETUP_S + join_s + verdict_s + ACK_S + RELEASE_S,
               "fingerprint_node": _fingerprint_node(env, report), "leader": True}
    timeout = SETUP_S + join_s + verdict_s + ACK_S + 2 * RELEASE_S + 30.0
    own_problem = None
    # Rank 0's own report is merged in the same form as the others' (their wire form, admitted).
    wire = report.to_dict()
    try:
        own = fleetadmit.admit(0, wire)
    except fleetadmit.BadReport as exc:  # the doctor's own rows: cannot happen unless a plugin slipped through
        own_problem = f"rank 0's own report could not be merged: {exc}"
        own = fleetadmit.admit(0, dict(wire, checks=[]))
    exchange = Exchange(env, python, request, key, timeout)
    state: dict = {"others": {}, "problems": {}, "hints": {}, "job": env.job, "identity": env.identity,
                   "info": {"scope": env.scope, "authenticated": key is not None, "mode": "store",
                            "fleet_checks": fleet_checks, "identity": identity_evidence(env)}}
    if own_problem:
        state["info"]["exchange_error"] = own_problem
    code = report.exit_code
    signal_code = None

    def merged(extra: dict | None = None) -> tuple[Report, int]:
        problems = dict(state["problems"])
        info = dict(state["info"], **(extra or {}))
        for r in range(1, env.world_size):
            if r not in state["others"] and r not in problems:
                problems[r] = info.get("missing_why") or "did not report within the fleet's time"
        known = {rep.node: rep.host for rep in (own, *state["others"].values()) if rep.node}
        placed = launcher_hosts(env, os.environ, known)
        hints = {r: placed[r] for r in problems if r in placed}
        hints.update(state["hints"])  # a rank's own hello names its host as its report would
        out, verdict = fleetmerge.merge(own, state["others"], env.world_size, problems, strict, info, hints)
        return out, verdict

    verdict = None
    try:
        GATE.arm()  # in the try: a signal noted since the checks ended takes the interrupted path, report and all
        exchange.start(_hello(env, report))
        plan = exchange.wait_for("plan.json", _now() + SETUP_S + 60.0) or {}
        state["info"]["bound_s"] = round(_now() - started + join_s + verdict_s + ACK_S, 1)
        if plan.get("port_note"):
            state["info"]["port_note"] = str(plan["port_note"])[:300]
        gathered = _admit_while_gathering(exchange, state, env.world_size,
                                          float(plan.get("report_by") or _now()) + 30.0)
        if gathered is None:
            answer = exchange.finish(_now() + 5.0)
            why = answer.get("error") or "the fleet exchange gave no reports"
            state["info"].update(exchange_error=shorten(str(why), 600),
                                 missing_why="not heard from: the exchange failed")
            out, verdict = merged()
        else:
            _take_reports(exchange, gathered, state, env.world_size)
            state["info"]["timings"] = gathered.get("timings") or {}
            out, verdict = merged()
            exchange.write("verdict.json", {"exit_code": int(verdict)})
            acks = exchange.wait_for("acks.json", float(plan.get("ack_by") or _now()) + 10.0) or {}
            if not acks.get("published"):
                state["info"]["exchange_error"] = ("the verdict was not ready before the verdict deadline, so no rank "
                                                   "took it")
                out, verdict = merged()
                verdict = max(int(verdict), int(ExitCode.FAILED))
            else:
                missed = [r for r in acks.get("not_acknowledged") or [] if isinstance(r, int)
                          and r in state["others"]]
                # Not a new status: the ranks that did take the verdict exit with it, and so does rank 0.
                if missed:
                    state["info"]["not_acknowledged"] = missed
                    out, _ = merged()
                else:
                    state["info"]["acknowledged_all"] = True
                    out, _ = merged()
    except Interrupted as exc:
        signal_code = 128 + exc.signum
        import signal as _signal

        name = _signal.Signals(exc.signum).name
        gathered = exchange.read("gathered.json")
        if gathered is not None and not state["others"]:
            _take_reports(exchange, gathered, state, env.world_size)
        exchange.close()
        state["info"].update(partial=f"interrupted by {name} during the fleet exchange: the ranks not heard from by "
                                     "then are listed as missing, and no verdict was sent", interrupted=name,
                             missing_why=f"not heard from before {name}")
        out, verdict = merged()
        out = out.with_exit_code(signal_code)  # as a single-host report cut short by a signal says
    except Exception as exc:  # the doctor's own side broke: the report still goes out
        exchange.close()
        state["info"].update(exchange_error=shorten(f"{type(exc).__name__}: {exc}", 600),
                             missing_why="not heard from: the exchange failed")
        out, verdict = merged()
    finally:
        GATE.shield()
    try:
        with GATE.critical():
            written = deliver(out)
    finally:
        with contextlib.suppress(OSError):
            exchange.touch("released")
        if signal_code is None:
            exchange.finish(_now() + RELEASE_S + 10.0)
        exchange.close()
    if signal_code is not None:
        return signal_code
    final = int(verdict if verdict is not None else code)
    return max(final, written) if written else final


def _admit_while_gathering(exchange: Exchange, state: dict, world: int, until: float) -> dict | None:
    """Wait for the gather to end, validating each report as its file appears (off the verdict's critical path:
    at 1,000 ranks that is seconds of work). None when the helper exited without it, time ran out or a stop signal
    ended the wait (signals.GATE.poll)."""
    from ..hostio.signals import GATE

    found: dict = {}

    def gathered() -> bool:
        found["gathered"] = exchange.read("gathered.json")
        if found["gathered"] is not None:
            return True
        _take_reports(exchange, {}, state, world)
        if exchange.exited():
            found["gathered"] = exchange.read("gathered.json")
            return True
        return False

    GATE.poll(gathered, min(until, exchange.hard_deadline), every=0.1)
    return found.get("gathered")


def _rank0_interrupted(env, report, strict, deliver, fleet_checks, key, code: int) -> int:
    from . import admit as fleetadmit, merge as fleetmerge
    from ..hostio.signals import GATE

    name = str(report.summary.interrupted or "a signal")
    info = {"scope": env.scope, "authenticated": key is not None, "fleet_checks": fleet_checks, "interrupted": name,
            "partial": f"interrupted by {name} before the fleet exchange: only rank 0's own results are here"}
    problems = {r: f"not heard from: rank 0 was interrupted by {name} first" for r in range(1, env.world_size)}
    own = fleetadmit.admit(0, report.to_dict())
    hints = launcher_hosts(env, os.environ, {own.node: own.host} if own.node else {})
    merged, _ = fleetmerge.merge(own, {}, env.world_size, problems, strict, info, hints)
    merged = merged.with_exit_code(code)
    with GATE.critical():
        deliver(merged)
    return code


def _take_reports(exchange: Exchange, gathered: dict, state: dict, world: int) -> None:
    from . import admit as fleetadmit

    hellos = _obj(gathered.get("hellos"))
    for raw_rank, hello in hellos.items():
        try:
            r = int(raw_rank)
        except ValueError:
            continue
        if 0 < r < world and isinstance(hello, dict) and isinstance(hello.get("host"), str) and \
                hello.get("job") in (None, state.get("job")):
            state["hints"][r] = fleetadmit._text(hello["host"], 255)
    for raw_rank, theirs in _obj(gathered.get("seen")).items():
        if str(raw_rank).isdigit() and 0 < int(raw_rank) < world and isinstance(theirs, dict) and \
                int(raw_rank) not in state["others"]:
            state["problems"][int(raw_rank)] = split_why(int(raw_rank), theirs, state.get("identity") or {})
    rejected = _obj(gathered.get("rejected"))
    for raw_rank, why in rejected.items():
        if str(raw_rank).isdigit() and 0 < int(raw_rank) < world:
            state["problems"][int(raw_rank)] = fleetadmit._text(why, 200)
    folder = exchange.path("reports")
    try:
        arrived = [int(name[:-5]) for name in os.listdir(folder) if name.endswith(".json") and name[:-5].isdigit()]
    except OSError:
        arrived = []
    for r in sorted(arrived):
        path = os.path.join(folder, f"{r}.json")
        if r in state["others"] or not 0 < r < world or r in state.get("rejected_seen", ()):
            continue
        try:
            payload = read_file(path, fleetadmit.MAX_REPORT_BYTES + 1)  # the helper's file: regular, bounded
            state["others"][r] = fleetadmit.admit(r, payload, state.get("job"))
            state["problems"].pop(r, None)
        except fleetadmit.BadReport as exc:
            state["problems"][r] = f"its report was rejected: {exc}"
            state.setdefault("rejected_seen", set()).add(r)
        except ReadRefused as exc:
            state["problems"][r] = f"its report could not be read: {exc}"
            state.setdefault("rejected_seen", set()).add(r)
        except (OSError, ValueError, TypeError, KeyError, RecursionError, AttributeError) as exc:
            state["problems"][r] = f"its report was rejected: {type(exc).__name__}"
            state.setdefault("rejected_seen", set()).add(r)


def _other(env, report, python, started, fleet_wait, verbose, rerun, key) -> int:

    from ..model.core import ExitCode, Interrupted
    from ..report.dispatch import output_width, render
    from ..report.output import write_stderr
    from ..hostio.signals import GATE

    budget = float(report.summary.budget_s or 60.0)
    base_wait = fleet_wait if fleet_wait is not None else max(5.0, budget + SKEW_S - (_now() - started))
    connect_s = base_wait + SKEW_S + SETUP_S
    request = {"rank": env.rank, "world_size": env.world_size, "master_addr": env.master_addr, "port": env.port,
               "scope": env.scope, "job": env.job, "agent_port": env.agent_port, "identity": env.identity,
               "connect_s": connect_s, "fingerprint_node": _fingerprint_node(env, report),
               "leader": env.node_leader}
    timeout = connect_s + SETUP_S + 4 * budget + VERDICT_S + VERDICT_PER_RANK_S * env.world_size + ACK_S + \
        2 * RELEASE_S + 60.0
    exchange = Exchange(env, python, request, key, timeout)
    ran_own = late = no_plan = False
    try:
        GATE.arm()  # in the try: the exchange's folder is removed whatever comes
        exchange.start(_hello(env, report))
        plan = exchange.wait_for("plan.json", _now() + SETUP_S + connect_s + 10.0)
        answer: dict
        if plan is None or "error" in plan:
            no_plan = True
            answer = exchange.finish(_now() + 10.0)
            if "error" not in answer and "missed" not in answer:
                answer = {"missed": (plan or {}).get("error") or "no plan from rank 0"}
            split = (plan or {}).get("identity_split") or answer.get("identity_split")
            if isinstance(split, dict):
                answer = dict(answer, missed=split_why(0, _obj(split.get("rank0")), _obj(split.get("own")),
                                                       "this rank"))
                no_plan = False  # the cause is known: not the port
        else:
            report_by = float(plan.get("report_by") or _now())
            ids = node_level_ids(report)
            leader_fp = plan.get("leader_fingerprint")
            own_fp = report.environment.get("fingerprint")
            if ids and rerun is not None and (plan.get("leader") != "read" or leader_fp != own_fp):
                seconds = report_by - _now() - 3.0
                if seconds >= 5.0:
                    own = rerun(ids, seconds)
                    if own is not None and own.exit_code >= 128:  # the signal its checks answered is this run's
                        raise Interrupted(own.exit_code - 128)
                    GATE.arm()  # the rerun's run shielded the gate as it ended: the exchange's waits answer again
                    if own is not None:
                        report = report.with_rows(own.checks, own.actions)
                        ran_own = True
            agreed_job = plan.get("job")
            if isinstance(agreed_job, str) and agreed_job != env.job:
                # torchrun's store gave rank 0's identity of the job: the report says it, and what this rank saw.
                report = with_job(report, agreed_job, env.job)
            exchange.write_bytes("report.json", bounded_report(report))
            exchange.touch("report.json.ready")
            ack_by = float(plan.get("ack_by") or _now())
            taken = _take_verdict(exchange, ack_by)
            answer = exchange.finish(ack_by + RELEASE_S + 15.0)
            # The verdict came, and this process did not take it in time: it was stopped or starved.
            late = not taken and (bool(answer.get("late")) or exchange.read("verdict.json") is not None)
    finally:
        GATE.shield()
        exchange_tail = exchange.tail()
        exchange.close()
    if late:
        return _late(env, report)
    if "exit_code" in answer and isinstance(answer.get("exit_code"), int) and answer.get("acknowledged") is True:
        if verbose:
            _say(f"== rank {env.rank} of {env.world_size} ({host_of(report)}): its own report"
                 + (" (it ran its host-level checks itself: its packages differ from its local rank 0's)"
                    if ran_own else "") + " ==")
            # --verbose-ranks asked for this rank's rows, so every row is shown in full, passes included (as -v does).
            write_stderr(render(report, "text", width=output_width(False), verbosity=1))
        return int(answer["exit_code"])
    why = answer.get("missed") or answer.get("error") or "no verdict"
    _say(f"dsv4-doctor (rank {env.rank} of {env.world_size}): not starting: this rank did not take the fleet's "
         f"verdict ({why}); its own report follows")
    stderr = answer.get("stderr") or (exchange_tail if answer.get("error") else "")
    stderr = str(stderr or "").strip()
    if len(stderr) > 2000:  # its last 2,000 characters from a whole line: a cut first line may end a secret
        stderr = stderr[-2000:].partition("\n")[2]
    if stderr:
        _say("  " + stderr.replace("\n", "\n  "))
    write_stderr(render(report, "text", width=output_width(False)))
    if no_plan:  # the one cause a rank cannot see from here: rank 0 could not open the fleet port
        _say(f"dsv4-doctor (rank {env.rank}): no plan came from rank 0 on port {env.port}; when rank 0's report says "
             "that port was in use (another job's?), give this job a port of its own with --fleet-port "
             "(docs/fleet.md, \"Ports\")")
    _say(f"dsv4-doctor (rank {env.rank}): exit 1, because this rank could not take the fleet's verdict")
    return int(ExitCode.FAILED)


def with_job(report: Report, job: str, own: str) -> Report:
    """The report with the job's agreed identity in its fleet_rank (and the one this rank computed beside it)."""
    import dataclasses

    environment = dict(report.environment)
    environment["fleet_rank"] = dict(_obj(environment.get("fleet_rank")), job=job, job_seen=own)
    return dataclasses.replace(report, environment=environment)


def host_of(report: Report) -> str:
    fr = report.environment.get("fleet_rank")
    return str((fr.get("host") if isinstance(fr, dict) else None) or "unknown host")


def _say(message: str) -> None:
    """A fleet-mode line on stderr, cleaned, redacted and bounded as every other output is (a rank's import error
    can carry terminal escapes, a workflow command, a token): the output layer's say, line by line."""
    from ..report.output import say

    for line in message.split("\n"):
        say(line)
