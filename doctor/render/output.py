"""Where a report goes: stdout or --output for `check`, stderr and --report for `preflight`; the stderr lines the
commands say. Every write survives a closed or broken stream; rendering is the renderers' (render())."""

from __future__ import annotations

import contextlib
import os
import sys

from ..model import ExitCode, UsageError


def check_output_path(path: str | None, option: str = "--output") -> None:
    """A report file that cannot be written is a usage error, said before any work."""
    if path is None:
        return
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a directory")
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
        # A FIFO would block the finished run until some reader appears; a socket cannot be opened at all.
        raise UsageError(f"{option} {path!r} is not a regular file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path!r}: {parent} is not a directory")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path!r} is not writable")
    elif not os.access(parent, os.W_OK):
        raise UsageError(f"{option} {path!r}: {parent} is not writable")


def say(message: str) -> None:
    from ..redact import clean_text

    if sys.stderr is None:  # started with stderr closed
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(clean_text(message) + "\n")
        sys.stderr.flush()


def write_stdout(text: str) -> bool:
    """Write to stdout; False when there is none (started with it closed) or it broke."""
    if sys.stdout is None:
        return False
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    except (OSError, ValueError):
        return False


def isatty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False


def emit(report: dict, fmt: str, output: str | None) -> int:
    """Write the report; its exit code, or 4 when --output could not be written (the report then goes to stdout)."""
    from . import output_width, render, verdict_line
    from .github import emit as annotate

    code = report["summary"]["exit_code"]
    to_tty = output is None and isatty(sys.stdout)
    color = fmt == "text" and to_tty and not os.environ.get("NO_COLOR")
    text = render(report, fmt, color=color, width=output_width(to_tty))
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
            say(verdict_line(report) + f" (report written to {output})")
        except OSError as exc:
            say(f"dsv4-doctor: could not write the report to {output}: {exc}; it follows on stdout")
            write_stdout(render(report, fmt, width=output_width(False)))
            code = max(code, int(ExitCode.OUTPUT))
    elif not write_stdout(text):
        say("dsv4-doctor: could not write the report: stdout is closed or broken; use --output FILE")
        code = max(code, int(ExitCode.OUTPUT))
    if sys.stderr is not None:
        annotate(report, sys.stderr)
    return code


def preflight_report(report: dict, path: str | None) -> int:
    """The report to stderr (the job's stdout is the job's), and to `path` (--report) as JSON; its exit code."""
    import json

    from . import output_width, render

    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(render(report, "text", width=output_width(False)))
            sys.stderr.flush()
    if path:
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            say(f"dsv4-doctor preflight: could not write the report to {path}: {exc}")
    return int(report["summary"]["exit_code"])
