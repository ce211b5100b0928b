"""Admitting a rank's report to the fleet merge: every other rank's report arrived as bytes over the fleet exchange.

It is hostile input. `admit` validates and bounds it (size, depth, ids, statuses, fixes) into a `RankReport` on the
doctor's model types; a report that fails raises `BadReport`, which the merge turns into a finding about that rank in
`fleet.ranks`, never a crash. Rank 0's own report is the doctor's own and never crossed the store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from .fix import Fix
from .model import CheckReport, Source, Status
from .registry import CHECK_ID  # the ids a check can have; anything else from a rank is not a check row

MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_ROWS = 1000
MAX_DEPTH = 24
MAX_TEXT = 8000


class BadReport(ValueError):
    """A rank's report the merge cannot take; the message says why, for fleet.ranks."""


def _obj(value) -> dict:
    return value if isinstance(value, dict) else {}


def _depth_ok(obj, limit: int = MAX_DEPTH) -> bool:
    stack = [(obj, 0)]
    nodes = 0
    while stack:
        o, d = stack.pop()
        nodes += 1
        if d > limit or nodes > 200_000:
            return False
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return True


def _text(value, limit: int = MAX_TEXT) -> str:
    from .redact import clean_text, cut

    text = value if isinstance(value, str) else ""
    return clean_text(cut(text, limit))


def _row_from(data, rank: int) -> CheckReport:
    if not isinstance(data, dict):
        raise BadReport("a check row is not an object")
    cid = data.get("id")
    if not isinstance(cid, str) or not CHECK_ID.fullmatch(cid):
        raise BadReport(f"a check id is not a check id ({str(cid)[:40]!r})")
    try:
        status = Status(data.get("status"))
    except ValueError:
        raise BadReport(f"check {cid}: unknown status {str(data.get('status'))[:20]!r}") from None
    fixes = []
    for fix in data.get("fixes") or []:
        try:
            fixes.append(Fix.from_dict(fix))
        except (ValueError, TypeError, AttributeError) as exc:
            raise BadReport(f"check {cid}: a fix is not valid ({exc})") from None
    sources = [Source(_text(s.get("title"), 300), _text(s.get("url"), 500)) for s in data.get("sources") or []
               if isinstance(s, dict)]
    evidence = _obj(data.get("evidence"))
    duration = data.get("duration_s")
    return CheckReport(id=cid, title=_text(data.get("title"), 300) or cid, status=status,
                       summary=_text(data.get("summary"), 2000) or "(no summary)",
                       details=_text(data.get("details")), evidence=evidence, fixes=fixes, sources=sources,
                       duration_s=float(duration) if isinstance(duration, (int, float)) and not isinstance(
                           duration, bool) and 0 <= duration < 1e7 else 0.0,
                       origin=_text(data.get("origin"), 200) or "dsv4-doctor",
                       internal_error=data.get("internal_error") is True)


class RankReport:
    """One rank's report, validated."""

    def __init__(self, rank: int, raw: Mapping):
        self.rank = rank
        self.raw = raw
        env = _obj(raw.get("environment"))
        fr = _obj(env.get("fleet_rank"))
        claimed = fr.get("rank")
        if claimed is not None and claimed != rank:
            raise BadReport(f"its report says it is rank {str(claimed)[:20]}")
        self.host = _text(fr.get("host"), 255) or "unknown"
        local = fr.get("local_rank")
        self.local_rank = local if isinstance(local, int) and not isinstance(local, bool) else None
        node = fr.get("node")
        self.node = _text(node, 64) if isinstance(node, str) and node else None
        fp = env.get("fingerprint")
        self.fingerprint = fp if isinstance(fp, dict) else {}
        checks = raw.get("checks")
        if not isinstance(checks, list) or len(checks) > MAX_ROWS:
            raise BadReport("its report has no list of checks" if not isinstance(checks, list) else
                            f"its report has {len(checks)} rows (at most {MAX_ROWS})")
        self.rows = {}
        for data in checks:
            row = _row_from(data, rank)
            self.rows[row.id] = row

    @property
    def node_key(self) -> str:
        """Hosts are keyed by the launcher's node identity where it gives one; the host name otherwise."""
        return ("node " + self.node) if self.node else self.host


def admit(rank: int, payload: bytes | Mapping) -> RankReport:
    """A rank's report from its bytes (or, for rank 0, its own dict), validated; BadReport says why not."""
    if isinstance(payload, (bytes, bytearray)):
        if len(payload) > MAX_REPORT_BYTES:
            raise BadReport(f"its report is {len(payload)} bytes (at most {MAX_REPORT_BYTES})")
        try:
            data = json.loads(bytes(payload).decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise BadReport("its report is not JSON") from None
    else:
        data = payload
    if not isinstance(data, dict):
        raise BadReport("its report is not a JSON object")
    if not _depth_ok(data):
        raise BadReport(f"its report is nested deeper than {MAX_DEPTH} levels or too large")
    from .redact import sanitize

    # Bounded and made valid here; redacted once, in the merged report (each rank redacted its own already, and
    # redacting every rank's whole report cost rank 0 25 ms a rank).
    return RankReport(rank, sanitize(data))
