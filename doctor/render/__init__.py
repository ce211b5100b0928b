"""Renderers turn a report (a dict, already redacted) into text; the CLI decides where it goes."""

from __future__ import annotations

import json

FORMATS = ("text", "json", "markdown", "junit")
LABEL = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}


def verdict_line(report: dict) -> str:
    """The one-line verdict every format ends with (kept free of rich: JSON runs never import it)."""
    s = report["summary"]
    c = s["counts"]
    parts = [f"{c[k]} {name}" for k, name in (("fail", "failed"), ("error", "errored"), ("warn", "warned"),
                                                ("pass", "passed"), ("skip", "skipped")) if c.get(k)]
    return f"Verdict: {LABEL[s['status']]} ({', '.join(parts) or 'no checks'}; exit {s['exit_code']})"


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
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
