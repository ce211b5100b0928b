"""Merging the per-rank reports of a fleet run into one report, in the doctor process, on the doctor's model types.

Every other rank's report is admitted first (admit.py: validated and bounded, since it crossed the store); one
that fails becomes a finding about that rank in `fleet.ranks`, never a crash.

Identical results are grouped, so the report grows with the number of distinct results, not with the number of
ranks: a check's row lists its groups (status, summary, the ranks as ranges, their hosts). Severity, status, exit
code and counts come from doctor/model/core.py, as for a single-host report.

Two rows exist only here: `fleet.ranks` (every rank that did not report, was rejected, or did not acknowledge the
verdict, with its host when the launcher or its hello said it) and `fleet.drift` (ranks that differ in a package
version or RECORD hash, an inspected source file's hash, the driver, the Python version, or a check's status).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

# admit, BadReport and MAX_REPORT_BYTES stay importable from here: the tests reach them through the merge.
from .admit import FINGERPRINT_SECTIONS, MAX_REPORT_BYTES, BadReport, RankReport, _obj, admit  # noqa: F401
from ..fix.steps import Fix
from ..hostio.redact import shorten
from ..model.core import SEVERITY, CheckReport, ExitCode, Source, Status, counts, exit_code_for, overall_status
from ..model.report import Report

MAX_GROUPS = 20  # groups listed per check; the rest are counted
MAX_DRIFT_ITEMS = 50

FLEET_SOURCES = [
    Source("torch.distributed (TCPStore): the job's own launcher environment",
           "https://pytorch.org/docs/stable/distributed.html"),
    Source("verl PR #7297 (the seed incident: one stale frontend on a node gave NaN)",
           "https://github.com/verl-project/verl/pull/7297"),
]
RANKS_TITLE = "Every rank of the job reported and took the verdict"
DRIFT_TITLE = "Every rank runs the same stack"


def ranges(ranks) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    ranks = sorted(set(ranks))
    out: list[str] = []
    start = prev = None
    for r in ranks:
        if start is None or prev is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)


def host_label(name, salt: str = "") -> str:
    """A host's name hidden by --anonymize-hosts: a salted hash, stable within one fleet run (one salt)."""
    digest = hashlib.sha256((salt + "\n" + str(name or "unknown")).encode("utf-8", "replace")).hexdigest()
    return "host-" + digest[:10]


def is_node_level(row: CheckReport) -> bool:
    """A row this rank left to its node's local rank 0 (runner.plan marks it in evidence)."""
    return row.status is Status.SKIP and row.evidence.get("node_level") is True


def _who(ranks, host_of: Mapping[int, str], limit: int = 6) -> str:
    """ "rank 3 (node07)" or "ranks 0-2,4 (node01, node02)" """
    hosts = sorted({host_of.get(r, "unknown") for r in ranks})
    shown = ", ".join(hosts[:limit]) + (f", ... {len(hosts) - limit} more hosts" if len(hosts) > limit else "")
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {ranges(ranks)} ({shown})"


def vouching(reports: Mapping[int, RankReport]) -> dict[int, str]:
    """The non-leader ranks whose node-level rows nobody answers for (rank -> why): their node's local rank 0 did
    not report, or its packages differ and this rank could not run the checks itself in time."""
    leader: dict[str, int] = {}
    for r in sorted(reports):
        if reports[r].local_rank == 0:
            leader.setdefault(reports[r].node_key, r)
    out = {}
    for r, rep in sorted(reports.items()):
        if rep.local_rank == 0 or not any(is_node_level(row) for row in rep.rows.values()):
            continue
        lead = leader.get(rep.node_key)
        if lead is None:
            out[r] = "its host's local rank 0, which runs the import probes, did not report"
        elif rep.fingerprint != reports[lead].fingerprint:
            out[r] = (f"its packages differ from those of rank {lead}, its host's local rank 0, and it could not "
                      "run this check itself within the fleet's time (see fleet.drift)")
    return out


def merge_check(check_id: str, rows: Mapping[int, CheckReport], host_of: Mapping[int, str],
                unvouched: Mapping[int, str], leaders: Collection[int] = ()) -> CheckReport:
    """One check's row across the ranks. leaders: the local rank 0s, whose rows answer for their hosts; a node-level
    check that another rank ran itself (its packages differ) is not "checked once per host", and the row says so."""
    ran: dict[int, CheckReport] = {}
    node_level = False
    for r, row in rows.items():
        if not is_node_level(row):
            ran[r] = row
            continue
        node_level = True
        if r in unvouched:
            ran[r] = CheckReport(id=row.id, title=row.title, status=Status.ERROR,
                                 summary=f"not checked on this rank: {unvouched[r]}; `dsv4-doctor check "
                                         "--no-distributed` in this rank's environment checks it",
                                 sources=row.sources, origin=row.origin)
    if not ran:
        ran = dict(rows)
    groups: dict[tuple[Status, str], list[int]] = {}
    for r, row in sorted(ran.items()):
        groups.setdefault((row.status, row.summary), []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: (-SEVERITY[kv[0][0]], -len(kv[1]), kv[1][0]))
    status = overall_status(s for (s, _) in groups)
    (w_status, w_summary), w_ranks = ordered[0]
    first = ran[w_ranks[0]]
    hosts_all = sorted({host_of.get(r, "unknown") for r in ran})
    own_runs = [r for r in ran if r not in leaders and not is_node_level(rows[r])] if node_level else []
    scope = ("" if not node_level else "; node-level: checked once per host" if not own_runs else
             f"; node-level: checked once per host, and by {_who(own_runs, host_of)} itself (its packages differ "
             "from its host's local rank 0's)")
    if len(ordered) == 1:
        where = (f"all {len(hosts_all)} hosts" if node_level and len(hosts_all) > 1 else
                 f"host {hosts_all[0]}" if node_level else
                 f"all {len(w_ranks)} reporting ranks" if len(w_ranks) > 1 else _who(w_ranks, host_of))
        summary = f"{w_summary} [{w_status.value} on {where}{scope}]"
    else:
        # The other groups with their own words when they are few: two passes that say different versions are
        # the point of a fleet report.
        others = "; ".join(f"{s.value} on {_who(rs, host_of)}: {shorten(text, 160)}" if len(ordered) <= 3 else
                           f"{s.value} on {len(rs)} rank(s)" for (s, text), rs in ordered[1:4])
        summary = f"{w_summary} [{w_status.value} on {_who(w_ranks, host_of)}; {others}{scope}]"
    lines, listed = [], []
    for (s, text), rs in ordered[:MAX_GROUPS]:
        hosts = sorted({host_of.get(r, "unknown") for r in rs})
        listed.append({"status": s.value, "summary": text, "ranks": ranges(rs), "count": len(rs),
                       "hosts": hosts[:64], "host_count": len(hosts)})
        if len(ordered) > 1:
            lines.append(f"{s.value} on {_who(rs, host_of)}: {text}")
    if len(ordered) > MAX_GROUPS:
        lines.append(f"... {len(ordered) - MAX_GROUPS} more distinct results")
    fixes: list[Fix] = []
    seen: set[str] = set()
    for _, rs in ordered:  # every group's fixes: a warn on one host has its fix beside a fail on another
        for fix in ran[rs[0]].fixes:
            if fix.key not in seen:
                seen.add(fix.key)
                fixes.append(fix)
    details = "\n".join(lines)
    if first.details:
        details += ("\n" if details else "") + (f"{_who(w_ranks[:1], host_of)}:\n" if lines else "") + first.details
    evidence = {"groups": listed, "group_count": len(ordered), "first_rank_evidence": first.evidence}
    # Accepted where it warns on every rank that ran it and every rank accepted it (they share the command line).
    accepted = first.accepted if status is Status.WARN and all(row.accepted for row in ran.values()) else None
    return CheckReport(id=check_id, title=first.title, status=status, summary=summary, details=details,
                       evidence=evidence, fixes=fixes, sources=first.sources, origin=first.origin,
                       internal_error=any(row.internal_error for row in ran.values()),
                       duration_s=max(row.duration_s for row in ran.values()), accepted=accepted)


def drift_items(reports: Mapping[int, RankReport]) -> list[tuple[str, dict[str, list[int]]]]:
    """Every dimension in which ranks differ: (what, {value: [ranks]}). A rank without a fingerprint section has
    the value "missing", so that it counts too."""
    values: dict[str, dict[str, list[int]]] = {}
    names: dict[str, set[str]] = {s: set() for s in FINGERPRINT_SECTIONS}
    for rep in reports.values():
        for section in FINGERPRINT_SECTIONS:
            names[section].update(str(k) for k in (rep.fingerprint.get(section) or {}))
    labels = {"packages": "package ", "sources": "source file ", "platform": ""}
    for r, rep in reports.items():
        missing = rep.fingerprint.get("missing")
        for section in FINGERPRINT_SECTIONS:
            have = _obj(rep.fingerprint.get(section))
            for name in sorted(names[section]):
                value = have.get(name, f"missing ({missing})" if missing else "absent")
                values.setdefault(labels[section] + name, {}).setdefault(str(value), []).append(r)
        for cid, row in rep.rows.items():
            if not is_node_level(row) and cid not in getattr(rep, "not_known_rows", ()):
                values.setdefault(f"check {cid}", {}).setdefault(row.status.value, []).append(r)
    return [(what.strip(), by_value) for what, by_value in sorted(values.items()) if len(by_value) > 1]


def drift_row(reports: Mapping[int, RankReport], host_of: Mapping[int, str]) -> CheckReport:
    items = drift_items(reports)
    evidence: dict = {"differences": []}
    if not items:
        dims = sum(len(rep.fingerprint.get(s) or {}) for rep in list(reports.values())[:1]
                   for s in FINGERPRINT_SECTIONS)
        return CheckReport("fleet.drift", DRIFT_TITLE, Status.PASS,
                           f"all {len(reports)} reporting ranks agree on {dims} package/source/platform fingerprints "
                           "and every check's status", evidence=evidence, sources=list(FLEET_SOURCES))
    parts = []
    for what, by_value in items[:MAX_DRIFT_ITEMS]:
        ordered = sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        if len(ordered[0][1]) == len(ordered[1][1]):  # a tie: no side is assumed healthy
            sides = [{"value": v, "ranks": ranges(rs), "hosts": sorted({host_of.get(r, "unknown") for r in rs})}
                     for v, rs in ordered]
            evidence["differences"].append({"what": what, "split": sides})
            parts.append(f"{what}: split, " + " vs ".join(f"{v} on {_who(rs, host_of)}" for v, rs in ordered[:4])
                         + " (an even split: which side is right is not known)")
            continue
        common_value, common_ranks = ordered[0]
        odd = ordered[1:]
        evidence["differences"].append({
            "what": what, "majority": {"value": common_value, "ranks": ranges(common_ranks)},
            "odd": [{"value": v, "ranks": ranges(rs), "hosts": sorted({host_of.get(r, "unknown") for r in rs})}
                    for v, rs in odd]})
        odd_text = "; ".join(f"{v} on {_who(rs, host_of)}" for v, rs in odd[:3])
        parts.append(f"{what}: {odd_text}, vs {common_value} on the other {len(common_ranks)} rank(s)")
    if len(items) > MAX_DRIFT_ITEMS:
        evidence["more_differences"] = len(items) - MAX_DRIFT_ITEMS
    summary = "ranks differ: " + "; ".join(parts[:3]) + (f"; ... {len(parts) - 3} more" if len(parts) > 3 else "")
    fix = Fix("Give every node the same image and the same PYTHONPATH; rebuild or re-pull the odd nodes' image (on "
              "an even split, decide which side is right first), then run the fleet check again",
              key="fleet:same-image", phase="setting")
    return CheckReport("fleet.drift", DRIFT_TITLE, Status.FAIL, summary, "\n".join(parts[3:]), evidence, [fix],
                       list(FLEET_SOURCES))


def ranks_row(world: int, reported: Sequence[int], problems: Mapping[int, str], host_of: Mapping[int, str],
              exchange: Mapping) -> CheckReport:
    """Every rank that did not report, was rejected, or did not take the verdict, each with its reason and host.
    The ranks that reported but did not acknowledge the verdict are named in its summary, whatever its status: they
    exit 1 without starting."""
    row = _ranks_row(world, reported, problems, host_of, exchange)
    missed = [r for r in exchange.get("not_acknowledged") or [] if isinstance(r, int)]
    if missed:
        row.summary += (f"; rank{'s' if len(missed) > 1 else ''} {ranges(missed)} did not acknowledge the verdict "
                        "(a rank that misses it exits 1 without starting)")
    return row


def _ranks_row(world: int, reported: Sequence[int], problems: Mapping[int, str], host_of: Mapping[int, str],
               exchange: Mapping) -> CheckReport:
    evidence = {"world_size": world, "reported": ranges(reported), "missing": ranges(problems),
                "ranks": [{"rank": r, "host": host_of.get(r), "why": problems[r]} for r in sorted(problems)[:200]]}
    for key in ("not_acknowledged", "exchange_error", "partial", "identity"):
        if exchange.get(key):
            evidence[key] = exchange[key]
    error = exchange.get("exchange_error")
    if not problems and not error:
        hosts = len(set(host_of.values()))
        acks = "; every rank acknowledged the verdict" if exchange.get("acknowledged_all") else ""
        if exchange.get("port_note"):
            acks += f" ({exchange['port_note']})"
        return CheckReport("fleet.ranks", RANKS_TITLE, Status.PASS,
                           f"all {world} ranks reported ({hosts} host{'' if hosts == 1 else 's'}){acks}",
                           evidence=evidence, sources=list(FLEET_SOURCES))
    by_why: dict[str, list[int]] = {}
    for r, why in sorted(problems.items()):
        by_why.setdefault(why, []).append(r)
    parts = [f"{_who(rs, host_of)}: {why}" for why, rs in sorted(by_why.items(), key=lambda kv: kv[1][0])]
    head = f"the fleet exchange failed ({error}); " if error else ""
    summary = (head + "; ".join(parts[:3]) + (f"; ... {len(parts) - 3} more" if len(parts) > 3 else "")
               + f" ({len(reported)} of {world} ranks reported)")
    details = ("A rank that misses rank 0's deadlines exits 1 without starting anything and says why on its stderr. "
               "A rank's host is shown when the launcher or the rank itself said it (`unknown` otherwise).\n"
               + "\n".join(parts[3:]))
    return CheckReport("fleet.ranks", RANKS_TITLE, Status.FAIL, summary, details.strip(), evidence,
                       sources=list(FLEET_SOURCES))


def merge(own: RankReport, others: Mapping[int, RankReport], world: int, problems: Mapping[int, str],
          strict: bool, exchange: Mapping | None = None, hosts_hint: Mapping[int, str] | None = None,
          anonymize_salt: str | None = None,
          annotate: Callable[[list[CheckReport]], Sequence[CheckReport]] | None = None) -> tuple[Report, int]:
    """The fleet report from rank 0's own report, the others' validated reports, and the ranks with a problem
    (rank -> why: did not report, rejected, did not acknowledge). exchange: what the exchange said (timings,
    mode, not_acknowledged, exchange_error, partial, bound_s). hosts_hint: hosts of ranks that said hello but gave
    no valid report, or that the launcher names. anonymize_salt: hide host names behind a salted hash. annotate: what
    the caller adds to the merged rows (the Ray fleet's evidence), before the report is sealed.

    Every merged report ends here, in one redaction pass over its whole wire form (assemble.sealed), after every
    rank's and node's text is in: nothing is added to it afterwards."""
    from ..report.assemble import sealed
    from ..hostio.redact import sanitize

    exchange = dict(exchange or {})
    reports = {0: own, **{r: rep for r, rep in others.items() if r != 0}}
    # The hosts and reasons come from other ranks and nodes: text, whatever they sent.
    hint = {r: h if isinstance(h, str) and h else "unknown" for r, h in (hosts_hint or {}).items()}
    problems = {r: why if isinstance(why, str) and why else "(no reason given)" for r, why in problems.items()}

    def label(name: str) -> str:
        return host_label(name, anonymize_salt) if anonymize_salt is not None else name

    host_of = {r: label(rep.host) for r, rep in reports.items()}
    for r, h in hint.items():
        host_of.setdefault(r, label(h))
    if anonymize_salt is not None:
        for rep in reports.values():
            rep.host = label(rep.host)
    check_ids = sorted({cid for rep in reports.values() for cid in rep.rows})
    unvouched = vouching(reports)
    leaders = {r for r, rep in reports.items() if rep.local_rank == 0}
    rows = [merge_check(cid, {r: rep.rows[cid] for r, rep in sorted(reports.items()) if cid in rep.rows}, host_of,
                        unvouched, leaders) for cid in check_ids if not cid.startswith("fleet.")]
    chosen = exchange.get("fleet_checks", ("fleet.ranks", "fleet.drift"))
    if "fleet.ranks" in chosen:
        rows.append(ranks_row(world, sorted(reports), problems, host_of, exchange))
    if "fleet.drift" in chosen:
        rows.append(drift_row(reports, host_of))
    if annotate is not None:
        rows = list(annotate(rows))
    rows.sort(key=lambda r: r.id)
    code = exit_code_for(rows, strict)
    if "fleet.ranks" not in chosen and (problems or exchange.get("exchange_error")) and code is ExitCode.OK:
        code = ExitCode.FAILED  # skipping the row does not make a missing rank a pass
    base = own.raw
    summary: dict[str, Any] = {"status": overall_status(r.status for r in rows).value, "exit_code": int(code),
                               "strict": bool(strict), "counts": dict(counts(rows)),
                               "duration_s": max([rep.duration_s for rep in reports.values()] or [0.0]),
                               "internal_errors": [r.id for r in rows if r.internal_error]}
    bound = exchange.get("bound_s")
    if isinstance(bound, (int, float)) and not isinstance(bound, bool):
        summary["budget_s"] = round(float(bound), 1)
    if exchange.get("partial"):
        summary["partial"] = str(exchange["partial"])
        if exchange.get("interrupted"):
            summary["interrupted"] = str(exchange["interrupted"])
    said = _obj(base.get("summary")).get("accepted")
    if isinstance(said, list) and said:  # rank 0's acceptances: every rank ran the same command line
        summary["accepted"] = [dict(a, applied=any(r.id == a.get("id") and r.accepted for r in rows))
                               for a in said[:100] if isinstance(a, Mapping)]
    left = _obj(base.get("summary")).get("left_out")
    if isinstance(left, Mapping) and isinstance(left.get("count"), int):  # rank 0's selection is every rank's
        summary["left_out"] = {"count": left["count"], "by": str(left.get("by", ""))[:100],
                               "checks": [c for c in left.get("checks") or [] if isinstance(c, str)][:64]}
    hosts: dict[str, list[int]] = {}
    for r, h in host_of.items():
        if r in reports:
            hosts.setdefault(h, []).append(r)
    odd = sorted(set(problems) | odd_ranks(rows))
    fleet = {"world_size": world, "reported": len(reports), "missing": ranges(problems),
             "hosts": {h: ranges(rs) for h, rs in sorted(hosts.items())}, "host_count": len(hosts),
             "timings": sanitize(_obj(exchange.get("timings"))), "mode": exchange.get("mode", "store"),
             "odd_ranks": ranges(odd), "scope": exchange.get("scope"),
             "authenticated": bool(exchange.get("authenticated")),
             "not_acknowledged": ranges(_ranks(exchange.get("not_acknowledged")))}
    if exchange.get("port_note"):
        fleet["port_note"] = str(exchange["port_note"])
    if exchange.get("runtime_env_not_applied"):  # Ray: the job's runtime_env fields the nodes' checks did not take
        fleet["runtime_env_not_applied"] = [str(n) for n in exchange["runtime_env_not_applied"]][:16]
    env = dict(base.get("environment") or {}) if isinstance(base.get("environment"), dict) else {}
    if anonymize_salt is not None and isinstance(env.get("fleet_rank"), dict):
        env["fleet_rank"] = dict(env["fleet_rank"], host=own.host)
    out = {"schema": base.get("schema", "dsv4-doctor.report/1"), "doctor": base.get("doctor") or {},
           "created": base.get("created") or "", "profile": base.get("profile") or {}, "environment": env,
           "plugins": base.get("plugins") or [], "summary": summary, "checks": [r.to_dict() for r in rows],
           "fleet": fleet}
    # Every rank's and node's text is redacted here, against rank 0's secrets, as the report's last step; the count
    # is rank 0's own (its text is seen again, and not counted again) plus what this pass masked. A fleet report has
    # no actions: its fixes crossed the store as text, and `fix` plans from a single host's run.
    counted = _obj(base.get("redactions")).get("count")
    counted = counted if isinstance(counted, int) and not isinstance(counted, bool) and 0 <= counted < 2 ** 31 else 0
    return sealed(out, counted=counted), int(code)


def _ranks(value) -> list[int]:
    return [r for r in value if isinstance(r, int) and not isinstance(r, bool)] if isinstance(value, list) else []


def odd_ranks(rows: Sequence[CheckReport]) -> set[int]:
    """The ranks outside the largest group of a row whose ranks disagree, and the odd sides of fleet.drift."""
    out: set[int] = set()
    for row in rows:
        groups = [g for g in row.evidence.get("groups") or [] if isinstance(g, dict)]
        if len(groups) > 1:
            largest = max(groups, key=lambda g: g.get("count") or 0)
            out.update(r for g in groups if g is not largest for r in _expand(g.get("ranks", "")))
        for diff in row.evidence.get("differences") or [] if row.id == "fleet.drift" else []:
            for side in diff.get("odd") or []:
                out.update(_expand(side.get("ranks", "")))
    return out


def _expand(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, str(text).split(",")):
        first, _, last = part.partition("-")
        try:
            out.extend(range(int(first), int(last or first) + 1))
        except ValueError:
            continue
    return out
