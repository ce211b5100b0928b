"""The check API: the @check decorator, results derived from findings, `needs` gating and `after` ordering, run by
the real runner."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest

from dsv4_doctor.engine import registry
from dsv4_doctor.api import Check, Finding, Fix, Source, Status, check, failed, passed, result_of
from dsv4_doctor.model.core import NO_FINDING, Profile
from dsv4_doctor.engine.probes import StaticRequest
from dsv4_doctor.hostio.procs import Processes
from dsv4_doctor.engine.registry import PluginInfo
from dsv4_doctor.engine.runner import ProbePool, RunContext, Runner
from dsv4_doctor.engine.session import static_probe_for

SOURCE = (Source("DSv4 recipe", "https://example.invalid/recipe"),)


def run_checks(*checks: Check):
    """The checks' reports from a real Runner (no probes: the checks here read nothing from the target)."""
    procs = Processes()
    ctx = RunContext(profile=Profile(), python=sys.executable, pool=ProbePool(sys.executable, 5.0, 2, procs),
                     static_probe=static_probe_for(StaticRequest(), 5.0))
    runner = Runner(list(checks), ctx, time.monotonic() + 20)
    runner.begin()
    runner.wait()
    return {r.id: r for r in runner.reports()}


def test_the_decorator_makes_a_check_whose_explanation_is_the_docstring():
    @check("demo.doc", "A demo", applies_when="always", detects="nothing", sources=SOURCE, needs=("demo.base",),
           after=("demo.other",))
    def demo(ctx):
        """Why it matters.

        A second paragraph,
            with a preformatted line.
        """
        return passed("fine")

    assert isinstance(demo, Check)
    assert demo.explanation == "Why it matters.\n\nA second paragraph,\n    with a preformatted line."
    assert demo.doc() == demo.explanation
    assert (demo.id, demo.title, demo.applies_when, demo.detects) == ("demo.doc", "A demo", "always", "nothing")
    assert demo.needs == ("demo.base",) and demo.after == ("demo.other",) and demo.sources == SOURCE
    assert demo.skip_if(Profile()) is None


def test_findings_derive_the_worst_status_and_join_its_summaries():
    fix_a, fix_b = Fix("a", [["pip", "install", "a"]]), Fix("b", [["pip", "install", "b"]])
    result = result_of([
        Finding(Status.PASS, "one is fine", "d1", evidence={"x": 1}),
        Finding(Status.WARN, "two is slow", fixes=[fix_a], evidence={"y": 2}),
        Finding(Status.FAIL, "three is broken", "d3", fixes=[fix_a, fix_b]),
        Finding(Status.FAIL, "four is broken"),
        Finding(Status.SKIP, "five is not known"),
    ])
    assert result.status is Status.FAIL
    assert result.summary == "three is broken; four is broken"
    assert result.details == "d1\nd3"
    assert [f.key for f in result.fixes] == [fix_a.key, fix_b.key]
    assert result.evidence == {"x": 1, "y": 2}


def test_a_skip_among_passes_is_not_a_pass_and_no_finding_is_an_error():
    mixed = result_of([Finding(Status.PASS, "fine"), Finding(Status.SKIP, "not known")])
    assert (mixed.status, mixed.summary) == (Status.SKIP, "not known")
    assert result_of([Finding(Status.PASS, "a"), Finding(Status.PASS, "b")]).summary == "a; b"
    assert result_of([Finding(Status.ERROR, "e"), Finding(Status.FAIL, "f")]).status is Status.ERROR
    empty = result_of([])
    assert (empty.status, empty.summary) == (Status.ERROR, NO_FINDING)
    with pytest.raises(TypeError):
        result_of([passed("a Result is no Finding")])


def test_the_runner_derives_a_generators_findings():
    @check("demo.gen", "Generator", applies_when="always", detects="nothing", sources=SOURCE)
    def gen(ctx):
        """Yields."""
        yield Finding(Status.PASS, "first")
        yield Finding(Status.WARN, "second")

    @check("demo.none", "Nothing", applies_when="always", detects="nothing", sources=SOURCE)
    def nothing(ctx):
        """Yields nothing."""
        yield from ()

    reports = run_checks(gen, nothing)
    assert (reports["demo.gen"].status, reports["demo.gen"].summary) == (Status.WARN, "second")
    assert (reports["demo.none"].status, reports["demo.none"].summary) == (Status.ERROR, NO_FINDING)


@pytest.mark.parametrize("base_status", [Status.FAIL, Status.ERROR])
def test_needs_skips_a_check_whose_base_failed_with_the_text_reports_had(base_status):
    ran = []

    @check("demo.base", "Base", applies_when="always", detects="nothing", sources=SOURCE)
    def base(ctx):
        """Base."""
        time.sleep(0.2)  # finishes after the dependent thread started: only the runner's ordering helps
        if base_status is Status.FAIL:
            return failed("the base is broken. More detail follows")
        raise RuntimeError("boom")

    @check("demo.dependent", "Dependent", applies_when="always", detects="nothing", sources=SOURCE,
           needs=("demo.base",))
    def dependent(ctx):
        """Dependent."""
        ran.append(True)
        return passed("never reached")

    reports = run_checks(dependent, base)
    report = reports["demo.dependent"]
    assert not ran and report.status is Status.SKIP
    reason = reports["demo.base"].summary.split(". ")[0]
    assert report.summary == f"needs demo.base ({reason})"
    assert report.evidence == {"needs": "demo.base", "needs_status": base_status.value}


def test_after_only_orders_and_a_warning_need_does_not_gate():
    @check("demo.first", "First", applies_when="always", detects="nothing", sources=SOURCE)
    def first(ctx):
        """First."""
        time.sleep(0.2)
        return failed("first failed")

    @check("demo.warns", "Warns", applies_when="always", detects="nothing", sources=SOURCE)
    def warns(ctx):
        """Warns."""
        yield Finding(Status.WARN, "a warning")

    @check("demo.reader", "Reader", applies_when="always", detects="nothing", sources=SOURCE,
           after=("demo.first",), needs=("demo.warns",))
    def reader(ctx):
        """Reads."""
        seen = ctx.outcome("demo.first")
        yield Finding(Status.PASS, f"saw {seen.status.value if seen else 'nothing'}")

    reports = run_checks(reader, first, warns)
    assert (reports["demo.reader"].status, reports["demo.reader"].summary) == (Status.PASS, "saw fail")


def builtin_entry_point() -> PluginInfo:
    return PluginInfo(name="dsv4-doctor", value="dsv4_doctor.checks", distribution="dsv4-doctor", version=None,
                      builtin=True)


@pytest.mark.parametrize("change, problem", [
    ({"id": "torch.needs-nothing-real", "needs": ("torch.no-such-check",)},
     "'torch.needs-nothing-real' needs an unknown check id 'torch.no-such-check'"),
    ({"id": "torch.after-nothing-real", "after": ("nope.nothing",)},
     "'torch.after-nothing-real' after an unknown check id 'nope.nothing'"),
    ({"id": "gpu.torch-install-moved"},
     "'gpu.torch-install-moved' is defined in the 'torch' area: its id must start with 'torch.'"),
    ({"id": "torch.undocumented", "explanation": "  \n"}, "'torch.undocumented' has no explanation (its docstring)"),
    ({"id": "torch.unsourced", "sources": ()}, "'torch.unsourced' names no source"),
])
def test_a_builtin_that_breaks_a_registry_rule_is_an_error_and_not_registered(change, problem):
    from dsv4_doctor.checks import CHECKS
    from dsv4_doctor.checks.torch_checks import torch_install

    bad = dataclasses.replace(torch_install, **change)  # its run function lives in torch_checks
    info = builtin_entry_point()
    admitted = registry.admit_builtins(info, [*CHECKS, bad], set())
    assert bad.id not in {c.id for c in admitted}
    assert info.error == problem
    assert {c.id for c in admitted} == {c.id for c in CHECKS}


def test_every_builtin_keeps_the_registry_rules():
    loaded = registry.load()
    assert [b.error for b in loaded.builtins] == [None]
    from dsv4_doctor.checks import CHECKS

    assert len(loaded.checks) == len(CHECKS) == loaded.builtins[0].checks


def test_explain_shows_what_a_check_needs_and_what_it_runs_after():
    from dsv4_doctor.report.explain import explain_text

    @check("demo.explained", "Explained", applies_when="always", detects="nothing", sources=SOURCE,
           needs=("demo.base", "demo.other-base"), after=("demo.first",))
    def explained(ctx):
        """Why."""
        return passed("fine")

    lines = explain_text(explained).splitlines()
    assert "needs (skipped when one fails): demo.base, demo.other-base" in lines
    assert "runs after: demo.first" in lines
    assert lines.index("runs after: demo.first") < lines.index("Why.")
    bare = explain_text(dataclasses.replace(explained, needs=(), after=()))
    assert "needs" not in bare and "runs after" not in bare
