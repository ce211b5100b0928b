"""The triage as data: schema `dsv4-doctor.triage/1` (docs/triage.md; doctor/schema/triage-1.schema.json).
Every string that came from a log or a path is redacted (as reports are) and made inert where it is shown."""

from __future__ import annotations

from ..hostio.redact import Redactor
from ..hostio.validtext import clean_text
from . import match, symptoms
from .locate import Located
from .scan import Line

SCHEMA = "dsv4-doctor.triage/1"
MAX_EVIDENCE = 5
TEXT_LIMIT = 8 * 1024


class Shown:
    """Hostile text as it may be shown: redacted, capped, inert. (Not Redactor's tree walk: a key named
    `signature` looks secret to it, and here every key is the doctor's own.)"""

    def __init__(self) -> None:
        self.redactor = Redactor()

    def __call__(self, text: str | None) -> str | None:
        return None if text is None else clean_text(self.redactor.redact_then_cap(text, TEXT_LIMIT))


def _where(line: Line) -> str:
    if line.rank is not None:
        return f"rank {line.rank}"
    return line.worker or line.host or "an unknown rank"


def build(located: Located, reports_said: list[dict] | None = None, note: str | None = None) -> dict:
    shown = Shown()

    def evidence(line: Line) -> dict:
        return {"file": shown(line.file), "line": line.number, "text": shown(line.text)}

    first = located.first
    causes: dict[str, dict] = {}
    for line in ([first] if first else []) + [x for x in located.same_source if x is not first]:
        for found in match.causes_in(line.text):
            signature = f"{found.check_id}/{found.text_id}"
            if signature not in causes:
                check = match.check_of(found.check_id)
                title = f": {check.title}" if check is not None else ""
                declared = found.text.replace("{", "").replace("}", "")
                causes[signature] = {
                    "signature": signature, "check": found.check_id,
                    "cause": f"{found.kind} {declared!r} ({found.source.title}); the doctor's rule "
                             f"{found.check_id}{title}",
                    "fixes": [{"description": f.description, "commands": [c.shell() for c in f.commands],
                               "manual": f.manual} for f in (check.fixes if check is not None else ())],
                    "evidence": []}
            if len(causes[signature]["evidence"]) < MAX_EVIDENCE:
                causes[signature]["evidence"].append(evidence(line))
    found_symptoms: dict[str, dict] = {}
    soft = [x for x in located.consequences if x.rule.kind in (symptoms.SOFT, symptoms.REPORTED)]
    for line in ([first] if first else []) + located.same_source + located.followed + soft:
        if line.rule.klass is None:
            continue
        entry = found_symptoms.setdefault(line.rule.name, {"signature": line.rule.name, "class": line.rule.klass,
                                                           "evidence": []})
        if len(entry["evidence"]) < MAX_EVIDENCE and evidence(line) not in entry["evidence"]:
            entry["evidence"].append(evidence(line))
    verdict = "known-cause" if causes else "known-symptom" if found_symptoms else "not-recognised"
    node = (f"the node of {_where(first)}" + (f" ({first.host})" if first.host else "")) if first else "each node"
    collect: list[str] = []
    if causes:
        check_id = next(iter(causes.values()))["check"]
        collect.append(f"dsv4-doctor check --only {check_id} on {node}, with the job's interpreter (--python) and "
                       "command (--job-args): it says whether the cause is still there and what fixes it")
    for entry in found_symptoms.values():
        for advice in symptoms.COLLECT_NEXT.get(entry["class"], ()):
            if advice not in collect:
                collect.append(advice)
    if not causes:
        collect.append(f"dsv4-doctor check on {node}: what a preflight can see of its stack")
    out = {
        "schema": SCHEMA,
        "verdict": verdict,
        "first_failure": None if first is None else {
            "file": shown(first.file), "line": first.number, "rank": first.rank, "host": shown(first.host),
            "text": shown(first.text)},
        "causes": list(causes.values()),
        "symptoms": list(found_symptoms.values()),
        "collect_next": [shown(c) for c in collect],
        "consequences": [{"file": shown(x.file), "line": x.number, "rank": x.rank, "text": shown(x.text)}
                         for x in located.consequences],
    }
    if reports_said:
        out["doctor_reports"] = [{k: shown(v) if isinstance(v, str) else v for k, v in r.items()}
                                 for r in reports_said]
    return out
