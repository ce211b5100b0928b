"""Which distribution installed a module, read from the dist-infos in the sys.path entry it lies in, without
running any package's code. Where several distributions install one top-level name (megatron-core and
megatron-bridge both install into `megatron`), the one whose RECORD lists the module's own file owns it; where
RECORD does not say, the owner is not known. RECORD is read bounded and its paths are only compared, never followed.

A part of the static probe (dsv4probe_static.py), loaded by path (dsv4probe_common.load_module).
"""

import csv
import importlib.machinery
import os

from dsv4probe_common import read_text  # in sys.modules: the probe loaded it first

_OWNERS = {}


def _real(path):
    try:
        return os.path.realpath(path or os.curdir)
    except (OSError, ValueError):
        return path


def _dist_infos(folder):
    try:
        return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info")))
    except OSError:
        return []


RECORD_LIMIT = 1 << 23  # torch's RECORD, the largest of the stack, is about 2 MB
_RECORDS = {}


def _record_path(line):
    """The path of one RECORD line (`path,hash,size`, written by csv: quoted when it holds a comma), relative to the
    folder the distribution was installed into; None for a blank or garbled line and for any path that leaves that
    folder (absolute, a `..` part: scripts in ../../../bin, or a RECORD that claims files elsewhere)."""
    try:
        fields = next(csv.reader([line]), None) if line.startswith('"') else [line.rsplit(",", 2)[0]]
    except csv.Error:  # an unclosed quote, a field over csv's limit, a NUL (before Python 3.11)
        return None
    path = fields[0].replace("\\", "/") if fields else ""
    parts = path.split("/")
    if not path or path.startswith("/") or ":" in parts[0] or any(p in ("", ".", "..") for p in parts):
        return None
    return path


def _record_paths(dist_info):
    """(the set of paths a distribution's RECORD lists inside its folder, whether that RECORD was read whole): a
    missing, unreadable or over-long RECORD is not whole. Read once, bounded; garbage lines list nothing."""
    if dist_info not in _RECORDS:
        from dsv4probe_static_installed import read_bounded

        try:
            raw, size = read_bounded(os.path.join(dist_info, "RECORD"), RECORD_LIMIT)
            whole = size <= len(raw)
        except OSError:
            raw, whole = b"", False
        paths = set()
        for line in raw.decode("utf-8", "replace").splitlines():
            path = _record_path(line)
            if path is not None:
                paths.add(path)
        _RECORDS[dist_info] = (frozenset(paths), whole)
    return _RECORDS[dist_info]


def _record_lists(dist_info, relative, folder=False):
    """Whether a distribution's RECORD lists file `relative` (a folder: any file inside it)."""
    paths = _record_paths(dist_info)[0]
    if not folder:
        return relative in paths
    prefix = relative + "/"
    return any(p.startswith(prefix) for p in paths)


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
    tops = set(read_text(os.path.join(dist_info, "top_level.txt"), 1 << 16).split())
    if not tops:
        suffixes = tuple(importlib.machinery.all_suffixes())
        for path in _record_paths(dist_info)[0]:
            first = path.split("/", 1)
            name = first[0]
            if len(first) == 1:  # a module file at the top: strip its suffix (.py, .cpython-311-x86_64-linux-gnu.so)
                name = next((name[: -len(s)] for s in suffixes if name.endswith(s)), "")
            if name and not name.endswith((".dist-info", ".egg-info", ".data")):
                tops.add(name)
    _TOPS[dist_info] = tops
    return tops


def _relative_in(entry, path):
    """`path` relative to sys.path entry `entry` (a real path), with / separators, as a RECORD writes it; or None."""
    real = _real(path)
    base = entry.rstrip(os.sep) + os.sep
    if not real.startswith(base):
        return None
    return real[len(base):].replace(os.sep, "/")


def owner_in(entry, top, anchor=None):
    """(the distribution in sys.path entry `entry` that installed the module whose own file (or folder, for a
    namespace portion) is `anchor`, under top-level name `top`; why that is not known, or None). The candidates are
    the dist-infos there whose top_level.txt (else RECORD) lists `top`. One candidate owns it. Several (megatron:
    megatron-core and megatron-bridge each install part of it) are told apart by RECORD alone: the owner is the one
    whose RECORD lists the anchor, when every other candidate's RECORD was read whole and does not; otherwise the
    owner is not known (never the first dist-info that names `top`). Each dist-info is read once."""
    relative = _relative_in(entry, anchor) if anchor else None
    folder = bool(anchor) and os.path.isdir(anchor)
    key = (entry, top, relative, folder)
    if key not in _OWNERS:
        _OWNERS[key] = _owner_by_record(entry, top, relative, folder)
    return _OWNERS[key]


def _owner_by_record(entry, top, relative, folder):
    candidates = [d for d in _dist_infos(entry) if top in _tops(d)]
    if not candidates:
        return None, None
    if len(candidates) == 1:
        return _dist_of_folder(candidates[0]), None
    names = " and ".join(os.path.basename(d) for d in candidates[:8]) + (" and more" if len(candidates) > 8 else "")
    if relative is None:
        return None, "%s each install %s, and which file the module is, is not known" % (names, top)
    listing, unread = [], []
    for dist_info in candidates:
        if _record_lists(dist_info, relative, folder):
            listing.append(dist_info)
        elif not _record_paths(dist_info)[1]:
            unread.append(dist_info)
    if len(listing) == 1 and not unread:
        return _dist_of_folder(listing[0]), None
    if len(listing) > 1:
        why = "the RECORDs of %s each list %s" % (" and ".join(os.path.basename(d) for d in listing[:8]), relative)
    elif listing:
        why = "%s lists %s in its RECORD, but the RECORD of %s could not be read whole" % (
            os.path.basename(listing[0]), relative, " and ".join(os.path.basename(d) for d in unread[:8]))
    else:
        why = "%s each install %s, and no RECORD among them lists %s" % (names, top, relative)
    return None, why[:1000]


def owner_of_file(path):
    """The distribution whose RECORD lists file `path` (a .pth file or an editable finder in a site directory)."""
    folder, name = os.path.split(path)
    for dist_info in _dist_infos(folder):
        if name in _record_paths(dist_info)[0]:
            return _dist_of_folder(dist_info)
    return None


PARTS_LIMIT = 64  # megatron-core lists 2 names under megatron/, megatron-bridge 1


def _parts_under(dist_info, top):
    """(the names directly under top-level folder `top` that a distribution's RECORD lists, sorted; whether that
    list is whole: its RECORD read whole and no more than PARTS_LIMIT names)."""
    paths, whole = _record_paths(dist_info)
    prefix = top + "/"
    parts = sorted(set(p[len(prefix):].split("/", 1)[0] for p in paths if p.startswith(prefix)))
    return parts[:PARTS_LIMIT], whole and len(parts) <= PARTS_LIMIT


def shared_top(entry, top, owner_path):
    """Where the owner of a module in sys.path entry `entry` shares top-level folder `top` with other distributions
    there (megatron-core and megatron-bridge in one `pip install --target` folder): {top, parts, whole, others: [{name,
    version, path, parts, whole}]}, parts being what each RECORD lists directly under `top` (pip's `--upgrade
    --target` replaces the whole folder `top`, theirs included). None where no other distribution there names `top`
    in its top_level.txt (else RECORD)."""
    if not owner_path or _real(os.path.dirname(owner_path)) != _real(entry):
        return None
    others = [d for d in _dist_infos(entry) if top in _tops(d) and _real(d) != _real(owner_path)]
    if not others:
        return None
    parts, whole = _parts_under(owner_path, top)
    shown = []
    for dist_info in others[:8]:
        found = _dist_of_folder(dist_info)
        their_parts, their_whole = _parts_under(dist_info, top)
        shown.append({"name": found["name"], "version": found["version"], "path": dist_info, "parts": their_parts,
                      "whole": their_whole})
    return {"top": top, "parts": parts, "whole": whole and len(others) <= 8, "others": shown}
