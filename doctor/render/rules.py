"""`dsv4-doctor list`, and the rules table of docs/rules.md generated from the check definitions (`list --format
markdown`)."""

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


def render_listing(checks, plugins, fmt: str) -> str:
    """`dsv4-doctor list`: the checks (and plugins that failed to load) as text, JSON or docs/rules.md's table."""
    import json

    from ..redact import Redactor

    redact = Redactor()
    if fmt == "json":
        rows = [{"id": c.id, "title": c.title, "origin": c.origin, "applies_when": c.applies_when} for c in checks]
        listed = [dict(p.to_dict(), warnings=list(p.warnings)) for p in plugins]
        return json.dumps(redact({"checks": rows, "plugins": listed}), indent=2) + "\n"
    if fmt == "markdown":
        return rules_table(checks)
    width = max([len(c.id) for c in checks] + [5])
    title = max([len(c.title) for c in checks] + [5])
    lines = [redact(f"{c.id:<{width}}  {c.title:<{title}}  {c.origin:<14}  {c.applies_when}") for c in checks]
    lines += [redact(f"plugin {p.name} ({p.distribution}) failed to load: {p.error}") for p in plugins if p.error]
    lines += [redact(f"plugin {p.name} ({p.distribution}) warning: {w}") for p in plugins for w in p.warnings]
    return "".join(line + "\n" for line in lines)
