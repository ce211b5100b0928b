"""doctor/testing.py, the in-process harness plugin authors and the doctor's own rule tests use: its stub context
answers as model.Context does, and run_check applies the runner's gating and derivation, not just the function."""

from __future__ import annotations

import pytest

from dsv4_doctor.api import Finding, Probe, Status, check
from dsv4_doctor.model.core import Profile
from dsv4_doctor.testing import (MARKERS, CheckCrashed, StubContext, dist, module, no_answer, outcome, run_check,
                                 static_answer)

PROBE = Probe.python("import:example", "dsv4probe_import.py", {"targets": ["example"]})


@check("example.version", "Example", applies_when="CP > 1", detects="example's version", probes=(PROBE,),
       skip_if=lambda profile: None if profile.cp > 1 else "CP is 1", needs=("torch.install",))
def example(ctx):
    """An example rule: reads a distribution, a module, a probe answer."""
    copies = ctx.static.dist_copies("example")
    if not copies:
        yield Finding(Status.FAIL, "example is not installed")
        return
    yield Finding(Status.PASS, f"example {copies[0]['version']}")
    answer = ctx.require(PROBE)
    if answer.get("slow"):
        yield Finding(Status.WARN, "example imports slowly")


@check("example.crash", "Crash", applies_when="always", detects="nothing")
def crash(ctx):
    """Its own code breaks."""
    raise KeyError("boom")


FACTS = static_answer(distributions={"example": dist("example", "1.2.0", "torch>=2.9")},
                      modules={"example": module("/site/example/__init__.py")})


def test_static_answer_reads_through_static_facts_with_the_target_s_markers():
    ctx = StubContext(facts=FACTS)
    copy = ctx.static.dist_copies("example")[0]
    assert copy["version"] == "1.2.0" and copy["path"] == "/site/example-1.2.0.dist-info"
    assert ctx.static.marker_env == MARKERS
    assert ctx.static.data["modules"] == {"example": {"found": True, "origin": "/site/example/__init__.py"}}
    assert module(None) == {"found": False}
    assert static_answer(requirement_targets={"x": None})["requirement_targets"] == {"x": None}


def test_findings_are_derived_into_one_result_as_a_run_does():
    result = run_check(example, StubContext(profile=Profile(cp=2), facts=FACTS, answers={PROBE.key: {"slow": True}}))
    assert result.status is Status.WARN and result.summary == "example imports slowly"
    assert run_check(example, StubContext(profile=Profile(cp=2), facts=FACTS,
                                          answers={PROBE.key: {}})).summary == "example 1.2.0"
    assert run_check(example, StubContext(profile=Profile(cp=2))).status is Status.FAIL


def test_skip_if_and_a_failed_need_gate_the_check_before_it_runs():
    ctx = StubContext(profile=Profile(cp=1), facts=FACTS)
    result = run_check(example, ctx)
    assert result.status is Status.SKIP and result.summary == "CP is 1" and ctx.probed == []
    failed_torch = outcome("torch.install", Status.FAIL, "torch is not installed. More text")
    ctx = StubContext(profile=Profile(cp=2), facts=FACTS, outcomes={"torch.install": failed_torch})
    result = run_check(example, ctx)
    assert result.status is Status.SKIP and result.summary == "needs torch.install (torch is not installed)"
    assert ctx.probed == []
    # A warning in the prerequisite does not stop the check.
    warned_torch = outcome("torch.install", Status.WARN)
    ctx = StubContext(profile=Profile(cp=2), facts=FACTS, answers={PROBE.key: {}},
                      outcomes={"torch.install": warned_torch})
    assert run_check(example, ctx).status is Status.PASS and ctx.probed == [PROBE.key]


def test_a_probe_without_an_answer_is_an_error_row_with_its_evidence():
    answers = {PROBE.key: no_answer(PROBE.key, "killed by SIGSEGV", signal="SIGSEGV", stderr_tail="Segfault")}
    result = run_check(example, StubContext(profile=Profile(cp=2), facts=FACTS, answers=answers))
    assert result.status is Status.ERROR and "killed by SIGSEGV" in result.summary
    assert result.evidence["signal"] == "SIGSEGV" and result.details == "Segfault"
    # A key not given at all is a probe that did not answer either.
    assert run_check(example, StubContext(profile=Profile(cp=2), facts=FACTS)).status is Status.ERROR


def test_a_crash_of_the_check_s_own_code_raises_unless_asked_for():
    with pytest.raises(CheckCrashed, match="KeyError: 'boom'"):
        run_check(crash, StubContext())
    result = run_check(crash, StubContext(), crash_ok=True)
    assert result.status is Status.ERROR and "the check crashed" in result.summary
