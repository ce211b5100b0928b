"""Admitting a rank's report to the fleet merge: every other rank's report arrived as bytes over the fleet exchange.

It is hostile input. `admit` validates and bounds it (size, depth, ids, statuses, fixes) into a `RankReport` on the
doctor's model types; a report that fails raises `BadReport`, which the merge turns into a finding about that rank in
`fleet.ranks`, never a crash. Rank 0's own report is the doctor's own and never crossed the store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..fix.steps import Fix
from ..model.core import CheckReport, Source, Status
from ..engine.registry import CHECK_ID  # the ids a check can have; anything else from a rank is not a check row

MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_ROWS = 1000
MAX_DEPTH = 24
MAX_TEXT = 8000
FINGERPRINT_SECTIONS = ("packages", "sources", "platform")


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
    from ..hostio.redact import clean_text, cut

    text = value if isinstance(value, str) else ""
    return clean_text(cut(text, limit))


def _seconds(value) -> float | None:
    """A duration a report may say: a number of seconds, 0 to 10^7, as a float; None for anything else (NaN, a bool,
    text)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e7
    return float(value) if ok else None


def _shown(value, limit: int = 80) -> str:
    """A malformed value as a finding quotes it: its JSON (redacted with the report it goes into); a long one cut
    where a word ends (a cut word could be part of a secret) and its length said."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return f"a {type(value).__name__}"
    if len(text) <= limit:
        return _text(text, limit)
    head = _text(text, limit).rstrip()
    return (f"{head}… " if head else f"a {type(value).__name__} ") + f"of {len(text)} characters as JSON"


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
    for name in ("fixes", "sources"):
        if not isinstance(data.get(name) or [], list):
            raise BadReport(f"check {cid}: its {name} is {_shown(data.get(name))}, not a list")
    for fix in data.get("fixes") or []:
        try:
            fixes.append(Fix.from_dict(fix))
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise BadReport(f"check {cid}: a fix is not valid ({exc})") from None
    sources = [Source(_text(s.get("title"), 300), _text(s.get("url"), 500)) for s in data.get("sources") or []
               if isinstance(s, dict)]
    evidence = _obj(data.get("evidence"))
    duration = data.get("duration_s")
    return CheckReport(id=cid, title=_text(data.get("title"), 300) or cid, status=status,
                       summary=_text(data.get("summary"), 2000) or "(no summary)",
                       details=_text(data.get("details")), evidence=evidence, fixes=fixes, sources=sources,
                       duration_s=_seconds(duration) or 0.0,
                       origin=_text(data.get("origin"), 200) or "dsv4-doctor",
                       internal_error=data.get("internal_error") is True, accepted=_accepted(data, status))


def _accepted(data: Mapping, status: Status) -> dict | None:
    """A rank's acceptance of a warning, bounded (a rank's report is hostile input); never on another status."""
    acc = data.get("accepted")
    if status is not Status.WARN or not isinstance(acc, Mapping):
        return None
    return {"reason": _text(acc.get("reason"), 200), "from": _text(acc.get("from"), 300)}


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
        for section in FINGERPRINT_SECTIONS:  # fleet.drift compares them key by key
            if not isinstance(self.fingerprint.get(section) or {}, dict):
                raise BadReport(f"its fingerprint's {section} is {_shown(self.fingerprint.get(section))}, "
                                "not an object")
        duration = _obj(raw.get("summary")).get("duration_s")
        self.duration_s = _seconds(duration) or 0.0
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


def oversize_report(size: int, fleet_rank: Mapping) -> dict:
    """What a rank sends instead of a report over MAX_REPORT_BYTES: short, typed, and saying so (rank 0 names the
    rank and the reason; the store never carries the big one)."""
    return {"schema": "dsv4-doctor.report/1", "oversize": {"bytes": int(size), "limit": MAX_REPORT_BYTES},
            "environment": {"fleet_rank": dict(fleet_rank)}, "checks": []}


def _refused(data: Mapping, job: str | None) -> str | None:
    """Why a well-formed report is still not this fleet's: an oversize stand-in, or another job's report."""
    over = data.get("oversize")
    if isinstance(over, dict):
        size = over.get("bytes")
        size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0
        return (f"its report was {size:,} bytes, over the {MAX_REPORT_BYTES:,}-byte limit, so it sent a short one "
                "saying so (a check or plugin on that rank writes too much evidence)")
    theirs = _obj(_obj(data.get("environment")).get("fleet_rank")).get("job")
    if job and theirs != job:
        return (f"its report is from another job (job identity {_text(theirs, 16) or 'none'}, not {job}): "
                "refused")
    return None


def admit(rank: int, payload: bytes | Mapping, job: str | None = None) -> RankReport:
    """A rank's report from its bytes (or, for rank 0, its own dict), validated; BadReport says why not. With
    `job` (the fleet's job identity), a report of another job is refused, whatever its world size."""
    if isinstance(payload, (bytes, bytearray)):
        if len(payload) > MAX_REPORT_BYTES:
            raise BadReport(f"its report is {len(payload)} bytes (at most {MAX_REPORT_BYTES})")
        from ..hostio.safeio import ReadRefused, decode_json

        try:
            data = decode_json(bytes(payload))
        except ReadRefused as exc:
            raise BadReport(f"its report is not read: {exc}") from None
    else:
        data = payload
    if not isinstance(data, dict):
        raise BadReport("its report is not a JSON object")
    if not _depth_ok(data):
        raise BadReport(f"its report is nested deeper than {MAX_DEPTH} levels or too large")
    why = _refused(data, job)
    if why:
        raise BadReport(why)
    from ..hostio.redact import sanitize

    # Bounded and made valid here; redacted once, in the merged report (each rank redacted its own already, and
    # redacting every rank's whole report cost rank 0 25 ms a rank). A value of a type no field takes is this rank's
    # rejection, never the merge's failure.
    try:
        return RankReport(rank, sanitize(data))
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError, RecursionError) as exc:
        if isinstance(exc, BadReport):
            raise
        raise BadReport(f"its report is malformed ({type(exc).__name__}: {_text(str(exc), 200)})") from None
