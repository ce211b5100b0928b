"""A Ray node's part of the fleet report: its entry in the Ray helper's answer, read field by field (hostile input: a
malformed entry is that node's failing entry, never the merge's failure), and its report: admitted as a fleet rank's,
or, on a node whose job environment has no doctor, made here from the static facts the shipped probe gave (the
selected checks on those facts; anything else is not known)."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..hostio.safeio import ReadRefused, decode_json
from .rayjob import MAX_ENV_VARS, REWARD_KEY, Wanted

if TYPE_CHECKING:
    from ..model.core import Profile

# How a node's report was made (fleet.ranks' `ran`, the verdict's count of doctor-less nodes).
RAN_DOCTOR = "doctor from the job's environment"
RAN_PROBES = "the doctor's probes shipped with the task"


def node_fields(node: str, host: str | None = None) -> dict:
    """profile.fleet of a node task's doctor (or the driver's): it makes the report carry its fingerprint."""
    return {"rank": 0, "world_size": 1, "local_rank": 0, "node_leader": True, "launcher": "ray",
            "host": host or socket.gethostname() or "unknown", "node": node[:16]}


def probe_report(payload: bytes | None, opts: Any, profile: Profile) -> dict | None:
    """The report of a node whose job environment has no doctor, made here from the static facts its shipped probe
    gave: the selected built-in checks run on those facts; a check that needs any other probe (the node's imports,
    torch, its GPUs: nothing else ran there) is an error that says so, never a pass."""
    from ..engine import registry
    from ..report.assemble import Outcome, build
    from ..engine.runner import _report, execute
    from .admit import MAX_REPORT_BYTES, _text

    if payload is None or len(payload) > MAX_REPORT_BYTES:
        return None
    try:
        facts = decode_json(payload)
    except ReadRefused:  # not JSON, or nested too deeply
        return None
    if not isinstance(facts, dict) or "probe_error" in facts:
        return None
    from ..hostio.redact import sanitize

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
    python = facts.get("python") if isinstance(facts.get("python"), dict) else {}
    data = build(outcome, _text(python.get("executable")) or "python", bool(opts.strict)).to_dict()
    data.setdefault("environment", {})["checked_by"] = RAN_PROBES
    return data


def _selected(opts: Any) -> list[str]:
    """The ids the driver's own run selected (its --only, expanded as the session expands it); [] for all."""
    import fnmatch

    from ..engine import registry

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
        from ..model.facts import StaticFacts

        return StaticFacts(self.facts)

    def probe(self, probe: Any):
        from ..engine.probes import ProbeResult

        return ProbeResult(getattr(probe, "key", "probe"), False, error=self.NOT_RUN)

    def require(self, probe: Any):
        from ..engine.runner import ProbeFailed

        raise ProbeFailed(self.probe(probe))

    def gpus(self) -> list[dict]:
        from ..engine.probes import NVIDIA_SMI
        from ..engine.runner import ProbeFailed

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
        data = decode_json(payload)
    except ReadRefused as exc:
        raise BadReport(f"its report is not read: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("environment"), dict):
        raise BadReport("its report is not a report")
    data["environment"]["fleet_rank"] = {"rank": rank, "local_rank": 0, "host": label, "node": node_id[:16]}
    return data


def helper_error(answer: dict) -> str:
    """What the helper's answer says went wrong, or what is malformed in it; "" for a well-formed answer."""
    from .admit import _shown, _text

    error = answer.get("error")
    if error is not None and error != "" and not isinstance(error, str):
        return f"the Ray helper's answer is malformed: its error is {_shown(error)}, not text"
    if error:
        return _text(error, 600)
    if not isinstance(answer.get("nodes"), list):
        return (f"the Ray helper's answer is malformed: its nodes is {_shown(answer.get('nodes'))}, not a list"
                if "nodes" in answer else "the Ray helper's answer has neither nodes nor an error")
    return ""


def timings(value: Any) -> dict:
    """The helper's timings: its named numbers of seconds, nothing else."""
    from .admit import _seconds, _text

    if not isinstance(value, dict):
        return {}
    return {_text(k, 64): _seconds(v) for k, v in list(value.items())[:32] if _text(k, 64) and _seconds(v) is not None}


class NodeAnswer:
    """One node's entry of the helper's answer, read field by field: each field the doctor uses has its JSON type
    and range, or the entry is malformed (`malformed` says which fields, and their values)."""

    def __init__(self) -> None:
        self.node_id, self.host, self.why = "", "unknown", ""
        self.how: str | None = None
        self.gpus: float | None = None
        self.seen: list[str] | None = None
        self.malformed: list[str] = []

    @property
    def label(self) -> str:
        """The node as fleet.ranks names it: its host and the first characters of its Ray node id."""
        return f"{self.host} (node {self.node_id[:8] or '?'})"

    @staticmethod
    def read(raw: Any) -> NodeAnswer:
        from .admit import _shown, _text

        node = NodeAnswer()
        if not isinstance(raw, dict):
            node.malformed.append(f"the entry is {_shown(raw)}, not an object")
            return node

        def bad(field: str, wants: str) -> None:
            node.malformed.append(f"{field} is {_shown(raw.get(field)) if field in raw else 'missing'}, not {wants}")

        node_id = raw.get("node_id")
        if isinstance(node_id, str) and node_id.isalnum() and len(node_id) <= 128:
            node.node_id = node_id
        else:
            bad("node_id", "a Ray node id")
        host = raw.get("host")
        if isinstance(host, str):
            node.host = _text(host, 255) or "unknown"
        elif host is not None:
            bad("host", "a host name")
        gpus = raw.get("gpus")
        if isinstance(gpus, (int, float)) and not isinstance(gpus, bool) and 0 <= gpus <= 1_000_000:
            node.gpus = float(gpus)
        else:
            bad("gpus", "a number of GPUs")
        ran = raw.get("ran")
        if ran in ("doctor", "probes"):
            node.how = RAN_PROBES if ran == "probes" else RAN_DOCTOR
        elif ran is not None:
            bad("ran", '"doctor" or "probes"')
        why = raw.get("why")
        if isinstance(why, str):
            node.why = _text(why, 400)
        elif why is not None:
            bad("why", "text")
        seen = raw.get("runtime_env_seen")
        if isinstance(seen, list) and all(isinstance(n, str) for n in seen):
            node.seen = [_text(n, 128) for n in seen[:MAX_ENV_VARS]]
        elif seen is not None:
            bad("runtime_env_seen", "a list of variable names")
        return node


def take_node(node: NodeAnswer, rank: int, payload_path: str, want: Wanted,
              from_probes: Callable[[bytes | None], dict | None] | None) -> tuple[Any, str]:
    """(the node's admitted report or None, why the node fails or ""). The caller makes anything that still raises
    this node's failing entry."""
    from ..hostio.procs import read_bounded
    from . import admit as fleetadmit

    if node.malformed:
        return None, "its answer to the doctor is malformed: " + "; ".join(node.malformed)
    taken, problem = None, node.why
    if not problem:
        payload = read_bounded(payload_path, fleetadmit.MAX_REPORT_BYTES + 1)
        try:
            if node.how == RAN_PROBES:
                data = from_probes(payload) if from_probes else None
                if data is None:
                    raise fleetadmit.BadReport("its static facts could not be read into a report")
                payload = json.dumps(data).encode("utf-8")
            taken = fleetadmit.admit(rank, as_node(payload, rank, node.label, node.node_id))
        except fleetadmit.BadReport as exc:
            problem = f"its report was rejected: {exc}"
    least = want.least_gpus
    if least and node.gpus is not None and node.gpus < least:
        asks = f"trainer.n_gpus_per_node={want.per_node}" + (
            f" (the reward pool's {REWARD_KEY}.n_gpus_per_node={want.reward_per_node})"
            if want.reward_nnodes and want.reward_per_node else "")
        problem = f"it has {node.gpus:g} GPU(s), and the command asks {asks}" + (f"; {problem}" if problem else "")
    return taken, problem


# nvidia-smi's view of the node's GPUs: no runtime_env field changes it. Every other row of a node reads the node's
# Python environment (its imports, its installed packages, its interpreter) or is a plugin's the driver cannot tell.
ENVIRONMENT_FREE = ("gpu.arch", "gpu.memory")


def not_seen(report: Any, unapplied: Sequence[str]) -> None:
    """A node's rows that depend on its Python environment, made not known (warn) in place when the job's runtime_env
    has fields the check's task did not apply (`unapplied`: pip, conda, a remote URI, ...): the job's workers on
    that node import what the task did not, so the node is never a pass (nor a failure) on facts it did not see.
    What the task saw without them stays in the summary and the evidence. A skip claims nothing and stays."""
    from ..model.core import Status
    from .admit import _text

    if not unapplied:
        return
    names = ", ".join(_text(n, 64) for n in list(unapplied)[:16])
    for cid, row in list(report.rows.items()):
        if cid in ENVIRONMENT_FREE or cid.startswith("fleet.") or row.status == Status.SKIP:
            continue
        summary = (f"not known: the job's runtime_env sets {names}, which the check's task on this node did not "
                   f"apply (its workers import what the task did not see); without them the task saw "
                   f"({row.status.value}) {row.summary}")
        evidence = dict(row.evidence or {}, runtime_env_not_applied=list(unapplied)[:16],
                        seen_without_them=row.status.value)
        report.rows[cid] = replace(row, status=Status.WARN, summary=_text(summary, 2000), evidence=evidence)
        # fleet.drift compares the rows' statuses across ranks: a row not known is no status to compare.
        report.not_known_rows = (*getattr(report, "not_known_rows", ()), cid)
