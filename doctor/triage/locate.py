"""The first failure across all streams, and what followed.

A failure line is hard (an exception, a CUDA error, a symptom the line itself shows), soft (what a rank prints when
a peer failed: the NCCL watchdog's timeout and abort, a closed connection) or reported (a Ray actor's or worker's
death, the launcher's report of a child killed by a signal: what another process says of the dead one). The first
failure is the earliest hard failure; only where there is none, the earliest soft one. A reported death is never
the first failure (what another process says of the dead one is not where it failed): a log that holds only those
has no first failure, and its deaths are listed apart with the consequences (their symptom still counts).
Earliest by time where every such line carries one (its own, or the last one its stream
stated before it: a traceback's last line), else by stream order (the inputs' order, then line order).
Consequences (torchrun's ChildFailedError block, "taking the entire process down", Ray's RayTaskError re-raise) are
never the first failure; they, and the lower tiers' lines where a higher tier failed, are listed apart."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import symptoms
from .scan import Line, Scanned

MAX_CONSEQUENCES = 50


@dataclass
class Located:
    first: Line | None
    by_time: bool
    same_source: list[Line] = field(default_factory=list)  # the first failing rank's own failure lines, in order
    followed: list[Line] = field(default_factory=list)  # each other rank's (or worker's) first failure
    consequences: list[Line] = field(default_factory=list)
    consequence_count: int = 0


def _order(lines: list[Line]) -> tuple[list[Line], bool]:
    if lines and all(line.time is not None for line in lines):
        return sorted(lines, key=lambda x: (x.time, x.stream, x.number)), True
    return sorted(lines, key=lambda x: (x.stream, x.number)), False


def locate(scanned: list[Scanned]) -> Located:
    failures = [line for s in scanned for line in s.failures]
    hard = [line for line in failures if line.rule.kind in (symptoms.FAILURE, symptoms.LOGGED)]
    soft = [line for line in failures if line.rule.kind == symptoms.SOFT]
    reported = [line for line in failures if line.rule.kind == symptoms.REPORTED]
    tiers = [tier for tier in (hard, soft) if tier]
    candidates, by_time = _order(tiers[0] if tiers else [])
    consequences = [line for s in scanned for line in s.consequences] + [x for tier in tiers[1:] for x in tier]
    consequences += reported
    consequences, _ = _order(consequences)
    found = Located(candidates[0] if candidates else None, by_time, consequences=consequences[:MAX_CONSEQUENCES],
                    consequence_count=len(consequences) + sum(s.dropped for s in scanned))
    if found.first is None:
        return found
    first = found.first
    found.same_source = [x for x in candidates if x.who == first.who]
    seen = {first.who}
    for line in candidates:
        if line.who not in seen:
            seen.add(line.who)
            found.followed.append(line)
    return found
