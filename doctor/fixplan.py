"""The fix plan: every failing or warning check's fixes, de-duplicated and ordered so that later steps do not undo
earlier ones, printed as a shell script that is safe to paste, and applied (`--apply`) as argv lists, never through a
shell.

Order: (1) torch and the CUDA runtime wheels, a manual step that names the compiled extensions to rebuild after it;
(2) packages built against torch; (3) pure-Python pins; (4) job settings and choices, as prose.

What `--apply` runs: only the automatic steps whose command is `pip ...`, as `<target python> -m pip ...` with the
exact arguments shown. It never runs a shell, a manual step (a torch reinstall), a job setting, or any other program
a plugin names; those stay in the script as comments for a person to read.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from collections.abc import Sequence

from .model import CheckReport, Command, Fix, Phase, Status

ORDER = (Phase.RUNTIME, Phase.BUILD, Phase.PIN, Phase.SETTING)
_COMMENT_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


@dataclass
class Step:
    fix: Fix
    commands: list[Command]  # the fix's commands not already in an earlier step
    checks: list[str] = field(default_factory=list)

    @property
    def automatic(self) -> bool:
        """`--apply` runs it: not manual, and every command is pip (run with the target's interpreter)."""
        return not self.fix.manual and self.fix.phase is not Phase.SETTING and bool(self.commands) and \
            all(c.is_pip for c in self.commands)


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
    seen: set[tuple[str, ...]] = set()
    for step in steps:
        step.commands = [c for c in step.commands if c.argv not in seen]
        seen.update(c.argv for c in step.commands)
    # A fix that is prose only (a setting, a withheld command) stays; one whose commands all came earlier goes.
    steps = [s for s in steps if s.commands or not s.fix.commands]
    return Plan(steps, unfixable)


def comment(text: str, limit: int = 300) -> str:
    """Text that stays one inert comment line however hostile it is."""
    text = _COMMENT_UNSAFE.sub(" ", str(text)).strip()
    return text if len(text) <= limit else text[:limit] + "…"


def pip_line(cmd: Command) -> str:
    """How the script runs a pip command: with the inspected interpreter's pip, not whichever is first on PATH."""
    return '"$PY" -m pip ' + shlex.join(cmd.argv[1:])


def render_script(plan: Plan, python: str, profile: dict, version: str) -> str:
    shown = " ".join(f"{k}={v}" for k, v in profile.items() if k in ("cp", "dsa_backend", "gpu_arch")
                     and v is not None)
    lines = ["#!/bin/sh", f"# dsv4-doctor {comment(version)} fix plan ({comment(shown)}).",
             "# Review it before running it. Manual steps and job settings are comments: read them.",
             "set -eu", f"PY={shlex.quote(python)}"]
    if not plan.steps:
        lines.append("# nothing to fix")
    for n, step in enumerate(plan.steps, 1):
        checks = ", ".join(step.checks)
        lines.append("")
        if step.fix.phase is Phase.SETTING or not step.fix.commands:
            lines.append(f"# Step {n} (a job setting or choice; nothing to run) [{comment(checks)}]:")
            lines.append(f"#   {comment(step.fix.description)}")
        elif step.automatic:
            lines.append(f"# Step {n} [{comment(checks)}]: {comment(step.fix.description)}")
            lines += [pip_line(c) for c in step.commands]
        else:
            why = "manual: not run by this script or by --apply" if step.fix.manual else \
                "not run by this script or by --apply: only pip commands are"
            lines.append(f"# Step {n} ({why}) [{comment(checks)}]: {comment(step.fix.description)}")
            lines += ["#   " + comment(pip_line(c) if c.is_pip else c.shell(), 2000) for c in step.commands]
        lines += [f"#   {comment(note)}" for note in step.fix.notes]
    if plan.unfixable:
        lines += ["", f"# No fix is known for: {comment(', '.join(plan.unfixable))} (see the report)."]
    return "\n".join(lines) + "\n"


def apply(plan: Plan, python: str, procs) -> tuple[int, int]:
    """Run the automatic steps with the target's pip, output to stderr; (commands run, exit code of the failing one
    or 0). Stops at the first failure."""
    ran = 0
    for step in plan.steps:
        if not step.automatic:
            continue
        for cmd in step.commands:
            argv = [python, "-m", "pip", *cmd.argv[1:]]
            sys.stderr.write("+ " + shlex.join(argv) + "\n")
            sys.stderr.flush()
            proc = procs.spawn(argv, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), stderr=sys.stderr.fileno())
            code = proc.wait()
            procs.release(proc)
            ran += 1
            if code != 0:
                return ran, code
    return ran, 0
