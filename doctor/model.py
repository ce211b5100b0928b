"""The data every check, renderer and the CLI share: profiles, checks, results, fixes.

Checks return data (a `Result`); renderers turn reports into text, JSON, markdown or JUnit; nothing here prints.
"""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, Union

if TYPE_CHECKING:
    from .probes import Probe, StaticRequest
    from .runner import Context


class Status(str, enum.Enum):
    """A check's outcome. The wire names are a contract: CI users gate on them."""

    PASS = "pass"
    WARN = "warn"  # works, but slower or risky
    FAIL = "fail"  # the job will crash or silently compute something wrong
    SKIP = "skip"  # does not apply to this profile; always says why
    ERROR = "error"  # the check could not complete (probe crashed or timed out, check code raised)


# Worst first: used for the overall verdict and to order annotations.
SEVERITY = {Status.ERROR: 4, Status.FAIL: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


class ExitCode(enum.IntEnum):
    """Process exit codes; the same for every output format."""

    OK = 0  # no failures (warnings allowed unless --strict)
    FAILED = 1  # at least one check failed or errored (or warned, with --strict)
    USAGE = 2  # bad command line (typer/click's own code for usage errors)
    INTERNAL = 3  # the doctor itself or a plugin crashed; the report is still written


@dataclass(frozen=True)
class Source:
    """An upstream source a rule is based on."""

    title: str
    url: str = ""

    def to_dict(self) -> dict:
        return {"title": self.title, "url": self.url}


@dataclass(frozen=True)
class Fix:
    """A remediation: prose apart from the exact shell commands (printed verbatim, never through markup)."""

    description: str
    commands: tuple[str, ...] = ()

    def __init__(self, description: str, commands: Iterable[str] = ()):
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "commands", tuple(commands))

    def to_dict(self) -> dict:
        return {"description": self.description, "commands": list(self.commands)}


@dataclass(frozen=True)
class Profile:
    """The planned job: which rules apply depends on it. Part of every report."""

    cp: int = 1
    dsa_backend: str = "cudnn"
    gpu_arch: str | None = None  # "9.0"; None when unknown
    gpu_arch_source: str = "unknown"  # "option" | "detected" | "unknown"
    device: str = "auto"  # where the smoke forward runs: auto | cuda | cpu
    smoke: str = "auto"  # auto: when a GPU is visible; on: always (`dsv4-doctor smoke`); off: --no-smoke
    gpus: int = 0  # GPUs nvidia-smi lists on this host

    @property
    def cc(self) -> tuple[int, int] | None:
        """Compute capability as a tuple, compared exactly as Megatron does."""
        if not self.gpu_arch:
            return None
        major, _, minor = self.gpu_arch.partition(".")
        return int(major), int(minor or 0)

    def to_dict(self) -> dict:
        return {
            "cp": self.cp,
            "dsa_backend": self.dsa_backend,
            "gpu_arch": self.gpu_arch,
            "gpu_arch_source": self.gpu_arch_source,
            "device": self.device,
            "smoke": self.smoke,
            "gpus": self.gpus,
        }


@dataclass
class Result:
    """What a check's run function returns."""

    status: Status
    summary: str
    details: str = ""
    evidence: dict = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)


def passed(summary: str, details: str = "", **evidence: Any) -> Result:
    return Result(Status.PASS, summary, details, evidence)


def warned(summary: str, details: str = "", fixes: Sequence[Fix] = (), **evidence: Any) -> Result:
    return Result(Status.WARN, summary, details, evidence, list(fixes))


def failed(summary: str, details: str = "", fixes: Sequence[Fix] = (), **evidence: Any) -> Result:
    return Result(Status.FAIL, summary, details, evidence, list(fixes))


def errored(summary: str, details: str = "", **evidence: Any) -> Result:
    """The check could not complete (e.g. a file it must read is unreadable)."""
    return Result(Status.ERROR, summary, details, evidence)


def skipped(reason: str, **evidence: Any) -> Result:
    return Result(Status.SKIP, reason, "", evidence)


ProbeSpec = Union[Sequence["Probe"], Callable[[Profile], Sequence["Probe"]]]


@dataclass(frozen=True)
class Check:
    """A rule. `explanation` is its documentation: `explain`, `list` and the README table come from these fields."""

    id: str  # stable dotted id, e.g. "torch.install"; never reused
    title: str
    explanation: str  # why it matters
    applies_when: str  # human text, e.g. "CP > 1"
    detects: str  # what it looks at, in a few words
    run: Callable[["Context"], Result]
    sources: tuple[Source, ...] = ()
    fixes: tuple[Fix, ...] = ()  # the remediations it can print, for `explain` and the rules table
    # Returns why the check does not apply to this profile, or None when it does.
    skip_if: Callable[[Profile], str | None] = lambda profile: None
    probes: ProbeSpec = ()
    static: "StaticRequest | None" = None
    origin: str = "dsv4-doctor"  # the distribution that registered it; set by the registry

    def probes_for(self, profile: Profile) -> list["Probe"]:
        return list(self.probes(profile) if callable(self.probes) else self.probes)

    def doc(self) -> str:
        return textwrap.dedent(self.explanation).strip()


@dataclass
class CheckReport:
    """A check's result, stamped with its identity, for renderers."""

    id: str
    title: str
    status: Status
    summary: str
    details: str = ""
    evidence: dict = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    duration_s: float = 0.0
    origin: str = "dsv4-doctor"
    # True when the doctor's own code (a check function, a plugin) crashed rather than the inspected environment.
    internal_error: bool = False

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "summary": self.summary,
            "details": self.details,
            "evidence": self.evidence,
            "fixes": [f.to_dict() for f in self.fixes],
            "sources": [s.to_dict() for s in self.sources],
            "duration_s": round(self.duration_s, 3),
            "origin": self.origin,
            "internal_error": self.internal_error,
        }


def overall_status(statuses: Iterable[Status]) -> Status:
    worst = Status.PASS
    for status in statuses:
        if SEVERITY[status] > SEVERITY[worst]:
            worst = status
    return worst


def exit_code_for(checks: Sequence[CheckReport], strict: bool = False) -> ExitCode:
    if any(c.internal_error for c in checks):
        return ExitCode.INTERNAL
    if any(c.status in (Status.FAIL, Status.ERROR) for c in checks):
        return ExitCode.FAILED
    if strict and any(c.status is Status.WARN for c in checks):
        return ExitCode.FAILED
    return ExitCode.OK


def counts(checks: Sequence[CheckReport]) -> Mapping[str, int]:
    tally = {s.value: 0 for s in Status}
    for c in checks:
        tally[c.status.value] += 1
    return tally
