"""What a job check found across the job's roles, and the closing finding it makes (its status by the engine's rule)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dsv4_doctor.api import Finding, Fix, Status, result_of


@dataclass
class Found:
    """What a job check found across the job's roles; `verdict` makes its closing finding."""

    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # what the command leaves not known
    notes: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)


def verdict(found: Found, evidence: dict, tail: Sequence[str] = (), passed_text: str = "") -> list[Finding]:
    """The job checks' one closing finding. Its status is the engine's rule (`result_of`) over what was found, with
    anything not known counted as a warning (never a skip, never a pass it did not earn); nothing found passes. The
    layout is the job checks' own: the failures, else the warnings, else what is not known (and why), else the notes
    lead the summary, and whatever ranks below them follows as details. `tail`: details a failure, warning or pass
    ends with."""
    fails, warns, unknown, notes = found.fails, found.warns, found.unknown, found.notes
    judged = [Finding(Status.FAIL, text) for text in fails]
    judged += [Finding(Status.WARN, text) for text in [*warns, *unknown]]
    status = result_of(judged).status if judged else Status.PASS
    if status is Status.FAIL:
        return [Finding(Status.FAIL, "; ".join(fails), "\n".join([*warns, *unknown, *notes, *tail]), found.fixes,
                        evidence)]
    if warns:
        return [Finding(Status.WARN, "; ".join(warns), "\n".join([*unknown, *notes, *tail]), found.fixes, evidence)]
    if unknown:
        return [Finding(Status.WARN, "not known: " + "; ".join(unknown), "\n".join([*notes, *tail]),
                        evidence=evidence)]
    return [Finding(Status.PASS, "; ".join(notes) or passed_text, "\n".join(tail), evidence=evidence)]
