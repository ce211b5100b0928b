"""The typed Report (doctor/model/report.py): its wire form is the JSON report byte for byte, everything a renderer
reads went through the Redactor, and the fix planner reads the checks' own fixes from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4_doctor.report.assemble import assemble
from dsv4_doctor.model.core import CheckReport, Command, Fix, Profile, Source, Status
from dsv4_doctor.model.report import Report

from conftest import run_doctor, validate

H200_RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-runs" / "2026-12-02-h200-b"


def _same_bytes(wire: dict) -> None:
    """Typing a wire form and writing it back gives the same JSON text, key order included."""
    again = Report.from_wire(wire).to_dict()
    assert json.dumps(again, indent=2, ensure_ascii=False) == json.dumps(wire, indent=2, ensure_ascii=False)


def test_the_wire_form_of_a_real_run_survives_typing_byte_for_byte(bare_python):
    run = run_doctor("check", "--static-only", "-f", "json", "--cp", "2", python=bare_python)
    wire = validate(json.loads(run.stdout))
    _same_bytes(wire)
    report = Report.from_wire(wire)
    assert report.exit_code == wire["summary"]["exit_code"] == 1
    assert [c.id for c in report.checks] == [c["id"] for c in wire["checks"]]
    failing = next(c for c in report.checks if c.status is Status.FAIL and c.fixes)
    assert all(isinstance(line, str) for fix in failing.fixes for line in fix.commands)


@pytest.mark.parametrize("path", sorted(H200_RUN.glob("*/*.json")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_h200_reports_survive_typing_byte_for_byte(path):
    wire = json.loads(path.read_text())
    if wire.get("schema") != "dsv4-doctor.report/1":
        pytest.skip("not a report")
    _same_bytes(wire)


def test_a_fleet_report_survives_typing_byte_for_byte():
    from hostile import fleet_merge, hostile_report

    a, b = hostile_report()[0].to_dict(), hostile_report(passing=True)[0].to_dict()
    for rank, wire in ((0, a), (1, b)):
        wire["environment"]["fleet_rank"] = {"rank": rank, "host": f"node{rank}"}
    merged = fleet_merge({0: a, 1: b})
    assert merged.fleet is not None and merged.fleet["world_size"] == 2
    _same_bytes(merged.to_dict())


def test_interrupted_and_budget_fields_come_back_in_their_order():
    row = CheckReport(id="a.b", title="t", status=Status.PASS, summary="fine")
    report = assemble(Profile(), [row], [], {}, False, 1.23456, budget_s=42.04, interrupted="SIGINT",
                      exit_override=130)
    wire = report.to_dict()
    assert list(wire["summary"]) == ["status", "exit_code", "strict", "counts", "duration_s", "internal_errors",
                                     "budget_s", "interrupted"]
    assert wire["summary"]["exit_code"] == 130 and report.summary.interrupted == "SIGINT"
    _same_bytes(wire)


# --- redaction: nothing a renderer reads is unredacted ----------------------------------------------------------

SECRET = "s3cr3t-Value-9f8e7d"
TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123"


def _secret_report(monkeypatch) -> Report:
    """A report whose every text holds a secret: by value (this process's secret-named variable), by shape (an HF
    token) and by name (`password=`), in the summary, details, evidence, a fix and the environment section."""
    monkeypatch.setenv("DSV4_TEST_PASSWORD", SECRET)
    monkeypatch.setenv("NCCL_SOCKET_TOKEN", SECRET)  # a relevant variable: listed in the environment section
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"0,{SECRET}")
    leak = f"{SECRET} {TOKEN} password=hunter2hunter2"
    fix = Fix(f"install it {leak}", [Command(("pip", "install", "--index-url", f"https://u:{SECRET}@h/simple", "x")),
                                     Command(("pip", "install", "y==1"))], notes=[leak])
    rows = [CheckReport(id="a.fail", title=f"t {leak}", status=Status.FAIL, summary=f"bad {leak}",
                        details=f"log line {leak}", evidence={"stderr": leak, "api_key": "plain-looking"},
                        fixes=[fix], sources=[Source(f"src {TOKEN}", f"https://x.invalid/{TOKEN}")]),
            CheckReport(id="a.warn", title="w", status=Status.WARN, summary=f"warn {leak}", details=leak)]
    from dsv4_doctor.report.assemble import relevant_variables

    env = {"target_python": {"executable": f"/opt/{SECRET}/python", "version": "3.12"},
           "variables": relevant_variables()}
    return assemble(Profile(cp=2), rows, [], env, False, 0.1)


def _every_format(report: Report, monkeypatch, tmp_path) -> dict[str, str]:
    from dsv4_doctor.fix import plan as fixplan
    from dsv4_doctor.report.dispatch import render
    from dsv4_doctor.report.github import emit as annotate
    from dsv4_doctor.report.script import render_script
    from dsv4_doctor.report.terminal import render_terminal

    out = {fmt: render(report, fmt) for fmt in ("text", "json", "markdown", "junit")}
    out["terminal"] = render_terminal(report, verbosity=3, color=True)
    out["script"] = render_script(fixplan.plan_of(report), "/usr/bin/python3", report.profile, "0",
                                  job_settings=report.job_settings)
    summary = tmp_path / "summary.md"
    said: list[str] = []
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    annotate(report, said.append, lambda path, body: Path(path).write_text(body) and None,
             environ={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    out["annotations"] = "".join(said)
    out["step summary"] = summary.read_text()
    return out


def test_a_secret_anywhere_in_a_run_reaches_no_format(monkeypatch, tmp_path):
    report = _secret_report(monkeypatch)
    outputs = _every_format(report, monkeypatch, tmp_path)
    for fmt, text in outputs.items():
        assert text.strip(), fmt
        for secret in (SECRET, TOKEN, "hunter2hunter2", "plain-looking"):
            assert secret not in text, (fmt, secret)
    assert "bad " in outputs["text"] and "install it" in outputs["script"]
    # What is typed is the redacted form: the rows, the environment and the shown fixes.
    row = report.row("a.fail")
    assert row is not None and SECRET not in repr(row) and TOKEN not in repr(report.environment)
    assert "held a secret" in row.fixes[0].commands[0] and row.fixes[0].commands[1] == "pip install y==1"


def test_the_planner_reads_the_checks_own_fixes_and_no_renderer_reads_them(monkeypatch, tmp_path):
    """Report.actions keeps the real command (`fix --apply` runs it); it is not part of any output."""
    from dsv4_doctor.fix import plan as fixplan

    report = _secret_report(monkeypatch)
    plan = fixplan.plan_of(report)
    argv = [c.argv for step in plan.steps for c in step.commands]
    assert ("pip", "install", "--index-url", f"https://u:{SECRET}@h/simple", "x") in argv
    assert plan.steps[0].checks == ["a.fail"] and plan.steps[0].automatic
    assert "actions" not in report.to_dict() and SECRET not in repr(report)


def test_the_doctor_s_own_rows_are_no_fix_plan_s_business():
    """A run that crashed (doctor.internal) or was interrupted before any check (doctor.interrupted) has a plan
    with nothing in it: `incomplete` says why, not "no fix is known for doctor.internal"."""
    from dsv4_doctor.fix import plan as fixplan

    crash = CheckReport(id="doctor.internal", title="dsv4-doctor ran", status=Status.ERROR, summary="crashed",
                        internal_error=True)
    report = assemble(Profile(), [crash], [], {}, False, 0.0)
    plan = fixplan.plan_of(report)
    assert plan.steps == [] and plan.unfixable == []
    assert fixplan.incomplete(report) == "dsv4-doctor crashed before the checks ran (see `dsv4-doctor check`)"
