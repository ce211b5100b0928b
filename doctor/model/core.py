"""The data every check, renderer and the CLI share: profiles, checks, results, and (from fix/steps.py) fixes.

Checks return data (a `Result`); renderers turn reports into text, JSON, markdown or JUnit; nothing here prints and
nothing here imports the engine (session, runner, probes), so plugins can import it cheaply.
"""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from collections.abc import Callable, Iterable, Mapping, Sequence

# What a fix is lives in fix/steps.py; checks, plugins (APIs 1/2) and the renderers import it from here.
from ..fix.steps import PIP, UNSAFE_CHARS, Command, Fix, Phase  # noqa: F401

# What an upstream source and text are live in upstream/texts.py, which imports nothing of the doctor.
from ..upstream.texts import Source, UpstreamText  # noqa: F401


class Status(str, enum.Enum):
    """A check's outcome. The wire names are a contract: CI users gate on them."""

    PASS = "pass"
    WARN = "warn"  # works, but slower or risky
    FAIL = "fail"  # the job will crash or silently compute something wrong
    SKIP = "skip"  # does not apply to this profile, or cannot be judged here; always says why
    ERROR = "error"  # the check could not complete (probe crashed or timed out, check code raised)


# Worst first: used for the overall verdict and to order annotations.
SEVERITY = {Status.ERROR: 4, Status.FAIL: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


class Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP arrived; the session writes what it has and exits 128 + signum. A BaseException, so
    that no `except Exception` swallows it; code that catches BaseException must let it through."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class ExitCode(enum.IntEnum):
    """Process exit codes; the same for every output format."""

    OK = 0  # no failures (warnings allowed unless --strict)
    FAILED = 1  # at least one check failed or errored (or warned, with --strict); `fix`: a failure has no fix
    USAGE = 2  # bad command line
    INTERNAL = 3  # the doctor itself or a plugin crashed; the report is still written
    OUTPUT = 4  # the report could not be written to --output; it went to stdout instead
    LATE = 5  # fleet mode: this rank took the verdict after the acknowledgement deadline (stopped): not started
    HANGUP = 129  # SIGHUP: probes killed, a report of what finished was written
    INTERRUPTED = 130  # SIGINT (Ctrl-C): likewise
    TERMINATED = 143  # SIGTERM: likewise


class UsageError(Exception):
    """A bad command line or target; the CLI prints it with the command's usage and exits 2."""


# ------------------------------------------------------------------------------------------------------ profile

@dataclass(frozen=True)
class Profile:
    """The planned job and where the doctor runs: which rules apply depends on it. Part of every report."""

    cp: int = 1
    dsa_backend: str = "cudnn"
    gpu_arch: str | None = None  # "9.0"; None when unknown
    gpu_arch_source: str = "unknown"  # "option" | "detected" | "unknown"
    device: str = "auto"  # where the smoke forward runs: auto | cuda | cpu
    smoke: str = "auto"  # auto: when a GPU is visible; on: always (`dsv4-doctor smoke`); off: --no-smoke
    gpus: int = 0  # GPUs nvidia-smi lists on this host
    static_only: bool = False  # --static-only: checks that start an import probe are skipped
    # --deep: the smoke's tier 2 too (the DSv4 layer at CP 1 and CP N, fused vs unfused); default: tier 1 and the
    # kernel sub-runs only
    deep: bool = False
    dsa_backend_source: str = "option"  # "option" | "default" | "job" (read from the job's command line)
    # Where `cp` came from: --cp ("option"), the job's command line ("job"), or neither ("default": the report says
    # the CP was assumed, so that a CP-1 check of a CP>1 job does not pass unremarked).
    cp_source: str = "default"
    # Settings read from a training command (preflight, --job-args); a plugin host's profile carries the report's
    # dict instead (plugin APIs 1/2). A job.model.Job or None: not imported here, job/ imports this module.
    job: Any = None
    fleet: Mapping[str, Any] | None = None  # this rank in a fleet run: rank, world_size, local_rank, node_leader, host

    @property
    def cc(self) -> tuple[int, int] | None:
        """Compute capability as a tuple, compared exactly as Megatron does."""
        if not self.gpu_arch:
            return None
        major, _, minor = self.gpu_arch.partition(".")
        return int(major), int(minor or 0)

    def to_dict(self) -> dict:
        out = {"cp": self.cp, "cp_source": self.cp_source, "dsa_backend": self.dsa_backend,
               "dsa_backend_source": self.dsa_backend_source,
               "gpu_arch": self.gpu_arch, "gpu_arch_source": self.gpu_arch_source, "device": self.device,
               "smoke": self.smoke, "gpus": self.gpus, "static_only": self.static_only,
               "deep": self.deep}
        if self.job is not None:
            out["job"] = dict(self.job) if isinstance(self.job, Mapping) else self.job.to_dict()
        if self.fleet is not None:
            out["fleet"] = dict(self.fleet)
        return out

    @property
    def device_index(self) -> int:
        """The GPU this process checks: a fleet rank's own (its local rank), else the first."""
        return int((self.fleet or {}).get("local_rank") or 0)


# ------------------------------------------------------------------------------------------------------- results

@dataclass
class Result:
    """What a check's run function returns."""

    status: Status
    summary: str
    details: str = ""
    evidence: dict = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)


def _evidence(evidence: Any, legacy: Mapping) -> Any:
    # Plugin API 1 passed evidence as keyword arguments; it still works.
    if evidence is not None and not isinstance(evidence, Mapping):
        return evidence  # the runner reports "evidence must be a dict"
    out = dict(evidence or {})
    out.update(legacy)
    return out


def passed(summary: str, details: str = "", evidence: Mapping | None = None, **legacy: Any) -> Result:
    return Result(Status.PASS, summary, details, _evidence(evidence, legacy))


def warned(summary: str, details: str = "", fixes: Sequence[Fix] = (), evidence: Mapping | None = None,
           **legacy: Any) -> Result:
    return Result(Status.WARN, summary, details, _evidence(evidence, legacy), list(fixes))


def failed(summary: str, details: str = "", fixes: Sequence[Fix] = (), evidence: Mapping | None = None,
           **legacy: Any) -> Result:
    return Result(Status.FAIL, summary, details, _evidence(evidence, legacy), list(fixes))


def errored(summary: str, details: str = "", evidence: Mapping | None = None, **legacy: Any) -> Result:
    """The check could not complete (e.g. a file it must read is unreadable)."""
    return Result(Status.ERROR, summary, details, _evidence(evidence, legacy))


def skipped(reason: str, evidence: Mapping | None = None, **legacy: Any) -> Result:
    return Result(Status.SKIP, reason, "", _evidence(evidence, legacy))


# -------------------------------------------------------------------------------------------------------- checks

class Context(Protocol):
    """What a check's run function sees (the engine's runner and the plugin host implement it)."""

    profile: Profile
    python: str
    target: dict  # the interpreter handshake: version, version_info, executable, prefix

    @property
    def static(self) -> Any: ...  # facts.StaticFacts over the static probe's answer

    def probe(self, probe: Any) -> Any: ...  # probes.ProbeResult: never raises

    def require(self, probe: Any) -> Any: ...  # the probe's answer, or the check becomes an `error`

    def gpus(self) -> list[dict]: ...

    def outcome(self, check_id: str) -> CheckReport | None: ...  # a check named in `needs` or `after`, when it ran


ProbeSpec = Sequence[Any] | Callable[[Profile], Sequence[Any]]


@dataclass(frozen=True)
class Check:
    """A rule. `explanation` is its documentation: `explain`, `list`, docs/rules.md's table and docs/checks.md come
    from these fields."""

    id: str  # stable dotted id, e.g. "torch.install"; never reused
    title: str
    explanation: str  # why it matters
    applies_when: str  # human text, e.g. "CP > 1"
    detects: str  # what it looks at, in a few words
    run: Callable[[Context], Result | Iterable[Finding]]  # findings: the runner derives the result (result_of)
    sources: tuple[Source, ...] = ()
    fixes: tuple[Fix, ...] = ()  # the remediations it can print, for `explain` and the rules table
    # The upstream error and warning texts of this rule, declared once: `classify` (upstream/registry.py) maps a message
    # back to its rule with them, and `explain` lists them.
    texts: tuple[UpstreamText, ...] = ()
    # Returns why the check does not apply to this profile, or None when it does.
    skip_if: Callable[[Profile], str | None] = lambda profile: None
    probes: ProbeSpec = ()
    static: Any = None  # probes.StaticRequest
    # Checks this one builds on: they run first, and when one of them failed or errored this check is skipped with
    # "needs <id> (<its finding>)" instead of repeating that finding.
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # checks whose outcome this one reads (ctx.outcome): they only run first
    # Part of a run only in that context: "job" (job arguments given: preflight, --job-args) or "fleet" (the rows the
    # fleet merge writes); not a row of skip noise otherwise.
    only_with: str | None = None
    # Runs on every rank of a fleet, on the rank's own GPU (its device, its smoke); other checks with import probes
    # run once per node, on local rank 0.
    per_gpu: bool = False
    origin: str = "dsv4-doctor"  # the distribution that registered it; set by the registry
    # The built-in area it belongs to (the prefix its id must have), stamped by the rulebook when it lists its checks;
    # the engine reads it here and never imports the rulebook. None for a plugin's check.
    area: str | None = None
    # Called with (ctx, the result's fixes) after the check ran: the fixes as the plan should carry them (the
    # built-ins' reach the copy the job imports and use the target's installer: checks/_reach.py).
    route_fixes: Callable[[Any, list], list] | None = None

    def probes_for(self, profile: Profile) -> list:
        return list(self.probes(profile) if callable(self.probes) else self.probes)

    def doc(self) -> str:
        return textwrap.dedent(self.explanation).strip()


class Wire(Protocol):
    """What crosses a boundary as JSON: a fix as a check made it (`Fix`) or as a report shows it (`ShownFix`)."""

    def to_dict(self) -> dict: ...


FixT = TypeVar("FixT", bound=Wire)


@dataclass
class CheckReport(Generic[FixT]):
    """A check's result, stamped with its identity. Its fixes are what the check made (`CheckReport[Fix]`: the
    runner's, with their real commands) or, in a finished report, their redacted form (`CheckReport[ShownFix]`,
    model/report.py: what renderers see)."""

    id: str
    title: str
    status: Status
    summary: str
    details: str = ""
    evidence: dict = field(default_factory=dict)
    fixes: list[FixT] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    duration_s: float = 0.0
    origin: str = "dsv4-doctor"
    # True when the doctor's own code (a check function, a plugin) crashed rather than the inspected environment.
    internal_error: bool = False
    # A warning the team accepted (--accept, DSV4_DOCTOR_ACCEPT, a config file): {"reason", "from"}. It stays in the
    # report and no longer fails --strict; a failure is never accepted.
    accepted: Mapping[str, str] | None = None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "summary": self.summary,
            "details": self.details,
            "evidence": self.evidence,
            "fixes": [f.to_dict() for f in self.fixes],
            "sources": [s.to_dict() for s in self.sources],
            "duration_s": round(max(0.0, self.duration_s), 3),
            "origin": self.origin,
            "internal_error": self.internal_error,
        }
        if self.accepted is not None:
            out["accepted"] = dict(self.accepted)
        return out


def needs_failed(ctx: Context, check_id: str) -> Result | None:
    """A skip that points at a failed prerequisite instead of repeating its finding; None when it is fine or absent.

    "Fine" is anything but fail/error: a warning in the prerequisite does not stop the dependent from judging."""
    other = ctx.outcome(check_id)
    if other is None or other.status not in (Status.FAIL, Status.ERROR):
        return None
    reason = other.summary.split(". ")[0]  # its first sentence: the finding itself is stated once, there
    if len(reason) > 120:  # cut where a word ends (as redact.cut does): a cut secret would pass redaction
        head = reason[:117]
        reason = (head if reason[117].isspace() else head.rpartition(" ")[0]).rstrip() + "..."
    return skipped(f"needs {check_id} ({reason})", evidence={"needs": check_id, "needs_status": other.status.value})


@dataclass(frozen=True)
class Finding:
    """One thing a check found; a check may yield several, and the runner derives its result from them
    (`result_of`)."""

    status: Status
    summary: str
    details: str = ""
    fixes: Sequence[Fix] = ()
    evidence: Mapping[str, Any] | None = None


NO_FINDING = "the check returned no finding"


def result_of(findings: Iterable[Finding]) -> Result:
    """The result a list of findings stands for. Its status is the worst of warn/fail/error when there is one; else
    `skip` when any finding is one (a check that cannot tell right from wrong somewhere must not pass); else `pass`.
    No finding at all is an `error`. The summary joins the findings that carry that status; details, fixes (one per
    key) and evidence come from every finding, in order."""
    findings = list(findings)
    for f in findings:
        if not isinstance(f, Finding):
            raise TypeError(f"check yielded {type(f).__name__}, not a Finding")
    if not findings:
        return Result(Status.ERROR, NO_FINDING)
    statuses = [Status(f.status) for f in findings]
    bad = [s for s in statuses if s in (Status.WARN, Status.FAIL, Status.ERROR)]
    status: Status
    if bad:
        status = max(bad, key=SEVERITY.__getitem__)
    elif Status.SKIP in statuses:
        status = Status.SKIP
    else:
        status = Status.PASS
    summary = "; ".join(f.summary for f, s in zip(findings, statuses, strict=True) if s is status)
    details = "\n".join(f.details for f in findings if f.details)
    fixes: list[Fix] = []
    keys: set[str] = set()
    evidence: dict = {}
    for f in findings:
        for fix in f.fixes:
            if fix.key not in keys:
                keys.add(fix.key)
                fixes.append(fix)
        if f.evidence is not None:
            if not isinstance(f.evidence, Mapping):
                raise TypeError("evidence must be a dict")
            evidence.update(f.evidence)
    return Result(status, summary, details, evidence, fixes)


def overall_status(statuses: Iterable[Status]) -> Status:
    """The worst status; `skip` when every check was skipped (nothing checked is not a pass)."""
    statuses = list(statuses)
    if statuses and all(s is Status.SKIP for s in statuses):
        return Status.SKIP
    worst = Status.PASS
    for status in statuses:
        if SEVERITY[status] > SEVERITY[worst]:
            worst = status
    return worst


def defect_line(exc: BaseException) -> str:
    """`Type: message (file:line)` of the innermost frame: a defect of the doctor's own said in one line, without a
    traceback."""
    import os

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    place = f" ({os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})" if tb is not None else ""
    return f"{type(exc).__name__}: {exc}{place}"


def exit_code_for(checks: Sequence[CheckReport], strict: bool = False) -> ExitCode:
    if any(c.internal_error for c in checks):
        return ExitCode.INTERNAL
    if any(c.status in (Status.FAIL, Status.ERROR) for c in checks):
        return ExitCode.FAILED
    if strict and any(c.status is Status.WARN and c.accepted is None for c in checks):
        return ExitCode.FAILED
    return ExitCode.OK


def counts(checks: Sequence[CheckReport]) -> Mapping[str, int]:
    tally = {s.value: 0 for s in Status}
    for c in checks:
        tally[c.status.value] += 1
    return tally
