"""The installer policy for an externally managed interpreter (PEP 668): the two ways pip installs that work, as
typed fixes that come before a check's pip steps (checks/_reach.py route adds them).

pip (23.0 and later) refuses every plain `pip install` or `pip uninstall` into an interpreter whose stdlib folder
holds an EXTERNALLY-MANAGED marker, outside a virtual environment (Debian 12 and Ubuntu 23.04 and later ship one
with their python3). The ways that work:

- a virtual environment made from it with --system-site-packages: a DSv4 image has its stack (torch, the CUDA wheels,
  Transformer Engine, Megatron) in that interpreter's own site-packages, and a venv without them would lose it all;
  the pip steps run with the venv's python, and the job must then run with it;
- pip's --break-system-packages, in an image the user owns (a container), which installs into the interpreter
  itself.

The fix planner (doctor/fix/plan.py) keeps one of them: the venv unless `fix --break-system-packages` is given, or
pip's own override is already set where the doctor runs (then the plan says so, and spells the flag out).
"""

from __future__ import annotations

from dsv4_doctor.api import BREAK_SYSTEM_PACKAGES as BREAK_OPTION, Fix, Phase, StaticFacts, plain_value
from dsv4_doctor.api import BREAK_KEY, DEFAULT_VENV as VENV_DIR, VENV_KEY  # the keys the planner keeps one of


def venv_python(folder: str) -> str:
    return folder.rstrip("/") + "/bin/python"


def venv_route(python: str, marker: str, with_pip: bool, default: bool = True, folder: str = VENV_DIR) -> Fix:
    """Make a venv from `python` that sees its packages; the pip steps and the job then use its python. Without pip
    of its own (`with_pip` False: the interpreter has pip, which the venv sees through its system site-packages) it
    needs no ensurepip, which Debian's python3 lacks without python3-venv."""
    argv = ["venv", "--system-site-packages", *([] if with_pip else ["--without-pip"]), folder]
    inside = venv_python(folder)
    how = "" if with_pip else " (--without-pip: it runs this interpreter's own pip, which it sees there)"
    return Fix(f"{python} is externally managed (PEP 668: {marker} is there and it is no virtual environment), so "
               "its pip refuses every plain install. Install into a virtual environment made from it that sees its "
               "packages (--system-site-packages: the image's torch, CUDA wheels and the rest of the stack stay "
               f"importable){how}: the pip steps run with {inside}, and the job must run with {inside} from then on "
               f"(check it with --python {inside}). The folder is {folder} in the job's working directory unless "
               "`dsv4-doctor fix --venv DIR` names another",
               [argv], key=VENV_KEY, phase=Phase.PATH,
               notes=[f"The packages of {python} stay visible in the venv and an uninstall step cannot remove them "
                      "from there: the venv's own copies come first on its sys.path."],
               action={"kind": "make-venv", "python": python, "venv": folder, "venv_python": inside,
                       "system_site_packages": "true", "with_pip": "true" if with_pip else "false",
                       "marker": marker, "default": "true" if default else "false"})


def break_route(python: str, marker: str, override: str | None) -> Fix:
    """Install into `python` itself with pip's --break-system-packages: for an image the user owns."""
    already = (f"; pip's own override is set where the doctor runs ({override}), so pip installs anyway and `fix` "
               "takes this way, spelling the flag out, unless --venv is given") if override else ""
    action = {"kind": "break-system-packages", "python": python, "marker": marker, "option": BREAK_OPTION,
              "default": "true" if override else "false"}
    if override:
        action["override"] = override
    return Fix(f"Or, in an image you own (a container you build, which nothing else shares): install into {python} "
               f"itself with pip's {BREAK_OPTION} (`dsv4-doctor fix {BREAK_OPTION}` prints and applies the pip steps "
               "that way). pip then changes what the distribution's package manager installed: a later apt upgrade "
               f"may overwrite it, or the distribution's own Python tools may break{already}",
               key=BREAK_KEY, phase=Phase.PATH, manual=True, action=action)


def managed_routes(static: StaticFacts, python: str) -> list[Fix]:
    """The two ways, when pip refuses a plain install into the target (its marker is there outside a venv) and the
    target has an installer at all (pip, or ensurepip for the venv); else none."""
    have = static.installer()
    managed = have["externally_managed"]
    if not managed["enforced"] or not (have["pip"] or have["ensurepip"]) or not plain_value(python):
        return []
    marker = managed["marker"] or "EXTERNALLY-MANAGED"
    return [venv_route(python, marker, with_pip=not have["pip"], default=not managed["override"]),
            break_route(python, marker, managed["override"])]
