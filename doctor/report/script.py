"""The fix plan as a POSIX shell script that is safe to paste: every step a comment that stays one inert line, the
automatic pip steps run with the inspected interpreter's pip (`"$PY" -I -m pip`), everything else (manual steps,
held-back builds, job settings, other programs) left as comments for a person to read.

Everything printed goes through the report's redaction and cleaning, on the parts, before they are quoted.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..fix.steps import installer_argv
from ..model.core import PIP, UNSAFE_CHARS, Command, Phase
from ..hostio.redact import WITHHELD, Redactor, cap, clean_text

if TYPE_CHECKING:  # the plan is computed above the renderers (doctor.fixplan); it is only read here
    from ..fix.plan import Plan, Step

_COMMENT_UNSAFE = re.compile(f"[{UNSAFE_CHARS}]+")


def inert(text: str, limit: int = 300) -> str:
    """Text that stays one inert comment line however hostile it is."""
    text = _COMMENT_UNSAFE.sub(" ", str(text)).strip()
    from ..hostio.redact import shorten

    return shorten(text, limit + 1)  # never through a word: a cut secret would pass redaction


def pip_line(cmd: Command, installer: str = "pip") -> str:
    """How the script runs a pip command: with the inspected interpreter's pip, not whichever is first on PATH; in a
    uv venv, uv aimed at it (`uv pip install --python "$PY" ...`); ensurepip as the interpreter's own module."""
    if cmd.is_ensurepip or cmd.is_venv:
        return cmd.env_prefix() + '"$PY" -I -m ' + shlex.join(cmd.argv)
    if installer == "uv":
        words = installer_argv("PYTHON_PLACEHOLDER", cmd, "uv")
        return cmd.env_prefix() + " ".join('"$PY"' if w == "PYTHON_PLACEHOLDER" else shlex.quote(w) for w in words)
    return cmd.env_prefix() + '"$PY" ' + " ".join(PIP) + " " + shlex.join(cmd.argv[1:])


def render_script(plan: Plan, python: str, profile: Mapping[str, Any], version: str, redact: Redactor | None = None,
                  incomplete: str | None = None, job_settings: Mapping[str, Any] | None = None) -> str:
    """The plan as a POSIX shell script. `incomplete`: why the run behind it did not finish (the plan then holds
    only what finished, and says so).

    Redaction works on the parts, before they are quoted or made comments: redacting the finished script would
    rewrite quoted text (`NAME='...'` inside a `'"'"'` escape) and unbalance its quotes, which a hostile METADATA
    turned into a command on the pasted script's shell."""
    return clean_text(_script(plan, python, profile, version, incomplete, redact or Redactor(), job_settings))


def in_settings_section(step: Step, job_settings: Mapping[str, Any] | None) -> bool:
    """A job-setting step the job-settings section already holds (a CP_ARGS line, an export line)."""
    if not job_settings or step.fix.phase is not Phase.SETTING:
        return False
    block: Any = job_settings.get("cp_args")
    block = block if isinstance(block, dict) else {}
    held = {f"job:{line}" for line in block.get("lines") or []}
    held |= {"env:" + line[len("export "):] for line in job_settings.get("exports") or [] if isinstance(line, str)}
    return step.fix.key in held


def _script(plan: Plan, python: str, profile: Mapping[str, Any], version: str, incomplete: str | None,
            redact: Redactor, job_settings: Mapping[str, Any] | None = None) -> str:
    def comment(text, limit: int = 300) -> str:
        """`inert`, on redacted text."""
        return inert(redact.text(cap(redact.literal(str(text)), limit + 8192)), limit)  # capped, then redacted

    def wrapped(text, lead: str = "# ", cont: str = "#   ") -> list[str]:
        """Comment lines wrapped at word boundaries (a step's description is never cut mid-word)."""
        return [lead + line if i == 0 else cont + line for i, line in enumerate(
            textwrap.wrap(comment(text, 4000), width=118 - len(cont), break_long_words=False,
                          break_on_hyphens=False) or [""])]

    def command_line(cmd: Command, installer: str) -> str:
        """The command, or a comment when redaction had to change it (it holds a secret): Redactor.command."""
        words = [f"{name}={value}" for name, value in cmd.env] + list(cmd.argv)  # its environment is printed too
        return WITHHELD if redact.command(words) is None else pip_line(cmd, installer)

    shown = " ".join(f"{k}={v}" for k, v in profile.items() if k in ("cp", "dsa_backend", "gpu_arch")
                     and v is not None)
    lines = ["#!/bin/sh", f"# dsv4-doctor {comment(version)} fix plan ({comment(shown)}).",
             "# Review it before running it. Manual steps and job settings are comments: read them.",
             "set -eu", f"PY={shlex.quote(redact.text(python))}"]
    if plan.installer_way:  # PEP 668: the way its pip steps install (a venv, or --break-system-packages)
        lines += wrapped("Installs: " + plan.installer_way)
    if incomplete:
        lines.append(f"# INCOMPLETE: {comment(incomplete)}; this plan holds only the fixes of the checks that "
                     "finished. Run `dsv4-doctor check` again before trusting it.")
    elif not plan.steps and not plan.unfixable:
        lines.append("# nothing to fix")
    if plan.no_installer is not None:  # nothing below could run: stop before the first step, saying why
        lines += wrapped("NO INSTALLER: " + plan.no_installer.fix.description)
        lines += ["echo 'dsv4-doctor: no installer in the target interpreter (see the plan)' >&2", "exit 1"]
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
            what = "a job setting or choice" if step.fix.phase is Phase.SETTING else (
                "the job's path: not run by this script or by --apply"
                if step.fix.phase is Phase.PATH and step.fix.action else "by hand: not run by this script or by --apply"
                if step.fix.phase is Phase.TOOLCHAIN and step.fix.manual else "its command was withheld")
            lines.append(f"# Step {n} ({what}; nothing to run) [{comment(checks)}]:")
            lines += wrapped(step.fix.description, "#   ")
        elif step.automatic:
            lines += wrapped(f"Step {n} [{comment(checks)}]: {step.fix.description}")
            lines += [command_line(c, step.fix.installer) for c in step.commands]
            if plan.venv_python and any(c.is_venv for c in step.commands):  # the pip steps after it run in the venv
                lines.append(f"PY={shlex.quote(redact.text(plan.venv_python))}")
        elif step.held_by is not None:
            needs = "torch" if plan.steps[step.held_by - 1].fix.phase is Phase.RUNTIME else "the toolchain"
            lines += wrapped(f"Step {n} (held back: run it after Step {step.held_by}, because it builds against "
                             f"{needs}; not run by this script or by --apply) [{comment(checks)}]: "
                             f"{step.fix.description}")
            lines += ["#   " + comment(pip_line(c, step.fix.installer), 2000) for c in step.commands]
        else:
            why = "manual: not run by this script or by --apply" if step.fix.manual else \
                "not run by this script or by --apply: only pip commands are"
            lines += wrapped(f"Step {n} ({why}) [{comment(checks)}]: {step.fix.description}")
            lines += ["#   " + comment(pip_line(c, step.fix.installer) if c.is_pip or c.is_ensurepip else c.shell(),
                                2000) for c in step.commands]
        for note in step.fix.notes:
            lines += wrapped(note, "#   ", "#   ")
    from ..job.settings import comment_lines

    section = comment_lines(job_settings)
    if section:
        lines += ["", "# Job settings: for the training command and the job script; not run by this script or by "
                      "--apply" + (f" [{comment(', '.join(held))}]" if held else "") + ":"]
        lines += [("#     " if line.startswith("  ") else "#   ") + comment(line, 2000) for line in section]
    if plan.unfixable:
        lines += ["", f"# No fix is known for: {comment(', '.join(plan.unfixable))} (see the report)."]
    return "\n".join(lines) + "\n"
