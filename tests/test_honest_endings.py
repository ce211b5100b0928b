"""A run that left checks out (--only, --skip, the smoke command) is no "ready to train": the verdict line says how many
were left out and by what, and the next line is a command that can be pasted as it is."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from dsv4_doctor.model.report import Report
from dsv4_doctor.report.hint import next_step

REPO = Path(__file__).resolve().parent.parent
COMPLETE = REPO / "docs" / "gpu-runs" / "2026-12-04-h200-truth" / "complete.json"


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsv4_doctor", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def test_only_and_skip_say_what_they_left_out_and_the_next_line_pastes():
    run = doctor("check", "--static-only", "--only", "python.version")
    verdict = run.stdout.rstrip().splitlines()[-1]  # at 200 columns the verdict and its next step are one line
    assert re.search(r"; \d+ checks left out \(--only\)", verdict) and "ready to train" not in run.stdout, verdict
    command = verdict.split("; next: ", 1)[1].split("  #")[0]
    assert shlex.split(command)[:2] == ["dsv4-doctor", "check"], verdict
    report = json.loads(doctor("check", "--static-only", "--skip", "python.version", "-f", "json").stdout)
    assert report["summary"]["left_out"] == {"count": 1, "by": "--skip", "checks": ["python.version"]}
    import jsonschema

    jsonschema.validate(report, json.loads((REPO / "doctor" / "schema" / "report-1.schema.json").read_text()))


def test_the_smoke_command_says_the_rest_was_left_out():
    report = json.loads(doctor("smoke", "--device", "cpu", "-f", "json", "--timeout", "30").stdout)
    left = report["summary"]["left_out"]
    assert left["by"] == "smoke" and "python.version" in left["checks"] and not any(
        c.startswith("smoke.") for c in left["checks"])


def test_ready_to_train_only_where_every_check_that_applies_ran():
    """The complete stack's own report (every check ran) ends "ready to train"; the same report with one check left
    out does not."""
    data = json.loads(COMPLETE.read_text(encoding="utf-8"))
    data["summary"].pop("left_out", None)
    data["summary"]["status"] = "pass"  # its two warnings accepted, say: the ending is what is tested
    assert next_step(Report.from_wire(data)) == "ready to train"
    data["summary"]["left_out"] = {"count": 2, "by": "--skip", "checks": ["gpu.arch", "gpu.memory"]}
    hint = next_step(Report.from_wire(data))
    assert hint.startswith("next: dsv4-doctor check ") and "2 checks were left out (--skip)" in hint
