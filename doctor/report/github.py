"""GitHub Actions: workflow-command annotations (on stderr, so stdout stays pure) and the step summary."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..hostio.redact import shorten

if TYPE_CHECKING:
    from ..model.report import Report

MAX_PER_LEVEL = 10  # GitHub shows at most 10 error and 10 warning annotations per step
MAX_MESSAGE = 4000
SUMMARY_CAP = 1024 * 1024 - 4096


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_annotations(report: Report) -> list[str]:
    order = {"error": 0, "fail": 1, "warn": 2}
    rows = sorted((c for c in report.checks if c.status.value in order), key=lambda c: order[c.status.value])
    lines, per_level = [], {"error": 0, "warning": 0}
    for c in rows:
        level = "warning" if c.status.value == "warn" else "error"
        if per_level[level] >= MAX_PER_LEVEL:
            continue
        per_level[level] += 1
        message = c.summary
        cmds = [cmd for fix in c.fixes for cmd in fix.commands]
        if cmds:
            message += "\nFix: " + "\n".join(cmds)
        message = shorten(message, MAX_MESSAGE)
        lines.append(f"::{level} title={_escape_property('dsv4-doctor (' + c.id + ')')}::{_escape_data(message)}")
    return lines


def emit(report: Report, say_raw: Callable[[str], object], append: Callable[[str, str], str | None],
         environ=None) -> None:
    """Under GitHub Actions: the annotations through `say_raw` (stderr; each line is escaped data already) and the
    markdown report appended to $GITHUB_STEP_SUMMARY through `append` (the output layer's bounded file write,
    which returns why it failed or None)."""
    environ = os.environ if environ is None else environ
    if environ.get("GITHUB_ACTIONS") != "true":
        return
    lines = workflow_annotations(report)
    if lines:
        say_raw("\n".join(lines) + "\n")
    summary_path = environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        from .markdown import render_markdown

        text = render_markdown(report)
        if len(text.encode("utf-8")) > SUMMARY_CAP:
            # At a line's end: never through a word (redact.cut's rule), and no markup left open mid-line.
            head = text.encode("utf-8")[:SUMMARY_CAP].decode("utf-8", errors="ignore")
            text = head.rpartition("\n")[0] + "\n…(truncated)\n"
        why = append(summary_path, text + "\n")
        if why is not None:
            from ..hostio.redact import clean_text

            say_raw(clean_text(f"dsv4-doctor: could not write the step summary: {why}") + "\n")
