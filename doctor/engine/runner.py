"""Runs checks: their probes concurrently, each check in its own thread, everything under one deadline.

Check functions run in the doctor process but only read probe answers; a check that raises or hangs becomes an
`error` row marked as an internal error (exit code 3), never a crash or a hang of the doctor. Every thread here is a
daemon and every probe is tracked by the session's `Processes`, so nothing waits for a probe that was given up.
"""

from __future__ import annotations

import math
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Iterable, Sequence

from ..model.facts import StaticFacts
from ..job.syspath import JobPath
from ..fix.steps import Fix
from ..model.core import Check, CheckReport, Profile, Result, Status, needs_failed, result_of
from .probes import (DEFAULT_TIMEOUT_S, LONG_TIMEOUT_S, NVIDIA_SMI, Probe, ProbeResult, parse_nvidia_smi, read_stage,
                     run_probe, stage_text)
from ..hostio.procs import Processes
from ..hostio.redact import cut_tail
from ..hostio.signals import GATE

CHECK_TIMEOUT_S = 10.0  # a check's own code, after its probes answered
MIN_PROBE_S = 0.5  # a probe that would get less than this of the budget is not started
STAGE_POLL_S = 0.25  # how often the waiting thread reads the running checks' probe stages (with an on_event only)

# A run's progress, for a live display: on_event("start", check_id) and on_event("done", check_id) from the checks'
# threads, and on_event("stage", check_id, text) from the waiting thread when what the check's probes say they do
# changes (text None: nothing to say). It must not block.
OnEvent = Callable[..., None]
WAITING_FOR_SLOT = "waiting for a free probe slot"


class ProbeFailed(Exception):
    """Raised by Context.require when a probe gave no answer; the runner turns it into an `error` result."""

    def __init__(self, result: ProbeResult):
        super().__init__(result.error)
        self.result = result


class _Slot:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: ProbeResult | None = None


class ProbePool:
    """Runs each probe once (by key) in a daemon thread, at most `workers` at a time, within the deadline. The plugin
    hosts take their turn from the same `slots`."""

    def __init__(self, python: str, default_timeout_s: float, workers: int, procs: Processes,
                 long_timeout_s: float | None = None):
        self.python = python
        self.default_timeout_s = default_timeout_s
        self.long_timeout_s = default_timeout_s if long_timeout_s is None else long_timeout_s
        self.procs = procs
        self.deadline: float | None = None  # set once the run's budget is known
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(workers)  # a probe or a plugin host holds one while it runs
        self.submitted: list[str] = []  # every probe key this pool was asked to run, in order
        self._running: set[str] = set()  # keys of the probes that run now
        self._stage_files: dict[str, str] = {}  # key -> the stage file of a Python probe that runs now
        self.job: JobPath | None = None  # how the job's interpreter starts, once known: every Python probe does too
        self.timeline: dict[str, tuple[float, float]] = {}  # key -> (monotonic start, end) of each probe that ran

    @classmethod
    def for_target(cls, python: str, timeout: float | None, workers: int,
                   procs: Processes | None = None) -> ProbePool:
        """The pool of a run of `python` under --timeout `timeout` (None: each probe's default limit, a long probe's
        LONG_TIMEOUT_S), with `procs` or a process registry of its own."""
        limit = DEFAULT_TIMEOUT_S if timeout is None else timeout
        return cls(python, limit, workers, procs or Processes(),
                   max(LONG_TIMEOUT_S, limit) if timeout is None else timeout)

    def submit(self, probe: Probe) -> _Slot:
        with self._lock:
            slot = self._slots.get(probe.key)
            if slot is None:
                self.submitted.append(probe.key)
                slot = self._slots[probe.key] = _Slot()
                threading.Thread(target=self._work, args=(probe, slot), daemon=True,
                                 name=f"probe-{probe.key[:40]}").start()
            return slot

    def as_job(self, probe: Probe) -> Probe:
        """A Python probe started as the job's interpreter starts (its sys.path[0], path flags and variables), once
        the job is known (Session.use_job_path)."""
        job = self.job
        if job is None or not probe.script or probe.flags or probe.env:
            return probe
        env = dict(job.env)
        if job.path:
            env["DSV4_DOCTOR_JOB_PATH"] = job.path
        return replace(probe, flags=tuple(f for f in job.flags if f in ("-I", "-E", "-s", "-S")),
                       env=tuple(env.items()))

    def timeout_for(self, probe: Probe) -> float:
        """A probe's own limit, else the run's for its kind (long: the GPU smoke's probes)."""
        if probe.timeout_s is not None:
            return probe.timeout_s
        return self.long_timeout_s if probe.long else self.default_timeout_s

    def _work(self, probe: Probe, slot: _Slot) -> None:
        started = None
        try:
            with self.slots:
                started = time.monotonic()
                self._running.add(probe.key)
                timeout = self.timeout_for(probe)
                if self.deadline is not None:
                    timeout = min(timeout, self.deadline - time.monotonic())
                if timeout < MIN_PROBE_S:
                    slot.result = ProbeResult(probe.key, ok=False, timed_out=True,
                                              error="not started: the run's time budget was spent")
                else:
                    probe = self.as_job(probe)
                    slot.result = run_probe(probe, self.python, timeout, self.procs,
                                            on_stage_file=lambda path: self._stage_files.__setitem__(probe.key, path))
        except BaseException as exc:  # run_probe never raises; the slot must resolve all the same
            slot.result = ProbeResult(probe.key, ok=False, error=f"{type(exc).__name__}: {exc}")
        finally:
            if started is not None:
                self.timeline[probe.key] = (started, time.monotonic())
            self._running.discard(probe.key)
            self._stage_files.pop(probe.key, None)
            slot.done.set()

    def critical_path(self, since: float) -> dict | None:
        """The probe that ended last (the run's long pole: the checks waited for it), with when it started and ended
        counted from `since`, and how long it ran; None when no probe ran."""
        if not self.timeline:
            return None
        key, (start, end) = max(self.timeline.items(), key=lambda item: item[1][1])
        return {"probe": key, "ran_s": round(end - start, 3), "started_at_s": round(start - since, 3),
                "ended_at_s": round(end - since, 3), "probes": len(self.timeline)}

    def stage(self, key: str) -> str | None:
        """What a probe says it does now (read_stage: bounded, cleaned, cut), "waiting for a free probe slot" while
        it waits for one, its key while it has said nothing yet, None when it is not running."""
        if key in self._running:
            path = self._stage_files.get(key)
            return (read_stage(path) if path else None) or stage_text(f"probe {key}")
        slot = self._slots.get(key)
        return WAITING_FOR_SLOT if slot is not None and not slot.done.is_set() else None

    def result(self, probe: Probe, wait_s: float | None = None) -> ProbeResult:
        """The probe's result, waiting at most `wait_s` (None: until it has one) through the gate's wait: in the
        main thread a stop signal ends it (signals.GATE.wait)."""
        slot = self.submit(probe)
        until = time.monotonic() + wait_s if wait_s is not None else math.inf
        if not GATE.wait(slot.done.wait, until):
            return ProbeResult(probe.key, ok=False, timed_out=True, error="no answer within the run's time budget")
        assert slot.result is not None
        return slot.result


@dataclass
class RunContext:
    """What a check's run function sees (implements model.Context)."""

    profile: Profile
    python: str
    pool: ProbePool
    static_probe: Probe
    outcomes: dict[str, CheckReport] = field(default_factory=dict)
    gpu_list: list[dict] | None = None
    target: dict = field(default_factory=dict)  # the interpreter handshake: version, executable, prefix

    def probe(self, probe: Probe) -> ProbeResult:
        return self.pool.result(probe)

    def require(self, probe: Probe):
        """The probe's answer, or ProbeFailed (the check becomes `error` with the signal/timeout and stderr)."""
        result = self.probe(probe)
        if not result.ok:
            raise ProbeFailed(result)
        return result.data

    @property
    def static(self) -> StaticFacts:
        return StaticFacts(self.require(self.static_probe))

    def gpus(self) -> list[dict]:
        """GPUs from nvidia-smi; empty when there is no nvidia-smi or it fails."""
        if self.gpu_list is None:
            result = self.probe(NVIDIA_SMI)
            self.gpu_list = parse_nvidia_smi(result.data) if result.ok else []
        return self.gpu_list

    def outcome(self, check_id: str) -> CheckReport | None:
        return self.outcomes.get(check_id)


def _report(check: Check, result: Result, duration: float, internal: bool = False) -> CheckReport:
    return CheckReport(
        id=check.id, title=check.title, status=result.status, summary=result.summary, details=result.details,
        evidence=result.evidence, fixes=list(result.fixes), sources=list(check.sources), duration_s=duration,
        origin=check.origin, internal_error=internal,
    )


def validated(result) -> Result:
    """A check's result must be a Result the report can carry, or findings it is derived from; anything else is the
    check's (or plugin's) bug."""
    if not isinstance(result, Result):
        if not isinstance(result, Iterable) or isinstance(result, (str, bytes, dict)):
            raise TypeError(f"check returned {type(result).__name__}, not a Result")
        result = result_of(result)
    result.status = Status(result.status)  # accepts "pass" as well as Status.PASS; raises on anything else
    if not isinstance(result.summary, str) or not result.summary.strip():
        raise ValueError("a result needs a one-line summary (a skip must say why)")
    if not isinstance(result.details, str):
        raise TypeError("details must be text")
    if not isinstance(result.evidence, dict):
        raise TypeError("evidence must be a dict")
    if not all(isinstance(f, Fix) for f in result.fixes):
        raise TypeError("fixes must be Fix objects")
    return result


def plan(check: Check, profile: Profile) -> tuple[str | None, list[Probe]]:
    """Whether a check runs under this profile, and the probes it starts: (why it is skipped or None, probes).
    The one place that decides it, for the run, the early probe start and the time budget. May raise (a check's
    own skip_if or probes); callers treat that as the check's bug."""
    reason = check.skip_if(profile)
    if reason:
        return str(reason), []
    probes = list(check.probes_for(profile))
    if profile.static_only and any(p.script for p in probes):
        return "static-only: this check imports packages in a probe", []
    if left_to_leader(check, profile, probes):
        return (f"node-level: imported once per host, by local rank 0 (this is local rank "
                f"{(profile.fleet or {}).get('local_rank')})"), []
    return None, probes


def left_to_leader(check: Check, profile: Profile, probes: Sequence[Probe]) -> bool:
    """A fleet rank other than its host's local rank 0 leaves host-level import checks to it, unless it runs its
    own (its packages differ from the leader's: `own_host_checks`). The skip row says so in evidence.node_level,
    which is what the fleet merge reads."""
    fleet = profile.fleet or {}
    return bool(fleet) and not fleet.get("node_leader") and not fleet.get("own_host_checks") and \
        not check.per_gpu and any(p.script for p in probes)


def routed(check: Check, ctx, fixes: list) -> list:
    """A check's fixes made to reach the copy the job imports and to use the installer the target has
    (`Check.route_fixes`); when routing itself breaks, the check's own fixes stand."""
    try:
        out = list(check.route_fixes(ctx, list(fixes)))  # type: ignore[misc]
    except Exception:
        return list(fixes)
    return out if all(isinstance(f, Fix) for f in out) else list(fixes)


def execute(check: Check, ctx) -> tuple[Result, bool]:
    """Run one check; (result, whether the check's own code broke). Never raises."""
    try:
        reason, _ = plan(check, ctx.profile)
        if reason:
            if left_to_leader(check, ctx.profile, check.probes_for(ctx.profile)):
                local = (ctx.profile.fleet or {}).get("local_rank")
                return Result(Status.SKIP, reason, evidence={"node_level": True, "local_rank": local}), False
            return Result(Status.SKIP, reason), False
        for need in check.needs:
            blocked = needs_failed(ctx, need)
            if blocked is not None:
                return blocked, False
        result = validated(check.run(ctx))
        if check.route_fixes is not None and result.fixes:
            result.fixes = routed(check, ctx, result.fixes)
        return result, False
    except ProbeFailed as exc:
        pr = exc.result
        return Result(Status.ERROR, f"probe {pr.key!r} {pr.error}", details=pr.stderr_tail,
                      evidence=pr.evidence()), False
    except BaseException as exc:  # the check's own code broke: a doctor or plugin bug
        tb = cut_tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), 3000)
        return Result(Status.ERROR, f"the check crashed: {type(exc).__name__}: {exc}", details=tb,
                      evidence={"origin": check.origin}), True


class Runner:
    """One run of the selected built-in checks. `wait()` returns when all are done or the deadline passed."""

    def __init__(self, checks: Sequence[Check], ctx: RunContext, deadline: float, on_event: OnEvent | None = None):
        self.checks = list(checks)
        self.ctx = ctx
        self.deadline = deadline
        self.on_event = on_event
        self._done = {c.id: threading.Event() for c in self.checks}
        self._lock = threading.Lock()
        self._stopped = False
        self.start = time.monotonic()
        self._probes: dict[str, list[Probe]] = {}  # check id -> the probes it started
        self._running: set[str] = set()  # checks started and not done
        self._stages: dict[str, str | None] = {}  # check id -> the stage last said

    def stop(self) -> None:
        """No result recorded from now on: an interrupted run reports what had finished before the signal, not a
        check that then saw its probe killed by the doctor's own cleanup."""
        with self._lock:
            self._stopped = True

    def begin(self) -> None:
        self.start_probes()
        for check in self.checks:
            threading.Thread(target=self._work, args=(check,), daemon=True, name=f"check-{check.id}").start()

    def start_probes(self) -> None:
        profile = self.ctx.profile
        # Start every applicable check's probes now, so they run concurrently while checks wait for theirs; the
        # long ones (the smoke, the kernel sub-runs) first, so that the pool's waves never leave one to the end.
        planned: list[Probe] = []
        for check in self.checks:
            try:
                _, probes = plan(check, profile)
            except Exception:  # not BaseException: the main thread's Interrupted must pass
                continue  # execute() reports it
            self._probes[check.id] = probes
            planned.extend(probes)
        for probe in sorted(planned, key=lambda p: not p.long):
            self.ctx.pool.submit(probe)

    def _work(self, check: Check) -> None:
        for need in (*check.needs, *check.after):
            event = self._done.get(need)
            if event is not None:
                event.wait(max(0.0, self.deadline - time.monotonic()))
        t0 = time.monotonic()
        with self._lock:
            self._running.add(check.id)
        if self.on_event:
            self.on_event("start", check.id)
        result, internal = execute(check, self.ctx)
        with self._lock:
            self._running.discard(check.id)
            if self._stopped:
                return
            self.ctx.outcomes[check.id] = _report(check, result, time.monotonic() - t0, internal)
        # The event before `done`: wait() returns at `done`, and a plugin host then exits at once; a result event
        # written after that was lost now and then (a flaky "the plugin host exited while this check ran").
        if self.on_event:
            self.on_event("done", check.id)
        self._done[check.id].set()

    def wait(self) -> None:
        """Until every check is done or the deadline passed; with an on_event, the probes' stages are read every
        STAGE_POLL_S meanwhile. The gate's wait: a stop signal ends it (signals.GATE.wait)."""
        for check in self.checks:
            done = self._done[check.id]
            while not GATE.wait(done.wait, min(self.deadline, time.monotonic() + STAGE_POLL_S)
                                if self.on_event else self.deadline):
                if time.monotonic() >= self.deadline or GATE.stopping is not None:
                    return
                self.poll_stages()

    def stage(self, check_id: str) -> str | None:
        """What a running check waits for: the stage one of its probes says (ProbePool.stage), one that runs before
        one still waiting for a slot; None when its probes are done (its own code runs, or it waits for another
        check)."""
        said = [self.ctx.pool.stage(p.key) for p in self._probes.get(check_id, ())]
        said = [s for s in said if s]
        return min(said, key=lambda s: s == WAITING_FOR_SLOT, default=None)

    def poll_stages(self) -> None:
        """A "stage" event for each running check whose stage changed; a display that breaks costs its rows only."""
        if not self.on_event:
            return
        with self._lock:
            running = sorted(self._running)
        for check_id in running:
            try:
                now = self.stage(check_id)
                if now != self._stages.get(check_id):
                    self._stages[check_id] = now
                    self.on_event("stage", check_id, now)
            except Exception:  # not BaseException: the main thread's Interrupted must pass
                continue

    def reports(self, unfinished: str | None = None) -> list[CheckReport]:
        """Every check's report, in selection order; an unfinished one is an error saying why."""
        out = []
        with self._lock:
            done = dict(self.ctx.outcomes)
        for check in self.checks:
            if check.id in done:
                out.append(done[check.id])
                continue
            why = unfinished or "the check did not finish within the doctor's time budget"
            out.append(_report(check, Result(Status.ERROR, why, evidence={"origin": check.origin}),
                               time.monotonic() - self.start, internal=unfinished is None))
        return out
