"""The fix plan: every failing or warning check's fixes, de-duplicated and ordered so that later steps do not undo
earlier ones, and applied (`--apply`) as argv lists, never through a shell. The plan is data; the shell script that
shows it is a renderer's (report/script.py).

Order: (1) torch and the CUDA runtime wheels, a manual step that names the compiled extensions to rebuild after it;
(2) packages built against torch; (3) pure-Python pins; (4) job settings and choices, as prose.

What `--apply` runs: only the automatic steps whose command is `pip ...`, as `<target python> -I -m pip ...` with
the exact arguments shown (`-I`: a `pip.py` in the current directory is not pip). It never runs a shell, a manual
step (a torch reinstall), a job setting, or any other program a plugin names; those stay in the script as comments
for a person to read. While a manual torch step is pending, the steps that build against torch are held back too:
they would compile against the torch that is about to be replaced. For an externally managed interpreter (PEP 668)
the plan takes one way pip installs there (fix/pep668.py): its first step then makes a virtual environment
(`<target python> -I -m venv --system-site-packages ...`) whose python runs the pip steps, or every pip step carries
pip's --break-system-packages.

The `+ command` echo of `--apply` goes through the report's redaction and cleaning, as the script does.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping, Sequence

from .steps import Command, Fix, Phase, env_value, installer_argv
from .met import already_met, fixes_to_run as fixes_to_run  # the rule lives in fix/met.py (render uses it too)
from .pep668 import VENV_BLOCKED, VENV_KEY, Policy, installer_way
from ..model.core import CheckReport, Status
from ..hostio.procs import kill_group
from ..hostio.redact import Redactor, cap, clean_text
from ..report.output import line_text, write_stderr
from ..model.report import Report

ORDER = (Phase.PATH, Phase.TOOLCHAIN, Phase.RUNTIME, Phase.BUILD, Phase.PIN, Phase.SETTING)
NO_INSTALLER = "installer:none"  # the key of the fix that says the target has no installer at all


@dataclass
class Step:
    fix: Fix
    commands: list[Command]  # the fix's commands not already in an earlier step
    checks: list[str] = field(default_factory=list)
    held_by: int | None = None  # the pending manual step (its number) this build step must wait for

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
    pending = next((n for n, s in enumerate(steps, 1) if s.fix.phase is Phase.RUNTIME and not s.runnable
                    and s.fix.commands), None)
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


def apply(plan: Plan, python: str, procs, redact: Redactor | None = None,
          interrupted: Callable[[], bool] = lambda: False, not_applied: list[str] | None = None) -> tuple[int, int]:
    """Run the automatic steps with the target's pip, output to stderr; (commands run, exit code of the failing one
    or 0). Stops at the first failure, or when `interrupted()` says a signal arrived (its handler kills pip). A step
    pip cannot carry out offline (offline_reason) is left out and named in `not_applied`, with the reason."""
    redact = redact or Redactor()
    ran = 0
    for n, step in enumerate(plan.steps, 1):
        if not step.automatic:
            continue
        why = next((r for r in (offline_reason(c, os.environ) for c in step.commands) if r), None)
        if why:
            line = f"step {n} not applied: {why}"
            write_stderr(line_text(line) + "\n")
            if not_applied is not None:
                not_applied.append(line)
            continue
        for cmd in step.commands:
            if interrupted():
                return ran, 0
            argv = pip_argv(python if cmd.is_venv else plan.venv_python or python, cmd, step.fix.installer)
            shown = shlex.join(redact.text(w) for w in argv)  # redact, then quote
            write_stderr("+ " + clean_text(cap(redact.text(cmd.env_prefix()) + shown)) + "\n")
            env = dict(os.environ, **{n: env_value(v, os.environ) for n, v in cmd.env}) if cmd.env else None
            out = _stderr_fd()
            proc = procs.spawn(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
            if interrupted():  # the signal came while pip was starting, before the handler could see it
                kill_group(proc)
            code = proc.wait()
            procs.release(proc)
            ran += 1
            if interrupted():
                return ran, 0
            if code != 0:
                return ran, code
    return ran, 0


def _stderr_fd() -> int:
    """Where pip's output goes: the doctor's stderr, or nowhere when the doctor has none."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL


def apply_guarded(plan: Plan, python: str, redact: Redactor | None = None,
                  not_applied: list[str] | None = None) -> tuple[int, int, int | None]:
    """`apply` with its own process tracking and signal handling: (commands run, the failing exit code or 0, the
    signal that stopped it or None). Every pip process is gone when it returns."""
    from ..hostio.procs import Processes
    from ..hostio.signals import ApplySignals

    procs = Processes()
    try:
        with ApplySignals(procs) as signals:
            ran, failed = apply(plan, python, procs, redact, interrupted=lambda: signals.signum is not None,
                                not_applied=not_applied)
    finally:
        procs.close()
    return ran, failed, signals.signum


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


def apply_and_recheck(plan: Plan, python: str, redact: Redactor, code: int, before: str, yes: bool,
                      ask: Callable[[str], Answer], say: Callable[[str], None], recheck: Callable[[], Report]) -> int:
    """`fix --apply` once the plan is printed: name the held-back steps, `ask` the question (unless `yes`), run the
    automatic steps (apply_guarded), then re-check (`recheck()` gives the new report) and say both verdicts. `code`
    is the first run's exit code, `before` its verdict line, `say` writes a line to stderr. Returns the command's
    exit code."""
    from ..model.core import ExitCode
    from ..hostio.signals import GATE

    if plan.no_installer is not None:
        say("nothing applied: " + plan.no_installer.fix.description)  # it starts with "no installer: "
        return int(ExitCode.FAILED)
    path = [n for n, s in enumerate(plan.steps, 1) if s.fix.phase is Phase.PATH and s.fix.manual]
    if path:  # a shadowing copy stays in front of what pip installs until they are done
        say(f"by hand first: step(s) {', '.join(map(str, path))} change where the job imports from (its PYTHONPATH, "
            "user site or folder); the re-check below runs in this environment, as it is")
    held = [n for n, s in enumerate(plan.steps, 1) if s.held_by is not None]
    if held:
        say(f"held back: step(s) {', '.join(map(str, held))} build against torch and wait for the manual torch "
            "step; run them after it")
    if not any(s.automatic for s in plan.steps):
        say("nothing to apply: the plan has no automatic (pip) step")
        return code
    if plan.installer_way:  # PEP 668: the way it takes (a venv, or --break-system-packages), named before it runs
        say("installing: " + plan.installer_way)
    if GATE.late is not None:
        say("nothing applied: a signal arrived while the plan was written")
        return 128 + GATE.late
    if not yes:
        pips = sum(1 for s in plan.steps if s.automatic for c in s.commands if not c.is_venv)
        question = f"Run the {pips} pip command(s) of this plan now?"
        if plan.venv_python:
            question = f"Make the virtual environment, then run the {pips} pip command(s) of this plan now?" if pips \
                else "Make the virtual environment of this plan now (its pip steps are left for you)?"
        answer = ask(question)
        if answer.signum is not None:
            say("\nnothing applied")
            return 128 + answer.signum
        if not answer.yes:  # no, the default, or the end of input
            say("nothing applied")
            return code
    not_applied: list[str] = []
    ran, failed, signum = apply_guarded(plan, python, redact, not_applied)
    if signum is not None:
        import signal

        say(f"interrupted by {signal.Signals(signum).name} after {ran} pip command(s); pip was stopped and "
            "the environment may be half-updated: run `dsv4-doctor check`")
        return 128 + signum
    if failed:
        say(f"a pip command failed with exit code {failed}; stopped after {ran} command(s)")
        return int(ExitCode.FAILED)
    again = recheck()  # the caller's: of plan.venv_python where the plan made a venv
    for line in not_applied:
        say(line)
    say("before: " + before)
    for line in after_apply(again):
        say(line)
    if plan.venv_python:
        folder = os.path.dirname(os.path.dirname(plan.venv_python))
        say(f"the pip steps installed into the virtual environment {folder} (PEP 668), which the re-check inspected: "
            f"run the job with {plan.venv_python}, and check it with --python {plan.venv_python}")
    return again.exit_code


SAID_MAX = 160  # characters of a row's summary or a step's description that `fix --apply`'s end says


def after_apply(again: Report, width: int | None = None) -> list[str]:
    """What `fix --apply` ends with, in this order: the verdict after, the rows that still fail (each its summary's
    first sentence), and the steps that remain for a person (manual, held back, or job settings) in the re-check's own
    plan, named. Each text is redacted, then shortened at a word (redact.shorten, at most SAID_MAX characters), then
    wrapped at `width` (default: the output width of stderr) with its continuation lines indented: one line each."""
    import textwrap

    from ..hostio.redact import shorten
    from ..report.dispatch import output_width, verdict_line
    from ..report.output import isatty

    width = output_width(isatty(sys.stderr)) if width is None else max(20, int(width))
    redactor = Redactor()

    def wrapped(text: str, first: str = "", rest: str = "    ") -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                             break_on_hyphens=False) or [first + text]

    def item(head: str, text: str) -> list[str]:
        return wrapped(head + shorten(" ".join(redactor.text(text).split()), SAID_MAX), "  ", "    ")

    lines = wrapped("after:  " + verdict_line(again), rest="        ")
    failing = [c for c in again.checks if c.status in (Status.FAIL, Status.ERROR)]
    if failing:
        lines.append(f"still failing ({len(failing)}):")
        for c in failing:
            lines += item(f"{c.id}: ", c.summary.split(". ")[0])
    plan = plan_of(again)
    left = [(n, s) for n, s in enumerate(plan.steps, 1) if not s.automatic]
    pip_left = [(n, s) for n, s in enumerate(plan.steps, 1) if s.automatic]
    if pip_left:
        lines += wrapped(f"pip steps the re-check still plans ({len(pip_left)}): `dsv4-doctor fix` shows them")
    if left:
        lines += wrapped(f"left for you ({len(left)}; `dsv4-doctor fix` prints them in full):")
        for n, step in left:
            kind = "manual" if step.fix.manual else ("held back" if step.held_by is not None else "a job setting")
            first = step.fix.description.splitlines()[0] if step.fix.description else ""
            lines += item(f"step {n} ({kind}) [{', '.join(step.checks)}]: ", first)
    return lines
