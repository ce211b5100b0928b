"""The fix plan: every failing or warning check's fixes, de-duplicated and ordered so that later steps do not undo
earlier ones, and applied (`--apply`) as argv lists, never through a shell. The plan is data; the shell script that
shows it is a renderer's (report/script.py).

Order: (1) torch and the CUDA runtime wheels, a manual step that names the compiled extensions to rebuild after it;
(2) packages built against torch; (3) pure-Python pins; (4) job settings and choices, as prose.

What `--apply` runs: only the automatic steps whose command is `pip ...`, as `<target python> -I -m pip ...` with
the exact arguments shown (`-I`: a `pip.py` in the current directory is not pip). It never runs a shell, a manual
step (a torch reinstall), a job setting, or any other program a plugin names; those stay in the script as comments
for a person to read. While a manual torch or toolchain step is pending, the steps that build are held back too:
they would compile against the torch that is about to be replaced. For an externally managed interpreter (PEP 668)
the plan takes one way pip installs there (fix/pep668.py): its first step then makes a virtual environment
(`<target python> -I -m venv --system-site-packages ...`) whose python runs the pip steps, or every pip step carries
pip's --break-system-packages.

How `--apply` runs the plan, and what a step that fails holds back (`waits_for`), is fix/apply.py's; installing from
a folder instead of the network (`fix --download DIR`, `fix --from DIR`) is fix/offline.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence

from .steps import Command, Fix, Phase, installer_argv
from .met import already_met, fixes_to_run as fixes_to_run  # the rule lives in fix/met.py (render uses it too)
from .pep668 import VENV_BLOCKED, VENV_KEY, Policy as Policy, installer_way
from ..model.core import CheckReport, Status
from ..model.report import Report

ORDER = (Phase.PATH, Phase.TOOLCHAIN, Phase.RUNTIME, Phase.BUILD, Phase.PIN, Phase.SETTING)
NO_INSTALLER = "installer:none"  # the key of the fix that says the target has no installer at all


@dataclass
class Step:
    fix: Fix
    commands: list[Command]  # the fix's commands not already in an earlier step
    checks: list[str] = field(default_factory=list)
    held_by: int | None = None  # the pending manual step (its number) this build step must wait for
    missing: str = ""  # `fix --from DIR`: what of this step DIR lacks (fix/offline.py); --apply fails the step

    @property
    def runnable(self) -> bool:
        """Not manual, not a setting, and every command is pip or ensurepip (run with the target's interpreter, or
        uv aimed at it), or the plan's own venv step for an externally managed interpreter (fix/pep668.py)."""
        return not self.fix.manual and self.fix.phase is not Phase.SETTING and bool(self.commands) and \
            all(c.is_pip or c.is_ensurepip or (c.is_venv and self.fix.key == VENV_KEY) for c in self.commands)

    @property
    def automatic(self) -> bool:
        """`--apply` runs it (and the script does): runnable, and not waiting for a manual step."""
        return self.runnable and self.held_by is None


@dataclass
class Plan:
    steps: list[Step]
    unfixable: list[str]  # failing or erroring checks that offer no fix at all
    venv_python: str | None = None  # PEP 668's venv way: the venv's python, which the pip steps run with
    installer_way: str = ""  # PEP 668: the way the plan took and why, one line ("" where pip installs as it is)

    @property
    def no_installer(self) -> Step | None:
        """The step that says nothing can be installed: the target has no installer (no pip, no ensurepip, no uv),
        or the venv's folder of an externally managed interpreter cannot be used."""
        return next((s for s in self.steps if s.fix.key in (NO_INSTALLER, VENV_BLOCKED)), None)

    @property
    def exit_code(self) -> int:
        return 1 if self.unfixable or self.no_installer else 0


def plan_of(report: Report, policy: Policy | None = None) -> Plan:
    """The plan of a report: its rows' statuses, and each row's fixes as the check made them (Report.actions: the
    commands `--apply` runs, which the printed report may withhold). The doctor's own rows (it crashed, or was
    interrupted before any check ran) are no check's finding: `incomplete` speaks for them."""
    return build_plan([CheckReport(id=row.id, title=row.title, status=row.status, summary=row.summary,
                                   fixes=list(report.actions.get(row.id, ()))) for row in report.checks
                       if not row.id.startswith("doctor.")], report.installed, policy)


def build_plan(reports: Sequence[CheckReport[Fix]], installed: Mapping[str, str] | None = None,
               policy: Policy | None = None) -> Plan:
    by_key: dict[str, Step] = {}
    unfixable = []
    for r in reports:
        if r.status not in (Status.FAIL, Status.WARN, Status.ERROR):
            continue
        if not r.fixes and r.status is not Status.WARN:
            unfixable.append(r.id)
        for fix in r.fixes:
            step = by_key.get(fix.key)
            if step is None:
                step = by_key[fix.key] = Step(fix, list(fix.commands))
            if r.id not in step.checks:
                step.checks.append(r.id)
    steps = sorted(by_key.values(), key=lambda s: ORDER.index(s.fix.phase))  # stable: first-seen within a phase
    seen: dict[tuple[str, ...], Step] = {}
    for step in steps:
        kept = []
        for c in step.commands:
            if installed and already_met(c, installed):
                continue  # the re-check found it done: the plan converges
            earlier = seen.get(c.argv)
            if earlier is None:
                seen[c.argv] = step
                kept.append(c)
            else:  # the earlier step runs it: it now answers for this step's checks too
                earlier.checks += [cid for cid in step.checks if cid not in earlier.checks]
        step.commands = kept
    # A fix that is prose only (a setting, a withheld command) stays; one whose commands all came earlier goes.
    steps = [s for s in steps if s.commands or not s.fix.commands]
    steps, venv_python, way = installer_way(steps, policy or Policy())
    # A build waits for a manual step it needs: the torch step (it builds against that torch), or a toolchain step a
    # person must do (a compiler, CUDA_HOME: without it the build fails minutes in). The first such step holds them.
    pending = next((n for n, s in enumerate(steps, 1) if not s.runnable and (
        (s.fix.phase is Phase.RUNTIME and s.fix.commands) or s.fix.phase is Phase.TOOLCHAIN)), None)
    if pending is not None:
        for step in steps:
            if step.fix.phase is Phase.BUILD and step.runnable:
                step.held_by = pending
    return Plan(steps, unfixable, venv_python, way)


def pip_argv(python: str, cmd: Command, installer: str = "pip") -> list[str]:
    """How `--apply` runs a pip command: with the target's own pip (or uv aimed at it, in a uv venv), the arguments
    the script shows."""
    import shutil

    return installer_argv(python, cmd, installer, shutil.which("uv") or "uv")


def offline_reason(cmd: Command, environ: Mapping[str, str]) -> str | None:
    """Why pip cannot carry out `cmd` here: with PIP_NO_INDEX set, a `git+` requirement (a clone, then a build from
    source) needs the network that a find-links folder of wheels does not replace."""
    if environ.get("PIP_NO_INDEX", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    if any("git+" in word for word in cmd.argv):
        return "PIP_NO_INDEX is set and it installs from git (a clone and a source build need the network)"
    return None


def incomplete(report: Report) -> str | None:
    """Why the run behind a fix plan did not finish, or None."""
    if report.summary.interrupted:
        return f"the run was interrupted by {report.summary.interrupted}"
    if report.row("doctor.internal") is not None:
        return "dsv4-doctor crashed before the checks ran (see `dsv4-doctor check`)"
    return None


@dataclass(frozen=True)
class Answer:
    """What a y/N prompt got: yes, or not (no, the default, the end of input, or the stop signal that ended it)."""

    yes: bool
    signum: int | None = None


# A step of these phases builds against what every earlier phase installs (the toolchain, torch and the CUDA runtime,
# the job's path): it waits for any of them that did not happen. A pure pin (Phase.PIN) needs only the installer.
BUILDS_ON_EARLIER_PHASES = (Phase.BUILD,)


def provides_installer(step: Step) -> bool:
    """The step that gives the pip steps their installer: ensurepip, or PEP 668's venv whose python runs them."""
    return any(c.is_ensurepip or c.is_venv for c in step.commands)


def waits_for(steps: Sequence[Step], n: int, undone: Mapping[int, str]) -> int | None:
    """The earlier step (its number) that step `n` depends on and that did not happen (failed, or skipped in turn),
    or None: every pip step depends on the installer step before it; a build step depends on every step of an
    earlier phase in ORDER (a manual one is held_by's rule). Other steps are independent."""
    step = steps[n - 1]
    for m in sorted(undone):
        if m >= n:
            break
        earlier = steps[m - 1]
        if provides_installer(earlier) and any(c.is_pip for c in step.commands):
            return m
        if step.fix.phase in BUILDS_ON_EARLIER_PHASES and ORDER.index(earlier.fix.phase) < ORDER.index(step.fix.phase):
            return m
    return None
