"""The report written out: the grouped terminal report or the asked format, to stdout, --output, preflight's stderr
and --report, with the annotations; the command's exit code, 4 when the report could not be written. Every byte goes
through the writer (report/output.py), which knows nothing of reports or renderers.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from ..model.core import ExitCode
from .output import isatty, say, write_file, write_stderr, write_stdout
from .shown import output_width, verdict_line

if TYPE_CHECKING:
    from ..model.report import Report


def wants_terminal_report(stream) -> bool:
    """Whether a text report to `stream` is the grouped terminal report: on a terminal, or when FORCE_COLOR asks
    for what a terminal gets. Anything else (a pipe, a file, a test) keeps the plain text report."""
    return isatty(stream) or bool(os.environ.get("FORCE_COLOR"))


def terminal_report(report: Report, stream, verbosity: int) -> str:
    """The grouped terminal report for `stream`: its width, ASCII glyphs unless it takes UTF-8, colour unless
    NO_COLOR is set. Imported here so that only this report ever loads rich."""
    from ..hostio.redact import neutralize_workflow_commands
    from .terminal import render_terminal

    return neutralize_workflow_commands(render_terminal(
        report, verbosity, width=output_width(isatty(stream)), color=not os.environ.get("NO_COLOR"),
        encoding=str(getattr(stream, "encoding", None) or "ascii")))


def emit(report: Report, fmt: str, output: str | None, verbosity: int = 0) -> int:
    """Write the report; its exit code, or 4 when it could not be written (to --output: it then goes to stdout)."""
    from .dispatch import render
    from .github import emit as annotate

    code = report.exit_code
    to_tty = output is None and isatty(sys.stdout)
    color = fmt == "text" and to_tty and not os.environ.get("NO_COLOR")
    if fmt == "text" and output is None and wants_terminal_report(sys.stdout):
        text = terminal_report(report, sys.stdout, verbosity)
    else:
        encoding = str(getattr(sys.stdout, "encoding", None) or "ascii") if output is None else "utf-8"
        text = render(report, fmt, color=color, width=output_width(to_tty), verbosity=verbosity, encoding=encoding)
    if output:
        why = write_file(output, text)
        if why is None:
            say(verdict_line(report) + f" (report written to {output})")
        else:
            say(f"dsv4-doctor: could not write the report to {output}: {why}; it follows on stdout")
            write_stdout(render(report, fmt, width=output_width(False), verbosity=verbosity,
                                encoding=str(getattr(sys.stdout, "encoding", None) or "ascii")))
            code = max(code, int(ExitCode.OUTPUT))
    elif not write_stdout(text):
        say("dsv4-doctor: could not write the report: stdout is closed, broken or not read; use --output FILE")
        code = max(code, int(ExitCode.OUTPUT))
    annotate(report, say_raw=write_stderr, append=lambda path, body: write_file(path, body, append=True))
    return code


def preflight_report(report: Report, path: str | None, verbosity: int = 0) -> int:
    """The report to stderr (the job's stdout is the job's), and to `path` (--report) as JSON; its exit code.
    Neither write decides whether the job starts: a report that could not be written is said, when stderr works."""
    from .dispatch import render

    if wants_terminal_report(sys.stderr):
        write_stderr(terminal_report(report, sys.stderr, verbosity))
    else:
        write_stderr(render(report, "text", width=output_width(False), verbosity=verbosity,
                            encoding=str(getattr(sys.stderr, "encoding", None) or "ascii")))
    if path:
        why = write_file(path, json.dumps(report.to_dict(), indent=2) + "\n")
        if why is not None:
            say(f"dsv4-doctor preflight: could not write the report to {path}: {why}")
    return report.exit_code


def emit_versions(report: Report, fmt: str, output: str | None) -> int:
    """`check --versions`: the versions block alone (text; json: `environment.versions`; markdown: its fence) to
    stdout or --output. Exit 0 once written (the block is no verdict), 4 when it could not be; a crash of the doctor
    (3) or a signal (128 + N) keeps its code."""
    from .versions import markdown_lines, of_report, report_lines

    if fmt == "json":
        text = json.dumps(of_report(report), indent=2, ensure_ascii=False) + "\n"
    else:
        text = "\n".join(markdown_lines(report)[:-1] if fmt == "markdown" else report_lines(report)) + "\n"
    code = report.exit_code if report.exit_code == int(ExitCode.INTERNAL) or report.exit_code >= 128 else 0
    if output:
        why = write_file(output, text)
        if why is None:
            return code
        say(f"dsv4-doctor: could not write the versions to {output}: {why}; they follow on stdout")
        code = max(code, int(ExitCode.OUTPUT))
    if not write_stdout(text):
        say("dsv4-doctor: could not write the versions: stdout is closed, broken or not read; use --output FILE")
        code = max(code, int(ExitCode.OUTPUT))
    return code
