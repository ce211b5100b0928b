"""`python -m dsv4_doctor.commands.gendocs > docs/checks.md`: every built-in rule's page, generated from its definition.

Grouped by area in report order (`Registry.areas`); per rule its id, title, when it applies, what it detects, its
explanation (the docstring), its fixes with their exact commands, the checks it needs or runs after, its upstream error
texts and its sources.
Nothing is written by hand, so the page cannot drift from the code (tests/test_gendocs.py compares them).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from ..model.core import Check
from ..report.markdown import code, fence, plain

_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_URL = re.compile(r"https?://[^\s<>()]+")
_ITEM = re.compile(r"(?:[-*]|\d{1,3}[.)])\s")


def _inline(text: str) -> str:
    """Prose as Markdown: its `code spans` kept, everything else shown as is (no markup, no HTML)."""
    out, last = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_escaped(text[last:m.start()]))
        out.append(code(m.group(2)))
        last = m.end()
    out.append(_escaped(text[last:]))
    return "".join(out)


def _escaped(chunk: str) -> str:
    if not chunk.strip():
        return " " if chunk else ""
    return (" " if chunk[:1].isspace() else "") + plain(chunk) + (" " if chunk[-1:].isspace() else "")


def _explanation(doc: str) -> list[str]:
    """The docstring's paragraphs, each one line; indented lines (a command, a log line) as a code block."""
    out: list[str] = []
    para: list[str] = []
    pre: list[str] = []

    def flush() -> None:
        if para:
            out.extend([_inline(" ".join(para)), ""])
            para.clear()
        if pre:
            out.extend([*fence("\n".join(pre)), ""])
            pre.clear()

    for line in doc.splitlines():
        if not line.strip():
            flush()
        elif line[:1].isspace():
            if para:
                flush()
            pre.append(line.strip())
        else:
            if pre or _ITEM.match(line):
                flush()
            para.append(line.strip())
    flush()
    return out


def _source(title: str, url: str) -> str:
    if url and _URL.fullmatch(url):
        return f"- [{plain(title)}](<{url}>)"
    return f"- {plain(title)}" + (f": {code(url)}" if url else "")


def rule_page(c: Check) -> list[str]:
    lines = [f"### {code(c.id)}: {plain(c.title)}", "", f"- **Applies when:** {_inline(c.applies_when)}",
             f"- **Detects:** {_inline(c.detects)}"]
    if c.needs:
        lines.append("- **Needs** (skipped when one fails): " + ", ".join(code(n) for n in c.needs))
    if c.after:
        lines.append("- **Runs after:** " + ", ".join(code(n) for n in c.after))
    lines += ["", *_explanation(c.doc())]
    if c.fixes:
        lines += ["**Fixes**", ""]
        for fix in c.fixes:
            tag = fix.phase.value + (", manual" if fix.manual else "")
            lines.append(f"- {_inline(fix.description)} ({tag})")
            if fix.commands:
                lines += ["", *("  " + line for line in fence("\n".join(cmd.shell() for cmd in fix.commands),
                                                               "sh")), ""]
            lines += [f"  {_inline(note)}" for note in fix.notes]
        lines.append("")
    if c.texts:
        lines += ["**Upstream texts** (how a message is classified back to this rule; `…` marks a variable part)", ""]
        for t in c.texts:
            where = f"[{plain(t.source.title)}](<{t.source.url}>)" if _URL.fullmatch(t.source.url) else \
                plain(t.source.title)
            lines.append(f"- {code(t.id)} ({plain(t.kind)}): {code(t.shown())}, {where}")
        lines.append("")
    lines += ["**Sources**", "", *(_source(s.title, s.url) for s in c.sources), ""]
    return lines


def render_docs(checks: list[Check], areas: Sequence[str]) -> str:
    """The pages of `checks`, grouped by their area (`Check.area`), the areas in `areas`' order (the registry's)."""
    by_area: dict[str, list[Check]] = {area: [] for area in areas}
    for c in checks:
        by_area.setdefault(c.area or c.id.split(".", 1)[0], []).append(c)
    lines = ["# Checks", "",
             "Every built-in rule of dsv4-doctor, by area in report order. Generated from the check definitions by",
             "`python -m dsv4_doctor.commands.gendocs > docs/checks.md`; do not edit by hand. "
             "`dsv4-doctor explain ID` prints",
             "the same page in a terminal.", ""]
    lines += [f"- [{area}](#{area}): " + ", ".join(code(c.id) for c in found) for area, found in by_area.items()
              if found]
    lines.append("")
    for area, found in by_area.items():
        if not found:
            continue
        lines += [f"## {area}", ""]
        for c in found:
            lines += rule_page(c)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def main() -> int:
    from ..engine.registry import load

    registry = load()
    problems = [b.error for b in registry.builtins if b.error]
    if problems:
        print("; ".join(problems), file=sys.stderr)
        return 1
    sys.stdout.write(render_docs(registry.checks, registry.areas))
    return 0


if __name__ == "__main__":
    sys.exit(main())
