"""In-process testing of checks, for the doctor's own tests and for plugin authors: a stub context (model.Context
over facts given as plain data) and builders for those facts, the shapes the probes report on a real machine.

    from dsv4_doctor.testing import StubContext, dist, run_check, static_answer
    ctx = StubContext(facts=static_answer(distributions={"torch": dist("torch", "2.11.0")}))
    result = run_check(my_check, ctx)

A check runs through the runner's own `execute`, so its skip_if, static-only and node-level gating, its `needs`
prerequisites (from `outcomes`) and the derivation of a result from findings apply exactly as in a real run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .model.facts import StaticFacts
from .model.core import Check, CheckReport, Profile, Result, Status
from .engine.probes import ProbeResult
from .engine.runner import ProbeFailed, execute

# PEP 508 marker values of a CPython 3.12 on x86_64 Linux, as the static probe computes them.
MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_machine": "x86_64", "implementation_name": "cpython", "os_name": "posix",
           "platform_system": "Linux", "platform_python_implementation": "CPython"}


def dist(name: str, version: str, *requires: str, path: str = "/site") -> dict:
    """One installed copy of a distribution, as the static probe reports it (its `distributions` entry)."""
    return {"copies": [{"name": name, "version": version, "path": f"{path}/{name}-{version}.dist-info",
                        "requires": list(requires)}]}


def module(origin: str | None) -> dict:
    """A module's entry in the static probe's `modules`: found at `origin`, or not found when it is None."""
    return {"found": True, "origin": origin} if origin else {"found": False}


def static_answer(distributions: Mapping[str, dict] | None = None, modules: Mapping[str, dict] | None = None,
                  **sections: Any) -> dict:
    """The static probe's answer: `distributions` (name -> `dist(...)`), `modules` (name -> `module(...)`) and any
    other section by name (`requirement_targets=...`). The python section's markers default to MARKERS."""
    answer: dict = {"distributions": dict(distributions or {}), "modules": dict(modules or {})}
    answer.update(sections)
    answer.setdefault("python", {"markers": MARKERS})
    return answer


def no_answer(key: str, error: str = "no answer", *, returncode: int | None = None, signal: str | None = None,
              timed_out: bool = False, stderr_tail: str = "") -> ProbeResult:
    """A probe that gave no answer (it crashed, timed out or printed no JSON), to put in StubContext.answers."""
    return ProbeResult(key, False, returncode=returncode, signal=signal, timed_out=timed_out,
                       stderr_tail=stderr_tail, error=error)


def outcome(check_id: str, status: Status, summary: str = "", title: str = "") -> CheckReport:
    """Another check's outcome, for StubContext.outcomes (what `needs` and `ctx.outcome` read)."""
    return CheckReport(id=check_id, title=title or check_id, status=status, summary=summary or status.value)


@dataclass
class StubContext:
    """model.Context over facts given as data.

    `facts` is the static probe's answer (`static_answer(...)`; a python section with MARKERS is added when it has
    none); `answers` maps a probe key to its answer, or to a ProbeResult (`no_answer(...)`); a key missing is a
    probe that gave no answer. `gpu_list` is nvidia-smi's GPUs, `outcomes` other checks' reports by id. `probed`
    records the keys of the probes asked for, in order."""

    profile: Profile = field(default_factory=Profile)
    facts: Mapping[str, Any] = field(default_factory=dict)
    answers: Mapping[str, Any] = field(default_factory=dict)
    gpu_list: list[dict] = field(default_factory=list)
    outcomes: Mapping[str, CheckReport] = field(default_factory=dict)
    python: str = "/usr/bin/python3"
    target: dict = field(default_factory=dict)
    probed: list[str] = field(default_factory=list)

    @property
    def static(self) -> StaticFacts:
        data = dict(self.facts)
        data.setdefault("python", {"markers": MARKERS})
        return StaticFacts(data)

    def probe(self, probe: Any) -> ProbeResult:
        self.probed.append(probe.key)
        if probe.key not in self.answers:
            return no_answer(probe.key)
        answer = self.answers[probe.key]
        return answer if isinstance(answer, ProbeResult) else ProbeResult(probe.key, True, answer)

    def require(self, probe: Any) -> Any:
        result = self.probe(probe)
        if not result.ok:
            raise ProbeFailed(result)
        return result.data

    def gpus(self) -> list[dict]:
        return self.gpu_list

    def outcome(self, check_id: str) -> CheckReport | None:
        return self.outcomes.get(check_id)


class CheckCrashed(AssertionError):
    """The check's own code raised: a bug in the check, not a finding about the environment."""


def run_check(check: Check, ctx: Any, *, crash_ok: bool = False) -> Result:
    """The check's result as a real run derives it (runner.execute). A crash of the check's own code raises
    CheckCrashed with its traceback, so that a test does not read the crash's `error` row as a finding; pass
    crash_ok=True to get that row instead."""
    result, crashed = execute(check, ctx)
    if crashed and not crash_ok:
        raise CheckCrashed(f"{check.id}: {result.summary}\n{result.details}")
    return result
