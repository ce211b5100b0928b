"""The fix plan: every failing or warning check's fixes, de-duplicated and ordered so that later steps do not undo
earlier ones, printed as a shell script that is safe to paste, and applied (`--apply`) as argv lists, never through a
shell.

Order: (1) torch and the CUDA runtime wheels, a manual step that names the compiled extensions to rebuild after it;
(2) packages built against torch; (3) pure-Python pins; (4) job settings and choices, as prose.

What `--apply` runs: only the automatic steps whose command is `pip ...`, as `<target python> -I -m pip ...` with
the exact arguments shown (`-I`: a `pip.py` in the current directory is not pip). It never runs a shell, a manual
step (a torch reinstall), a job setting, or any other program a plugin names; those stay in the script as comments
for a person to read. While a manual torch step is pending, the steps that build against torch are held back too:
they would compile against the torch that is about to be replaced.

Everything printed (the script, the `+ command` echo) goes through the report's redaction and cleaning.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .model import UNSAFE_CHARS, CheckReport, Command, Fix, Phase, Status, env_value
from .procs import kill_group
from .redact import WITHHELD, Redactor, cap, clean_text
from .render.output import line_text, write_stderr

ORDER = (Phase.RUNTIME, Phase.BUILD, Phase.PIN, Phase.SETTING)
_COMMENT_UNSAFE = re.compile(f"[{UNSAFE_CHARS}]+")
PIP = ("-I", "-m", "pip")


@dataclass
class Step:
    fix: Fix
    commands: list[Command]  # the fix's commands not already in an earlier step
    checks: list[str] = field(default_factory=list)
    held_by: int | None = None  # the pending manual step (its number) this build step must wait for

    @property
    def runnable(self) -> bool:
        """Not manual, not a setting, and every command is pip (run with the target's interpreter)."""
        return not self.fix.manual and self.fix.phase is not Phase.SETTING and bool(self.commands) and \
            all(c.is_pip for c in self.commands)

    @property
    def automatic(self) -> bool:
        """`--apply` runs it (and the script does): runnable, and not waiting for a manual step."""
        return self.runnable and self.held_by is None


@dataclass
class Plan:
    steps: list[Step]
    unfixable: list[str]  # failing or erroring checks that offer no fix at all

    @property
    def exit_code(self) -> int:
        return 1 if self.unfixable else 0


def build_plan(reports: Sequence[CheckReport]) -> Plan:
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
            earlier = seen.get(c.argv)
            if earlier is None:
                seen[c.argv] = step
                kept.append(c)
            else:  # the earlier step runs it: it now answers for this step's checks too
                earlier.checks += [cid for cid in step.checks if cid not in earlier.checks]
        step.commands = kept
    # A fix that is prose only (a setting, a withheld command) stays; one whose commands all came earlier goes.
    steps = [s for s in steps if s.commands or not s.fix.commands]
    pending = next((n for n, s in enumerate(steps, 1) if s.fix.phase is Phase.RUNTIME and not s.runnable
                    and s.fix.commands), None)
    if pending is not None:
        for step in steps:
            if step.fix.phase is Phase.BUILD and step.runnable:
                step.held_by = pending
    return Plan(steps, unfixable)


def comment(text: str, limit: int = 300) -> str:
    """Text that stays one inert comment line however hostile it is."""
    text = _COMMENT_UNSAFE.sub(" ", str(text)).strip()
    return text if len(text) <= limit else text[:limit] + "…"


_comment = comment


def pip_line(cmd: Command) -> str:
    """How the script runs a pip command: with the inspected interpreter's pip, not whichever is first on PATH."""
    return cmd.env_prefix() + '"$PY" ' + " ".join(PIP) + " " + shlex.join(cmd.argv[1:])


def pip_argv(python: str, cmd: Command) -> list[str]:
    return [python, *PIP, *cmd.argv[1:]]


def render_script(plan: Plan, python: str, profile: dict, version: str, redact: Redactor | None = None,
                  incomplete: str | None = None, job_settings: dict | None = None) -> str:
    """The plan as a POSIX shell script. `incomplete`: why the run behind it did not finish (the plan then holds
    only what finished, and says so).

    Redaction works on the parts, before they are quoted or made comments: redacting the finished script would
    rewrite quoted text (`NAME='...'` inside a `'"'"'` escape) and unbalance its quotes, which a hostile METADATA
    turned into a command on the pasted script's shell."""
    return clean_text(_script(plan, python, profile, version, incomplete, redact or Redactor(), job_settings))


def in_settings_section(step: Step, job_settings: dict | None) -> bool:
    """A job-setting step the job-settings section already holds (a CP_ARGS line, an export line)."""
    if not job_settings or step.fix.phase is not Phase.SETTING:
        return False
    block: Any = job_settings.get("cp_args")
    block = block if isinstance(block, dict) else {}
    held = {f"job:{line}" for line in block.get("lines") or []}
    held |= {"env:" + line[len("export "):] for line in job_settings.get("exports") or [] if isinstance(line, str)}
    return step.fix.key in held


def _script(plan: Plan, python: str, profile: dict, version: str, incomplete: str | None, redact: Redactor,
            job_settings: dict | None = None) -> str:
    def comment(text, limit: int = 300) -> str:  # noqa: F811 - the module's, on redacted text
        return _comment(redact.text(cap(redact.literal(str(text)), limit + 8192)), limit)  # capped, then redacted

    def wrapped(text, lead: str = "# ", cont: str = "#   ") -> list[str]:
        """Comment lines wrapped at word boundaries (a step's description is never cut mid-word)."""
        return [lead + line if i == 0 else cont + line for i, line in enumerate(
            textwrap.wrap(comment(text, 4000), width=118 - len(cont), break_long_words=False,
                          break_on_hyphens=False) or [""])]

    def command_line(cmd: Command) -> str:
        """The command, or a comment when redaction had to change it (it holds a secret): Redactor.command."""
        words = [f"{name}={value}" for name, value in cmd.env] + list(cmd.argv)  # its environment is printed too
        return WITHHELD if redact.command(words) is None else pip_line(cmd)

    shown = " ".join(f"{k}={v}" for k, v in profile.items() if k in ("cp", "dsa_backend", "gpu_arch")
                     and v is not None)
    lines = ["#!/bin/sh", f"# dsv4-doctor {comment(version)} fix plan ({comment(shown)}).",
             "# Review it before running it. Manual steps and job settings are comments: read them.",
             "set -eu", f"PY={shlex.quote(redact.text(python))}"]
    if incomplete:
        lines.append(f"# INCOMPLETE: {comment(incomplete)}; this plan holds only the fixes of the checks that "
                     "finished. Run `dsv4-doctor check` again before trusting it.")
    elif not plan.steps and not plan.unfixable:
        lines.append("# nothing to fix")
    held: list[str] = []
    n = 0
    for step in plan.steps:  # the settings are the last phase: numbering the rest alone keeps held_by's numbers
        checks = ", ".join(step.checks)
        if in_settings_section(step, job_settings):
            held += [c for c in step.checks if c not in held]
            continue
        n += 1
        lines.append("")
        if step.fix.phase is Phase.SETTING or not step.fix.commands:
            what = "a job setting or choice" if step.fix.phase is Phase.SETTING else "its command was withheld"
            lines.append(f"# Step {n} ({what}; nothing to run) [{comment(checks)}]:")
            lines += wrapped(step.fix.description, "#   ")
        elif step.automatic:
            lines += wrapped(f"Step {n} [{comment(checks)}]: {step.fix.description}")
            lines += [command_line(c) for c in step.commands]
        elif step.held_by is not None:
            lines += wrapped(f"Step {n} (held back: run it after Step {step.held_by}, because it builds against "
                             f"torch; not run by this script or by --apply) [{comment(checks)}]: "
                             f"{step.fix.description}")
            lines += ["#   " + comment(pip_line(c), 2000) for c in step.commands]
        else:
            why = "manual: not run by this script or by --apply" if step.fix.manual else \
                "not run by this script or by --apply: only pip commands are"
            lines += wrapped(f"Step {n} ({why}) [{comment(checks)}]: {step.fix.description}")
            lines += ["#   " + comment(pip_line(c) if c.is_pip else c.shell(), 2000) for c in step.commands]
        for note in step.fix.notes:
            lines += wrapped(note, "#   ", "#   ")
    from .job.settings import comment_lines

    section = comment_lines(job_settings)
    if section:
        lines += ["", "# Job settings: for the training command and the job script; not run by this script or by "
                      "--apply" + (f" [{comment(', '.join(held))}]" if held else "") + ":"]
        lines += [("#     " if line.startswith("  ") else "#   ") + comment(line, 2000) for line in section]
    if plan.unfixable:
        lines += ["", f"# No fix is known for: {comment(', '.join(plan.unfixable))} (see the report)."]
    return "\n".join(lines) + "\n"


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
            argv = pip_argv(python, cmd)
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
    from .procs import Processes
    from .signals import ApplySignals

    procs = Processes()
    try:
        with ApplySignals(procs) as signals:
            ran, failed = apply(plan, python, procs, redact, interrupted=lambda: signals.signum is not None,
                                not_applied=not_applied)
    finally:
        procs.close()
    return ran, failed, signals.signum


def incomplete(report: dict) -> str | None:
    """Why the run behind a fix plan did not finish, or None."""
    s = report["summary"]
    if s.get("interrupted"):
        return f"the run was interrupted by {s['interrupted']}"
    if any(c["id"] == "doctor.internal" for c in report["checks"]):
        return "dsv4-doctor crashed before the checks ran (see `dsv4-doctor check`)"
    return None


def apply_and_recheck(plan: Plan, python: str, redact: Redactor, code: int, before: str, yes: bool,
                      say: Callable[[str], None], recheck: Callable[[], dict]) -> int:
    """`fix --apply` once the plan is printed: name the held-back steps, ask (unless `yes`), run the automatic steps
    (apply_guarded), then re-check (`recheck()` gives the new report) and say both verdicts. `code` is the first
    run's exit code, `before` its verdict line, `say` writes a line to stderr. Returns the command's exit code."""
    from .model import ExitCode
    from .render import verdict_line
    from .signals import GATE

    held = [n for n, s in enumerate(plan.steps, 1) if s.held_by is not None]
    if held:
        say(f"held back: step(s) {', '.join(map(str, held))} build against torch and wait for the manual torch "
            "step; run them after it")
    if not any(s.automatic for s in plan.steps):
        say("nothing to apply: the plan has no automatic (pip) step")
        return code
    if GATE.late is not None:
        say("nothing applied: a signal arrived while the plan was written")
        return 128 + GATE.late
    if not yes:
        write_stderr(f"Run the {sum(len(s.commands) for s in plan.steps if s.automatic)} pip command(s) of this "
                     "plan now? [y/N] ")
        try:
            with GATE.suspended():  # Ctrl-C at the prompt must answer it
                answer = sys.stdin.readline()
        except KeyboardInterrupt:
            say("\nnothing applied")
            return 130
        if answer.strip().lower() not in ("y", "yes"):
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
    again = recheck()
    for c in again["checks"]:
        say(f"{c['id']}: {c['status']} - {c['summary']}")
    for line in not_applied:
        say(line)
    say("before: " + before)
    say("after:  " + verdict_line(again))
    return int(again["summary"]["exit_code"])
