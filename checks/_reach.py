"""Fixes that reach the copy the job imports, run by the installer the target has.

Every built-in check's fixes pass through `route` (model.Check.route_fixes) after it ran:

- A pip step for a stack package whose imported copy is not the one pip writes (a PYTHONPATH entry, the user site,
  the job's own folder) would be hidden by that copy: the plan first says how to take that copy out of the way, as a
  typed action (`Fix.action`: which entry, which file, what to change), so that the pip step then reaches what the
  job imports. A Megatron checkout is updated in place (checks/fixes.py, mcore).
- The installer: `"$PY" -I -m pip` where pip is importable; `uv pip ... --python "$PY"` in a venv uv made, with uv
  on PATH; else `"$PY" -I -m ensurepip --upgrade` first; where even ensurepip is missing the plan says "no
  installer" and stops.
"""

from __future__ import annotations

import os
import re
import shlex

from dsv4_doctor.facts import STACK_MODULE_OF, StaticFacts, canonical
from dsv4_doctor.model import Command, Fix, Phase

STACK = STACK_MODULE_OF
STACK_MODULES = tuple(dict.fromkeys(STACK.values()))
NO_INSTALLER = "installer:none"  # doctor/fixplan.py's NO_INSTALLER
_VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--constraint", "-r",
                  "--requirement", "--python", "--target", "-t", "--prefix", "--root"}


def targets(cmd: Command) -> list[str]:
    """The distributions a pip command installs or removes (canonical names)."""
    out = []
    words = list(cmd.argv[2:]) if len(cmd.argv) > 1 and cmd.argv[1] in ("install", "uninstall") else []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            skip = word in _VALUE_OPTIONS
            continue
        egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", word)
        m = egg or re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", word)
        if m and not word.startswith(("git+", "http", "file:")) or egg:
            out.append(canonical(m.group(1)))  # type: ignore[union-attr]
    return out


def installer_choice(static: StaticFacts) -> tuple[str, list[Fix]]:
    """(the installer the pip steps use, the steps that must come first)."""
    have = static.installer()
    if not have["known"] or have["pip"]:
        return "pip", []
    if have["uv_venv"] and have["uv"]:
        return "uv", []
    if have["ensurepip"]:
        return "pip", [Fix("The target interpreter has no pip: install it with its own ensurepip first",
                           [["ensurepip", "--upgrade"]], key="installer:ensurepip", phase=Phase.PATH,
                           action={"kind": "install-pip", "via": "ensurepip"})]
    uv = "a venv made by uv, but uv is not on PATH" if have["uv_venv"] else "no venv made by uv"
    return "pip", [Fix(f"no installer: the target interpreter has no pip, its ensurepip is missing (a Debian python3 "
                       f"without python3-venv/python3-pip strips it) and it is {uv}. Install pip for it (apt-get "
                       "install python3-pip, or put uv on PATH for a uv venv), then run `dsv4-doctor fix` again",
                       key=NO_INSTALLER, phase=Phase.PATH, manual=True, action={"kind": "no-installer"})]


def _pythonpath_without(root: str) -> str:
    real = os.path.realpath(root)
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != real]
    return os.pathsep.join(kept)


def owned(static: StaticFacts, copy: dict, dist: str | None) -> bool:
    """Whether a distribution's metadata lies with the copy (its own dist-info in the same folder)."""
    if copy["owner"]:
        return True
    found = static.dist(dist) if dist else None
    return bool(found and found.get("path") and copy["entry"]
                and os.path.realpath(os.path.dirname(str(found["path"]))) == os.path.realpath(copy["entry"]))


def hides(static: StaticFacts, copy: dict, dist: str | None = None) -> bool:
    """Whether the copy the job imports lies where a pip step does not reach it: a folder in front of
    site-packages (PYTHONPATH, the user site, the job's own folder, a .pth entry) that holds a copy no distribution
    owns (a checkout), or one that hides another copy further down the path; any user-site copy (pip under -I never
    writes there). site-packages, an editable install (pip replaces it) and a PYTHONPATH folder whose own metadata
    is the only copy (a `pip install --target` folder, what pip reports) are taken as reached."""
    if not copy["found"] or copy["place"] not in ("pythonpath", "user-site", "job", "pth", "other"):
        return False
    if copy["place"] == "user-site":
        return True  # `"$PY" -I -m pip` never writes the user site: whatever it installs stays behind this copy
    return not owned(static, copy, dist) or bool(copy["others"])


def clearing(static: StaticFacts, module: str, dist: str | None = None) -> Fix | None:
    """The step that takes a shadowing copy of `module` out of the job's way, or None when pip reaches the copy the
    job imports (site-packages, an editable install pip replaces)."""
    copy = static.copy(module)
    root, place, why = copy["root"], copy["place"], copy["why"]
    if not root or not hides(static, copy, dist):
        return None
    version = f" {copy['version']}" if copy["version"] else ""
    head = f"{module}{version} is imported from {root} ({why}), in front of the copy pip installs"
    if place == "pythonpath":
        left = _pythonpath_without(root)
        change = f"export PYTHONPATH={shlex.quote(left)}" if left else "unset PYTHONPATH"
        return Fix(f"{head}: drop that entry where the job sets PYTHONPATH ({change}), so that the install steps "
                   "reach what the job imports", key=f"path:pythonpath:{root}", phase=Phase.PATH,
                   manual=True, action={"kind": "drop-pythonpath-entry", "module": module, "entry": root,
                                        "index": str(copy["pythonpath_index"] or ""), "variable": "PYTHONPATH",
                                        "value": left})
    if place == "user-site":
        return Fix(f"{head}: set PYTHONNOUSERSITE=1 in the job's environment (or remove that copy from the user "
                   "site), so that the install steps reach what the job imports", key=f"path:user-site:{root}",
                   phase=Phase.PATH, manual=True,
                   action={"kind": "disable-user-site", "module": module, "entry": root,
                           "variable": "PYTHONNOUSERSITE", "value": "1"})
    if place == "job":
        top = module.split(".")[0]
        path = os.path.join(root, top)
        if not os.path.isdir(path):
            path = next((os.path.join(root, top + s) for s in (".py",) if os.path.exists(os.path.join(root, top + s))),
                        path)
        meta = (copy["owner"] or {}).get("path")
        meta = meta if meta and os.path.dirname(meta) == root else None  # its own dist-info, beside it
        moved = f"mv {path} {path}.aside" + (f" and mv {meta} {meta}.aside" if meta else "")
        action = {"kind": "move-aside", "module": module, "path": path, "to": path + ".aside"}
        if meta:
            action.update(dist_info=meta, dist_info_to=meta + ".aside")
        return Fix(f"{head}: the job's own folder holds a {top} of its own; run the job from another folder, or move "
                   f"that copy aside ({moved}), so that the install steps reach what the job imports",
                   key=f"path:job:{path}", phase=Phase.PATH, manual=True, action=action)
    return None


def route(ctx, fixes: list[Fix]) -> list[Fix]:
    """A check's fixes as a plan should carry them: each pip step after the step that clears the copy hiding it,
    every pip step run by the target's installer (and after the step that installs pip, where it has none)."""
    if not any(c.is_pip for f in fixes for c in f.commands):
        return fixes
    static: StaticFacts = ctx.static
    installer, first = installer_choice(static)
    out: list[Fix] = list(first)
    for fix in fixes:
        if not any(c.is_pip for c in fix.commands):
            out.append(fix)
            continue
        for cmd in fix.commands:
            for dist in targets(cmd) if cmd.is_pip else []:
                module = STACK.get(dist)
                step = clearing(static, module, dist) if module else None
                if step is not None and all(step.key != f.key for f in out):
                    out.append(step)
        out.append(fix.with_installer(installer) if installer != fix.installer else fix)
    return out


def copies_note(dist: str, copies: list[dict], imported: dict | None = None) -> str:
    """"NAME is installed N times: VERSION at PATH, ...; the job imports the one from WHY": each copy by its own
    version and place, never one version for all."""
    shown = "; ".join(f"{c.get('version') or '(unreadable)'} at {os.path.dirname(str(c.get('path') or '?'))}"
                      for c in copies[:8]) + ("; ..." if len(copies) > 8 else "")
    job = f"; the job imports the copy at {imported['root']} ({imported['why']})" \
        if imported and imported.get("found") and imported.get("why") else "; the first on sys.path wins"
    return f"{dist} is installed {len(copies)} times ({shown}){job}"
