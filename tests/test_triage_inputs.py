"""What triage reads and refuses, hostile lines, exit codes and the doctor-report tie-in, through the real CLI."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time

import pytest

from triage_helpers import triage, triage_json, validate

SECRET = "hf_" + "Zq8wLm3Rt5Yv7Xp9Kd2Fg4Hj6"


def test_fifo_device_and_symlink_loop_are_skipped_and_named_never_waited_on(tmp_path):
    (tmp_path / "rank0.log").write_text("ValueError: DSv4 Hybrid Attention only supports TP size 1.\n")
    os.mkfifo(tmp_path / "pipe.log")  # no writer: opening it for reading would block
    os.symlink("/dev/zero", tmp_path / "zero.log")  # a device: reading it never ends
    os.symlink(tmp_path / "loop-b", tmp_path / "loop-a")
    os.symlink(tmp_path / "loop-a", tmp_path / "loop-b")
    started = time.monotonic()
    done = triage(str(tmp_path), timeout=30)
    assert time.monotonic() - started < 20
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert "known cause: job.parallelism" in text.splitlines()[0]
    assert f"Not read: {tmp_path / 'pipe.log'} (a FIFO, not a regular file)" in text
    assert f"Not read: {tmp_path / 'zero.log'} (a character device, not a regular file)" in text
    assert f"Not read: {tmp_path / 'loop-a'} (a symlink loop)" in text


def test_an_unreadable_file_is_named(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads a file of mode 000")
    locked = tmp_path / "rank1.log"
    locked.write_text("RuntimeError: x\n")
    locked.chmod(0)
    assert "(not readable (permission denied))" in triage(str(tmp_path)).stdout.decode()


def test_hostile_lines_never_leak_escapes_secrets_or_unbounded_text(tmp_path, monkeypatch):
    log = tmp_path / "rank0.log"
    with open(log, "wb") as out:
        out.write(b"\x1b]0;pwned\x07\x1b[31mred\x1b[0m ::set-output name=x::y\n")
        out.write(b"x" * (10 << 20) + b" RuntimeError: in a 10 MB line\n")  # a 10 MB line
        out.write(f"RuntimeError: CUDA out of memory; HF_TOKEN={SECRET} Authorization: Bearer {SECRET}\n".encode())
        out.write(f"\x1b[2J\x1b]8;;http://evil\x07link\x1b]8;;\x07 ValueError: token {SECRET}\n".encode())
    for fmt in ("text", "json"):
        done = triage("-f", fmt, str(log), timeout=60)
        assert done.returncode == 0
        out = done.stdout.decode()
        assert SECRET not in out and "\x1b" not in out and "\x07" not in out
        assert max(len(line) for line in out.splitlines()) < 20_000
        assert not any(line.lstrip().startswith("::") for line in out.splitlines())
    result = json.loads(triage("-f", "json", str(log)).stdout)
    validate(result)
    assert result["symptoms"][0]["class"] == "oom"
    assert "***REDACTED***" in json.dumps(result)


def test_stdin_is_read_with_no_path_and_with_dash():
    log = b"[rank3]:torch.OutOfMemoryError: CUDA out of memory.\n"
    for args in ((), ("-",)):
        done = triage("-f", "json", *args, stdin=log)
        assert done.returncode == 0
        result = json.loads(done.stdout)
        assert result["first_failure"]["rank"] == 3 and result["first_failure"]["file"] == "<stdin>"


def test_no_path_and_a_terminal_on_stdin_is_a_usage_error():
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "dsv4_doctor", "triage"], stdin=terminal, capture_output=True,
                              timeout=30)
    finally:
        os.close(controller)
        os.close(terminal)
    assert done.returncode == 2
    assert b"give the logs to read" in done.stderr and done.stdout == b""


def test_output_file_and_an_unwritable_output_is_a_usage_error(tmp_path):
    (tmp_path / "a.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    target = tmp_path / "triage.json"
    done = triage("-f", "json", "-o", str(target), str(tmp_path / "a.log"))
    assert done.returncode == 0 and done.stdout == b""
    validate(json.loads(target.read_text()))
    assert triage("-o", str(tmp_path), str(tmp_path / "a.log")).returncode == 2  # a folder


def test_a_crash_part_way_still_prints_what_it_had_and_exits_3(tmp_path, monkeypatch, capsys):
    """A defect of the doctor's own (no release shows one): forced in-process, as the CLI would meet it."""
    from dsv4_doctor.triage import command

    (tmp_path / "a.log").write_text("RuntimeError: x\n")

    def broken(*_):
        raise RuntimeError("a defect")

    monkeypatch.setattr(command, "locate", broken)
    code = command.run([str(tmp_path / "a.log")], "text", None)
    out = capsys.readouterr().out
    assert code == 3
    assert out.startswith("dsv4-doctor triage: not recognised")
    assert "internal error, the triage is incomplete: RuntimeError: a defect" in out


def _report(path, rank: int, status: str, summary: str) -> None:
    """A doctor report as `check -f json -o FILE` writes it (the real CLI, one static row), then given the row of
    kernels.flash-mla and the rank a fleet run records; still valid against the report schema."""
    import jsonschema
    from pathlib import Path

    done = subprocess.run([sys.executable, "-m", "dsv4_doctor", "check", "--static-only", "--only", "python.version",
                           "--no-smoke", "-f", "json", "-o", str(path)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(path.read_text())
    row = dict(report["checks"][0], id="kernels.flash-mla", title="FlashMLA sparse forward loads (cudnn backend)",
               status=status, summary=summary)
    report["checks"].append(row)
    report["environment"]["fleet_rank"] = {"rank": rank, "local_rank": rank, "host": "node-1", "node": 0, "job": "7"}
    schema = json.loads((Path(__file__).parent.parent / "doctor" / "schema" / "report-1.schema.json").read_text())
    jsonschema.validate(report, schema)
    path.write_text(json.dumps(report))


def test_a_doctor_report_beside_the_logs_says_whether_the_failing_rank_was_warned(tmp_path):
    for rank in (0, 1):
        folder = tmp_path / "attempt_0" / str(rank)
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text("Traceback (most recent call last):\n"
                                           "ModuleNotFoundError: No module named 'flash_mla'\n" if rank == 1 else
                                           "step 1\n")
    _report(tmp_path / "doctor-rank0.json", 0, "pass", "FlashMLA loads")
    _report(tmp_path / "doctor-rank1.json", 1, "fail", "flash_mla is not installed")
    result = triage_json(str(tmp_path))
    assert result["first_failure"]["rank"] == 1 and result["causes"][0]["check"] == "kernels.flash-mla"
    (said,) = result["doctor_reports"]
    assert said["failing_rank"] and said["rank"] == 1 and said["warned"] and said["row"] == "fail"
    assert said["report"].endswith("doctor-rank1.json")
    text = triage(str(tmp_path)).stdout.decode()
    assert "Doctor report: the failing rank's doctor report" in text and "had warned: row kernels.flash-mla " \
           "was fail" in text
