"""The triage for people (text: the verdict first, then the first failure with a few lines of context, the cause and
its fix, then what followed) and for programs (JSON, schema dsv4-doctor.triage/1). No rich: plain text, every piece
of a log redacted and made inert (verdict.Shown) before it is written."""

from __future__ import annotations

import json

from .locate import Located
from .scan import Scanned
from .streams import Skipped
from .verdict import Shown

SHOWN_CONSEQUENCES = 8
SHOWN_FOLLOWED = 8
LINE_WIDTH = 400  # characters of one log line in the text (the JSON keeps them whole, up to 8 KiB)


def as_json(result: dict) -> str:
    return json.dumps(result, indent=2, ensure_ascii=False) + "\n"


def _short(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= LINE_WIDTH else text[:LINE_WIDTH - 1] + "…"


def _who(rank, host) -> str:
    parts = [f"rank {rank}" if rank is not None else "", f"host {host}" if host else ""]
    return ", ".join(p for p in parts if p) or "rank not known"


HEADLINES = {
    "known-cause": "known cause",
    "known-symptom": "a known symptom, no known cause",
    "not-recognised": "not recognised",
}


def as_text(result: dict, located: Located, scanned: list[Scanned], skipped: list[Skipped],
            note: str | None = None) -> str:
    shown = Shown()
    out: list[str] = []
    verdict = result["verdict"]
    head = f"dsv4-doctor triage: {HEADLINES[verdict]}"
    if result["causes"]:
        head += f": {result['causes'][0]['check']}"
    elif result["symptoms"]:
        head += f": {result['symptoms'][0]['class']}"
    out.append(head)
    read = sum(1 for s in scanned if s.refused is None)
    out.append(f"  read {read} stream(s), {sum(s.lines for s in scanned)} lines"
               + (f"; {len(skipped)} path(s) not read (listed at the end)" if skipped else ""))
    first = result["first_failure"]
    if first is None:
        out.append("")
        out.append("No failure line was found in what was read.")
    else:
        how = "the earliest by the lines' times" if located.by_time else "the first in stream order: the lines " \
              "carry no time to compare"
        out.append("")
        out.append(f"First failure: {_who(first['rank'], first['host'])}, {first['file']}:{first['line']} ({how})")
        line = located.first
        assert line is not None
        for before in line.before:
            out.append(f"    {_short(shown(before))}")
        out.append(f"  > {_short(first['text'])}")
        for after in line.after:
            out.append(f"    {_short(shown(after))}")
    for cause in result["causes"]:
        out.append("")
        out.append(f"Cause ({cause['signature']}): {cause['cause']}")
        for ev in cause["evidence"]:
            out.append(f"  seen at {ev['file']}:{ev['line']}: {_short(ev['text'])}")
        for fix in cause["fixes"]:
            out.append(f"  fix: {fix['description']}" + (" (by hand)" if fix.get("manual") else ""))
            out.extend(f"    $ {cmd}" for cmd in fix["commands"])
    for said in result.get("doctor_reports", []):
        whose = "the failing rank's doctor report" if said["failing_rank"] else "a doctor report (whose rank is not " \
                "known to be the failing one)"
        row = said["row"]
        out.append("")
        if row is None:
            out.append(f"Doctor report: {whose}, {said['report']}, has no row {said['check']}: it did not check it.")
        elif said["warned"]:
            out.append(f"Doctor report: {whose}, {said['report']}, had warned: row {said['check']} was {row}: "
                       f"{_short(said['summary'])}")
        else:
            out.append(f"Doctor report: {whose}, {said['report']}, had not warned: row {said['check']} was {row}.")
    if result["symptoms"]:
        out.append("")
        out.append("Symptoms:")
        for symptom in result["symptoms"]:
            ev = symptom["evidence"][0]
            out.append(f"  {symptom['class']} ({symptom['signature']}), first at {ev['file']}:{ev['line']}")
    if located.followed:
        out.append("")
        out.append("Then failed:")
        for line in located.followed[:SHOWN_FOLLOWED]:
            out.append(f"  {_who(line.rank, shown(line.host))}, {shown(line.file)}:{line.number}: "
                       f"{_short(shown(line.text))}")
        if len(located.followed) > SHOWN_FOLLOWED:
            out.append(f"  ... and {len(located.followed) - SHOWN_FOLLOWED} more")
    if result["consequences"]:
        out.append("")
        out.append(f"Set aside as consequences of an earlier failure ({located.consequence_count}):")
        for c in result["consequences"][:SHOWN_CONSEQUENCES]:
            out.append(f"  {c['file']}:{c['line']} ({_who(c['rank'], None)}): {_short(c['text'])}")
    out.append("")
    out.append("Collect next:")
    out.extend(f"  - {advice}" for advice in result["collect_next"])
    refused = [(s.stream.name, s.refused) for s in scanned if s.refused is not None]
    cut = sum(s.cut_lines for s in scanned)
    if skipped or refused or cut:
        out.append("")
    for path, why in [(s.name, s.why) for s in skipped] + refused:
        out.append(f"Not read: {shown(path)} ({why})")
    if cut:
        out.append(f"Lines longer than 8 KiB were cut at 8 KiB: {cut}")
    if note:
        out.append("")
        out.append(note)
    return "\n".join(out) + "\n"
