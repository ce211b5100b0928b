"""The rules table in README, generated from the check definitions (`dsv4-doctor list --format markdown`)."""

from __future__ import annotations


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rules_table(checks) -> str:
    lines = ["| id | applies when | detects | fix |", "|---|---|---|---|"]
    for c in checks:
        fixes = []
        for fix in c.fixes:
            fixes += [f"`{_cell(cmd)}`" for cmd in fix.commands] or [_cell(fix.description)]
        lines.append(f"| `{c.id}` | {_cell(c.applies_when)} | {_cell(c.detects)} | {'<br>'.join(fixes) or '—'} |")
    return "\n".join(lines) + "\n"
