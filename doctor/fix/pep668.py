"""The installer policy of a fix plan for an externally managed interpreter (PEP 668): which of the two ways the
checks offer (checks/fixes/installer.py) the plan keeps, and the venv's folder.

pip refuses a plain install into an interpreter whose stdlib folder holds PEP 668's EXTERNALLY-MANAGED marker, outside
a virtual environment. The plan then takes a virtual environment made from it with --system-site-packages (its
folder: `fix --venv DIR`, default .venv-dsv4 in the job's working directory), whose python runs the pip steps and
then the job; or, with `fix --break-system-packages` (or where pip's own override is already set, and no --venv),
every pip step with pip's --break-system-packages. It never keeps a plain pip step that pip would refuse.

Pure: it reads and rewrites the plan's steps (fixplan.Step) and looks at the venv's folder; it runs nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypeVar

from .steps import BREAK_SYSTEM_PACKAGES, Fix, Phase, breaking_system_packages, plain_value


class PlanStep(Protocol):
    """What this module reads of the plan's steps (fixplan.Step, which imports this module): only read and
    replaced here."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # a dataclass: dataclasses.replace rewrites it
    fix: Fix
    commands: list[Any]


S = TypeVar("S", bound=PlanStep)

# PEP 668's two ways (checks/fixes/installer.py), the step that says the venv's folder cannot be used, and the
# interpreter's own ensurepip step (checks/_reach.py), which a venv makes needless
VENV_KEY, BREAK_KEY, VENV_BLOCKED, ENSUREPIP_KEY = ("installer:venv", "installer:break-system-packages",
                                                    "installer:venv-blocked", "installer:ensurepip")
DEFAULT_VENV = ".venv-dsv4"  # the venv's folder, in the job's working directory (fix --venv DIR names another)


@dataclass(frozen=True)
class Policy:
    """How the pip steps of an externally managed interpreter (PEP 668) run: in a virtual environment (`venv`: its
    folder; default DEFAULT_VENV in `cwd`, the job's working directory), or with pip's --break-system-packages."""

    break_system_packages: bool = False
    venv: str | None = None
    cwd: str | None = None


def installer_way(steps: list[S], policy: Policy) -> tuple[list[S], str | None, str]:
    """PEP 668: keep one of the two ways the checks offer (docs/fix-plans.md). The venv's step, first, with its
    folder resolved (pip's own ensurepip step goes: the venv brings or sees pip), unless --break-system-packages is
    asked or pip's own override is set where the doctor runs (and no --venv): then every pip step spells the flag
    out. Neither way when no pip step is left. (steps, the venv's python or None, the line that names the way)."""
    venv = next((s for s in steps if s.fix.key == VENV_KEY and s.fix.commands), None)
    breaking = next((s for s in steps if s.fix.key == BREAK_KEY), None)
    if venv is None or breaking is None:
        return steps, None, ""
    others = [s for s in steps if s is not venv and s is not breaking]
    rest = [s for s in others if s.fix.key != ENSUREPIP_KEY]
    if not any(c.is_pip for s in rest for c in s.commands):
        return rest, None, ""
    action, override = dict(venv.fix.action), dict(breaking.fix.action).get("override")
    python = action.get("python") or "the target interpreter"
    if policy.break_system_packages or (override and not policy.venv):
        why = f"as asked ({BREAK_SYSTEM_PACKAGES})" if policy.break_system_packages else \
            f"since pip's own override is set ({override}; --venv DIR takes a venv instead)"
        for step in others:  # pip's ensurepip step stays: it installs pip into the interpreter itself
            step.commands = [breaking_system_packages(c) for c in step.commands]
        return others, None, (f"{python} is externally managed (PEP 668): the pip steps install into it with pip's "
                            f"{BREAK_SYSTEM_PACKAGES}, {why}")
    folder = os.path.abspath(policy.venv) if policy.venv else \
        os.path.join(os.path.abspath(policy.cwd or os.getcwd()), DEFAULT_VENV)
    inside = os.path.join(folder, "bin", "python")
    problem = venv_problem(folder, python)
    argv = ("venv", "--system-site-packages", *(() if action.get("with_pip") == "true" else ("--without-pip",)),
            folder)
    if problem is None and not plain_value(folder):
        problem = "has control characters in its path"
    if problem is not None:
        blocked = Fix(f"no usable virtual environment: {python} is externally managed (PEP 668), so the pip steps "
                      f"need a venv, and {folder} {problem}: name another folder with `dsv4-doctor fix --venv DIR` "
                      f"(or, in an image you own, use {BREAK_SYSTEM_PACKAGES})", key=VENV_BLOCKED, phase=Phase.PATH,
                      manual=True, action=dict(action, venv=folder, venv_python=inside))
        # nothing installs until a usable folder is named: the pip steps would install where pip refuses
        return [replace(venv, fix=blocked, commands=[]), *[s for s in rest if not any(c.is_pip for c in s.commands)]], \
            None, ""
    made = Fix(f"Make the virtual environment {folder} from {python} with --system-site-packages, so that the image's "
               f"stack stays importable in it ({python} is externally managed, PEP 668: its pip refuses a plain "
               f"install): the pip steps below run with {inside}, and so must the job from now on", [argv],
               key=VENV_KEY, phase=Phase.PATH,
               notes=[*venv.fix.notes, f"Or, in an image you own (a container): `dsv4-doctor fix "
                      f"{BREAK_SYSTEM_PACKAGES}` installs into {python} itself."],
               action=dict(action, venv=folder, venv_python=inside))
    return [replace(venv, fix=made, commands=list(made.commands)), *rest], inside, (
        f"{python} is externally managed (PEP 668): the pip steps install into the virtual environment {folder} "
        f"(made from it with --system-site-packages); run the job with {inside} (in an image you own, "
        f"{BREAK_SYSTEM_PACKAGES} installs into {python} instead)")


def venv_problem(folder: str, python: str) -> str | None:
    """Why `folder` cannot be the venv: a file, a folder of other files, or a venv of another interpreter (making
    a venv over it would leave its python pointing at that one). None: absent, empty, or a venv of `python`."""
    if not os.path.lexists(folder):
        return None
    if not os.path.isdir(folder):
        return "exists and is not a folder"
    try:
        names = os.listdir(folder)
    except OSError as exc:
        return f"cannot be listed ({exc.strerror or exc})"
    if names and "pyvenv.cfg" not in names:
        return "holds other files and is no virtual environment (no pyvenv.cfg)"
    its_python = os.path.realpath(os.path.join(folder, "bin", "python"))
    if names and its_python != os.path.realpath(python):
        return f"is a virtual environment of another interpreter ({its_python})"
    return None
