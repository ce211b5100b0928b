"""The plain-text parts of the human report that need no rich: the job line and the fleet's lead lines (the grouped
report itself is report/terminal.py, for a terminal and a pipe alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shown import shown

if TYPE_CHECKING:
    from ..model.report import Report

def long_pole_line(report: Report) -> str | None:
    """-v: the probe the run waited for last (summary.critical_path), or None."""
    path = report.summary.critical_path or {}
    probe, ran, ended = path.get("probe"), path.get("ran_s"), path.get("ended_at_s")
    if not isinstance(probe, str) or not isinstance(ran, (int, float)) or not isinstance(ended, (int, float)):
        return None
    return f"Long pole: probe {probe} ran {float(ran):.1f} s, ending {float(ended):.1f} s after the doctor started"


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
