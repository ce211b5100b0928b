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


def render_listing(checks, plugins, fmt: str, width: int = 100) -> str:
    """`dsv4-doctor list`: the checks (and plugins that failed to load) as text, JSON or docs/rules.md's table. Text
    fits `width`: a header, each check's id and title, then when it applies on the line below; its origin only when a
    plugin, not the doctor, brings it."""
    import json
    import textwrap

    from ..hostio.redact import Redactor

    redact = Redactor()
    if fmt == "json":
        rows = [{"id": c.id, "title": c.title, "origin": c.origin, "applies_when": c.applies_when} for c in checks]
        listed = [dict(p.to_dict(), warnings=list(p.warnings)) for p in plugins]
        return json.dumps(redact({"checks": rows, "plugins": listed}), indent=2) + "\n"
    if fmt == "markdown":
        return rules_table(checks)
    width = max(40, width)
    id_width = min(max([len(c.id) for c in checks] + [5]), width // 3)
    indent = " " * (id_width + 2)

    def wrapped(text: str, first: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent, break_on_hyphens=False) \
            or [first.rstrip()]

    lines = [f"{'Check':<{id_width}}  What it checks; when it applies"]
    for c in checks:
        origin = f" (from {c.origin})" if c.origin != "dsv4-doctor" else ""  # a plugin's check says whose it is
        title = redact(c.title + origin)
        if len(c.id) > id_width:  # an id too long for its column: on a line of its own
            lines += [redact(c.id)] + wrapped(title, indent)
        else:
            lines += wrapped(title, f"{redact(c.id):<{id_width}}  ")
        lines += wrapped(f"when: {redact(c.applies_when)}", indent)
    lines += [redact(f"plugin {p.name} ({p.distribution}) failed to load: {p.error}") for p in plugins if p.error]
    lines += [redact(f"plugin {p.name} ({p.distribution}) warning: {w}") for p in plugins for w in p.warnings]
    return "".join(line.rstrip() + "\n" for line in lines)
