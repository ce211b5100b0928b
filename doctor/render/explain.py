"""`dsv4-doctor explain ID`: a check's documentation, its fixes and every upstream source, from its definition."""

from __future__ import annotations

from ..model import Check
from ..redact import Redactor


def explain_text(c: Check, redact: Redactor | None = None) -> str:
    """Redacted and cleaned: the prose line by line, each command from its argv (`Redactor.command_line`), so that
    no redaction ever rewrites a quoted command."""
    redact = redact or Redactor()
    lines: list[str | tuple[str]] = [f"{c.id}: {c.title}", f"origin: {c.origin}", f"applies when: {c.applies_when}",
                                     f"detects: {c.detects}"]
    if c.needs:
        lines.append("reads the outcome of: " + ", ".join(c.needs))
    lines += ["", c.doc(), ""]
    if c.fixes:
        lines.append("Fixes:")
        for fix in c.fixes:
            tag = f" ({fix.phase.value}{', manual' if fix.manual else ''})"
            lines.append(f"  {fix.description}{tag}")
            lines += [(f"    {redact.command_line(cmd.argv)}",) for cmd in fix.commands]  # a tuple: not redacted again
            lines += [f"    {note}" for note in fix.notes]
        lines.append("")
    lines.append("Sources:")
    lines += [f"  {s.title}" + (f": {s.url}" if s.url else "") for s in c.sources] or ["  (none)"]
    return "\n".join(line[0] if isinstance(line, tuple) else redact(line) for line in lines) + "\n"
