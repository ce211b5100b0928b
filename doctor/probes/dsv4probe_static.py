"""The static probe: facts that need no heavy import.

Distribution metadata (the .dist-info/.egg-info folders on sys.path, found by name as importlib.metadata finds them,
read without importing it: that import alone costs 50 ms, most of this probe's time), module locations (found without
importing any package: importing megatron.core alone takes about 14 s), and `ast` summaries of source files (classes,
their fields and methods, functions and their parameters). Stdlib only, Python 3.8+. Every fact that cannot be read
becomes an error value.
"""

import os
import sys

# Before any other import: nothing beside a probe script is the job's (dsv4probe_common's docstring says why).
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]
if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
    import importlib.util

    _spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
        os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
    sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["dsv4probe_common"])
from dsv4probe_common import error_info, serve

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import platform
import re
import stat
import time


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
        "path": [p for p in sys.path if p],
        "markers": marker_environment(),
    }


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


def _index():
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
    """(a regular file's first `limit` bytes, its size). Anything else (a FIFO, a device) raises OSError without
    blocking: a FIFO named METADATA would stall the whole probe until its timeout."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("%s is not a regular file" % path)
        with os.fdopen(fd, "rb") as fh:
            fd = None
            return fh.read(limit), info.st_size
    finally:
        if fd is not None:
            os.close(fd)


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
SOURCE_LIMIT = 1 << 23


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
        return json.loads(text)
    except ValueError:
        return {"error": "unreadable direct_url.json"}


def distribution_facts(name):
    """Every installed copy of a distribution (two dist-infos for one name is itself a finding)."""
    copies = []
    seen = set()
    for folder in _index().get(normalize(name), []):
        real = os.path.realpath(folder)
        if real in seen:
            continue  # the same dist-info reached through a symlinked or repeated sys.path entry
        seen.add(real)
        entry = {"name": name, "version": None, "path": folder, "error": None}
        meta_file = "METADATA" if folder.endswith(".dist-info") else "PKG-INFO"
        try:
            raw, size = read_bounded(os.path.join(folder, meta_file), METADATA_LIMIT)
            fields = parse_metadata(raw, truncated=size > len(raw))
            if size > len(raw):
                entry["metadata_truncated"] = "headers read; the description past byte %d of %d was not" % (
                    len(raw), size)
            entry["version"] = (fields.get("Version") or [None])[0]
            entry["name"] = (fields.get("Name") or [name])[0]
            entry["requires"] = fields.get("Requires-Dist", [])
            entry["requires_python"] = (fields.get("Requires-Python") or [None])[0]
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # missing, unreadable or non-UTF-8 METADATA
            entry["error"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
        if not entry["version"] and not entry["error"]:
            entry["error"] = "%s has no Version (empty or corrupt)" % meta_file
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
    return {"copies": copies}


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
    """find_spec of the top-level name only (it executes nothing), then a walk of the package directories."""
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except Exception as exc:
        return {"found": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    if spec is None:
        return {"found": False, "missing": parts[0]}
    here = {
        "kind": "namespace" if spec.origin in (None, "namespace") else (
            "package" if spec.submodule_search_locations is not None else "module"),
        "origin": spec.origin if spec.origin not in (None, "namespace") else None,
        "locations": list(spec.submodule_search_locations or []),
    }
    for i, part in enumerate(parts[1:], start=1):
        found = None
        namespace_dirs = []
        for directory in here["locations"]:
            hit = _module_file(directory, part)
            if hit is None:
                continue
            if hit["kind"] == "namespace":
                namespace_dirs.extend(hit["locations"])
                continue
            found = hit
            break
        if found is None and namespace_dirs:
            found = {"kind": "namespace", "origin": None, "locations": namespace_dirs}
        if found is None:
            return {"found": False, "missing": ".".join(parts[: i + 1])}
        here = found
    here["found"] = True
    return here


def _unparse(node):
    unparse = getattr(ast, "unparse", None)
    if unparse is None:
        return getattr(node, "id", None) or type(node).__name__
    try:
        return unparse(node)
    except Exception:
        return type(node).__name__


def _params(fn):
    args = fn.args
    names = [a.arg for a in getattr(args, "posonlyargs", [])] + [a.arg for a in args.args]
    names += [a.arg for a in args.kwonlyargs]
    return {
        "params": names,
        "varargs": args.vararg.arg if args.vararg else None,
        "varkw": args.kwarg.arg if args.kwarg else None,
        "lineno": fn.lineno,
    }


def _class_summary(node):
    fields, assigns, methods = [], [], {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            fields.append({"name": item.target.id, "annotation": _unparse(item.annotation),
                           "default": _unparse(item.value) if item.value is not None else None,
                           "lineno": item.lineno})
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name):
                    assigns.append(target.id)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods[item.name] = _params(item)
    return {
        "bases": [_unparse(b) for b in node.bases],
        "decorators": [_unparse(d) for d in node.decorator_list],
        "fields": fields,
        "assigns": assigns,
        "methods": methods,
        "lineno": node.lineno,
    }


def _attribute_reads(tree, owners):
    """Every `owner.attr` read in the module, per owner name (e.g. DSA.indexer_forward_wrapper)."""
    found = {o: set() for o in owners}
    if not owners:
        return {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in found:
            found[node.value.id].add(node.attr)
    return {o: sorted(names) for o, names in found.items()}


_GATE_NAME = "COMPUTE_CAPABILITY"
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _literal(node):
    """An int or a tuple of ints written in the source, else None."""
    try:
        value = ast.literal_eval(node)
    except Exception:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, tuple) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _names_in(node):
    return set(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


def capability_gates(tree):
    """A module's compute-capability gate, as written: the module-level constants whose name says
    COMPUTE_CAPABILITY (value and line), every comparison that uses one (operator, the other side, line), and the
    f-strings that name one (their literal parts and expressions, to rebuild the message an error would carry)."""
    constants = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name) and _GATE_NAME in target.id:
                constants[target.id] = {"value": _literal(node.value), "lineno": node.lineno}
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            imported.update(a.asname or a.name for a in node.names if _GATE_NAME in a.name)
    known = set(constants) | imported
    compares, messages = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = node.left, node.comparators[0]
            for mine, other, flip in ((right, left, False), (left, right, True)):
                used = _names_in(mine) & known
                if used and not (_names_in(other) & known):
                    op = _OPS.get(type(node.ops[0]))
                    if op and flip:
                        op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
                    compares.append({"constant": sorted(used)[0], "op": op, "subject": _unparse(other),
                                     "constant_expr": _unparse(mine), "lineno": node.lineno})
                    break
        elif isinstance(node, ast.JoinedStr) and (_names_in(node) & known):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts.append({"text": value.value})
                elif isinstance(value, ast.FormattedValue):
                    parts.append({"expr": _unparse(value.value)})
            messages.append({"parts": parts, "lineno": node.lineno})
    return {"constants": constants, "imported": sorted(imported), "compares": compares, "messages": messages}


def _function_facts(fn):
    """What a module-level function does, for rules read from code: the names it imports inside its body
    (`from cudnn import DSA` -> "cudnn:DSA"), the calls it makes, its comparisons and the exceptions it catches."""
    imports, calls, compares, catches = [], [], [], []
    for node in ast.walk(fn):
        if isinstance(node, ast.ImportFrom) and node.module:
            imports += ["%s:%s" % (node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            imports += [a.name for a in node.names]
        elif isinstance(node, ast.Call):
            calls.append(_unparse(node.func)[:200])
        elif isinstance(node, ast.Compare):
            compares.append(_unparse(node)[:200])
        elif isinstance(node, ast.ExceptHandler):
            catches.append(_unparse(node.type)[:200] if node.type is not None else "")
    return {"imports": imports[:50], "calls": calls[:100], "compares": compares[:50], "catches": catches[:20]}


def _assignments(tree, attributes):
    """Every `obj.attr = value` for the wanted attribute names, with the simple local assignments (`name = expr`)
    of the function it is in, so that a rule such as `provider.apply_dsa_kernel_fusion = use_fusion` can be followed
    back to what decides it."""
    wanted = set(attributes)
    out = []
    if not wanted:
        return out
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local, hits = {}, []
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if isinstance(target, ast.Name) and len(local) < 200:
                    local.setdefault(target.id, _unparse(node.value)[:500])
                elif isinstance(target, ast.Attribute) and target.attr in wanted:
                    hits.append({"attribute": target.attr, "target": _unparse(target)[:200],
                                 "value": _unparse(node.value)[:500], "lineno": node.lineno})
        for hit in hits:
            out.append(dict(hit, function=fn.name, locals=local))
    return out[:20]


# A top-level statement starts a line with neither indentation nor a closing bracket; a cut just before one ends
# the statements above it (a comment line does not: a body may go on after one), unless the line sits inside a
# string or a bracket: then the parse fails and an earlier cut is tried, further back each time (1, 4, 16 ... lines
# of such starts), since a cut inside a long string fails at every line of it. Few tries: each parses up to the
# read limit (seconds on a loaded host for 8 MiB), so no try starts past _PREFIX_SECONDS.
_TOP_LEVEL_LINE = re.compile(rb"\n(?=[A-Za-z_@])")
_PREFIX_TRIES = 6
_PREFIX_SECONDS = 10.0


def parse_prefix(raw, path):
    """(the longest prefix of a cut-off source that ends a top-level statement and parses, its ast) or (b"", None)."""
    cuts = [m.start() + 1 for m in _TOP_LEVEL_LINE.finditer(raw)]
    tried, start = 0, time.monotonic()
    while cuts and tried < _PREFIX_TRIES and (tried == 0 or time.monotonic() - start < _PREFIX_SECONDS):
        cut = cuts.pop()
        tried += 1
        try:
            return raw[:cut], ast.parse(raw[:cut], filename=path)
        except (SyntaxError, ValueError, UnicodeDecodeError):
            # The first cut stays, and is the last try: the first top-level statements at least.
            del cuts[1 if tried == _PREFIX_TRIES - 1 else len(cuts) - min(len(cuts) - 1, (1 << (2 * tried - 2)) - 1):]
    return b"", None


def source_facts(module, needles, owners=(), attributes=()):
    where = locate_module(module)
    if not where.get("found"):
        return {"found": False, "missing": where.get("missing"), "error": where.get("error")}
    path = where.get("origin")
    if not path or not path.endswith(".py"):
        return {"found": True, "path": path, "error": "no Python source to read (%s)" % where.get("kind")}
    result = {"found": True, "path": path, "error": None}
    try:
        raw, size = read_bounded(path, SOURCE_LIMIT)
    except OSError as exc:
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
        return result
    if size > len(raw):
        # What lies past the bound is not known, so `error` stays set: a rule that needs the whole file does not
        # judge it. The definitions before the bound are still read: a signature found there is a fact.
        result["truncated"] = True
        raw, tree = parse_prefix(raw, path)
        result["read_bytes"] = len(raw)
        read = ("its first %d bytes (%d lines) were read, the rest not judged" % (len(raw), raw.count(b"\n"))
                if tree is not None else "no run of whole statements before it parsed; not judged")
        result["error"] = "source truncated: larger than the %d-byte read limit (%d bytes); %s" % (
            SOURCE_LIMIT, size, read)
        if tree is None:
            return result
    else:
        try:
            tree = ast.parse(raw, filename=path)
        except (SyntaxError, ValueError, UnicodeDecodeError) as exc:  # includes non-UTF-8 without a coding cookie
            result["error"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
            return result
        result["sha256"] = hashlib.sha256(raw).hexdigest()
    text = raw.decode("utf-8", errors="replace")
    classes, functions, names = {}, {}, []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = _class_summary(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = _params(node)
            if attributes:
                functions[node.name].update(_function_facts(node))
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    result.update(classes=classes, functions=functions, names=names,
                  contains={needle: True for needle in needles if needle in text} if result.get("truncated")
                  else {needle: needle in text for needle in needles},
                  attributes=_attribute_reads(tree, owners))
    if _GATE_NAME in text:
        result["capability"] = capability_gates(tree)
    if attributes:
        result["assignments"] = _assignments(tree, attributes)
    return result


def _requirement_name(line):
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    return normalize(m.group(1)) if m else None


def dependents(names):
    """Every installed distribution that declares a requirement on one of `names`: {dist: {version, requires}}.

    Reads every METADATA on sys.path once (a few ms per hundred distributions)."""
    wanted = set(normalize(n) for n in names)
    out = {}
    for key in _index():
        if key in wanted:
            continue
        facts = distribution_facts(key)["copies"]
        if not facts or facts[0].get("error"):
            continue
        hits = [r for r in facts[0].get("requires") or [] if _requirement_name(r) in wanted]
        if hits:
            out[facts[0]["name"]] = {"version": facts[0]["version"], "path": facts[0]["path"], "requires": hits}
    return out


def requirement_targets(names):
    """Every distribution named in the Requires-Dist of `names` (markers not evaluated): {name: version or None}."""
    out = {}
    for name in names:
        copies = distribution_facts(name)["copies"]
        if not copies or copies[0].get("error"):
            continue
        for line in copies[0].get("requires") or []:
            target = _requirement_name(line)
            if target and target not in out:
                found = distribution_facts(target)["copies"] if target in _index() else []
                out[target] = found[0].get("version") if found and not found[0].get("error") else None
    return out


def answer(request):
    out = {"python": python_facts(), "distributions": {}, "modules": {}, "sources": {}}
    names = list(request.get("distributions", []))
    prefixes = tuple(normalize(p) for p in request.get("distribution_prefixes", []))
    if prefixes:
        names += sorted(k for k in _index() if k.startswith(prefixes) and k not in {normalize(n) for n in names})
    for name in names:
        try:
            out["distributions"][name] = distribution_facts(name)
        except Exception as exc:
            out["distributions"][name] = {"error": error_info(exc)["message"]}
    for name in request.get("modules", []):
        try:
            out["modules"][name] = locate_module(name)
        except Exception as exc:
            out["modules"][name] = {"found": False, "error": error_info(exc)["message"]}
    needles = request.get("contains", [])
    owners = request.get("attributes_of", [])
    for name in request.get("sources", []):
        try:
            out["sources"][name] = source_facts(name, needles, owners, request.get("assignments_of", []))
        except Exception as exc:
            out["sources"][name] = {"found": False, "error": error_info(exc)["message"]}
    if request.get("requirements_of"):
        try:
            out["requirement_targets"] = requirement_targets(request["requirements_of"])
        except Exception as exc:
            out["requirement_targets"] = {"error": error_info(exc)["message"]}
    if request.get("dependents_of"):
        try:
            out["dependents"] = dependents(request["dependents_of"])
        except Exception as exc:
            out["dependents"] = {"error": error_info(exc)["message"]}
    return out


if __name__ == "__main__":
    serve(answer)
