"""`dsv4-doctor explain ID`: a check's documentation, its fixes and every upstream source, from its definition.

Prose is wrapped to the output width the text report uses (the terminal's, COLUMNS when piped, else 100), with
continuation lines indented; a check's explanation is reflowed (its source breaks lines at its own width). Commands
and URLs are never wrapped or broken: they stay copy-pastable, on a line of their own when they do not fit.
"""

from __future__ import annotations

import re
import textwrap

from ..model.core import Check
from ..hostio.redact import Redactor
from .shown import DEFAULT_WIDTH

_ITEM = re.compile(r"(?:[-*]|\d{1,3}[.)])\s")  # a list item starts a paragraph of its own


def _wrap(text: str, width: int, first: str = "", rest: str = "  ") -> list[str]:
    """One paragraph; a word longer than the line (a URL) stays whole on a line of its own."""
    return textwrap.wrap(text, width=max(20, width), initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def _reflow(doc: str, width: int) -> list[str]:
    """Paragraphs (blank-line separated; a list item starts one) reflowed; indented lines are kept as they are."""
    out: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            out.extend(_wrap(" ".join(para), width))
            para.clear()

    for line in doc.splitlines():
        if not line.strip():
            flush()
            out.append("")
        elif line[:1].isspace():  # preformatted: a command, a quoted log line
            flush()
            out.append(line.rstrip())
        else:
            if _ITEM.match(line):
                flush()
            para.append(line.strip())
    flush()
    return out


def _source(title: str, url: str, width: int) -> list[str]:
    line = f"  {title}: {url}" if url else f"  {title}"
    if len(line) <= width:
        return [line]
    lines = _wrap(title + (":" if url else ""), width, "  ", "    ")
    return lines + ([f"    {url}"] if url else [])


def _with_env(cmd, line: str) -> str:
    """The command as it is run: its environment first (a withheld command stays the withheld comment)."""
    return line if line.startswith("#") else cmd.env_prefix() + line


def explain_text(c: Check, width: int = DEFAULT_WIDTH, redact: Redactor | None = None) -> str:
    """Redacted and cleaned piece by piece before it is wrapped (a wrap never splits a secret from the word that names
    it); each command is printed from its argv (`Redactor.command_line`) and never redacted again as a whole."""
    red = redact or Redactor()

    def r(text: str) -> str:
        return str(red(text))

    lines = _wrap(r(f"{c.id}: {c.title}"), width) + _wrap(r(f"origin: {c.origin}"), width) + \
        _wrap(r(f"applies when: {c.applies_when}"), width) + _wrap(r(f"detects: {c.detects}"), width)
    if c.needs:
        lines += _wrap(r("needs (skipped when one fails): " + ", ".join(c.needs)), width)
    if c.after:
        lines += _wrap(r("runs after: " + ", ".join(c.after)), width)
    lines += [""] + _reflow(r(c.doc()), width) + [""]
    if c.fixes:
        lines.append("Fixes:")
        for fix in c.fixes:
            tag = f" ({fix.phase.value}{', manual' if fix.manual else ''})"
            lines += _wrap(r(f"{fix.description}{tag}"), width, "  ", "    ")
            lines += [f"    {_with_env(cmd, red.command_line(cmd.argv))}" for cmd in fix.commands]  # never wrapped
            for note in fix.notes:
                lines += _wrap(r(note), width, "    ", "      ")
        lines.append("")
    if c.texts:
        lines += _wrap("Upstream texts (how the doctor recognises this rule's errors; … marks a variable part):", width)
        for t in c.texts:
            lines += _wrap(r(f"{t.id} ({t.kind}): {t.shown()}"), width, "  ", "    ")
            lines.append("    " + (r(t.source.url) or r(t.source.title)))  # a URL is never wrapped
        lines.append("")
    lines.append("Sources:")
    for s in c.sources:
        lines += _source(r(s.title), r(s.url), width)
    if not c.sources:
        lines.append("  (none)")
    return "\n".join(lines) + "\n"
