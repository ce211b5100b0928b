"""Markdown for pasting into an issue: a verdict, a table, and details folded away."""

from __future__ import annotations

import json

from . import LABEL, verdict_line

MAX_CHARS = 60000  # GitHub rejects bodies over 65,536 characters


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict) -> str:
    p = report.get("profile", {})
    env = report.get("environment", {})
    target = env.get("target_python", {})
    out = [
        "### dsv4-doctor report",
        "<!-- Paste this whole block into your issue. Secrets were redacted. -->",
        "",
        f"**{verdict_line(report)}**",
        "",
        f"dsv4-doctor {report['doctor']['version']} · cp={p.get('cp')} · dsa-backend={p.get('dsa_backend')} · "
        f"gpu-arch={p.get('gpu_arch') or 'unknown'} ({p.get('gpu_arch_source')}) · "
        f"python {target.get('version') or '?'} (`{target.get('executable')}`)",
        "",
        "| Status | Check | Summary |",
        "|---|---|---|",
    ]
    for c in report["checks"]:
        out.append(f"| {LABEL[c['status']]} | `{c['id']}` | {_cell(c['summary'])} |")
    problems = [c for c in report["checks"] if c["status"] not in ("pass", "skip")]
    if problems:
        out += ["", "<details><summary>Details and fixes</summary>", ""]
        for c in problems:
            out.append(f"#### {LABEL[c['status']]} `{c['id']}`: {c['title']}")
            out.append("")
            out.append(c["summary"])
            if c.get("details"):
                out += ["", "```text", c["details"].rstrip(), "```"]
            for fix in c.get("fixes", []):
                out += ["", f"Fix: {fix['description']}"]
                if fix["commands"]:
                    out += ["", "```sh", *fix["commands"], "```"]
            if c.get("sources"):
                out += ["", "Sources: " + "; ".join(s["url"] or s["title"] for s in c["sources"])]
            out.append("")
        out.append("</details>")
    out += ["", "<details><summary>Environment</summary>", "", "```json",
            json.dumps({"environment": env, "plugins": report.get("plugins", [])}, indent=2), "```", "", "</details>"]
    text = "\n".join(out) + "\n"
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 200] + "\n\n…(truncated to fit an issue body; use --format json for all)\n"
    return text
