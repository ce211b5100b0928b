"""Where the job's interpreter finds a module, found as its import system would find it, without running the
package's code: the job's sys.path[0] in front (the script's folder, or the working directory for -m and -c), then
the meta-path finders in order (PathFinder for sys.path, with its namespace-package rules; the finders PEP 660
editable installs register), level by level down the dotted name. A finder's find_spec runs (that is how the job
finds the module too); no package's __init__ does. Each copy says why it is there: which sys.path entry (the job's
folder, PYTHONPATH entry N, the user site, site-packages, a .pth file) or which finder, and which distribution owns
it; a copy no distribution owns (a checkout on the path) is judged by its files (package_info.py, __version__, the
git commit read from .git).

A part of the static probe (dsv4probe_static.py), loaded by path (dsv4probe_common.load_module).
"""

import importlib.machinery
import os
import sys
import types

from dsv4probe_common import load_module, read_text

# Which distribution installed a copy: the part beside this one, loaded by path.
_owner = load_module("dsv4probe_static_owner", os.path.dirname(os.path.realpath(__file__)))
owner_in, owner_of_file = _owner.owner_in, _owner.owner_of_file
shared_top = _owner.shared_top

JOB = {"path": None, "why": None}
_ORIGINS = None


def set_job_path(request):
    """Put the job's sys.path[0] in front, as its interpreter will (before anything reads sys.path)."""
    job = request.get("job_path")
    if not isinstance(job, dict) or not isinstance(job.get("path"), str) or not job["path"]:
        return
    path = job["path"]
    sys.path[:] = [path] + [p for p in sys.path if p != path]
    JOB["path"] = path
    JOB["why"] = str(job.get("why") or "the job's sys.path[0]")[:200]


def _real(path):
    try:
        return os.path.realpath(path or os.curdir)
    except (OSError, ValueError):
        return path


def _pythonpath():
    if sys.flags.ignore_environment:
        return []
    return [_real(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _user_site():
    try:
        import site

        if not getattr(site, "ENABLE_USER_SITE", False):
            return None
        return _real(site.getusersitepackages())
    except Exception:
        return None


def _site_dirs():
    try:
        import site

        return [_real(p) for p in site.getsitepackages()]
    except Exception:
        return []


def _pth_owner(entry, sites):
    """The .pth file (in a site directory) that put `entry` on sys.path, or None."""
    for site_dir in sites:
        try:
            names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            text = read_text(os.path.join(site_dir, name), 1 << 16)
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")) and \
                        _real(os.path.join(site_dir, line)) == entry:
                    return os.path.join(site_dir, name)
    return None


def _site_around(entry, sites):
    """The site directory that `entry` lies inside (not equal to it), or None."""
    return next((s for s in sites if entry.startswith(s.rstrip(os.sep) + os.sep)), None)


def _pth_code_owner(entry, site_dir):
    """The .pth file in `site_dir` whose import line put `entry` (a folder inside `site_dir`) on sys.path, found
    without running it: the line names the entry's last folder in quotes. nvidia-cutlass-dsl 4.8's
    nvidia_cutlass_dsl_packages.pth: `import sys, os, nvidia_cutlass_dsl; sys.path.insert(0,
    os.path.join(nvidia_cutlass_dsl.__path__[0], 'dsl_packages'))`. None where no line names it."""
    last = os.path.basename(entry.rstrip(os.sep))
    quoted = ("'%s'" % last, '"%s"' % last)
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return None
    for name in names:
        for line in read_text(os.path.join(site_dir, name), 1 << 16).splitlines():
            if line.startswith(("import ", "import\t")) and any(q in line for q in quoted):
                return os.path.join(site_dir, name)
    return None


def path_origins():
    """Why each sys.path entry is there: {realpath: {"index", "kind", "why", "entry", "pth"?}} (built once)."""
    global _ORIGINS
    if _ORIGINS is not None:
        return _ORIGINS
    _ORIGINS = {}
    pythonpath = _pythonpath()
    user = _user_site()
    sites = _site_dirs()
    job = _real(JOB["path"]) if JOB["path"] else None
    for index, entry in enumerate(sys.path):
        real = _real(entry)
        if real in _ORIGINS:
            continue
        info = {"index": index, "entry": entry}
        if job is not None and real == job and index == 0:
            info.update(kind="job", why="from " + JOB["why"])
        elif real in pythonpath:
            info.update(kind="pythonpath", why="PYTHONPATH entry %d" % (pythonpath.index(real) + 1),
                        pythonpath_index=pythonpath.index(real) + 1)
        elif user is not None and real == user:
            info.update(kind="user-site", why="the user site")
        elif real in sites:
            info.update(kind="site", why="site-packages")
        else:
            pth = _pth_owner(real, ([user] if user else []) + sites)
            around = _site_around(real, ([user] if user else []) + sites)
            code = _pth_code_owner(real, around) if around and not pth else None
            if pth:
                info.update(kind="pth", why="a .pth file (%s)" % pth, pth=pth)
            elif code:
                info.update(kind="pth", why="a .pth file's import line (%s)" % code, pth=code)
            else:
                info.update(kind="other", why="sys.path entry %d" % index)
            if around:
                info["site"] = around  # a folder inside a site directory: its files are in that site's RECORDs
        _ORIGINS[real] = info
    return _ORIGINS


def _entry_of(path):
    """The sys.path entry a file or folder lies in (the longest that contains it), with its origin; or None."""
    real = _real(path)
    best = None
    for entry, info in path_origins().items():
        if real == entry or real.startswith(entry.rstrip(os.sep) + os.sep):
            if best is None or len(entry) > len(best[0]):
                best = (entry, info)
    return best


def _locations(spec):
    locs = spec.submodule_search_locations
    if locs is None:
        return None
    inner = getattr(locs, "_path", None)  # a _NamespacePath: iterating it would import the parent
    return [p for p in (inner if inner is not None else locs) if isinstance(p, str)]


def _finder_name(finder):
    kind = finder if isinstance(finder, type) else type(finder)
    return "%s.%s" % (getattr(kind, "__module__", "?"), getattr(kind, "__qualname__", kind.__name__))


def _is_path_finder(finder):
    return finder is importlib.machinery.PathFinder or (
        isinstance(finder, type) and issubclass(finder, importlib.machinery.PathFinder))


def find(fullname, path):
    """The spec the import system would find for `fullname` (its parent's __path__ is `path`), and the finder."""
    for finder in list(sys.meta_path):
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(fullname, path)
        if spec is not None:
            return spec, finder
    return None, None


def _copy_facts(spec, finder, top):
    origin = spec.origin if spec.origin not in (None, "namespace", "built-in", "frozen") else None
    locations = _locations(spec)
    here = {
        "kind": "namespace" if origin is None and locations is not None else (
            "package" if locations is not None else ("extension" if origin and origin.endswith(
                tuple(importlib.machinery.EXTENSION_SUFFIXES)) else "module")),
        "origin": origin,
        "locations": list(locations or []),
        "finder": _finder_name(finder),
    }
    return here


def _where(here, top, finder):
    """Why the job imports this copy: the sys.path entry or the finder, and its owner distribution."""
    anchor = here["origin"] or (here["locations"][0] if here["locations"] else None)
    if anchor is None:
        return {"why": "not known", "place": "other"}
    if not _is_path_finder(finder):
        module = sys.modules.get(type(finder).__module__ if not isinstance(finder, type) else finder.__module__)
        finder_file = getattr(module, "__file__", None)
        owner = owner_of_file(finder_file) if finder_file else None
        root = (owner or {}).get("checkout") or _package_root(anchor, top)
        if owner:
            why = "editable %s %s -> %s" % (owner.get("name"), owner.get("version"), root)
        else:
            why = "the meta-path finder %s" % here["finder"]
        return {"why": why, "place": "editable" if owner and owner.get("editable") else "finder", "owner": owner,
                "root": root}
    hit = _entry_of(anchor)
    if hit is None:
        return {"why": "not on sys.path", "place": "other", "root": _package_root(anchor, top)}
    entry, info = hit
    owner, owner_not_known = owner_in(entry, top, anchor)
    out = {"why": info["why"], "place": info["kind"], "entry": entry, "root": entry, "index": info["index"]}
    if owner_not_known:
        out["owner_not_known"] = owner_not_known
    if "pythonpath_index" in info:
        out["pythonpath_index"] = info["pythonpath_index"]
    if not owner and info.get("site"):
        # A folder inside a site directory (a .pth file put it on sys.path): the distribution whose RECORD lists the
        # module's own file, relative to that site directory (nvidia-cutlass-dsl 4.8: its -libs-core wheel, while
        # the .pth file is the meta wheel's).
        inner = os.path.relpath(_real(anchor), info["site"]).split(os.sep)[0]
        owner, owner_not_known = owner_in(info["site"], inner, anchor)
        out.pop("owner_not_known", None)
        if owner_not_known:
            out["owner_not_known"] = owner_not_known
    if info["kind"] == "pth":
        pth_owner = owner_of_file(info["pth"])
        if pth_owner and (pth_owner.get("editable") or not owner):
            owner = pth_owner
            out.pop("owner_not_known", None)
        if owner:
            out["place"] = "editable" if owner.get("editable") else "pth"
            out["why"] = "%s%s %s -> %s (%s)" % ("editable " if owner.get("editable") else "", owner.get("name"),
                                                 owner.get("version"), entry, os.path.basename(info["pth"]))
    out["owner"] = owner
    shared = shared_top(entry, top, (owner or {}).get("path")) if info["kind"] != "pth" else None
    if shared:
        out["shared_top"] = shared
    return out


def _package_root(anchor, top):
    """The folder that holds the top-level package of the file or folder `anchor`."""
    real = _real(anchor)
    parts = real.split(os.sep)
    if top in parts:
        i = len(parts) - 1 - parts[::-1].index(top)
        return os.sep.join(parts[:i]) or os.sep
    return os.path.dirname(real)


def other_copies(top, chosen_entry):
    """Every other sys.path entry that holds top-level `top` (shadowed by the one the job imports)."""
    from dsv4probe_static_installed import _module_file

    out = []
    for entry, info in path_origins().items():
        if entry == chosen_entry:
            continue
        try:
            hit = _module_file(entry, top)
        except OSError:
            hit = None
        if hit is None or hit["kind"] == "namespace":
            continue
        owner = owner_in(entry, top, hit["origin"] or hit["locations"][0])[0]
        out.append({"path": hit["origin"] or entry, "why": info["why"], "place": info["kind"],
                    "version": (owner or {}).get("version"), "distribution": (owner or {}).get("name")})
        if len(out) >= 16:
            break
    return out


def locate_module(name):
    """Where `name` imports from, as the job's import system finds it, level by level (no package code runs)."""
    parts = name.split(".")
    try:
        spec, finder = find(parts[0], None)
    except Exception as exc:
        return {"found": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    if spec is None:
        return {"found": False, "missing": parts[0]}
    chain = [(spec, finder)]
    # The parents as the import system would hold them while it finds a child (a nested namespace package's path
    # reads its parent's __path__ from sys.modules): bare module objects, none of the package's code run.
    placed = []
    try:
        for i in range(1, len(parts)):
            path = _locations(spec)
            if path is None:
                return {"found": False, "missing": ".".join(parts[: i + 1])}
            parent = ".".join(parts[:i])
            if parent not in sys.modules:
                stand_in = types.ModuleType(parent)
                stand_in.__path__ = list(path)
                stand_in.__spec__ = spec
                sys.modules[parent] = stand_in
                placed.append(parent)
            try:
                spec, finder = find(".".join(parts[: i + 1]), path)
            except Exception as exc:
                return {"found": False, "error": "%s: %s" % (type(exc).__name__, exc)}
            if spec is None:
                return {"found": False, "missing": ".".join(parts[: i + 1])}
            chain.append((spec, finder))
    finally:
        for parent in placed:
            sys.modules.pop(parent, None)
    here = _copy_facts(spec, finder, parts[0])
    here["found"] = True
    # Why: decided by the first level that is not a namespace (a namespace merges portions from many entries).
    anchor_spec, anchor_finder = next(((s, f) for s, f in chain if s.origin not in (None, "namespace")), chain[-1])
    here.update(_where(_copy_facts(anchor_spec, anchor_finder, parts[0]), parts[0], anchor_finder))
    if chain[0][0].origin not in (None, "namespace") or len(parts) == 1:
        here["others"] = other_copies(parts[0], here.get("entry"))
    checkout = load_module("dsv4probe_static_checkout", os.path.dirname(os.path.realpath(__file__)))
    files_version, git_commit = checkout.files_version, checkout.git_commit

    if not here.get("owner") and here["kind"] in ("package", "namespace") and here["locations"]:
        stated = files_version(here["locations"][0])
        if stated:
            here["files_version"] = stated
    root = here.get("root")
    owner = here.get("owner") or {}
    if root and here.get("place") != "site" and (not owner or owner.get("editable")):
        here["git"] = git_commit(root, 3)  # a checkout: the commit its files are at
    return here
