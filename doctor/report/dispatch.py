"""Renderers turn a Report (model/report.py: typed, made from the redacted and cleaned wire form) into text, and the fix
plan into its shell script (report/script.py); the CLI decides where it goes. Only the JSON renderer sees the wire form.

No renderer imports anything heavy, and every text format passes one last step: no line of output can start a
GitHub Actions workflow command, whatever wrapping did to it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ..hostio.redact import neutralize_workflow_commands
from .shown import (  # noqa: F401  (the package's names for its callers: the CLI, the fix plan, the fleet)
    DEFAULT_WIDTH, FORMATS, LABEL, MAX_WIDTH, MIN_WIDTH, clamp_width, cp_assumed, cp_hint, cp_shown,
    fixes_shown, level_shown, output_width, python_why, shown, verdict_line)

if TYPE_CHECKING:
    from ..model.report import Report


def render(report: Report, fmt: str, color: bool = False, width: int = DEFAULT_WIDTH, verbosity: int = 0,
           encoding: str = "utf-8") -> str:
    """The report in `fmt`. Text is the grouped report a terminal shows, for a pipe, a file or a log too (verdict
    first, the rows that need attention cut to one rule, passes and skips counted; `verbosity` 1 every row in full,
    2 with its evidence, 3 with its sources)."""
    if fmt == "json":
        return render_json(report)
    if fmt == "markdown":
        from .markdown import render_markdown

        out = render_markdown(report)
    elif fmt == "junit":
        from .junit import render_junit

        out = render_junit(report)
    else:
        from .terminal import render_terminal

        out = render_terminal(report, verbosity, width=width, color=color, encoding=encoding)
    return neutralize_workflow_commands(out)


def render_json(report: Report) -> str:
    # The wire form, through json.dumps only: nothing that honours FORCE_COLOR touches the JSON.
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


class NoDisplay:
    """The on_event of a run nobody watches live (a pipe, JSON, a fleet rank other than 0)."""

    def __call__(self, event: str, check_id: str, detail: str | None = None) -> None:
        pass

    def stop(self) -> None:
        pass


def live_display(enabled: bool):
    """The runner's on_event with `stop()`: the live display on stderr (report/live.py, which imports rich) when
    `enabled`, else nothing. Colour unless NO_COLOR; the terminal's width, or COLUMNS (else 100) when stderr is no
    terminal (FORCE_COLOR)."""
    if not enabled:
        return NoDisplay()
    import sys

    from .output import isatty

    try:
        from .live import LiveDisplay

        return LiveDisplay(color=not os.environ.get("NO_COLOR"),
                           width=None if isatty(sys.stderr) else output_width(False),
                           encoding=str(getattr(sys.stderr, "encoding", None) or "ascii"))
    except Exception:  # cosmetic: a display that cannot start never costs the run
        return NoDisplay()
