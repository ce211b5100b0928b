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

JOB = {"path": None, "why": None}
_ORIGINS = None
_OWNERS = {}


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
            text = _small(os.path.join(site_dir, name), 1 << 16)
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")) and \
                        _real(os.path.join(site_dir, line)) == entry:
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
            if pth:
                info.update(kind="pth", why="a .pth file (%s)" % pth, pth=pth)
            else:
                info.update(kind="other", why="sys.path entry %d" % index)
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


def _dist_infos(folder):
    try:
        return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info")))
    except OSError:
        return []


def _small(path, limit=1 << 23):
    from dsv4probe_static_installed import read_regular

    try:
        return read_regular(path, limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _record_lists(dist_info, relative):
    record = _small(os.path.join(dist_info, "RECORD"))
    for line in record.splitlines():
        path = line.rsplit(",", 2)[0].replace("\\", "/")
        if path == relative or path.startswith(relative + "/"):
            return True
    return False


def _dist_of_folder(dist_info):
    from dsv4probe_static_installed import parse_metadata, read_bounded

    meta = "METADATA" if dist_info.endswith(".dist-info") else "PKG-INFO"
    try:
        raw, size = read_bounded(os.path.join(dist_info, meta), 1 << 20)
        fields = parse_metadata(raw, truncated=size > len(raw))
    except (OSError, ValueError, UnicodeDecodeError):
        fields = {}
    from dsv4probe_static_installed import _direct_url

    url = _direct_url(dist_info) or {}
    dir_info = url.get("dir_info") if isinstance(url, dict) else None
    editable = bool(dir_info.get("editable")) if isinstance(dir_info, dict) else False
    out = {"name": (fields.get("Name") or [None])[0], "version": (fields.get("Version") or [None])[0],
           "path": dist_info, "editable": editable}
    target = url.get("url") if isinstance(url, dict) else None
    if editable and isinstance(target, str) and target.startswith("file://"):
        out["checkout"] = target[len("file://"):]
    return out


_TOPS = {}


def _tops(dist_info):
    """The top-level names a distribution installed: top_level.txt, else the first parts of its RECORD's paths."""
    if dist_info in _TOPS:
        return _TOPS[dist_info]
    tops = set(_small(os.path.join(dist_info, "top_level.txt"), 1 << 16).split())
    if not tops:
        suffixes = tuple(importlib.machinery.all_suffixes())
        for line in _small(os.path.join(dist_info, "RECORD")).splitlines():
            first = line.rsplit(",", 2)[0].replace("\\", "/").split("/", 1)
            name = first[0]
            if len(first) == 1:  # a module file at the top: strip its suffix (.py, .cpython-311-x86_64-linux-gnu.so)
                name = next((name[: -len(s)] for s in suffixes if name.endswith(s)), "")
            if name and not name.endswith((".dist-info", ".egg-info", ".data")) and name != "..":
                tops.add(name)
    _TOPS[dist_info] = tops
    return tops


def owner_in(entry, top):
    """The distribution in sys.path entry `entry` that installed top-level name `top` (its top_level.txt or RECORD
    lists it), or None. Each dist-info is read once."""
    key = (entry, top)
    if key not in _OWNERS:
        found = next((d for d in _dist_infos(entry) if top in _tops(d)), None)
        _OWNERS[key] = _dist_of_folder(found) if found else None
    return _OWNERS[key]


def owner_of_file(path):
    """The distribution whose RECORD lists file `path` (a .pth file or an editable finder in a site directory)."""
    folder, name = os.path.split(path)
    for dist_info in _dist_infos(folder):
        if _record_lists(dist_info, name):
            return _dist_of_folder(dist_info)
    return None


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
    owner = owner_in(entry, top)
    out = {"why": info["why"], "place": info["kind"], "entry": entry, "root": entry, "index": info["index"]}
    if "pythonpath_index" in info:
        out["pythonpath_index"] = info["pythonpath_index"]
    if info["kind"] == "pth":
        pth_owner = owner_of_file(info["pth"])
        if pth_owner:
            owner = pth_owner
            out["place"] = "editable" if pth_owner.get("editable") else "pth"
            out["why"] = "editable %s %s -> %s (%s)" % (pth_owner.get("name"), pth_owner.get("version"), entry,
                                                        os.path.basename(info["pth"]))
    out["owner"] = owner
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
        owner = owner_in(entry, top)
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
    from dsv4probe_common import load_module

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
