"""Markdown for pasting into an issue (and the GitHub step summary): a verdict, a table, details folded away.

Text from the inspected environment or a plugin never becomes live markdown or HTML: inline it is escaped
character by character (`plain`) or put in a code span (`code`), multi-line it goes in a fence longer than any
backtick run inside it (`fence`). Only the doctor's own fixed text appears inside HTML elements.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from .versions import markdown_lines
from .shown import LABEL, accepted_shown, cp_hint, cp_shown, fixes_shown, level_shown, shown, verdict_line

if TYPE_CHECKING:
    from ..model.report import Report

MAX_CHARS = 60000  # GitHub rejects bodies over 65,536 characters
# The characters that can start markup anywhere in a line (emphasis, code, links, images, HTML, entities, headings,
# lists, setext underlines, tables, strikethrough); every ASCII punctuation character may be backslash-escaped.
# Also `:` and `@` and the dot of `www.`: GitHub turns bare URLs, www. addresses, e-mails and @mentions into links.
_PUNCT = re.compile(r"([\\`*_{}\[\]()<>#+\-!|~&=:@])")
_WWW = re.compile(r"(?i)\b(www)\.")
_TICKS = re.compile(r"`+")


def plain(text) -> str:
    """Inline text shown as is: no markup, no HTML, no line structure, safe in a table cell."""
    return _WWW.sub(r"\1\\.", _PUNCT.sub(r"\\\1", " ".join(shown(text, "").split())))


def code(text) -> str:
    """An inline code span that holds `text` whatever backticks it contains (pipes escaped for tables)."""
    text = " ".join(shown(text, "").split()).replace("|", "\\|")
    ticks = "`" * (max((len(m) for m in _TICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: str, info: str = "text") -> list[str]:
    ticks = "`" * max(3, max((len(m) for m in _TICKS.findall(text)), default=0) + 1)
    return [ticks + info, *str(text).rstrip().splitlines(), ticks]


def render_markdown(report: Report) -> str:
    p = report.profile
    target = report.target_python
    arch = shown(p.get("gpu_arch")) + (f" ({p['gpu_arch_source']})" if p.get("gpu_arch") else "")
    out = [
        "### dsv4-doctor report",
        "<!-- Paste this whole block into your issue. Secrets were redacted. -->",
        "",
        *markdown_lines(report),  # what was found, first
        f"**{plain(verdict_line(report))}**",
        "",
        f"dsv4-doctor {plain(report.doctor_version)} · cp={plain(cp_shown(p))} · "
        f"dsa-backend={plain(p.get('dsa_backend'))} · gpu-arch={plain(arch)} · "
        + (f"{level_shown(p).strip()} · " if level_shown(p) else "")  # from a bool: nothing to escape
        + f"python {plain(shown(target.get('version')))} ({code(target.get('executable'))})"
        + (f" · {plain(target['why'])}" if isinstance(target.get("why"), str) and report.job is not None else "")
        + (f" · {plain(cp_hint(p))}" if cp_hint(p) else ""),
        "",
    ]
    from .text import job_line

    job = job_line(report)
    if job:
        out += [plain(job), ""]
    out += [
        "| Status | Check | Summary |",
        "|---|---|---|",
    ]
    for c in report.checks:
        said = f" ({plain(accepted_shown(c))})" if c.accepted else ""
        out.append(f"| {LABEL[c.status.value]} | {code(c.id)} | {plain(c.summary)}{said} |")
    problems = [c for c in report.checks if c.status.value not in ("pass", "skip")]
    if problems:
        out += ["", "<details><summary>Details and fixes</summary>", ""]
        for c in problems:
            out += [f"#### {LABEL[c.status.value]} {code(c.id)}: {plain(c.title)}", "", plain(c.summary)]
            if c.details:
                out += ["", *fence(c.details)]
            for fix in fixes_shown(report, c):  # without a step the fix plan drops as already met
                out += ["", f"Fix{' (manual)' if fix.manual else ''}: {plain(fix.description)}"]
                if fix.commands:
                    out += ["", *fence("\n".join(fix.commands), "sh")]
            if c.sources:
                out += ["", "Sources: " + "; ".join(code(s.url or s.title) for s in c.sources)]
            out.append("")
        out.append("</details>")
    env_json = json.dumps({"environment": dict(report.environment),
                           "plugins": [p.to_dict() for p in report.plugins]}, indent=2)
    out += ["", "<details><summary>Environment</summary>", "", *fence(env_json, "json"), "", "</details>"]
    text = "\n".join(out) + "\n"
    return text if len(text) <= MAX_CHARS else truncate(text, MAX_CHARS - 200)


def truncate(text: str, limit: int) -> str:
    """Cut at a line boundary, then close whatever fence and <details> the cut left open."""
    kept, size, ticks, details = [], 0, "", 0
    for line in text.splitlines():
        if size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
        run = len(line) - len(line.lstrip("`"))
        if ticks and line.strip() == ticks:
            ticks = ""
        elif not ticks and run >= 3:
            ticks = "`" * run
        elif not ticks:
            details += line.count("<details>") - line.count("</details>")
    closing = ([ticks] if ticks else []) + ["</details>"] * max(0, details)
    return "\n".join(kept + closing + ["", "…(truncated to fit an issue body; use --format json for all)"]) + "\n"
