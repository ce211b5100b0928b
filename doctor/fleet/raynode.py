"""A Ray node's report: admitted as a fleet rank's, or, on a node whose job environment has no doctor, made here from
the static facts the shipped probe gave (the selected checks on those facts; anything else is not known)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model import Profile


def probe_report(payload: bytes | None, opts: Any, profile: Profile) -> dict | None:
    """The report of a node whose job environment has no doctor, made here from the static facts its shipped probe
    gave: the selected built-in checks run on those facts; a check that needs any other probe (the node's imports,
    torch, its GPUs: nothing else ran there) is an error that says so, never a pass."""
    from .. import registry
    from ..assemble import Outcome, build
    from ..runner import _report, execute
    from .admit import MAX_REPORT_BYTES
    from .raycluster import RAN_PROBES, node_fields

    if payload is None or len(payload) > MAX_REPORT_BYTES:
        return None
    try:
        facts = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(facts, dict) or "probe_error" in facts:
        return None
    from ..redact import sanitize

    facts = sanitize(facts)
    profile = replace(profile, fleet=node_fields("probes"))
    selected_ids = set(_selected(opts))
    checks = [c for c in registry.load().checks if not selected_ids or c.id in selected_ids]
    context = _ProbeContext(profile=profile, facts=facts)
    reports = []
    for check in checks:
        result, internal = execute(check, context)
        report = _report(check, result, 0.0, internal)
        context.outcomes[check.id] = report
        reports.append(report)
    outcome = Outcome(profile=profile, reports=reports, target={}, static=facts, duration_s=0.0, budget_s=0.0)
    data = build(outcome, str(facts.get("python", {}).get("executable") or "python"), bool(opts.strict)).to_dict()
    data.setdefault("environment", {})["checked_by"] = RAN_PROBES
    return data


def _selected(opts: Any) -> list[str]:
    """The ids the driver's own run selected (its --only, expanded as the session expands it); [] for all."""
    import fnmatch

    from .. import registry

    only = [str(v) for v in (opts.only or [])]
    skip = [str(v) for v in (opts.skip or [])]
    ids = [c.id for c in registry.load().checks]
    picked = [i for i in ids if not only or any(fnmatch.fnmatchcase(i, p) or i == p for p in only)]
    return [i for i in picked if not any(fnmatch.fnmatchcase(i, p) for p in skip)]


class _ProbeContext:
    """model.Context for a node where only the shipped static probe ran: its facts, and nothing else."""

    NOT_RUN = ("was not run: this node's job environment has no dsv4-doctor, and only the doctor's static probe, "
               "shipped with the task, ran there (not known)")

    def __init__(self, profile: Any, facts: dict):
        self.profile, self.facts, self.python = profile, facts, "python"
        self.target: dict = {}
        self.outcomes: dict[str, Any] = {}

    @property
    def static(self):
        from ..facts import StaticFacts

        return StaticFacts(self.facts)

    def probe(self, probe: Any):
        from ..probes import ProbeResult

        return ProbeResult(getattr(probe, "key", "probe"), False, error=self.NOT_RUN)

    def require(self, probe: Any):
        from ..runner import ProbeFailed

        raise ProbeFailed(self.probe(probe))

    def gpus(self) -> list[dict]:
        from ..probes import NVIDIA_SMI
        from ..runner import ProbeFailed

        raise ProbeFailed(self.probe(NVIDIA_SMI))

    def outcome(self, check_id: str):
        return self.outcomes.get(check_id)


def as_node(payload: bytes | None, rank: int, label: str, node_id: str) -> dict:
    """A node's report as a fleet rank's: its place (rank, host label, node) set by the driver, not by the node."""
    from .admit import MAX_REPORT_BYTES, BadReport

    if payload is None:
        raise BadReport("its report could not be read")
    if len(payload) > MAX_REPORT_BYTES:
        raise BadReport(f"its report is {len(payload)} bytes (at most {MAX_REPORT_BYTES})")
    try:
        data = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadReport("its report is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("environment"), dict):
        raise BadReport("its report is not a report")
    data["environment"]["fleet_rank"] = {"rank": rank, "local_rank": 0, "host": label, "node": node_id[:16]}
    return data
