"""Fixes that reach the copy the job imports, run by the installer the target has.

Every built-in check's fixes pass through `route` (model.Check.route_fixes) after it ran:

- A pip step for a stack package whose imported copy is not the one pip writes (a PYTHONPATH entry, the user site,
  the job's own folder) would be hidden by that copy: the plan first says how to take that copy out of the way, as a
  typed action (`Fix.action`: which entry, which file, what to change), so that the pip step then reaches what the
  job imports. A Megatron checkout is updated in place (checks/fixes/catalogue.py, mcore).
- The installer: `"$PY" -I -m pip` where pip is importable; `uv pip ... --python "$PY"` in a venv uv made, with uv
  on PATH; else `"$PY" -I -m ensurepip --upgrade` first; where even ensurepip is missing the plan says "no
  installer" and stops. An externally managed interpreter (PEP 668) gets the two ways pip installs there first
  (checks/fixes/installer.py).
"""

from __future__ import annotations

import os
import re
import shlex

from dsv4_doctor.api import STACK_MODULE_OF, Command, Fix, Phase, StaticFacts, canonical, plain_value

from .fixes.installer import managed_routes

STACK = STACK_MODULE_OF
STACK_MODULES = tuple(dict.fromkeys(STACK.values()))
NO_INSTALLER = "installer:none"  # doctor/fix/plan.py's NO_INSTALLER
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
    if copy["owner_not_known"]:
        return False  # several distributions install its top-level name and none is known to own its file
    found = static.dist(dist) if dist else None
    return bool(found and found.get("path") and copy["entry"]
                and os.path.realpath(os.path.dirname(str(found["path"]))) == os.path.realpath(copy["entry"]))


def hides(static: StaticFacts, copy: dict, dist: str | None = None) -> bool:
    """Whether the copy the job imports lies where a pip step does not reach it. `"$PY" -I -m pip install` ignores
    PYTHONPATH, the user site and the job's folder and writes site-packages, behind whatever they hold: any copy
    there hides what pip installs, even one with its own dist-info (a `pip install --target` folder: `target_entry`
    says how to reach it). A .pth entry or another folder hides when no distribution owns the copy (a checkout) or
    when it shadows another copy further down the path. site-packages and an editable install (pip replaces it) are
    reached."""
    if not copy["found"] or copy["place"] not in ("pythonpath", "user-site", "job", "pth", "other"):
        return False
    if copy["place"] in ("pythonpath", "user-site", "job"):
        return True  # `"$PY" -I -m pip` never writes there: whatever it installs stays behind this copy
    return not owned(static, copy, dist) or bool(copy["others"])


def own_metadata(static: StaticFacts, copy: dict, dist: str | None) -> str | None:
    """The dist-info that installed the copy, when it lies directly in the copy's sys.path entry (beside it)."""
    entry = copy["entry"]
    if not entry or copy["owner_not_known"]:
        return None  # never a dist-info guessed by name where RECORD does not say which installed the copy
    for found in ((copy["owner"] or {}).get("path"), (static.dist(dist) or {}).get("path") if dist else None):
        if isinstance(found, str) and os.path.realpath(os.path.dirname(found)) == os.path.realpath(entry):
            return found
    return None


def target_entry(static: StaticFacts, copy: dict, dist: str | None) -> str | None:
    """The PYTHONPATH entry the job imports the copy from, when that entry is a `pip install --target` folder: the
    copy's own .dist-info beside it, no git checkout, no other copy of it further down the path. A pip step reaches
    that copy only when aimed at that folder (`pip install --no-deps --upgrade --target ENTRY`); None otherwise."""
    if not copy["found"] or copy["place"] != "pythonpath" or copy["others"] or copy["git"]:
        return None
    meta = own_metadata(static, copy, dist)
    entry = copy["entry"]
    if not meta or not meta.endswith(".dist-info") or not entry or not os.path.isabs(entry) \
            or not plain_value(entry) or not plain_value(meta + ".aside"):
        return None
    return entry


def into_entry(cmd: Command, entry: str) -> Command | None:
    """`pip install ... SPEC` aimed at a `--target` folder: `pip install --no-deps --upgrade --target ENTRY ...`
    (--upgrade: pip replaces what the folder holds only then; --no-deps: its dependencies stay where they are). None
    when the command already names where it installs, is not an install, or installs extras without --no-deps (pip's
    --no-deps drops them: `transformer-engine[pytorch,core_cu13]` would install the meta package alone; `route` then
    clears the folder's copy instead)."""
    argv = list(cmd.argv)
    if len(argv) < 3 or argv[1] != "install" or any(a in ("--target", "-t", "--prefix", "--root", "--user", "-e",
                                                          "--editable") or a.startswith(("--target=", "--prefix=",
                                                                                          "--root="))
                                                    for a in argv[2:]):
        return None
    if "--no-deps" not in argv and _has_extras(argv[2:]):
        return None  # --no-deps would drop what the extras bring (TE's [pytorch,core_cu13]: its core and extension)
    extra = [a for a in ("--no-deps", "--upgrade") if a not in argv and not (a == "--upgrade" and "-U" in argv)]
    try:
        return Command((argv[0], "install", *extra, "--target", entry, *argv[2:]), cmd.env)
    except ValueError:
        return None


def _has_extras(words: list[str]) -> bool:
    """Whether a requirement among an install's words names extras (`NAME[EXTRA]...`); an unreadable one counts."""
    from packaging.requirements import InvalidRequirement, Requirement

    skip = False
    for word in words:
        if skip or word.startswith("-"):
            skip = not skip and word in _VALUE_OPTIONS
            continue
        try:
            if Requirement(word).extras:
                return True
        except InvalidRequirement:
            if "[" in word:
                return True
    return False


def _met(cmd: Command, have: str | None) -> bool:
    """A single plain `NAME==VERSION` install that the copy's version already is."""
    from packaging.requirements import InvalidRequirement, Requirement

    words = [w for w in cmd.argv[2:] if not w.startswith("-")]
    try:
        req = Requirement(words[0]) if len(words) == 1 and have else None
    except InvalidRequirement:
        return False
    pins = [s.version for s in req.specifier if s.operator == "=="] if req is not None else []
    return bool(req is not None and not req.url and len(pins) == 1 and len(req.specifier) == 1 and pins[0] == have)


def _moving_metadata(static: StaticFacts, module: str, dist: str, entry: str) -> Fix | None:
    """The step before a `--target` install: the copy's old dist-info moved aside (pip replaces the package folder
    but leaves the old version's dist-info beside the new one, and importlib.metadata may read either)."""
    copy = static.copy(module)
    meta = own_metadata(static, copy, dist)
    if not meta:
        return None
    version = f" {copy['version']}" if copy["version"] else ""
    return Fix(f"{module}{version} is imported from {entry} ({copy['why']}), a `pip install --target` folder in front "
               "of site-packages, where `\"$PY\" -I -m pip` would install: the install step below is aimed at that "
               f"folder (--target). pip replaces the package there but leaves the old version's metadata beside the "
               f"new one, so move it aside first (mv {meta} {meta}.aside)", key=f"path:target-metadata:{meta}",
               phase=Phase.PATH, manual=True,
               action={"kind": "move-aside", "module": module, "path": meta, "to": meta + ".aside"})


_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")


def sharing(copy: dict) -> str | None:
    """"megatron-bridge 0.6.2 (megatron/bridge)": the other distributions in the copy's `--target` folder that install
    into its top-level folder too, in words; None where none does."""
    shared = copy["shared_top"]
    if not shared:
        return None
    return " and ".join(f"{o['name'] or os.path.basename(o['path'] or '?')}{' ' + o['version'] if o['version'] else ''}"
                        + (f" ({', '.join(shared['top'] + '/' + p for p in o['parts'][:4])})" if o["parts"] else "")
                        for o in shared["others"])


def staging(aimed: Command, copy: dict, dist: str, entry: str) -> list[Command] | None:
    """The install `aimed` (`pip install --upgrade --target ENTRY ...`) as steps that leave the other distributions
    of a shared top-level folder in place. pip's `--upgrade --target` removes every top-level folder the wheel installs
    before it moves the new one in (megatron/, megatron-bridge's megatron/bridge with it), so: pip installs into an
    empty staging folder beside ENTRY; the old version's own folders under the shared top (what its RECORD lists
    there and no other distribution's RECORD does) are removed; the staging folder is copied over ENTRY (cp -R
    merges folders); the staging folder is removed. None where a part of that is not plain (then the copy is
    cleared from the path instead)."""
    shared = copy["shared_top"]
    base = entry.rstrip("/")
    top = shared["top"] if shared else ""
    if not shared or not base or not _PART.fullmatch(top) or "--target" not in aimed.argv:
        return None
    stage = f"{base}.{dist}-staging"
    at = aimed.argv.index("--target")
    install = (*aimed.argv[:at + 1], stage, *aimed.argv[at + 2:])
    theirs = {p for o in shared["others"] for p in o["parts"]}
    own = [p for p in shared["parts"] if p not in theirs]
    known = shared["whole"] and all(o["whole"] for o in shared["others"]) and own \
        and all(_PART.fullmatch(p) and p not in (".", "..") for p in own)
    old = [("rm", "-r", "--", *(f"{base}/{top}/{p}" for p in own))] if known else []
    try:
        return [Command(install, aimed.env), *(Command(c) for c in old),
                Command(("cp", "-R", "--", f"{stage}/.", f"{base}/")), Command(("rm", "-r", "--", stage))]
    except ValueError:
        return None


def _aimed(fix: Fix, commands: list[Command], reached: list[tuple[str, str, str]], static: StaticFacts,
           stage: str | None = None) -> Fix:
    """The fix with its install commands aimed at the `--target` folders the job imports from, said and typed; a
    staged one (`staging`, through folder `stage`) is a manual step that says why."""
    module, dist, entry = reached[0]
    copy = static.copy(module)
    where = "; ".join(f"{d} into {e} ({static.copy(m)['why']})" for m, d, e in reached)
    action = dict(fix.action) or {"kind": "install-into-entry", "module": module, "distribution": dist, "entry": entry,
                                  "index": str(copy["pythonpath_index"] or ""), "variable": "PYTHONPATH"}
    # A note's other pip route (Megatron-Bridge's PyPI release) would land behind that folder just the same.
    aim = f"install it into {entry} the same way, through a staging folder; never --upgrade --target {entry}" \
        if stage else f"aim it at the same folder: --upgrade --target {entry}"
    notes = [n + f" (to reach the copy the job imports, {aim})" if "pip install" in n else n for n in fix.notes]
    description = f"{fix.description} (aimed at the `pip install --target` folder the job imports it from: {where})"
    if stage:
        top = (copy["shared_top"] or {}).get("top", "")
        action = {**action, "kind": "install-via-staging", "staging": stage, "shared_top": top,
                  "shared_with": sharing(copy) or ""}
        kept = "its old folders there are removed first (its RECORD lists them, no other RECORD does), " \
            if any(c.argv[0] == "rm" and c.argv[-1] != stage for c in commands) else \
            "its old files there are overwritten (which of them are its own, the RECORDs do not tell whole), "
        description += (f". A manual step: `pip install --target --upgrade` replaces the whole {top}/ folder of "
                        f"{entry}, which {sharing(copy)} also installs into: it would delete those files and leave "
                        f"their dist-info pointing at nothing. So pip installs into an empty staging folder ({stage}), "
                        f"{kept}the staging folder is copied over {entry} (cp -R merges the folders) and removed")
    return Fix(description, commands, key=f"{fix.key}:into:{'+'.join(e for _, _, e in reached)}"
               + (":staged" if stage else ""), phase=fix.phase, manual=fix.manual or bool(stage), notes=notes,
               action=action, installer=fix.installer)


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
    """A check's fixes as a plan should carry them: each pip step after the step that clears the copy hiding it, or
    aimed at the `--target` folder that copy lies in; every pip step run by the target's installer (and after the
    step that installs pip, where it has none)."""
    if not any(c.is_pip for f in fixes for c in f.commands):
        return fixes
    static: StaticFacts = ctx.static
    installer, first = installer_choice(static)
    out: list[Fix] = [*managed_routes(static, ctx.python), *first]  # PEP 668: the two ways pip installs there

    def before(step: Fix | None) -> None:
        if step is not None and all(step.key != f.key for f in out):
            out.append(step)

    for fix in fixes:
        if not any(c.is_pip for c in fix.commands):
            out.append(fix)
            continue
        commands: list[Command] = []
        reached: list[tuple[str, str, str]] = []
        stage: str | None = None  # the staging folder of an install into a shared top-level folder
        # the modules this fix installs with a step not aimed at their `--target` folder (an install with extras, see
        # into_entry, or of several distributions): their uninstall steps clear the folder's copy too, never with a
        # move-aside that says an install is aimed there
        unaimed = {STACK[n] for c in fix.commands if c.is_pip and len(c.argv) > 1 and c.argv[1] == "install"
                   for n in targets(c) if STACK.get(n) and (e := target_entry(static, static.copy(STACK[n]), n))
                   and (len(targets(c)) != 1 or into_entry(c, e) is None)}
        for cmd in fix.commands:
            names = targets(cmd) if cmd.is_pip else []
            aimed: list[Command] = []  # the command's steps, aimed at the folder the job imports from
            for dist in names:
                module = STACK.get(dist)
                if not module:
                    continue
                copy = static.copy(module)
                entry = target_entry(static, copy, dist)
                if entry and len(names) == 1 and cmd.argv[1] == "install":
                    if _met(cmd, copy["version"]):
                        continue  # the plan leaves it out (fixplan.already_met): nothing to aim, nothing to move
                    into = into_entry(cmd, entry)
                    # another distribution installs into the same top-level folder: never `--upgrade --target` there
                    aimed = (staging(into, copy, dist, entry) or []) if into and copy["shared_top"] else \
                        [into] if into else []
                    if aimed and copy["shared_top"]:
                        stage = aimed[0].argv[aimed[0].argv.index("--target") + 1]
                if entry and (aimed or (cmd.argv[1] == "uninstall" and module not in unaimed)):
                    before(_moving_metadata(static, module, dist, entry))
                    if aimed:
                        reached.append((module, dist, entry))
                    continue
                before(clearing(static, module, dist))
            commands += aimed or [cmd]
        if reached:
            fix = _aimed(fix, commands, reached, static, stage)
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
