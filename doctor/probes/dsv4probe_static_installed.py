"""What is installed, read without importing it: the interpreter, the distributions' metadata on sys.path (found by
name as importlib.metadata finds them), the modules' locations, and who requires what.

A part of the static probe (dsv4probe_static.py), loaded by path (dsv4probe_common.load_module).
"""

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import re
import sys


# Every list in the answer is capped, and a cap that was reached is said beside it (`*_capped`).
MAX_PATH_ENTRIES = 512
MAX_REQUIRES = 2000
MAX_COPIES = 32


def _common():
    """dsv4probe_common: the probe loaded it first, so it is in sys.modules; imported on its own (in-process tests),
    the copy beside it."""
    common = sys.modules.get("dsv4probe_common")
    if getattr(common, "PROBE_COMMON", None) is not True:
        import importlib

        common = importlib.import_module(".dsv4probe_common", __package__) if __package__ else \
            importlib.import_module("dsv4probe_common")
    return common


def _cut_text(text, limit):
    """dsv4probe_common.cut_text (redact-aware: never part of a word, so never part of a secret)."""
    return _common().cut_text(text, limit)


def python_facts():
    vi = sys.version_info
    return {
        "version": "%d.%d.%d" % (vi[0], vi[1], vi[2]),
        "version_info": [vi[0], vi[1], vi[2], vi[3], vi[4]],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "platform": sys.platform,
        "machine": platform.machine(),
        "system": platform.system(),
        "release": platform.release(),
        "path": [p for p in sys.path if p][:MAX_PATH_ENTRIES],
        "path_entries": len([p for p in sys.path if p]),  # beside the capped list: how many there were
        "markers": marker_environment(),
        "installer": installer_facts(),
    }


def _pyvenv_uv():
    """Whether sys.prefix is a venv made by uv (its pyvenv.cfg has a `uv = VERSION` line)."""
    try:
        text = read_regular(os.path.join(sys.prefix, "pyvenv.cfg"), 1 << 16).decode("utf-8", "replace")
    except OSError:
        return False
    return any(line.split("=", 1)[0].strip() == "uv" for line in text.splitlines() if "=" in line)


def installer_facts():
    """What can install into this interpreter: pip importable as `-I -m pip` finds it (site-packages only, no
    PYTHONPATH, user site or current folder), a uv venv and uv on PATH, ensurepip with its bundled wheels, and
    whether pip refuses to install into it (PEP 668, dsv4probe_static_pep668)."""
    isolated = [p for p in sys.path if p and p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    try:
        import site

        user = site.getusersitepackages() if getattr(site, "ENABLE_USER_SITE", False) else None
    except Exception:
        user = None
    locate = sys.modules.get("dsv4probe_static_locate")
    job = getattr(locate, "JOB", {}).get("path")
    isolated = [p for p in isolated if p not in (user, job) and os.path.realpath(p) != os.path.realpath(os.getcwd())]
    pip = None
    try:
        spec = importlib.machinery.PathFinder.find_spec("pip", isolated)
        pip = spec.origin if spec is not None else None
    except Exception:
        pip = None
    ensurepip = False
    try:
        spec = importlib.machinery.PathFinder.find_spec("ensurepip", isolated)
        if spec is not None and spec.submodule_search_locations:
            bundled = os.path.join(list(spec.submodule_search_locations)[0], "_bundled")
            ensurepip = os.path.isdir(bundled) and any(n.startswith("pip-") for n in os.listdir(bundled))
    except Exception:
        ensurepip = False
    uv = None
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder or ".", "uv")
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            uv = candidate
            break
    return {"pip": pip, "uv_venv": _pyvenv_uv(), "uv": uv, "ensurepip": ensurepip,
            "externally_managed": _externally_managed()}


def _externally_managed():
    """dsv4probe_static_pep668's answer (that part loaded by path, beside this one); a part that cannot be loaded is
    said, never a crash of the probe."""
    try:
        part = _common().load_module("dsv4probe_static_pep668", os.path.dirname(os.path.realpath(__file__)))
        return part.externally_managed()
    except Exception as exc:
        return {"found": False, "unread": "not read: %s" % type(exc).__name__}


def marker_environment():
    """PEP 508's environment markers as this interpreter sees them (what pip evaluates Requires-Dist with)."""
    impl = getattr(sys, "implementation", None)
    iv = getattr(impl, "version", sys.version_info)
    iversion = "%d.%d.%d" % (iv[0], iv[1], iv[2])
    if iv[3] != "final":
        iversion += iv[3][0] + str(iv[4])
    return {
        "implementation_name": getattr(impl, "name", "cpython"),
        "implementation_version": iversion,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def normalize(name):
    """PEP 503 name normalisation, as importlib.metadata matches folder names (`transformer_engine-2.16.1`)."""
    return re.sub(r"[-_.]+", "_", name).lower()


_INDEX = None


def distribution_index():
    """Every distribution folder on sys.path, by normalised name, in sys.path order (built once)."""
    global _INDEX
    if _INDEX is None:
        _INDEX = {}
        for directory in sys.path:
            try:
                names = sorted(os.listdir(directory or "."))
            except OSError:
                continue
            for entry in names:
                if entry.endswith(".dist-info") or entry.endswith(".egg-info"):
                    prefix = entry.rsplit(".", 1)[0].split("-")[0]
                    _INDEX.setdefault(normalize(prefix), []).append(os.path.join(directory or ".", entry))
    return _INDEX


def read_bounded(path, limit=1 << 22):
    """(a regular file's first `limit` bytes, its size): dsv4probe_common.read_bounded, the probes' one read path.
    Anything else (a FIFO, a device) raises its ReadRefused, an OSError, without blocking: a FIFO named METADATA
    would stall the whole probe until its timeout."""
    return _common().read_bounded(path, limit)


def read_regular(path, limit=1 << 22):
    """A regular file's first `limit` bytes (see read_bounded)."""
    return read_bounded(path, limit)[0]


def _read(folder, name, limit=1 << 22):
    return read_regular(os.path.join(folder, name), limit)


# What an installer writes about the install itself, not the package's files: direct_url.json holds the path the
# wheel was installed from (two installs of one wheel from two folders differed in it on the H200, 2026-12-01),
# .pyc files exist or not with pip's --no-compile, and files outside the site folder ("../../../bin/torchrun") are
# scripts whose first line names the interpreter.
_RECORD_INSTALL_ONLY = ("/direct_url.json", "/INSTALLER", "/REQUESTED", "/RECORD")


def record_fingerprint(raw):
    """sha256 of a RECORD's entries for the package's own files (sorted: the order is the installer's)."""
    keep = []
    for line in raw.splitlines():
        path = line.rsplit(b",", 2)[0].decode("utf-8", "replace").replace("\\", "/")
        if (not path or path.endswith(".pyc") or path.startswith("../")
                or (".dist-info/" in path and path.endswith(_RECORD_INSTALL_ONLY))):
            continue
        keep.append(line.strip())
    return hashlib.sha256(b"\n".join(sorted(keep))).hexdigest()


METADATA_LIMIT = 1 << 22


def parse_metadata(raw, truncated=False):
    """The header fields of a METADATA/PKG-INFO file (RFC 822 style; continuation lines folded). Decoded strictly,
    as importlib.metadata reads it: undecodable METADATA is an error. When the read stopped at its bound
    (`truncated`), the cut may split the body's last character, which is no error; headers that do not end
    before the bound are (they may go on past it, with a Requires-Python the rules need)."""
    if truncated:
        end = raw.find(b"\n\n")
        if end < 0:
            end = raw.find(b"\r\n\r\n")
        if end < 0:
            raise ValueError("its headers go on past the %d-byte read limit" % len(raw))
        # The headers in full, strictly; the body is not read (no rule reads the description).
        raw = raw[:end + 1]
    text = raw.decode("utf-8")
    fields = {}
    last = None
    for line in text.splitlines():
        if not line:
            break  # the body (description) follows the first empty line; a line of blanks is a folded one (a
            # multi-line License field, as megatron-bridge 0.6.2 has, carries them), as the email parser reads it
        if line[:1] in (" ", "\t") and last is not None:
            fields[last][-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip()
        fields.setdefault(last, []).append(value.strip())
    return fields


def _direct_url(folder):
    try:
        text = _read(folder, "direct_url.json", 1 << 16).decode("utf-8", "replace")
    except OSError:
        return None
    if not text.strip():
        return None
    try:
        return _common().decode_json(text)
    except OSError:  # ReadRefused: not JSON, or nested too deeply
        return {"error": "unreadable direct_url.json"}


_METADATA = {}  # dist-info folder -> its METADATA's facts (read once, whoever asks)
_FACTS = {}  # (name, with_files) -> distribution_facts' answer


def metadata_facts(folder, name):
    """A distribution folder's METADATA (PKG-INFO) facts, read once: name, version, requires, requires_python,
    error (and metadata_truncated, requires_capped where said). A copy each call: callers add their own fields."""
    facts = _METADATA.get(folder)
    if facts is None:
        facts = {"name": None, "version": None, "error": None}
        meta_file = "METADATA" if folder.endswith(".dist-info") else "PKG-INFO"
        try:
            raw, size = read_bounded(os.path.join(folder, meta_file), METADATA_LIMIT)
            fields = parse_metadata(raw, truncated=size > len(raw))
            if size > len(raw):
                facts["metadata_truncated"] = "headers read; the description past byte %d of %d was not" % (
                    len(raw), size)
            facts["version"] = (fields.get("Version") or [None])[0]
            facts["name"] = (fields.get("Name") or [None])[0]
            requires = fields.get("Requires-Dist", [])
            facts["requires"] = requires[:MAX_REQUIRES]
            if len(requires) > MAX_REQUIRES:
                facts["requires_capped"] = len(requires)  # the cap said: how many there were
            facts["requires_python"] = (fields.get("Requires-Python") or [None])[0]
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # missing, unreadable or non-UTF-8 METADATA
            facts["error"] = "%s: %s" % (type(exc).__name__, _cut_text(str(exc), 300))
        if not facts["version"] and not facts["error"]:
            facts["error"] = "%s has no Version (empty or corrupt)" % meta_file
        _METADATA[folder] = facts
    return dict(facts, name=facts["name"] or name)


def distribution_facts(name, with_files=True):
    """Every installed copy of a distribution (two dist-infos for one name is itself a finding), memoised.
    `with_files`: also the installer, direct_url.json and the RECORD's fingerprint (record_sha256), which fleet.drift
    compares between ranks; only the answer's `distributions` section asks for them, so a RECORD is read and hashed
    only there, once."""
    key = (name, with_files)
    if key in _FACTS:
        return _FACTS[key]
    copies = []
    seen = set()
    answer = {"copies": copies}
    for folder in distribution_index().get(normalize(name), []):
        real = os.path.realpath(folder)
        if real in seen:
            continue  # the same dist-info reached through a symlinked or repeated sys.path entry
        seen.add(real)
        entry = dict(metadata_facts(folder, name), path=folder)
        if with_files:
            try:
                entry["installer"] = _read(folder, "INSTALLER", 256).decode("utf-8", "replace").strip() or None
            except OSError:
                entry["installer"] = None
            entry["direct_url"] = _direct_url(folder)
            try:  # RECORD lists every installed file with its hash: the files' fingerprint (fleet.drift)
                entry["record_sha256"] = record_fingerprint(_read(folder, "RECORD", 1 << 23))
            except OSError:
                entry["record_sha256"] = None
        copies.append(entry)
        if len(copies) >= MAX_COPIES:
            answer["copies_capped"] = MAX_COPIES  # more copies not read: the cap said
            break
    _FACTS[key] = answer
    return answer


def _module_file(directory, part):
    """Where module `part` lives inside `directory`, without importing it."""
    pkg = os.path.join(directory, part)
    if os.path.isdir(pkg):
        init = os.path.join(pkg, "__init__.py")
        if os.path.isfile(init):
            return {"kind": "package", "origin": init, "locations": [pkg]}
        return {"kind": "namespace", "origin": None, "locations": [pkg]}
    for suffix in importlib.machinery.SOURCE_SUFFIXES:
        candidate = os.path.join(directory, part + suffix)
        if os.path.isfile(candidate):
            return {"kind": "module", "origin": candidate, "locations": []}
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = os.path.join(directory, part + suffix)
        if os.path.isfile(candidate):
            return {"kind": "extension", "origin": candidate, "locations": []}
    return None


def locate_module(name):
    """Where the job imports `name` from (dsv4probe_static_locate: its finders, in order; no package code runs)."""
    from dsv4probe_common import load_module

    return load_module("dsv4probe_static_locate", os.path.dirname(os.path.realpath(__file__))).locate_module(name)


def _requirement_name(line):
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    return normalize(m.group(1)) if m else None


def dependents(names):
    """Every installed distribution that declares a requirement on one of `names`: {dist: {version, requires}}.

    Reads each distribution's METADATA only (the first copy on sys.path, as importlib.metadata finds it), once: no
    RECORD, INSTALLER or direct_url.json, so that 20,000 distributions stay well within the probe's time."""
    wanted = set(normalize(n) for n in names)
    out = {}
    for key, folders in distribution_index().items():
        if key in wanted:
            continue
        facts = metadata_facts(folders[0], key)
        if facts.get("error"):
            continue
        hits = [r for r in facts.get("requires") or [] if _requirement_name(r) in wanted]
        if hits:
            out[facts["name"]] = {"version": facts["version"], "path": folders[0], "requires": hits}
    return out


def requirement_targets(names):
    """Every distribution named in the Requires-Dist of `names` (markers not evaluated): {name: version or None}."""
    out = {}
    for name in names:
        copies = distribution_facts(name, False)["copies"]
        if not copies or copies[0].get("error"):
            continue
        for line in copies[0].get("requires") or []:
            target = _requirement_name(line)
            if target and target not in out:
                found = distribution_facts(target, False)["copies"] if target in distribution_index() else []
                out[target] = found[0].get("version") if found and not found[0].get("error") else None
    return out
