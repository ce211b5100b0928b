"""The rules table in README, generated from the check definitions (`dsv4-doctor list --format markdown`)."""

from __future__ import annotations

from .markdown import code, plain


def rules_table(checks) -> str:
    lines = ["| id | applies when | detects | fix |", "|---|---|---|---|"]
    for c in checks:
        fixes = []
        for fix in c.fixes:
            fixes += [code(cmd.shell()) for cmd in fix.commands] or [plain(fix.description)]
        lines.append(f"| {code(c.id)} | {plain(c.applies_when)} | {plain(c.detects)} | {'<br>'.join(fixes) or '—'} |")
    return "\n".join(lines) + "\n"
