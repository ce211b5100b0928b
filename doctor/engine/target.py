"""The target interpreter: named by --python, resolved as every run resolves it, or the one the job's command runs
(`judged_python`: the interpreter the stack checks judge, and why); and how many probes run at a time. What the early
start needs before it imports the session (engine/earlystart.py), so base-layer and light."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from ..model.core import UsageError


# What every stack row says of a job that runs on another host (`ray job submit`, `sbatch --wrap`): its interpreter
# and sys.path are that host's, never judged on this one.
REMOTE_NOT_KNOWN = "not known: the job runs on the remote host (`{}`); check there, or use `check --ray`"


def workers() -> int:
    return max(4, min(8, 2 * (os.cpu_count() or 2)))


def resolve_python(value: str | None) -> str:
    if value is None:
        return sys.executable
    import shutil

    from ..fix.steps import plain_value

    if not plain_value(value):
        # The path is printed in reports and in the fix script: it must stay one plain line.
        raise UsageError(f"--python {value!r}: the path has control or line-break characters")

    if os.path.isdir(value):  # a virtual environment's folder: name its interpreter
        inside = [os.path.join(value, *p) for p in (("bin", "python"), ("bin", "python3"), ("Scripts", "python.exe"))]
        hint = next((p for p in inside if os.access(p, os.X_OK)), None)
        raise UsageError(f"--python {value!r} is a folder, not an interpreter" + (
            f": pass --python {hint}" if hint else ": pass the interpreter's path (a venv's bin/python)"))
    found = value if os.sep in value else shutil.which(value)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise UsageError(f"--python: no executable interpreter at {value!r}")
    found = os.path.abspath(found)
    if not plain_value(found):
        raise UsageError(f"--python {found!r}: the path has control or line-break characters")
    try:
        found.encode("utf-8")  # the fix script's PY= and the reports must name these exact bytes
    except UnicodeEncodeError:
        raise UsageError(f"--python {found!r}: the path is not valid UTF-8") from None
    return found


@dataclass(frozen=True)
class Judged:
    """The interpreter the stack checks judge, and why: the one the job's command runs (`job`), --python's (`option`)
    or the doctor's own (`doctor`). `job_python`: the interpreter the command runs, where it is known;
    `job_not_known`: why it is not (the word its chain stopped at, `uv run --with`, a remote host)."""

    python: str
    source: str  # "job" | "option" | "doctor"
    why: str
    job_python: str | None = None
    job_not_known: str | None = None
    remote: str | None = None  # the submitter the job runs on another host through ("ray job submit")

    def to_dict(self) -> dict:
        out = {"judged_by": self.source, "why": self.why, "job_python": self.job_python}
        if self.job_not_known is not None:
            out["job_python_not_known"] = self.job_not_known
        if self.remote is not None:
            out["remote"] = self.remote
        return out


def same_interpreter(a: str | None, b: str | None) -> bool:
    """Whether two paths start the same Python in the same environment: the same file in the same folder (a venv's
    python and python3; never a venv's python and the base interpreter it links to, which is another folder)."""
    if not a or not b:
        return False
    if a == b:
        return True
    try:
        return os.path.dirname(os.path.abspath(a)) == os.path.dirname(os.path.abspath(b)) and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def judged_python(option: str | None, chain: Any = None, job: bool = False) -> Judged:
    """The interpreter a run judges: --python when given (an override), else the one the job's command runs
    (`chain`: doctor/job/chain.py's Chain; verl's Ray workers' runtime_env.py_executable when the command sets it),
    else the doctor's own. `job`: a training command was given (its chain may be None: overrides only). Raises
    UsageError for a --python that is no interpreter."""
    job_python, not_known, remote = _job_python(chain) if job else (None, None, None)
    if remote:  # the stack rows are not known (engine/session.py): this interpreter only runs the job rows
        python = resolve_python(option)
        whose = "--python" if option is not None else "the doctor's own"
        why = f"{whose}, not judged: {not_known}"
        return Judged(python, "option" if option is not None else "doctor", why, None, not_known, remote)
    if option is not None:
        python = resolve_python(option)
        if job_python is not None and not same_interpreter(python, job_python):
            why = f"--python (the command runs {job_python}: {chain.interpreter_why})"
        elif job_python is not None:
            why = f"--python, the interpreter the command runs ({chain.interpreter_why})"
        else:
            why = "--python" + (f": the command's interpreter is not known ({not_known})" if not_known else "")
        return Judged(python, "option", why, job_python, not_known, remote)
    if job_python is not None:
        python = sys.executable if same_interpreter(job_python, sys.executable) else job_python
        return Judged(python, "job", f"the job's interpreter ({chain.interpreter_why})", job_python, None, remote)
    why = "the doctor's own" + (f": the command's interpreter is not known ({not_known})" if not_known else "")
    return Judged(resolve_python(None), "doctor", why, None, not_known, remote)


def _job_python(chain: Any) -> tuple[str | None, str | None, str | None]:
    """(the interpreter the command runs, or None and why it is not known; the remote submitter)."""
    if chain is None:
        return None, "the command is overrides only: it names no interpreter", None
    remote = getattr(chain, "remote", None)
    if remote:
        return None, f"the job runs on the remote host (`{remote}`)", remote
    if chain.stopped:
        return None, str(chain.stopped), None
    if chain.interpreter is None:
        why = str(chain.interpreter_why)
        return None, why[len("not known: "):] if why.startswith("not known: ") else why, None
    try:
        return resolve_python(chain.interpreter), None, None
    except UsageError as exc:  # a runtime_env.py_executable that is no interpreter here, a path the reports refuse
        detail = str(exc).removeprefix("--python").lstrip(": ")
        return None, f"{chain.interpreter_why}: {detail}", None
