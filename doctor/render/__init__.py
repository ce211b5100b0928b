"""Renderers turn a report (a dict, already redacted) into text; the CLI decides where it goes."""

from __future__ import annotations

import json

FORMATS = ("text", "json", "markdown", "junit")


def render(report: dict, fmt: str, color: bool = False, width: int | None = None) -> str:
    if fmt == "json":
        return render_json(report)
    if fmt == "markdown":
        from .markdown import render_markdown

        return render_markdown(report)
    if fmt == "junit":
        from .junit import render_junit

        return render_junit(report)
    from .text import render_text

    return render_text(report, color=color, width=width)


def render_json(report: dict) -> str:
    # json.dumps only: rich's print_json honours FORCE_COLOR and would corrupt the JSON.
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"
