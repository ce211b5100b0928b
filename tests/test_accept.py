"""Accepted warnings (--accept, DSV4_DOCTOR_ACCEPT, [tool.dsv4-doctor] accept): a healthy stack's known warnings no
longer fail a --strict gate, everything else still does; stale and unknown acceptances are said, never silent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4_doctor.engine.accept import Acceptance, apply, config_file, gather, parse
from dsv4_doctor.model.core import ExitCode, UsageError, exit_code_for
from dsv4_doctor.model.report import Report, row_from_wire

REPO = Path(__file__).resolve().parent.parent
COMPLETE = REPO / "docs" / "gpu-runs" / "2026-12-04-h200-truth" / "complete.json"
KNOWN = ("deps.consistency:megatron-bridge pins megatron-core[dev,mlm] while Megatron is a checkout",
         "libs.loaded:cuDNN and NCCL from the image and from the wheels")


def doctor(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsv4_doctor", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, **(env or {})})


def test_the_gate_passes_the_committed_complete_stack_with_its_two_warnings_accepted_and_fails_with_one_left_out():
    """The H200 complete stack's own report (two explained warnings), through the verdict code every run uses."""
    rows = [row_from_wire(c) for c in json.loads(COMPLETE.read_text(encoding="utf-8"))["checks"]]
    assert sorted(r.id for r in rows if r.status.value == "warn") == ["deps.consistency", "libs.loaded"]
    assert exit_code_for(rows, strict=True) is ExitCode.FAILED
    both = [parse(entry, "--accept") for entry in KNOWN]
    marked, said = apply(rows, both)
    assert exit_code_for(marked, strict=True) is ExitCode.OK and all(a["applied"] for a in said)
    one, _ = apply(rows, both[:1])
    assert exit_code_for(one, strict=True) is ExitCode.FAILED


def test_a_failure_is_never_accepted():
    rows = [row_from_wire(c) for c in json.loads(
        (COMPLETE.parent / "arch-10.0.json").read_text(encoding="utf-8"))["checks"]]
    marked, said = apply(rows, [parse("kernels.flash-mla:we know", "--accept")])
    assert exit_code_for(marked, strict=False) is ExitCode.FAILED
    assert said == [{"id": "kernels.flash-mla", "reason": "we know", "from": "--accept", "applied": False,
                     "status": "fail"}]
    assert all(r.accepted is None for r in marked if r.id == "kernels.flash-mla")


@pytest.mark.parametrize("entry", ["nodot", "Deps.Copies", "deps.copies:" + "x" * 201, "deps.copies:bell\x07",
                                   "../etc.passwd", ""])
def test_a_malformed_acceptance_is_a_usage_error(entry):
    with pytest.raises(UsageError):
        parse(entry, "--accept")


def test_sources_the_command_line_first_then_the_variable_then_the_nearest_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.dsv4-doctor]\naccept = ["libs.loaded:file", '
                                             '{id = "gpu.memory", reason = "shared GPU"}]\n')
    below = tmp_path / "a" / "b"
    below.mkdir(parents=True)
    found = gather(["libs.loaded:cli"], {"DSV4_DOCTOR_ACCEPT": "deps.copies:one; gpu.arch"}, str(below))
    assert [(a.id, a.reason, a.origin) for a in found] == [
        ("libs.loaded", "cli", "--accept"), ("deps.copies", "one", "DSV4_DOCTOR_ACCEPT"),
        ("gpu.arch", "", "DSV4_DOCTOR_ACCEPT"), ("gpu.memory", "shared GPU", str(tmp_path / "pyproject.toml"))]
    # A pyproject.toml without the table is not the config; a dsv4-doctor.toml nearer is.
    (below / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert config_file(str(below)) == str(tmp_path / "pyproject.toml")
    (below.parent / "dsv4-doctor.toml").write_text('accept = ["deps.consistency"]\n')
    assert config_file(str(below)) == str(below.parent / "dsv4-doctor.toml")


def test_a_broken_config_file_is_a_usage_error_naming_it(tmp_path):
    (tmp_path / "dsv4-doctor.toml").write_text("accept = [\n")
    with pytest.raises(UsageError, match="dsv4-doctor.toml"):
        gather(None, {}, str(tmp_path))
    (tmp_path / "dsv4-doctor.toml").write_text('accept = "libs.loaded"\n')
    with pytest.raises(UsageError, match="must be a list"):
        gather(None, {}, str(tmp_path))


def test_an_unknown_id_is_a_usage_error_and_a_stale_one_is_said_in_the_report(tmp_path):
    done = doctor("check", "--static-only", "--only", "python.version", "--accept", "no.such-check", cwd=tmp_path)
    assert done.returncode == 2 and "no check 'no.such-check'" in done.stderr
    done = doctor("check", "--static-only", "--only", "python.version", "--strict", "-f", "json", cwd=tmp_path,
                  env={"DSV4_DOCTOR_ACCEPT": "python.version:was a warning once"})
    report = json.loads(done.stdout)
    assert report["summary"]["accepted"] == [{"id": "python.version", "reason": "was a warning once",
                                              "from": "DSV4_DOCTOR_ACCEPT", "applied": False,
                                              "status": report["checks"][0]["status"]}]
    text = doctor("check", "--static-only", "--only", "python.version", cwd=tmp_path,
                  env={"DSV4_DOCTOR_ACCEPT": "python.version:was a warning once", "COLUMNS": "200"}).stdout
    assert "accepted but not a warning here: python.version" in text


def test_an_accepted_warning_is_marked_in_every_format_and_no_longer_fails_strict(tmp_path, bare_python):
    """A real warning: an interpreter without triton makes kernels.triton warn (apply_rope_fusion would fail)."""
    base = ("check", "--static-only", "--python", bare_python, "--only", "kernels.triton", "--strict")
    strict = doctor(*base, "-f", "json", cwd=tmp_path)
    assert strict.returncode == 1 and json.loads(strict.stdout)["checks"][0]["status"] == "warn"
    accept = ("--accept", "kernels.triton:no RoPE fusion in this image")
    passed = doctor(*base, *accept, "-f", "json", cwd=tmp_path)
    report = json.loads(passed.stdout)
    assert passed.returncode == 0 and report["summary"]["exit_code"] == 0
    assert report["checks"][0]["accepted"] == {"reason": "no RoPE fusion in this image", "from": "--accept"}
    assert report["summary"]["accepted"][0]["applied"] is True
    assert Report.from_wire(report).checks[0].accepted == report["checks"][0]["accepted"]  # read back, typed
    import jsonschema

    jsonschema.validate(report, json.loads((REPO / "doctor" / "schema" / "report-1.schema.json").read_text()))
    text = doctor(*base, *accept, cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    assert "[accepted: no RoPE fusion in this image (from --accept)]" in text
    assert "1 warned, 1 of them accepted" in text.splitlines()[-2] + text.splitlines()[-1]
    assert 'failures="0"' in doctor(*base, *accept, "-f", "junit", cwd=tmp_path).stdout
    markdown = doctor(*base, *accept, "-f", "markdown", cwd=tmp_path).stdout
    assert "no RoPE fusion in this image" in markdown and "of them accepted" in markdown


def test_acceptance_is_plain_data(tmp_path):
    assert Acceptance("a.b", "r", "x").to_dict() == {"id": "a.b", "reason": "r", "from": "x"}


def test_a_hostile_config_file_never_stalls_the_gate_or_passes_it(tmp_path):
    """A FIFO named dsv4-doctor.toml is no config file (never opened: nothing waits on it, nothing is accepted); a file
    past 1 MiB and one of 101 entries are usage errors naming it."""
    import time

    fifo = tmp_path / "fifo" / "dsv4-doctor.toml"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    start = time.monotonic()
    assert gather(None, {}, str(fifo.parent)) == () and time.monotonic() - start < 5
    big = tmp_path / "big" / "dsv4-doctor.toml"
    big.parent.mkdir()
    big.write_text("accept = []\n# " + "x" * (1 << 20) + "\n")
    with pytest.raises(UsageError, match="dsv4-doctor.toml"):
        gather(None, {}, str(big.parent))
    many = tmp_path / "many" / "dsv4-doctor.toml"
    many.parent.mkdir()
    many.write_text("accept = [" + ", ".join(f'"a.b{i}"' for i in range(101)) + "]\n")
    with pytest.raises(UsageError, match="at most 100"):
        gather(None, {}, str(many.parent))
