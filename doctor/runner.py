"""Runs checks: resolves the profile, starts their probes concurrently, and turns every outcome into a CheckReport.

Check functions run in the doctor process but only read probe answers; a check that raises or hangs becomes an
`error` row marked as an internal error (exit code 3), never a crash or a hang of the doctor.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from .model import Check, CheckReport, Fix, Profile, Result, Status
from .probes import NVIDIA_SMI, STATIC_SCRIPT, Probe, ProbeResult, StaticRequest, parse_nvidia_smi, run_probe

CHECK_TIMEOUT_S = 10.0  # a check's own code, after its probes answered
STATIC_TIMEOUT_S = 30.0


class ProbeFailed(Exception):
    """Raised by Context.require when a probe gave no answer; the runner turns it into an `error` result."""

    def __init__(self, result: ProbeResult):
        super().__init__(result.error)
        self.result = result


class StaticFacts:
    """Convenience reads over the static probe's answer; a malformed answer reads as "nothing found"."""

    def __init__(self, data: dict):
        self.data = data if isinstance(data, dict) else {}

    def _section(self, name: str) -> dict:
        section = self.data.get(name)
        return section if isinstance(section, dict) else {}

    @property
    def python(self) -> dict:
        return self._section("python")

    def dist_copies(self, name: str) -> list[dict]:
        entry = self._section("distributions").get(name)
        copies = entry.get("copies") if isinstance(entry, dict) else None
        return [c for c in copies if isinstance(c, dict)] if isinstance(copies, list) else []

    def dist(self, name: str) -> dict | None:
        """The copy Python would use (first on sys.path), or None when not installed."""
        copies = self.dist_copies(name)
        return copies[0] if copies else None

    def version(self, name: str) -> str | None:
        d = self.dist(name)
        v = d.get("version") if d else None
        return v if isinstance(v, str) else None

    def module(self, name: str) -> dict:
        m = self._section("modules").get(name)
        return m if isinstance(m, dict) else {"found": False}

    def source(self, module: str) -> dict:
        m = self._section("sources").get(module)
        return m if isinstance(m, dict) else {"found": False}


_PREFETCHED: dict[tuple[str, str], Future] = {}


def static_probe_for(request: StaticRequest, probe_timeout_s: float) -> Probe:
    return Probe.python("static", STATIC_SCRIPT, request.to_json(), timeout_s=min(STATIC_TIMEOUT_S, probe_timeout_s))


def prefetch_static(python: str, probe: Probe) -> None:
    """Start the static probe before the command line is fully parsed: typer's start-up then overlaps with it."""
    future: Future = Future()

    def work() -> None:
        try:
            future.set_result(run_probe(probe, python, probe.timeout_s or STATIC_TIMEOUT_S))
        except BaseException as exc:  # run_probe never raises; the future must resolve all the same
            future.set_result(ProbeResult(probe.key, ok=False, error=f"{type(exc).__name__}: {exc}"))

    threading.Thread(target=work, daemon=True, name="static-prefetch").start()
    _PREFETCHED[(python, probe.request + str(probe.timeout_s))] = future


class ProbePool:
    def __init__(self, python: str, default_timeout_s: float, workers: int):
        self.python = python
        self.default_timeout_s = default_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe")
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()

    def submit(self, probe: Probe) -> Future:
        with self._lock:
            fut = self._futures.get(probe.key)
            if fut is None:
                fut = _PREFETCHED.pop((self.python, probe.request + str(probe.timeout_s)), None)
            if fut is None:
                fut = self._executor.submit(run_probe, probe, self.python, self.default_timeout_s)
            self._futures[probe.key] = fut
            return fut

    def result(self, probe: Probe) -> ProbeResult:
        return self.submit(probe).result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class Context:
    """What a check's run function sees."""

    profile: Profile
    python: str
    pool: ProbePool
    static_probe: Probe

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
        result = self.probe(NVIDIA_SMI)
        return parse_nvidia_smi(result.data) if result.ok else []


@dataclass
class RunResult:
    profile: Profile
    checks: list[CheckReport]
    static: dict | None
    gpus: list[dict]
    duration_s: float
    probes: list[dict] = field(default_factory=list)


def resolve_profile(profile: Profile, pool: ProbePool) -> tuple[Profile, list[dict]]:
    """Count the GPUs, and fill in --gpu-arch from nvidia-smi when the user did not give it."""
    smi = pool.result(NVIDIA_SMI)
    try:
        gpus = parse_nvidia_smi(smi.data) if smi.ok else []
    except Exception:  # whatever nvidia-smi printed, the run goes on without GPU facts
        gpus = []
    profile = replace(profile, gpus=len(gpus))
    if profile.gpu_arch is None and gpus and gpus[0].get("compute_capability"):
        profile = replace(profile, gpu_arch=gpus[0]["compute_capability"], gpu_arch_source="detected")
    return profile, gpus


def _report(check: Check, result: Result, duration: float, internal: bool = False) -> CheckReport:
    return CheckReport(
        id=check.id, title=check.title, status=result.status, summary=result.summary, details=result.details,
        evidence=result.evidence, fixes=list(result.fixes), sources=list(check.sources), duration_s=duration,
        origin=check.origin, internal_error=internal,
    )


def _validated(result) -> Result:
    """A plugin's result must be a Result the report can carry; anything else is the plugin's bug."""
    if not isinstance(result, Result):
        raise TypeError(f"check returned {type(result).__name__}, not a Result")
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


def _execute(check: Check, ctx: Context) -> tuple[Result, bool]:
    try:
        reason = check.skip_if(ctx.profile)
        if reason:
            return Result(Status.SKIP, reason), False
        return _validated(check.run(ctx)), False
    except ProbeFailed as exc:
        pr = exc.result
        return Result(Status.ERROR, f"probe {pr.key!r} {pr.error}", details=pr.stderr_tail,
                      evidence=pr.evidence()), False
    except BaseException as exc:  # the check's own code broke: a doctor or plugin bug
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
        return Result(Status.ERROR, f"the check crashed: {type(exc).__name__}: {exc}", details=tb,
                      evidence={"origin": check.origin}), True


def run_checks(
    checks: Sequence[Check],
    profile: Profile,
    python: str,
    probe_timeout_s: float = 60.0,
    on_event: Callable[[str, str], None] | None = None,
    static_request: StaticRequest | None = None,
) -> RunResult:
    start = time.monotonic()
    workers = max(4, min(8, 2 * (os.cpu_count() or 2)))
    pool = ProbePool(python, probe_timeout_s, workers)
    if static_request is None:
        static_request = StaticRequest.merge(c.static for c in checks)
    static_probe = static_probe_for(static_request, probe_timeout_s)
    pool.submit(static_probe)  # every run needs it (the report names the target interpreter)
    profile, gpus = resolve_profile(profile, pool)
    ctx = Context(profile=profile, python=python, pool=pool, static_probe=static_probe)

    # Start every applicable check's probes now, so they run concurrently while checks wait for theirs.
    for check in checks:
        try:
            if not check.skip_if(profile):
                for probe in check.probes_for(profile):
                    pool.submit(probe)
        except BaseException:
            continue  # _execute reports it

    reports: dict[str, CheckReport] = {}
    threads: list[tuple[Check, threading.Thread, float]] = []
    slots: dict[str, tuple[Result, bool, float]] = {}

    def work(check: Check) -> None:
        t0 = time.monotonic()
        if on_event:
            on_event("start", check.id)
        result, internal = _execute(check, ctx)
        slots[check.id] = (result, internal, time.monotonic() - t0)
        if on_event:
            on_event("done", check.id)

    for check in checks:
        t = threading.Thread(target=work, args=(check,), daemon=True, name=f"check-{check.id}")
        t.start()
        threads.append((check, t, time.monotonic()))

    # Every probe ends within its timeout; queueing behind busy workers can add a few of them.
    n_probes = len(pool._futures)
    probe_budget = probe_timeout_s * (1 + n_probes // workers) + STATIC_TIMEOUT_S
    deadline = start + probe_budget + CHECK_TIMEOUT_S
    for check, t, _ in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if check.id in slots:
            result, internal, duration = slots[check.id]
            reports[check.id] = _report(check, result, duration, internal)
        else:
            reports[check.id] = _report(
                check,
                Result(Status.ERROR, "the check did not finish within the doctor's time budget "
                       f"({probe_budget + CHECK_TIMEOUT_S:.0f} s)", evidence={"origin": check.origin}),
                time.monotonic() - start, internal=True,
            )
    static_future = pool._futures.get(static_probe.key)
    static_result = None
    if static_future is not None:  # the report names the target interpreter from it, even if no check needed it
        try:
            static_result = static_future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:
            static_result = None
    pool.shutdown()
    probes = []
    for key, fut in pool._futures.items():
        if fut.done() and not fut.cancelled():
            pr = fut.result()
            probes.append({"key": key, "ok": pr.ok, "duration_s": round(pr.duration_s, 3), "error": pr.error})
    return RunResult(
        profile=profile,
        checks=[reports[c.id] for c in checks],
        static=static_result.data if static_result is not None and static_result.ok else None,
        gpus=gpus,
        duration_s=time.monotonic() - start,
        probes=probes,
    )
