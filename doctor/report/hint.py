"""The `next:` hint the text report ends with: `dsv4-doctor fix` with this run's options, `> fix.sh`.

The command carries the run's profile as options (--cp unless the job's command gave it; --gpu-arch, --dsa-backend
and --python where this run had them from options), each value printed only when it is safe to paste; the terminal
report prints the command on one line, never wrapped (as a fix command). No rich here: plain strings only.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any

from .shown import fixes_shown, shown
from .output import line_text

if TYPE_CHECKING:
    from ..model.report import Report

# What the `next:` hint prints of an option's value: a GPU arch, a DSA backend's name, an interpreter's path (at most
# OPTION_MAX characters, printable, never a redaction mark); any other value is "the same" option, unprinted.
_ARCH = re.compile(r"\d{1,3}\.\d{1,3}[a-z]?")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?(\.exe)?")
OPTION_MAX = 160


def _clean(value: Any) -> str:
    """A report string as the terminal may show it: redacted, without escapes or workflow commands."""
    return line_text(shown(value, ""))


def next_step(report: Report) -> str:
    """What to do after the verdict: "ready to train" only where the job's command was read and its stack judged
    here; else the `fix` command where a fix can help, or what to give the doctor."""
    s = report.summary
    job = report.job or {}
    chain = job.get("chain")
    remote = chain.get("remote") if isinstance(chain, dict) else None
    if s.status.value in ("pass", "warn") and not s.interrupted and s.job_not_read:
        return "next: give the training command itself (the job's was not read)"
    if s.status.value in ("pass", "warn") and not s.interrupted and isinstance(remote, str):
        return f"next: check the remote host the job runs on (`{_clean(remote)}`), or use `check --ray`"
    if s.status.value in ("pass", "warn") and not s.interrupted and s.left_out:
        left = f"{s.left_out.get('count')} checks were left out ({s.left_out.get('by')}): run them all before training"
        return f"next: {fix_command(report, 'check')}  # {_clean(left)}"
    if s.status.value in ("pass", "warn") and not s.interrupted:
        return "ready to train" + (" (read the warnings above)" if s.status.value == "warn" else "")
    # a row that needs attention: fail, error, warn, or a status this doctor does not know (shown as an error)
    if any(fixes_shown(report, c) for c in report.checks if c.status.value not in ("pass", "skip")):
        return f"next: {fix_command(report)} > fix.sh"
    return "next: read the rows above (no fix the doctor can write)"


def _printable(value: Any, pattern: re.Pattern[str] | None = None) -> str | None:
    """`value` as the hint may print it (quoted for a shell), or None: not a string, too long, not printable, not
    what `pattern` allows, changed by the output's cleaning, or masked by redaction."""
    if not isinstance(value, str) or not value or len(value) > OPTION_MAX or not value.isprintable():
        return None
    if (pattern is not None and not pattern.fullmatch(value)) or _clean(value) != value or "REDACTED" in value:
        return None
    return shlex.quote(value)


def _same_python(target: Any, doctor: Any) -> bool:
    """Whether the target interpreter is the doctor's own (`--python` was not needed): the same path, or the same
    folder's python / python3 / python3.X (one virtual environment)."""
    if not isinstance(target, str) or not isinstance(doctor, str):
        return not isinstance(target, str)
    if target == doctor:
        return True
    (t_dir, _, t_name), (d_dir, _, d_name) = target.rpartition("/"), doctor.rpartition("/")
    return t_dir == d_dir and bool(_PYTHON_NAME.fullmatch(t_name)) and bool(_PYTHON_NAME.fullmatch(d_name))


def fix_command(report: Report, command: str = "fix") -> str:
    """The `fix` command (or `check`, which takes the same options) for this run's profile: its --cp (unless the
    job's command gave it), and --gpu-arch, --dsa-backend and --python where this run had them from options. A value
    the hint cannot print safely, and a training command (a report holds it only by shape), are named as
    "(the same ...)" instead."""
    p = report.profile
    words = ["dsv4-doctor", command]
    same: list[str] = []
    job = report.job
    if job is None or p.get("cp_source") == "option":
        cp = p.get("cp")
        words += ["--cp", str(cp) if isinstance(cp, int) and not isinstance(cp, bool) and cp > 0 else "N"]
    for option, key, pattern in (("--gpu-arch", "gpu_arch", _ARCH), ("--dsa-backend", "dsa_backend", _NAME)):
        if p.get(f"{key}_source") == "option":
            value = _printable(p.get(key), pattern)
            if value is None:
                same.append(option)
            else:
                words += [option, value]
    target = report.target_python.get("executable")
    from_job = report.target_python.get("judged_by") == "job"  # the same --job-args names it again
    if not from_job and not _same_python(target, report.environment.get("doctor_python")):
        value = _printable(target)
        if value is None or not value.lstrip("'").startswith("/"):
            same.append("--python")
        else:
            words += ["--python", value]
    if job is not None:
        same.append("--job-args/--job-cwd")
    return " ".join(words) + (f" (the same {', '.join(same)})" if same else "")
