"""A generator of hostile environments for the hardening tests: every command and every output format, run against
every way an output can fail, with the same hostile inputs.

- `RUNS`: (command, format) for every command and each of its formats, and `argv_for` builds its command line.
- `STDOUT_FAULTS` / `FILE_FAULTS`: stdout full (/dev/full), closed, or a pipe nobody reads; an `-o`/`--report`
  that is a full device, a directory, a FIFO, a socket, under a regular file, or relative in a deleted working
  directory.
- `hostile_report`: a real report (report.assemble, redaction included) whose every text is hostile: shell syntax,
  markup, workflow commands, terminal escapes, lone surrogates, real-looking tokens and this process's secrets.
- `run_in_process`: the CLI's main() in this process, its streams on the given file descriptors, the run itself
  replaced by `hostile_report` (the output layer, the renderers and the exit codes are what these tests try).
- `fleet_merge`: rank reports through the fleet merge as rank 0 does it (merge, sanitize, redact), for renderers.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsv4_doctor.model.report import Report

SECRET_ENV = {"HF_TOKEN": "hf_SecretValueOfTheJob0123456789", "WANDB_API_KEY": "wandb-secret-0123456789abcdef"}
TOKENS = ["hf_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
          "sk-abcdefghijklmnopqrstuvwxyz012345", "AKIAABCDEFGHIJKLMNOP", SECRET_ENV["HF_TOKEN"]]
HOSTILE = ["$(touch /tmp/pwn-a)", "`touch /tmp/pwn-b`", "[bold red]markup[/]", "</details><details open>",
           "\n# heading\n", "\n::error::injected", "\n  ::warning file=x::injected", "\n##[error]legacy",
           "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "\ud800 lone", "\x01\x02", "\u202eevil",
           "password=hunter2secret", "Authorization: Bearer abcdefgh12345678"] + TOKENS

RUNS = [("check", f) for f in ("text", "json", "markdown", "junit")] + \
       [("smoke", f) for f in ("text", "json", "markdown", "junit")] + \
       [("list", f) for f in ("text", "json", "markdown")] + \
       [("fix", "script"), ("preflight", "text"), ("explain", "text")]
REPORTING = [r for r in RUNS if r[0] in ("check", "smoke")]  # the commands with -o/--output
STDOUT_FAULTS = ["full", "closed", "unread"]
FILE_FAULTS = ["full", "directory", "fifo", "socket", "under-a-file", "deleted-cwd"]


def argv_for(command: str, fmt: str, python: str, output: str | None = None) -> list[str]:
    if command in ("check", "smoke"):
        return [command, "-f", fmt, "--python", python] + (["-o", output] if output else [])
    if command == "list":
        return ["list", "-f", fmt]
    if command == "explain":
        return ["explain", "python.version"]
    if command == "fix":
        return ["fix", "--python", python]
    return ["preflight", "--dry-run", "--python", python] + (["--report", output] if output else []) + \
        ["--", "python3", "train.py", "--hf-token", TOKENS[0], "actor.password=hunter2secret"]


def hostile_text() -> str:
    return " ".join(HOSTILE)


def hostile_report(passing: bool = False) -> tuple[Report, list]:
    """(report, the live CheckReports): one row per status, every text hostile; `passing`: no failing row."""
    from dsv4_doctor.model.core import CheckReport, Fix, Profile, Status
    from dsv4_doctor.hostio.redact import sanitize
    from dsv4_doctor.report.assemble import assemble

    text = hostile_text()
    statuses = [Status.PASS, Status.WARN, Status.SKIP] + ([] if passing else [Status.FAIL, Status.ERROR])
    rows = [CheckReport(id=f"hostile.{s.value}", title=text, status=s, summary=text, details=text,
                        evidence=sanitize({"stderr_tail": text, "env": dict(SECRET_ENV)}),
                        fixes=[Fix(text, [["pip", "install", "torch==2.11.0"], ["pip", "install", TOKENS[0]]])]
                        if s is Status.FAIL else [])
            for s in statuses]
    report = assemble(Profile(), rows, [], {"target_python": {"executable": text, "version": text}}, False, 0.0)
    return report, rows


def fleet_merge(reports: dict[int, dict]) -> Report:
    """Rank reports (their wire form) merged as rank 0 does it, in the doctor process: each admitted (validated,
    bounded) from its bytes as the store delivers them (rank 0's own as its dict), then doctor/fleet/merge.py's
    merge."""
    import json

    from dsv4_doctor.fleet import merge as fleetmerge

    own = fleetmerge.admit(0, reports[0])
    others = {r: fleetmerge.admit(r, json.dumps(rep).encode()) for r, rep in reports.items() if r != 0}
    merged, _code = fleetmerge.merge(own, others, len(reports), {}, False)
    return merged


def full_pipe() -> tuple[int, int]:
    """(read end, write end) of a pipe whose buffer is already full: nobody reads it."""
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(w, b"x" * 65536)
    fcntl.fcntl(w, fcntl.F_SETFL, flags)
    return r, w


def fifo_nobody_reads(path: Path) -> int:
    """A FIFO with a reader that never reads and a full buffer; returns the reader's fd (close it after)."""
    os.mkfifo(path)
    keep = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(keep, b"x" * 65536)
    return keep


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def stream_on(fault: str | None, tmp: Path, name: str):
    """A text stream for sys.stdout/sys.stderr with the given fault; yields (stream or None, path of its capture)."""
    capture = tmp / f"{name}.capture"
    if fault is None:
        fh = open(capture, "w+", encoding="utf-8", errors="surrogateescape")
        try:
            yield fh, capture
        finally:
            fh.close()
    elif fault == "full":
        fh = open("/dev/full", "w", encoding="utf-8")
        try:
            yield fh, None
        finally:
            with contextlib.suppress(OSError):
                fh.close()
    elif fault == "closed":
        yield None, None
    elif fault == "unread":
        r, w = full_pipe()
        fh = os.fdopen(w, "w", encoding="utf-8")
        try:
            yield fh, None
        finally:
            os.close(r)  # first: what the stream still buffers then fails (EPIPE) instead of blocking the close
            with contextlib.suppress(OSError):
                fh.close()
    else:
        raise ValueError(fault)


def file_target(fault: str, tmp: Path) -> str:
    """An -o / --report path with the given fault."""
    if fault == "full":
        return "/dev/full"
    if fault == "directory":
        return str(tmp)
    if fault == "fifo":
        path = tmp / "report.fifo"
        os.mkfifo(path)
        return str(path)
    if fault == "socket":
        import socket

        path = tmp / "report.sock"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()  # the socket file stays
        return str(path)
    if fault == "under-a-file":  # what no permission lets anyone write (the tests may run as root)
        (tmp / "a-file").write_text("")
        return str(tmp / "a-file" / "report.out")
    if fault == "deleted-cwd":
        gone = tmp / "gone"
        gone.mkdir()
        os.chdir(gone)
        gone.rmdir()
        return "report.out"
    raise ValueError(fault)


HANG_S = 20


class Hung(Exception):
    pass


def _hung(signum, frame):
    raise Hung(f"the in-process run took over {HANG_S} s (a write blocked?)")


def run_in_process(command: str, fmt: str, tmp: Path, stdout: str | None = None, stderr: str | None = None,
                   file_fault: str | None = None, passing: bool = False, environ: dict | None = None,
                   argv: list[str] | None = None) -> Outcome:
    """The CLI in this process, with hostile_report as the run's result, the given stream faults and an -o /
    --report with `file_fault`; `argv` replaces the command line argv_for builds (its --python is the target a fix
    plan's pip steps run with)."""
    import pytest

    from dsv4_doctor.commands import usecases as app
    from dsv4_doctor.cli import main as cli
    from dsv4_doctor.report import output
    from dsv4_doctor.hostio.signals import GATE

    report, _ = hostile_report(passing)

    def fake_run(opts, profile, only, skip, strict, progress):
        return report

    cwd = os.getcwd()
    GATE.late = None
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(app, "run_report", fake_run)
            mp.setattr(cli, "_start_early", lambda words: False)  # the run's first probes: the run is replaced
            mp.setattr(output, "IDLE_TIMEOUT", 0.3, raising=False)
            mp.setattr(output, "_given_up", {}, raising=False)
            for k in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS",
                      "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"):
                mp.delenv(k, raising=False)
            for k, v in {**SECRET_ENV, **(environ or {})}.items():
                mp.setenv(k, v)
            target = file_target(file_fault, tmp) if file_fault else None
            line = argv if argv is not None else argv_for(command, fmt, sys.executable, target)
            with stream_on(stdout, tmp, "stdout") as (out, out_path), \
                    stream_on(stderr, tmp, "stderr") as (err, err_path):
                mp.setattr(sys, "stdout", out)
                mp.setattr(sys, "stderr", err)
                mp.setattr(sys, "stdin", io.StringIO(""))
                # A run that hangs (a write that blocks) fails the test instead of the whole session.
                previous = signal.signal(signal.SIGALRM, _hung)
                signal.alarm(HANG_S)
                try:
                    cli.main(line)
                    code = 0
                except SystemExit as exc:
                    code = int(exc.code or 0)
                finally:
                    signal.alarm(0)
                    signal.signal(signal.SIGALRM, previous)
                for fh in (out, err):
                    if fh is not None:
                        with contextlib.suppress(OSError, ValueError):
                            fh.flush()
                read = [p.read_text(encoding="utf-8", errors="surrogateescape") if p else ""
                        for p in (out_path, err_path)]
    finally:
        os.chdir(cwd)
        GATE.late = None
    return Outcome(code, read[0], read[1])
