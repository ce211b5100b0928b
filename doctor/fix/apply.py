"""`fix --apply`: run the plan's automatic steps, every one it can, then check again and say what is left.

A step that fails does not stop the plan: the steps that depend on it (plan.waits_for: every pip step on the
installer step before it, a build step on every step of an earlier phase) are skipped, each saying which step it
waited for, and the independent ones still run. The re-check follows, and the end names the verdict before and after,
each failed step with its error (pip's last `ERROR:` line, or its exit code), each skipped step and why, the rows
that still fail and what is left for a person. A signal stops the plan at once (pip's group is killed) and there is no
re-check: the environment may be half-updated.

The `+ command` echo goes through the report's redaction and cleaning, as the script does.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from .plan import Answer, Phase, Plan, offline_reason, pip_argv, plan_of, waits_for
from .runner import run_relayed
from .steps import env_value
from ..hostio.redact import Redactor, cap, clean_text
from ..model.core import Status
from ..model.report import Report
from ..report.output import line_text, write_stderr

INSTALL_TIMEOUT_S = 4 * 3600.0  # one pip command: a source build of Transformer Engine can take an hour or more


@dataclass
class Applied:
    """What `apply` did: the commands it ran, and by step number the steps that failed (their error) and the steps
    it skipped or left out (why)."""

    ran: int = 0
    code: int = 0  # the first failing command's exit code, or 0
    failed: dict[int, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    left_out: dict[int, str] = field(default_factory=dict)  # steps pip cannot carry out here (PIP_NO_INDEX)
    not_applied: list[str] = field(default_factory=list)  # the lines said for them

    @property
    def undone(self) -> dict[int, str]:
        return {**self.failed, **self.skipped, **self.left_out}


def _say(line: str) -> None:
    write_stderr(line_text(line) + "\n")


def apply(plan: Plan, python: str, procs, redact: Redactor | None = None,
          interrupted: Callable[[], bool] = lambda: False, not_applied: list[str] | None = None) -> Applied:
    """Run the automatic steps with the target's pip, output to stderr; every one whose dependencies happened (see
    the module's text). Stops when `interrupted()` says a signal arrived (its handler kills pip). A step pip cannot
    carry out offline (offline_reason) is left out and named in `not_applied`, with the reason; a step whose
    artifact `--from DIR` lacks (Step.missing) fails without running."""
    redact = redact or Redactor()
    out = Applied()
    for n, step in enumerate(plan.steps, 1):
        if not step.automatic:
            continue
        earlier = waits_for(plan.steps, n, out.undone)
        if earlier is not None:
            out.skipped[n] = f"it depends on step {earlier}, which " + (
                "failed" if earlier in out.failed else "did not run")
            _say(f"step {n} skipped: {out.skipped[n]}")
            continue
        why = next((r for r in (offline_reason(c, os.environ) for c in step.commands) if r), None)
        if why:
            line = f"step {n} not applied: {why}"
            _say(line)
            out.not_applied.append(line)
            out.left_out[n] = why
            if not_applied is not None:
                not_applied.append(line)
            continue
        if step.missing:
            out.failed[n] = "not in the --from folder: " + step.missing
            _say(f"step {n} failed: {out.failed[n]}")
            out.code = out.code or 1
            continue
        for cmd in step.commands:
            if interrupted():
                return out
            argv = pip_argv(python if cmd.is_venv else plan.venv_python or python, cmd, step.fix.installer)
            shown = shlex.join(redact.text(w) for w in argv)  # redact, then quote
            write_stderr("+ " + clean_text(cap(redact.text(cmd.env_prefix()) + shown)) + "\n")
            env = dict(os.environ, **{n: env_value(v, os.environ) for n, v in cmd.env}) if cmd.env else None
            result = run_relayed(procs, argv, env, INSTALL_TIMEOUT_S, interrupted)
            out.ran += 1
            if interrupted():
                return out
            if result.code != 0:
                out.failed[n] = redact.text(result.error(INSTALL_TIMEOUT_S))
                out.code = out.code or result.code or 1
                _say(f"step {n} failed: {out.failed[n]}")
                break  # the step's later commands build on its earlier ones
    return out


def apply_guarded(plan: Plan, python: str, redact: Redactor | None = None) -> tuple[Applied, int | None]:
    """`apply` with its own process tracking and signal handling: (what it did, the signal that stopped it or None).
    Every pip process is gone when it returns."""
    from ..hostio.procs import Processes
    from ..hostio.signals import ApplySignals

    procs = Processes()
    try:
        with ApplySignals(procs) as signals:
            done = apply(plan, python, procs, redact, interrupted=lambda: signals.signum is not None)
    finally:
        procs.close()
    return done, signals.signum


def apply_and_recheck(plan: Plan, python: str, redact: Redactor, code: int, before: str, yes: bool,
                      ask: Callable[[str], Answer], say: Callable[[str], None], recheck: Callable[[], Report]) -> int:
    """`fix --apply` once the plan is printed: name the held-back steps, `ask` the question (unless `yes`), run the
    automatic steps (apply_guarded), then re-check (`recheck()` gives the new report) and say both verdicts, the
    failed and skipped steps and what is left. `code` is the first run's exit code, `before` its verdict line, `say`
    writes a line to stderr. Returns the command's exit code: the re-check's, or 1 where a step failed and the
    re-check passed."""
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
        first = plan.steps[plan.steps[held[0] - 1].held_by - 1]  # type: ignore[operator]
        what = "torch" if first.fix.phase is Phase.RUNTIME else "toolchain"
        say(f"held back: step(s) {', '.join(map(str, held))} build and wait for the manual {what} step; run them "
            "after it")
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
    done, signum = apply_guarded(plan, python, redact)
    if signum is not None:
        import signal

        say(f"interrupted by {signal.Signals(signum).name} after {done.ran} pip command(s); pip was stopped and "
            "the environment may be half-updated: run `dsv4-doctor check`")
        return 128 + signum
    again = recheck()  # the caller's: of plan.venv_python where the plan made a venv
    for line in done.not_applied:
        say(line)
    for line in after_apply(again, failed=done.failed, skipped=done.skipped, plan=plan):
        say(line)
    if plan.venv_python:
        folder = os.path.dirname(os.path.dirname(plan.venv_python))
        say(f"the pip steps installed into the virtual environment {folder} (PEP 668), which the re-check inspected: "
            f"run the job with {plan.venv_python}, and check it with --python {plan.venv_python}")
    if done.failed and again.exit_code == 0:
        return int(ExitCode.FAILED)
    return again.exit_code


SAID_MAX = 160  # characters of a row's summary or a step's description that `fix --apply`'s end says
ERROR_MAX = 300  # characters of a failed step's error


def after_apply(again: Report, width: int | None = None, failed: dict[int, str] | None = None,
                skipped: dict[int, str] | None = None, plan: Plan | None = None) -> list[str]:
    """What `fix --apply` ends with, in this order: the verdict after, the steps of `plan` that failed (with their
    error) or were skipped (why), the rows that still fail (each its summary's first sentence), and the steps that
    remain in the re-check's own plan (pip steps, counted; a person's: manual, held back, or job settings, named).
    Each text is redacted, then shortened at a word (redact.shorten), then wrapped at `width` (default: the output
    width of stderr) with its continuation lines indented."""
    import textwrap

    from ..hostio.redact import shorten
    from ..report.dispatch import output_width, verdict_line
    from ..report.output import isatty

    width = output_width(isatty(sys.stderr)) if width is None else max(20, int(width))
    redactor = Redactor()

    def wrapped(text: str, first: str = "", rest: str = "    ") -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                             break_on_hyphens=False) or [first + text]

    def item(head: str, text: str, limit: int = SAID_MAX) -> list[str]:
        return wrapped(head + shorten(" ".join(redactor.text(text).split()), limit), "  ", "    ")

    def described(n: int) -> str:
        step = plan.steps[n - 1] if plan is not None and 0 < n <= len(plan.steps) else None
        if step is None:
            return f"step {n}"
        first = step.fix.description.splitlines()[0] if step.fix.description else ""
        return f"step {n} [{', '.join(step.checks)}] ({shorten(' '.join(first.split()), 60)})"

    lines = wrapped("after:  " + verdict_line(again), rest="        ")
    if failed:
        lines.append(f"failed ({len(failed)}):")
        for n, error in sorted(failed.items()):
            lines += item(f"{described(n)}: ", error, ERROR_MAX)
    if skipped:
        lines.append(f"skipped ({len(skipped)}):")
        for n, why in sorted(skipped.items()):
            lines += item(f"{described(n)}: ", why)
    failing = [c for c in again.checks if c.status in (Status.FAIL, Status.ERROR)]
    if failing:
        lines.append(f"still failing ({len(failing)}):")
        for c in failing:
            lines += item(f"{c.id}: ", c.summary.split(". ")[0])
    left_plan = plan_of(again)
    left = [(n, s) for n, s in enumerate(left_plan.steps, 1) if not s.automatic]
    pip_left = [(n, s) for n, s in enumerate(left_plan.steps, 1) if s.automatic]
    if pip_left:
        lines += wrapped(f"pip steps the re-check still plans ({len(pip_left)}): `dsv4-doctor fix` shows them")
    if left:
        lines += wrapped(f"left for you ({len(left)}; `dsv4-doctor fix` prints them in full):")
        for n, step in left:
            kind = "manual" if step.fix.manual else ("held back" if step.held_by is not None else "a job setting")
            first = step.fix.description.splitlines()[0] if step.fix.description else ""
            lines += item(f"step {n} ({kind}) [{', '.join(step.checks)}]: ", first)
    return lines
