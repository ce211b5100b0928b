"""What a job check found across the job's roles, and the one closing rule that makes its finding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dsv4_doctor.api import Finding, Fix, Status


@dataclass
class Found:
    """What a job check found across the job's roles; `verdict` makes its closing finding."""

    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # what the command leaves not known
    notes: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)


def verdict(found: Found, evidence: dict, tail: Sequence[str] = (), passed_text: str = "") -> list[Finding]:
    """The job checks' one closing rule: the failures, else the warnings, lead the summary, with whatever ranks
    below them as details; anything not known makes the row a warning that says what is not known and why (never a
    skip, never a pass it did not earn); else the notes pass it. `tail`: details a failure, warning or pass ends
    with."""
    fails, warns, unknown, notes = found.fails, found.warns, found.unknown, found.notes
    if fails:
        return [Finding(Status.FAIL, "; ".join(fails), "\n".join([*warns, *unknown, *notes, *tail]), found.fixes,
                        evidence)]
    if warns:
        return [Finding(Status.WARN, "; ".join(warns), "\n".join([*unknown, *notes, *tail]), found.fixes, evidence)]
    if unknown:
        return [Finding(Status.WARN, "not known: " + "; ".join(unknown), "\n".join([*notes, *tail]),
                        evidence=evidence)]
    return [Finding(Status.PASS, "; ".join(notes) or passed_text, "\n".join(tail), evidence=evidence)]
