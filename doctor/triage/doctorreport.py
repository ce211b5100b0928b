"""A doctor JSON report among the job's files (`preflight --report FILE`, `check -f json -o FILE`): recognised by its
`schema` key, read through the read path (bounded, never blocking), and asked whether it had already warned about
the cause triage found: the row of that check, its status and summary, on the failing rank's report where the
report says whose it is (its fleet rank or host, else the rank its path gives)."""

from __future__ import annotations

from dataclasses import dataclass

from ..hostio.safeio import ReadRefused, load_json
from . import layouts

SCHEMA_PREFIX = "dsv4-doctor.report/"
MAX_REPORT = 64 << 20
SNIFF = 4096


@dataclass(frozen=True)
class DoctorReport:
    path: str
    rank: int | None
    host: str | None
    rows: dict  # check id -> (status, summary)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_report(path: str, head: bytes) -> DoctorReport | None:
    """The report at `path` when its first bytes (`head`) and then its JSON say it is one, else None."""
    if b'"schema"' not in head or SCHEMA_PREFIX.encode() not in head or not head.lstrip().startswith(b"{"):
        return None
    try:
        data = load_json(path, MAX_REPORT, errors="replace")
    except ReadRefused:
        return None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith(SCHEMA_PREFIX):
        return None
    env = data.get("environment")
    env = env if isinstance(env, dict) else {}
    fleet = env.get("fleet_rank")
    fleet = fleet if isinstance(fleet, dict) else {}
    rank = _int(fleet.get("rank"))
    if rank is None:
        rank = layouts.of_path(path).rank
    host = fleet.get("host") if isinstance(fleet.get("host"), str) else None
    rows = {}
    for row in data.get("checks") or []:
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            rows[row["id"]] = (str(row.get("status")), str(row.get("summary") or ""))
    return DoctorReport(path, rank, host, rows)


def tie_in(reports: list[DoctorReport], check_id: str | None, rank: int | None, host: str | None) -> list[dict]:
    """What each report that may be the failing rank's says about the cause's check, the failing rank's first."""
    if not reports or check_id is None:
        return []
    mine = [r for r in reports if (rank is not None and r.rank == rank) or (host is not None and r.host == host)]
    chosen = mine or reports
    out = []
    for report in chosen:
        status, summary = report.rows.get(check_id, (None, ""))
        warned = status in ("warn", "fail", "error")
        out.append({"report": report.path, "rank": report.rank, "host": report.host,
                    "failing_rank": bool(mine), "check": check_id, "row": status, "summary": summary,
                    "warned": warned})
    return out
