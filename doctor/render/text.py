"""The human report: a table, then the details and exact fix commands of everything not passing, then a verdict.

Plain text wrapped to the output width with continuation lines indented; colour (ANSI) only when asked for. Fix
commands, and the indented lines of a fix's description (a job's line to add), are never wrapped: they must stay
copy-pastable.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from . import LABEL, cp_hint, cp_shown, shown, verdict_line

if TYPE_CHECKING:
    from ..report import Report, Row

COLOR = {"pass": "32", "warn": "33", "fail": "1;31", "skip": "2", "error": "1;35"}


def _paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    lines = []
    for para in str(text).splitlines() or [""]:
        lines += textwrap.wrap(para, width=max(20, width), initial_indent=first, subsequent_indent=rest,
                               break_long_words=True, break_on_hyphens=False, replace_whitespace=True) or [first]
        first = rest
    return lines


def profile_line(report: Report) -> str:
    p = report.profile
    arch = shown(p.get("gpu_arch"))
    if p.get("gpu_arch") and p.get("gpu_arch_source") not in (None, "unknown"):
        arch += f" ({p['gpu_arch_source']})"
    target = report.target_python
    extra = " static-only" if p.get("static_only") else ""
    fleet = report.fleet
    if fleet is not None:
        extra += (f" fleet: {fleet.get('reported')} of {fleet.get('world_size')} ranks on {fleet.get('host_count')} "
                  "host(s)")
    job = report.job
    if job is not None:
        entry = shown(job.get("entry"), "overrides only, no program" if job.get("kind") == "verl" else "unknown")
        extra += f" (from the {shown(job.get('kind'))} command: {entry})"
    hint = cp_hint(p)
    return (f"dsv4-doctor {report.doctor_version}  profile: cp={cp_shown(p)} "
            f"dsa-backend={shown(p.get('dsa_backend'))} gpu-arch={arch}{extra}  python: "
            f"{shown(target.get('executable'))} ({shown(target.get('version'))})" + (f"  ({hint})" if hint else ""))


def job_line(report: Report) -> str | None:
    """What the profile took from a training command that the rows do not say: how the DSA backend was decided,
    and the keys no check reads (names only: their values may hold secrets)."""
    p = report.profile
    job = report.job
    if job is None:
        return None
    line = f"job: dsa-backend {shown(p.get('dsa_backend'))} ({shown(job.get('dsa_backend_decided'))})"
    if isinstance(job.get("read_by"), str):
        line += f"; settings {shown(job['read_by'])}"
        if isinstance(job.get("checked_against"), str):
            line += f", overrides checked against {shown(job['checked_against'])}"
    if isinstance(job.get("cp_given"), int):
        line += f"; cp {job['cp_given']} from --cp (the command's own is not known)"
    if job.get("not_known"):
        line += f"; not known: {shown(job.get('not_known'))}"
    unknown = [str(k) for k in job.get("unknown") or [] if isinstance(k, str)]
    given = job.get("unknown_count")
    count = given if isinstance(given, int) else len(unknown)
    if unknown:
        shown_keys = ", ".join(unknown[:8]) + (f" (+{count - 8} more)" if count > 8 else "")
        line += f"; not read by any check: {shown_keys}"
    return line


def _sources(c: Row) -> str:
    if not c.sources:
        return ""
    first = c.sources[0].title or c.sources[0].url
    more = f" (+{len(c.sources) - 1} more)" if len(c.sources) > 1 else ""
    return f"Sources: {first}{more}; all in `dsv4-doctor explain {c.id}`"


def fleet_lead(report: Report) -> list[str]:
    """A fleet report's first lines: the odd ranks and hosts, and what to do about each (the rows say the rest)."""
    fleet = report.fleet
    if fleet is None:
        return []
    lines = []
    ranks = report.row("fleet.ranks")
    ranks_evidence = ranks.evidence if ranks is not None else {}
    for item in ranks_evidence.get("ranks") or []:
        if isinstance(item, dict):
            lines.append(f"rank {item.get('rank')} ({item.get('host') or 'host unknown'}): {item.get('why')}; look "
                         "at that rank's stderr and its node")
    if ranks_evidence.get("exchange_error"):
        lines.append(f"the exchange: {ranks_evidence['exchange_error']}")
    drift = report.row("fleet.drift")
    odd: dict[str, list[str]] = {}
    for diff in ((drift.evidence if drift is not None else {}).get("differences") or [])[:8]:
        if not isinstance(diff, dict):
            continue
        if diff.get("split"):
            sides = " vs ".join(f"{s.get('value')} on rank(s) {s.get('ranks')} ({', '.join(s.get('hosts') or [])})"
                                for s in diff["split"][:3])
            lines.append(f"{diff.get('what')}: an even split, {sides}; decide which side is right, then give every "
                         "node that image")
            continue
        majority = (diff.get("majority") or {}).get("value")
        for side in diff.get("odd") or []:
            where = f"rank(s) {side.get('ranks')} ({', '.join(side.get('hosts') or [])})"
            odd.setdefault(where, []).append(f"{diff.get('what')} is {side.get('value')}, not {majority}")
    for where, whats in odd.items():
        more = f" (and {len(whats) - 2} more differences)" if len(whats) > 2 else ""
        lines.append(f"{where}: {'; '.join(whats[:2])}{more}, as on the rest; re-pull that node's image or fix its "
                     "PYTHONPATH")
    if not lines:
        return [f"Fleet: all {fleet.get('world_size')} ranks reported and agree"]
    return ["Fleet: look first at"] + ["  " + line for line in lines[:12]] + (
        [f"  ... {len(lines) - 12} more (see fleet.ranks and fleet.drift)"] if len(lines) > 12 else [])


def render_text(report: Report, color: bool = False, width: int = 100) -> str:
    out = _wrap(profile_line(report), width, "", "  ")
    job = job_line(report)
    if job:
        out += _wrap(job, width, "", "  ")
    for line in fleet_lead(report):
        out += _wrap(line, width, "", "      ")
    checks = report.checks
    id_width = max([len(c.id) for c in checks] + [5])
    head = f"{'Status':<7} {'Check':<{id_width}}  "
    out.append(_paint(head + "Summary", "1", color))
    indent = " " * len(head)
    narrow = width - len(indent) < 40  # a summary column this thin would break words: summaries go below
    for c in checks:
        status = c.status.value
        label = f"{LABEL[status]:<7}"
        if narrow:
            rows = [_paint(label, COLOR[status], color) + f" {c.id}"] + _wrap(c.summary, width, "    ", "    ")
        else:
            rows = _wrap(c.summary, width, indent, indent)
            rows[0] = _paint(label, COLOR[status], color) + f" {c.id:<{id_width}}  " + rows[0][len(indent):]
        out += rows
    for c in checks:
        status = c.status.value
        if status in ("pass", "skip"):
            continue
        out.append("")
        prefix = f"{LABEL[status]} {c.id}"
        header = _wrap(f"{prefix}: {c.title}", width, "", "    ")
        if header[0].startswith(prefix):
            header[0] = _paint(prefix, COLOR[status], color) + header[0][len(prefix):]
        out += header
        out += _wrap(c.summary, width, "  ", "    ")
        for line in c.details.rstrip().splitlines():
            # An indented line is preformatted (a command, a job setting, a quoted log line): never wrapped.
            out += ["  " + line] if line.startswith("  ") else _wrap(line, width, "  ", "    ")
        for fix in c.fixes:
            tag = " (manual)" if fix.manual else ""
            first, *more = fix.description.splitlines() or [""]
            out += _wrap(f"Fix{tag}: {first}", width, "  ", "    ")
            # An indented line of a description is preformatted (a job's line to add): never wrapped.
            for line in more:
                out += ["    " + line.strip()] if line.startswith("  ") else _wrap(line, width, "    ", "    ")
            out += ["    " + cmd for cmd in fix.commands]  # never wrapped: copy-pastable
            out += _wrap(" ".join(fix.notes), width, "    ", "    ") if fix.notes else []
        if c.sources:
            out += _wrap(_sources(c), width, "  ", "    ")
    from ..registry import plugin_row_id

    row_ids = {c.id for c in checks}
    for p in report.plugins:
        # A plugin that failed to load has its own `plugin.<name>` row; the line is for reports without one.
        if p.error and plugin_row_id(p.name or "") not in row_ids:
            out += _wrap(f"Plugin {p.name} from {p.distribution} failed to load: {p.error}", width, "", "  ")
    settings = report.job_settings
    cp_args = settings.get("cp_args") if settings else None
    block = cp_args if isinstance(cp_args, dict) else {}
    if settings and (block.get("missing") or settings.get("exports")):
        from ..job.settings import comment_lines

        out += [""] + _wrap("Job settings (for the training command and the job script; the doctor never runs "
                            "them):", width, "", "  ")
        for line in comment_lines(settings):
            out += ["  " + line] if line.startswith("  ") else _wrap(line, width, "  ", "    ")
    out.append("")
    out += [_paint(line, COLOR[report.summary.status.value], color)
            for line in _wrap(verdict_line(report), width, "", "  ")]
    return "\n".join(line.rstrip() for line in out) + "\n"
