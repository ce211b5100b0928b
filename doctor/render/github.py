"""GitHub Actions: workflow-command annotations (on stderr, so stdout stays pure) and the step summary."""

from __future__ import annotations

import os
from typing import TextIO

MAX_PER_LEVEL = 10  # GitHub shows at most 10 error and 10 warning annotations per step
MAX_MESSAGE = 4000
SUMMARY_CAP = 1024 * 1024 - 4096


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_annotations(report: dict) -> list[str]:
    order = {"error": 0, "fail": 1, "warn": 2}
    rows = sorted((c for c in report["checks"] if c["status"] in order), key=lambda c: order[c["status"]])
    lines, per_level = [], {"error": 0, "warning": 0}
    for c in rows:
        level = "warning" if c["status"] == "warn" else "error"
        if per_level[level] >= MAX_PER_LEVEL:
            continue
        per_level[level] += 1
        message = c["summary"]
        cmds = [cmd for fix in c.get("fixes", []) for cmd in fix["commands"]]
        if cmds:
            message += "\nFix: " + "\n".join(cmds)
        message = message[:MAX_MESSAGE]
        lines.append(f"::{level} title={_escape_property('dsv4-doctor (' + c['id'] + ')')}::{_escape_data(message)}")
    return lines


def emit(report: dict, stderr: TextIO, environ=None) -> None:
    environ = os.environ if environ is None else environ
    if environ.get("GITHUB_ACTIONS") != "true":
        return
    for line in workflow_annotations(report):
        stderr.write(line + "\n")
    summary_path = environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        from .markdown import render_markdown

        text = render_markdown(report)
        if len(text.encode("utf-8")) > SUMMARY_CAP:
            text = text.encode("utf-8")[:SUMMARY_CAP].decode("utf-8", errors="ignore") + "\n…(truncated)\n"
        try:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        except OSError as exc:
            stderr.write(f"dsv4-doctor: could not write the step summary: {exc}\n")
