"""The human report: a table, then the details and exact fix commands of everything not passing, then a verdict.

Everything data-derived is a rich `Text` on a console with markup off: a fix like `pip install 'pkg[extra]'` must
print exactly as written.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import LABEL, verdict_line

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim", "error": "bold magenta"}


def _profile_line(report: dict) -> str:
    p = report.get("profile", {})
    arch = p.get("gpu_arch") or "unknown"
    target = report.get("environment", {}).get("target_python", {})
    return (
        f"dsv4-doctor {report['doctor']['version']}  profile: cp={p.get('cp')} dsa-backend={p.get('dsa_backend')} "
        f"gpu-arch={arch} ({p.get('gpu_arch_source')})  python: {target.get('executable')} "
        f"({target.get('version') or '?'})"
    )


def render_text(report: dict, color: bool = False, width: int | None = None) -> str:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, markup=False, emoji=False,
                      highlight=False, width=width or 160, soft_wrap=False)
    console.print(Text(_profile_line(report), style="bold"))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("Status", no_wrap=True)
    table.add_column("Check", no_wrap=True)
    table.add_column("Summary", overflow="fold")
    for c in report["checks"]:
        table.add_row(Text(LABEL[c["status"]], style=STYLE[c["status"]]), Text(c["id"]), Text(c["summary"]))
    console.print(table)
    for c in report["checks"]:
        if c["status"] in ("pass", "skip"):
            continue
        console.print()
        head = Text(f"{LABEL[c['status']]} {c['id']}", style=STYLE[c["status"]])
        head.append(f": {c['title']}", style="bold")
        console.print(head)
        console.print(Text("  " + c["summary"]))
        if c.get("details"):
            for line in c["details"].rstrip().splitlines():
                console.print(Text("  " + line), soft_wrap=True)
        for fix in c.get("fixes", []):
            console.print(Text("  Fix: " + fix["description"], style="bold"))
            for cmd in fix["commands"]:
                console.print(Text("    " + cmd, style="cyan"), soft_wrap=True)
        if c.get("sources"):
            console.print(Text("  Sources: " + "; ".join(s["url"] or s["title"] for s in c["sources"]), style="dim"),
                          soft_wrap=True)
    if report.get("plugins"):
        for p in report["plugins"]:
            if p.get("error"):
                console.print(Text(f"Plugin {p['name']} from {p['distribution']} failed to load: {p['error']}",
                                   style="bold magenta"), soft_wrap=True)
    console.print()
    console.print(Text(verdict_line(report), style=STYLE[report["summary"]["status"]]))
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
