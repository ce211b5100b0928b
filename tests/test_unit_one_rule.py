"""One rule, one list: the job checks' closing finding takes its status from the engine's rule (`result_of`) and keeps
its own layout; the report formats are listed once, in the renderers, and the CLI offers that list."""

from __future__ import annotations

import importlib

import pytest

from dsv4_doctor.api import Fix, Finding, Status, result_of
from dsv4_doctor.checks.job.verdict import Found, verdict

FIX = Fix("a fix", key="k")


def closing(**found) -> Finding:
    out = verdict(Found(**found), {"e": 1}, ["tail"], "passed text")
    assert len(out) == 1
    return out[0]


@pytest.mark.parametrize("found, status, summary, details, fixed", [
    ({"fails": ["f1", "f2"], "warns": ["w"], "unknown": ["u"], "notes": ["n"]}, Status.FAIL, "f1; f2",
     "w\nu\nn\ntail", True),
    ({"warns": ["w1", "w2"], "unknown": ["u"], "notes": ["n"]}, Status.WARN, "w1; w2", "u\nn\ntail", True),
    ({"unknown": ["u1", "u2"], "notes": ["n"]}, Status.WARN, "not known: u1; u2", "n\ntail", False),
    ({"notes": ["n1", "n2"]}, Status.PASS, "n1; n2", "tail", False),
    ({}, Status.PASS, "passed text", "tail", False),
])
def test_job_verdict_layout(found, status, summary, details, fixed):
    """The worst rank leads the summary, every rank below it follows as details; not known is a warning without the
    fixes, never a skip or a pass; the fixes go with a failure or a stated warning only."""
    finding = closing(**found, fixes=[FIX])
    assert (finding.status, finding.summary, finding.details) == (status, summary, details)
    assert list(finding.fixes) == ([FIX] if fixed else [])
    assert finding.evidence == {"e": 1}


def test_job_verdict_status_is_the_engines():
    """The closing finding's status is what the engine's rule makes of the same failures and warnings."""
    for found in ({"fails": ["f"], "warns": ["w"]}, {"warns": ["w"], "unknown": ["u"]}, {"unknown": ["u"]}):
        judged = [Finding(Status.FAIL, t) for t in found.get("fails", [])]
        judged += [Finding(Status.WARN, t) for t in found.get("warns", []) + found.get("unknown", [])]
        assert closing(**found).status is result_of(judged).status


def test_report_formats_are_listed_once():
    """The CLI's --format choices are the renderers' list itself, not a copy that can drift from it."""
    commandline = importlib.import_module("dsv4_doctor.cli.grammar")  # the package's `commandline` is a function
    shown = importlib.import_module("dsv4_doctor.report.shown")
    assert commandline.FORMATS is shown.FORMATS
