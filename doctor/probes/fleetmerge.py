"""Merging the per-rank reports of a fleet run into one report (fleet mode, `check --distributed`).

Stdlib only, Python 3.8+: rank 0's exchange helper (dsv4probe_fleet.py, in the target interpreter) imports it, and
so do the doctor's tests. Identical results are grouped, so the report grows with the number of distinct results,
not with the number of ranks: a check's row lists its groups (status, summary, the ranks as ranges, their hosts).

Two rows exist only here: `fleet.ranks` (every rank that did not report within the time budget) and `fleet.drift`
(ranks that differ in a package version or RECORD hash, an inspected source file's hash, the driver, the Python
version, or a check's status), each naming the odd ranks, their hosts and both values.
"""

import hashlib

SEVERITY = {"error": 4, "fail": 3, "warn": 2, "pass": 1, "skip": 0}
NODE_LEVEL = "node-level:"  # the summary prefix of a check a rank left to its node's local rank 0 (runner.plan)
MAX_GROUPS = 20  # groups listed per check; the rest are counted
MAX_DRIFT_ITEMS = 50

FLEET_SOURCES = [
    {"title": "torch.distributed (TCPStore, gloo): the job's own launcher environment",
     "url": "https://pytorch.org/docs/stable/distributed.html"},
    {"title": "verl PR #7297 (the seed incident: one stale frontend on a node gave NaN)",
     "url": "https://github.com/verl-project/verl/pull/7297"},
]
RANKS_TITLE = "Every rank of the job reported"
DRIFT_TITLE = "Every rank runs the same stack"


def ranges(ranks):
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    ranks = sorted(set(ranks))
    out, start, prev = [], None, None
    for r in ranks:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(str(start) if start == prev else "%d-%d" % (start, prev))
            start = prev = r
    if start is not None:
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
    return ",".join(out)


def host_label(name, anonymize):
    """A host's name in the report, or a stable hash of it with --anonymize-hosts."""
    name = str(name or "unknown")
    return "host-" + hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:10] if anonymize else name


def _who(ranks, host_of, limit=6):
    """ "rank 3 (node07)" or "ranks 0-2,4 (node01, node02)" """
    hosts = sorted(set(host_of.get(r, "unknown") for r in ranks))
    shown = ", ".join(hosts[:limit]) + (", ... %d more hosts" % (len(hosts) - limit) if len(hosts) > limit else "")
    return "%s %s (%s)" % ("rank" if len(ranks) == 1 else "ranks", ranges(ranks), shown)


def _worst(statuses):
    statuses = list(statuses)
    if statuses and all(s == "skip" for s in statuses):
        return "skip"
    worst = "pass"
    for s in statuses:
        if SEVERITY.get(s, 4) > SEVERITY[worst]:
            worst = s
    return worst


def _row(check_id, title, status, summary, details="", evidence=None, fixes=(), sources=(), origin="dsv4-doctor",
         internal=False, duration=0.0):
    return {"id": check_id, "title": title, "status": status, "summary": summary, "details": details,
            "evidence": evidence or {}, "fixes": list(fixes), "sources": list(sources), "duration_s": duration,
            "origin": origin, "internal_error": internal}


def _unvouched_row(row, why):
    """A node-level row of a rank that its node's local rank 0 cannot answer for: it was not checked there."""
    out = dict(row)
    out.update(status="error", summary="not checked on this rank: " + why + "; `dsv4-doctor check "
                                       "--no-distributed` in this rank's environment checks it",
               details="", evidence={}, fixes=[], internal_error=False)
    return out


def merge_check(check_id, rows, host_of, world, unvouched=None):
    """One check's row from every rank's (rank -> row). Node-level skips of non-leader ranks are left out, since
    their node's local rank 0 reports for them, except for the ranks in `unvouched` (rank -> why): local rank 0 of
    their host did not report, or its packages differ from theirs, so its result says nothing about them."""
    unvouched = unvouched or {}
    ran = {}
    for r, row in rows.items():
        if not str(row.get("summary", "")).startswith(NODE_LEVEL):
            ran[r] = row
        elif r in unvouched:
            ran[r] = _unvouched_row(row, unvouched[r])
    if not ran:
        ran = rows
    groups = {}
    for r, row in sorted(ran.items()):
        groups.setdefault((row.get("status"), row.get("summary")), []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: (-SEVERITY.get(kv[0][0], 4), -len(kv[1])))
    status = _worst(s for (s, _), _ in ordered)
    (w_status, w_summary), w_ranks = ordered[0]
    first = ran[w_ranks[0]]
    node_level = any(str(row.get("summary", "")).startswith(NODE_LEVEL) for row in rows.values())
    hosts_all = sorted(set(host_of.get(r, "unknown") for r in ran))
    scope = ("; node-level: checked once per host" if node_level else "")
    if len(ordered) == 1:
        where = ("all %d hosts" % len(hosts_all) if node_level and len(hosts_all) > 1 else
                 "host %s" % hosts_all[0] if node_level else
                 "all %d reporting ranks" % len(w_ranks) if len(w_ranks) > 1 else _who(w_ranks, host_of))
        summary = "%s [%s on %s%s]" % (w_summary, w_status, where, scope)
    else:
        others = "; ".join("%s on %d rank(s)" % (s, len(rs)) for (s, _), rs in ordered[1:4])
        summary = "%s [%s on %s; %s%s]" % (w_summary, w_status, _who(w_ranks, host_of), others, scope)
    lines = []
    listed = []
    for (s, text), rs in ordered[:MAX_GROUPS]:
        hosts = sorted(set(host_of.get(r, "unknown") for r in rs))
        listed.append({"status": s, "summary": text, "ranks": ranges(rs), "count": len(rs), "hosts": hosts[:64],
                       "host_count": len(hosts)})
        if len(ordered) > 1:
            lines.append("%s on %s: %s" % (s, _who(rs, host_of), text))
    if len(ordered) > MAX_GROUPS:
        lines.append("... %d more distinct results" % (len(ordered) - MAX_GROUPS))
    fixes, seen = [], set()
    for (s, _), rs in ordered:
        if s != status:
            continue
        for fix in ran[rs[0]].get("fixes") or []:
            key = fix.get("id") or fix.get("description")
            if key not in seen:
                seen.add(key)
                fixes.append(fix)
    details = "\n".join(lines)
    if first.get("details"):
        details += ("\n" if details else "") + ("%s:\n" % _who(w_ranks[:1], host_of) if lines else "") + \
            str(first.get("details"))
    evidence = {"groups": listed, "group_count": len(ordered), "first_rank_evidence": first.get("evidence") or {}}
    return _row(check_id, first.get("title") or check_id, status, summary, details, evidence, fixes,
                first.get("sources") or [], first.get("origin") or "dsv4-doctor",
                any(bool(row.get("internal_error")) for row in ran.values()),
                max(float(row.get("duration_s") or 0) for row in ran.values()))


def fingerprint_of(report):
    env = report.get("environment") if isinstance(report.get("environment"), dict) else {}
    fp = env.get("fingerprint")
    return fp if isinstance(fp, dict) else {}


def vouching(reports, host_of):
    """The non-leader ranks whose node-level checks their host's local rank 0 cannot answer for (rank -> why):
    found on the H200 (2026-12-01), where rank 1 had another cudnn-frontend on its PYTHONPATH and the frontend's
    import check, run by local rank 0 only, said "pass on host vm" for both."""
    local_of = {}
    for r, rep in reports.items():
        env = rep.get("environment") if isinstance(rep.get("environment"), dict) else {}
        fr = env.get("fleet_rank") if isinstance(env.get("fleet_rank"), dict) else {}
        local = fr.get("local_rank")
        local_of[r] = local if isinstance(local, int) else None
    leader = {}
    for r in sorted(reports):
        if local_of[r] == 0:
            leader.setdefault(host_of.get(r, "unknown"), r)
    out = {}
    for r in sorted(reports):
        if local_of[r] == 0:
            continue
        lead = leader.get(host_of.get(r, "unknown"))
        if lead is None:
            out[r] = "this host's import probes run on its local rank 0, which did not report"
        elif fingerprint_of(reports[r]) != fingerprint_of(reports[lead]):
            out[r] = ("its packages differ from those of rank %d, the local rank 0 that ran this host's import "
                      "probes (see fleet.drift)" % lead)
    return out


def drift_items(reports, host_of, check_rows):
    """Every dimension in which ranks differ: (what, {value: [ranks]})."""
    values = {}
    for r, report in reports.items():
        fp = fingerprint_of(report)
        for section, label in (("packages", "package "), ("sources", "source file "), ("platform", "")):
            for name, value in sorted((fp.get(section) or {}).items()):
                values.setdefault(label + str(name), {}).setdefault(str(value), []).append(r)
    for check_id, rows in check_rows.items():
        for r, row in rows.items():
            if str(row.get("summary", "")).startswith(NODE_LEVEL):
                continue
            values.setdefault("check %s" % check_id, {}).setdefault(str(row.get("status")), []).append(r)
    items = []
    for what, by_value in sorted(values.items()):
        if len(by_value) > 1:
            items.append((what.strip(), by_value))
    return items


def drift_row(reports, host_of, check_rows):
    items = drift_items(reports, host_of, check_rows)
    evidence = {"differences": []}
    if not items:
        dims = sum(len(fingerprint_of(rep).get(s) or {}) for rep in list(reports.values())[:1]
                   for s in ("packages", "sources", "platform"))
        return _row("fleet.drift", DRIFT_TITLE, "pass",
                    "all %d reporting ranks agree on %d package/source/platform fingerprints and every check's status"
                    % (len(reports), dims), evidence=evidence, sources=FLEET_SOURCES)
    parts = []
    for what, by_value in items[:MAX_DRIFT_ITEMS]:
        ordered = sorted(by_value.items(), key=lambda kv: -len(kv[1]))
        common_value, common_ranks = ordered[0]
        odd = ordered[1:]
        evidence["differences"].append({
            "what": what, "majority": {"value": common_value, "ranks": ranges(common_ranks)},
            "odd": [{"value": v, "ranks": ranges(rs), "hosts": sorted(set(host_of.get(r, "unknown") for r in rs))}
                    for v, rs in odd]})
        odd_text = "; ".join("%s on %s" % (v, _who(rs, host_of)) for v, rs in odd[:3])
        parts.append("%s: %s, vs %s on the other %d rank(s)" % (what, odd_text, common_value, len(common_ranks)))
    if len(items) > MAX_DRIFT_ITEMS:
        evidence["more_differences"] = len(items) - MAX_DRIFT_ITEMS
    summary = "ranks differ: " + "; ".join(parts[:3]) + ("; ... %d more" % (len(parts) - 3) if len(parts) > 3 else "")
    details = "\n".join(parts[3:])  # the first three are in the summary
    fix = {"description": "Give every node the same image and the same PYTHONPATH; rebuild or re-pull the odd "
                          "nodes' image, then run the fleet check again", "commands": [], "argv": [],
           "id": "fleet:same-image", "phase": "setting", "manual": False, "notes": []}
    return _row("fleet.drift", DRIFT_TITLE, "fail", summary, details, evidence, [fix], FLEET_SOURCES)


def ranks_row(world, reported, missing, host_of, wait_s):
    if not missing:
        hosts = len(set(host_of.values()))
        return _row("fleet.ranks", RANKS_TITLE, "pass", "all %d ranks reported (%d host%s)"
                    % (world, hosts, "" if hosts == 1 else "s"),
                    evidence={"world_size": world, "reported": ranges(reported), "missing": ""},
                    sources=FLEET_SOURCES)
    return _row("fleet.ranks", RANKS_TITLE, "fail",
                "rank%s %s did not report within the time budget (%.0f s after rank 0's exchange was up); %d of %d "
                "reported" % ("" if len(missing) == 1 else "s", ranges(missing), wait_s, len(reported), world),
                "A rank that cannot join (its torch does not import, its node is down or stalled) prints its own "
                "report to stderr and exits 1. Ranks never heard from have no known host.",
                evidence={"world_size": world, "reported": ranges(reported), "missing": ranges(missing)},
                sources=FLEET_SOURCES)


def exit_code(rows, strict):
    if any(r.get("internal_error") for r in rows):
        return 3
    if any(r.get("status") in ("fail", "error") for r in rows):
        return 1
    if strict and any(r.get("status") == "warn" for r in rows):
        return 1
    return 0


def merge(reports, world, missing, strict, wait_s, timings=None, bound_s=None):
    """The fleet report from {rank: report} (each rank's own, redacted by its doctor) and the missing ranks.
    bound_s: the fleet run's worst-case time, from the exchange helper (rank 0's run time when its join window
    opened, plus the window, plus the exchange's timeouts); summary.budget_s is that, or left out without it."""
    reports = {int(r): rep for r, rep in reports.items() if isinstance(rep, dict)}
    host_of = {}
    for r, rep in reports.items():
        fr = (rep.get("environment") or {}).get("fleet_rank") if isinstance(rep.get("environment"), dict) else None
        host_of[r] = str((fr or {}).get("host") or "unknown")
    check_rows = {}
    for r, rep in sorted(reports.items()):
        for row in rep.get("checks") or []:
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                check_rows.setdefault(row["id"], {})[r] = row
    unvouched = vouching(reports, host_of)
    rows = [merge_check(cid, rs, host_of, world, unvouched) for cid, rs in sorted(check_rows.items())]
    rows.append(ranks_row(world, sorted(reports), sorted(missing), host_of, wait_s))
    rows.append(drift_row(reports, host_of, check_rows))
    rows.sort(key=lambda r: r["id"])
    base = reports[min(reports)] if reports else {}
    counts = {s: 0 for s in SEVERITY}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    code = exit_code(rows, strict)
    hosts = {}
    for r, h in host_of.items():
        hosts.setdefault(h, []).append(r)
    summary = {"status": _worst(r["status"] for r in rows), "exit_code": code, "strict": bool(strict),
               "counts": counts,
               "duration_s": max([float((rep.get("summary") or {}).get("duration_s") or 0)
                                  for rep in reports.values()] or [0.0]),
               "internal_errors": [r["id"] for r in rows if r.get("internal_error")]}
    # Not rank 0's own budget plus the wait (found in review: 402.7 s where the bound was ~210 s): by default the
    # wait is the rest of that budget, so the sum counted it twice.
    if isinstance(bound_s, (int, float)) and not isinstance(bound_s, bool):
        summary["budget_s"] = round(float(bound_s), 1)
    fleet = {"world_size": world, "reported": len(reports), "missing": ranges(missing),
             "hosts": {h: ranges(rs) for h, rs in sorted(hosts.items())}, "host_count": len(hosts),
             "timings": timings or {}}
    out = {"schema": base.get("schema", "dsv4-doctor.report/1"), "doctor": base.get("doctor") or {},
           "created": base.get("created") or "", "profile": base.get("profile") or {},
           "environment": base.get("environment") or {}, "plugins": base.get("plugins") or [],
           "summary": summary, "checks": rows, "redactions": base.get("redactions") or {"count": 0}, "fleet": fleet}
    return out, code
