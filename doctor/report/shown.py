"""What every human format shows the same way: a value never as None, the verdict line, the profile's parts, a row's
fixes, the width of a report. A leaf of the renderers: it imports none of them, so each renderer and the dispatcher
(`render`, in the package) import it and no renderer imports the package back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model.report import Report

FORMATS = ("text", "json", "markdown", "junit")  # the report formats: `render` writes each, the CLI offers them
LABEL = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}
DEFAULT_WIDTH = 100
MIN_WIDTH, MAX_WIDTH = 40, 400  # COLUMNS and a terminal's size are clamped to this, never refused


def shown(value, unknown: str = "unknown") -> str:
    """A value for human-readable output: never Python's None."""
    if value is None or value == "":
        return unknown
    return str(value)


def verdict_line(report: Report) -> str:
    """The one-line verdict every human format ends with."""
    s = report.summary
    parts = [f"{s.count(k)} {name}" for k, name in (("fail", "failed"), ("error", "errored"), ("warn", "warned"),
                                                     ("pass", "passed"), ("skip", "skipped")) if s.count(k)]
    applied = [a for a in s.accepted if a.get("applied")]
    if applied:
        parts.insert(parts.index(f"{s.count('warn')} warned") + 1, f"{len(applied)} of them accepted")
    stale = [str(a.get("id")) for a in s.accepted if not a.get("applied")]
    extra = f"; interrupted by {s.interrupted}" if s.interrupted else ""
    nothing = "nothing was checked: " if s.status.value == "skip" else ""
    unread = f"; the job's command was not read ({s.job_not_read})" if s.job_not_read else ""
    fleet = report.fleet if isinstance(report.fleet, Mapping) else {}
    fields = fleet.get("runtime_env_not_applied")
    if isinstance(fields, list) and fields:
        unread += (f"; the job's runtime_env {', '.join(str(f) for f in fields[:16])} not applied to the nodes' "
                   "checks: their environment rows are not known")
    if stale:
        unread += f"; accepted but not a warning here: {', '.join(stale[:16])}"
    if s.left_out:
        unread += f"; {s.left_out.get('count')} checks left out ({s.left_out.get('by')})"
    return (f"Verdict: {LABEL[s.status.value]} ({nothing}{', '.join(parts) or 'no checks'}; exit {s.exit_code}"
            f"{extra}){unread}")


def accepted_shown(row: Any) -> str:
    """A row's acceptance as the human formats show it beside its status: `accepted: REASON (from WHERE)`."""
    acc = row.accepted
    if not acc:
        return ""
    reason = acc.get("reason") or "no reason given"
    return f"accepted: {reason} (from {acc.get('from')})"


def python_why(report: Report) -> str | None:
    """For a job's command, the interpreter the stack rows judged and why (the command's, --python's, or the
    doctor's own and why the command's is not known), as the report's first line says it; otherwise None: the
    versions block leads with the interpreter."""
    target = report.target_python
    why = target.get("why")
    if not isinstance(why, str) or not why or report.job is None:
        return None
    return f"python {shown(target.get('executable'))} ({shown(target.get('version'))}), {why}"


def fixes_shown(report: Report, row: Any) -> list:
    """A row's fixes as the text and markdown reports show them: without a command whose requirement the copy the job
    imports already meets, as the fix plan drops it (fixmet.fixes_to_run). A report read back from a file has no
    installed versions: all its fixes are shown."""
    fixes = list(row.fixes)
    if not report.installed or not any(f.argv for f in fixes):
        return fixes
    from ..fix.met import fixes_to_run

    return fixes_to_run(fixes, report.installed)


def cp_assumed(profile: Mapping[str, Any]) -> bool:
    """Whether the CP size came from neither --cp nor the job's command line (a report without `cp_source`, from
    before the field: CP 1 and no job)."""
    if "cp_source" in profile:
        return profile.get("cp_source") == "default"
    return profile.get("cp") == 1 and not isinstance(profile.get("job"), dict)


def cp_shown(profile: Mapping[str, Any]) -> str:
    """The CP size with where it came from, as the report's first line says it."""
    cp = shown(profile.get("cp"))
    job = profile.get("job") if isinstance(profile.get("job"), dict) else None
    if job is not None and job.get("cp_known") is False:
        return f"{cp} (not known: checked as CP > 1)"
    if profile.get("cp_source") == "job":
        return f"{cp} (from the job)"
    return cp


def level_shown(profile: Mapping[str, Any]) -> str:
    """The smoke's level as the profile line says it (" level=default" or " level=deep"); nothing for a report from
    before the field, or where no smoke runs (--no-smoke, --static-only, no GPU seen and no --device: the smoke's
    own skip, smoke.thd-cp's not_run)."""
    if not isinstance(profile.get("deep"), bool) or profile.get("smoke") == "off" or profile.get("static_only"):
        return ""
    if profile.get("smoke") == "auto" and profile.get("device") == "auto" and not profile.get("gpus"):
        return ""
    return " level=deep" if profile["deep"] else " level=default"


def cp_hint(profile: Mapping[str, Any]) -> str | None:
    """What to do about a CP size the doctor assumed."""
    return f"CP {shown(profile.get('cp'))} assumed: pass --cp N" if cp_assumed(profile) else None


def output_width(is_tty: bool) -> int:
    """The terminal's width on a terminal; COLUMNS when piped; else 100; clamped to MIN_WIDTH-MAX_WIDTH (a
    COLUMNS of 1000000000 made every line a gigabyte)."""
    import shutil

    if is_tty:
        try:
            return clamp_width(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)  # COLUMNS first, too
        except (ValueError, OverflowError, OSError):
            return DEFAULT_WIDTH
    raw = os.environ.get("COLUMNS", "").strip()
    if not raw.isascii() or not raw.isdigit():
        return DEFAULT_WIDTH
    return clamp_width(int(raw[:12]) if len(raw) <= 12 else MAX_WIDTH)


def clamp_width(width: int) -> int:
    return max(MIN_WIDTH, min(MAX_WIDTH, int(width)))
