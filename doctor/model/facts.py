"""Small helpers checks share for reading probe answers: versions, requirements, import outcomes."""

from __future__ import annotations

import os
import re
from typing import Any

from packaging.utils import canonicalize_name

from .located import INSTALLED_BY, STACK_MODULE_OF, copy_of
from .versions import (  # noqa: F401  (re-exported: the checks read them from facts)
    MARKER_KEYS, MAX_REQUIREMENTS, at_least, extra_requirements, parse_requirement, requirement_text, requirements,
    safe_specifier, safe_version, version)


class StaticFacts:
    """Convenience reads over the static probe's answer; a malformed answer reads as "nothing found"."""

    def __init__(self, data: dict):
        self.data = data if isinstance(data, dict) else {}

    @classmethod
    def of(cls, result: Any) -> StaticFacts:
        """The facts of a static probe's result (a ProbeResult, or None where it did not run): nothing found unless it
        answered."""
        return cls(result.data if result is not None and result.ok else {})

    def _section(self, name: str) -> dict:
        section = self.data.get(name)
        return section if isinstance(section, dict) else {}

    @property
    def python(self) -> dict:
        return self._section("python")

    @property
    def marker_env(self) -> dict:
        """PEP 508 marker values of the target interpreter, as its static probe computed them."""
        markers = self.python.get("markers")
        return {k: v for k, v in markers.items() if k in MARKER_KEYS and isinstance(v, str)} \
            if isinstance(markers, dict) else {}

    def dist_copies(self, name: str) -> list[dict]:
        """Every copy of a distribution on the target's path, first wins, with its fields type-checked (the probe's
        answer is untrusted); each carries the target's PEP 508 marker environment (`marker_env`), so that
        `requirements()` judges markers for the target."""
        entry = self._section("distributions").get(name)
        copies = entry.get("copies") if isinstance(entry, dict) else None
        env = self.marker_env
        return [_clean_copy(c, env) for c in copies if isinstance(c, dict)] if isinstance(copies, list) else []

    def dist(self, name: str) -> dict | None:
        """The copy Python would use (first on sys.path), or None when not installed."""
        copies = self.dist_copies(name)
        return copies[0] if copies else None

    def readable_dist(self, name: str) -> dict | None:
        """The first copy whose METADATA could be read (broken metadata is reported by deps.metadata)."""
        return next((c for c in self.dist_copies(name) if not c.get("error") and c.get("version")), None)

    def version(self, name: str) -> str | None:
        """The version of the copy the job imports: the first readable metadata on its path, unless the module the
        job imports (STACK_MODULE_OF) comes from another copy: an editable finder's distribution, another copy's
        (or one of INSTALLED_BY's: nvidia-cutlass-dsl-libs-core 4.8.1 in site-packages while a --target folder's
        nvidia-cutlass-dsl 4.5.2 comes first), or a checkout no metadata describes (then the version its files
        state, or None)."""
        d = self.readable_dist(name)
        v = d.get("version") if d else None
        module = STACK_MODULE_OF.get(canonical(name))
        if module and isinstance(self._section("modules").get(module), dict):
            c = self.copy(module)
            owner = c["owner"] or {}
            mine = (canonical(name), *INSTALLED_BY.get(canonical(name), ()))
            if c["found"] and owner.get("version") and d is not None and owner.get("path") != d.get("path") \
                    and canonical(str(owner.get("name") or "")) in mine:
                return owner["version"]
            if c["found"] and c["owner_not_known"]:
                return c["version"]  # which distribution installed it is not known: only what its files state
            if c["found"] and not owner and c["entry"] and c["place"] != "site" and not (
                    d and d.get("path") and os.path.realpath(os.path.dirname(str(d["path"])))
                    == os.path.realpath(c["entry"])):
                return c["version"]  # a checkout on the path: what its files state, or not known
        return v if isinstance(v, str) else None

    def distribution_names(self) -> list[str]:
        """The names the probe reported distributions under (a malformed section reads as none)."""
        return [name for name in self._section("distributions") if isinstance(name, str)]

    def unreadable(self) -> dict[str, str]:
        """Distributions whose METADATA could not be read: name -> why."""
        out = {}
        for name in self._section("distributions"):
            for c in self.dist_copies(name):
                if c.get("error"):
                    out[f"{name} ({c.get('path')})"] = str(c.get("error"))
        return out

    def truncated(self) -> dict[str, str]:
        """Distributions whose METADATA was over the read limit: its headers were read, its description not."""
        out = {}
        for name in self._section("distributions"):
            for c in self.dist_copies(name):
                if c.get("metadata_truncated") and not c.get("error"):
                    out[f"{name} ({c.get('path')})"] = str(c["metadata_truncated"])
        return out

    def installed(self) -> dict[str, dict]:
        """Every distribution the probe reported with readable metadata (those asked for and those found by prefix),
        by normalised name."""
        out = {}
        for name in self._section("distributions"):
            d = self.readable_dist(name)
            if d is not None:
                out[canonical(name)] = d
        return out

    def requirement_targets(self) -> dict[str, str | None]:
        """Installed version (or None: not installed) of every distribution the requested ones require, by
        normalised name (underscores, as the probe's index keys them)."""
        section = self._section("requirement_targets")
        return {k: (v if isinstance(v, str) else None) for k, v in section.items() if k != "error"}

    def dependents(self) -> dict[str, dict]:
        """Other installed distributions that require one of the DSv4 packages, as the static probe found them from
        their METADATA alone ({name: {version, path, requires}}: no RECORD, installer or direct_url of theirs)."""
        section = self._section("dependents")
        return {k: v for k, v in section.items() if isinstance(v, dict)}

    def module(self, name: str) -> dict:
        """Where a module is: found (bool), kind, origin, locations, missing, error; typed whatever the probe said."""
        m = self._section("modules").get(name)
        return _clean_module(m) if isinstance(m, dict) else {"found": False}

    def device_code(self, module: str) -> dict:
        """The device code in a module's shared objects (the static probe's fatbin read): found, objects (each: path,
        has_fatbin, cubins and ptx as [{arch, count}], fatbins, entries, compressed, capped, error); typed."""
        m = self._section("device_code").get(module)
        return _clean_device_code(m) if isinstance(m, dict) else {"found": False, "objects": []}

    def copy(self, module: str) -> dict:
        """The copy of `module` the job imports, typed (located.copy_of says what each field holds)."""
        return copy_of(self.module(module))

    def installer(self) -> dict:
        """What can install into the target: pip (its origin, or None), uv_venv, uv (its path on PATH), ensurepip,
        and externally_managed (PEP 668, typed by externally_managed)."""
        raw = self.python.get("installer")
        raw = raw if isinstance(raw, dict) else {}
        return {"known": bool(raw), "pip": _text_or_none(raw.get("pip")), "uv_venv": raw.get("uv_venv") is True,
                "uv": _text_or_none(raw.get("uv")), "ensurepip": raw.get("ensurepip") is True,
                "externally_managed": externally_managed(raw.get("externally_managed"))}

    def source(self, module: str) -> dict:
        """A module's ast summary: found, path, error, truncated, classes, functions, names, contains, attributes;
        typed."""
        m = self._section("sources").get(module)
        return _clean_source(m) if isinstance(m, dict) else {"found": False}


def externally_managed(raw) -> dict:
    """The static probe's PEP 668 facts, typed: marker (its path), found, in_venv, error (the distributor's message),
    unread, override (where pip's own override is set), and `enforced`: the marker is there outside a venv, so pip
    refuses a plain install (unless its override is set). `known` is False when the probe said nothing of it."""
    raw = raw if isinstance(raw, dict) else {}
    out = {"known": bool(raw), "found": raw.get("found") is True, "in_venv": raw.get("in_venv") is True}
    for key in ("marker", "error", "unread", "override"):
        out[key] = _text_or_none(raw.get(key))
    out["enforced"] = out["found"] and not out["in_venv"] and out["marker"] is not None
    return out


def _text_or_none(value):
    return value if isinstance(value, str) else None


def _texts(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _clean_module(m: dict) -> dict:
    out = dict(m, found=m.get("found") is True, locations=_texts(m.get("locations")))
    for key in ("kind", "origin", "missing", "error"):
        out[key] = _text_or_none(m.get(key))
    return out


_ARCH = re.compile(r"(sm|compute)_[0-9]{2,4}[af]?")


def _clean_archs(value) -> list[dict]:
    items = value if isinstance(value, list) else []
    return [{"arch": a["arch"], "count": a["count"] if isinstance(a.get("count"), int) else 0} for a in items[:64]
            if isinstance(a, dict) and isinstance(a.get("arch"), str) and _ARCH.fullmatch(a["arch"])]


def _clean_device_code(m: dict) -> dict:
    objects = []
    raw = m.get("objects")
    for o in (raw if isinstance(raw, list) else [])[:32]:
        if not isinstance(o, dict) or not isinstance(o.get("path"), str):
            continue
        clean = {"path": o["path"], "has_fatbin": o.get("has_fatbin") is True, "cubins": _clean_archs(o.get("cubins")),
                 "ptx": _clean_archs(o.get("ptx"))}
        for key in ("fatbins", "entries", "compressed", "size", "cubins_left_out", "ptx_left_out"):
            clean[key] = o[key] if isinstance(o.get(key), int) and not isinstance(o.get(key), bool) else None
        for key in ("capped", "error"):
            clean[key] = _text_or_none(o.get(key))
        objects.append(clean)
    return {"found": m.get("found") is True, "objects": objects, "error": _text_or_none(m.get("error")),
            "objects_left_out": m.get("objects_left_out") if isinstance(m.get("objects_left_out"), int) else None}


def _clean_params(p) -> dict:
    p = p if isinstance(p, dict) else {}
    lineno = p.get("lineno")
    return {"params": _texts(p.get("params")), "varargs": _text_or_none(p.get("varargs")),
            "varkw": _text_or_none(p.get("varkw")), "lineno": lineno if isinstance(lineno, int) else None}


def _clean_class(c) -> dict:
    c = c if isinstance(c, dict) else {}
    fields = [f for f in c.get("fields") or [] if isinstance(f, dict) and isinstance(f.get("name"), str)] \
        if isinstance(c.get("fields"), list) else []
    methods = c.get("methods")
    lineno = c.get("lineno")
    return {"bases": _texts(c.get("bases")), "decorators": _texts(c.get("decorators")),
            "fields": [{"name": f["name"], "annotation": _text_or_none(f.get("annotation")),
                        "default": _text_or_none(f.get("default")),
                        "lineno": f.get("lineno") if isinstance(f.get("lineno"), int) else None} for f in fields],
            "assigns": _texts(c.get("assigns")),
            "methods": {k: _clean_params(v) for k, v in methods.items()} if isinstance(methods, dict) else {},
            "lineno": lineno if isinstance(lineno, int) else None}


def _clean_source(m: dict) -> dict:
    out: dict = {"found": m.get("found") is True, "path": _text_or_none(m.get("path")),
                 "error": _text_or_none(m.get("error")), "missing": _text_or_none(m.get("missing")),
                 "sha256": _text_or_none(m.get("sha256")),
                 # Over the read limit: what follows is what was read before it (whole top-level statements), and
                 # `error` says so; a name absent from it is not known to be absent.
                 "truncated": m.get("truncated") is True}
    if "classes" not in m and "functions" not in m:
        return out
    classes, functions = m.get("classes"), m.get("functions")
    contains, attributes = m.get("contains"), m.get("attributes")
    out.update(
        classes={k: _clean_class(v) for k, v in classes.items()} if isinstance(classes, dict) else {},
        functions={k: _clean_params(v) for k, v in functions.items()} if isinstance(functions, dict) else {},
        names=_texts(m.get("names")),
        contains={k: v is True for k, v in contains.items()} if isinstance(contains, dict) else {},
        attributes={k: _texts(v) for k, v in attributes.items()} if isinstance(attributes, dict) else {},
    )
    if isinstance(m.get("capability"), dict):
        out["capability"] = _clean_capability(m["capability"])
    return out


def _int_or_ints(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return None


def _clean_parts(parts) -> list[dict]:
    out: list[dict] = []
    for p in parts if isinstance(parts, list) else []:
        if isinstance(p, dict):
            out.append({"text": p["text"]} if isinstance(p.get("text"), str) else
                       {"expr": p["expr"] if isinstance(p.get("expr"), str) else "?"})
    return out


def _clean_capability(c: dict) -> dict:
    """A module's compute-capability gate as the static probe read it (constants, comparisons, messages)."""
    raw_constants, raw_compares, raw_messages = c.get("constants"), c.get("compares"), c.get("messages")
    constants: dict = raw_constants if isinstance(raw_constants, dict) else {}
    compares: list = raw_compares if isinstance(raw_compares, list) else []
    messages: list = raw_messages if isinstance(raw_messages, list) else []

    def lineno(d):
        return d.get("lineno") if isinstance(d.get("lineno"), int) else None

    return {
        "constants": {k: {"value": _int_or_ints(v.get("value")), "lineno": lineno(v)}
                      for k, v in constants.items() if isinstance(k, str) and isinstance(v, dict)},
        "imported": _texts(c.get("imported")),
        "compares": [{"constant": _text_or_none(d.get("constant")), "op": _text_or_none(d.get("op")),
                      "subject": _text_or_none(d.get("subject")), "lineno": lineno(d)}
                     for d in compares if isinstance(d, dict)],
        "messages": [{"parts": _clean_parts(d.get("parts")), "lineno": lineno(d)}
                     for d in messages if isinstance(d, dict)],
    }


_COPY_TEXT = ("name", "version", "path", "requires_python", "error", "installer", "kind", "record_sha256",
              "metadata_truncated")


def _clean_copy(copy: dict, env: dict) -> dict:
    out = dict(copy)
    for key in _COPY_TEXT:
        if key in out and not isinstance(out[key], str):
            out[key] = None
    requires = out.get("requires")
    out["requires"] = [r for r in requires if isinstance(r, str)] if isinstance(requires, list) else []
    for key in ("direct_url", "entry_points"):
        if key in out and not isinstance(out[key], dict):
            out[key] = None
    out["marker_env"] = env
    return out


def canonical(name: str) -> str:
    return canonicalize_name(name)


def outcome(answer: dict, target: str) -> dict:
    """One target's result from an import probe answer, in a shape checks can index without guards: `ok` a bool,
    `error` None or a dict whose `type` and `message` are strings (a probe's answer is untrusted data)."""
    results = answer.get("results") if isinstance(answer, dict) else None
    for r in results if isinstance(results, list) else []:
        if isinstance(r, dict) and r.get("target") == target:
            return _normal_outcome(r)
    return {"target": target, "ok": False, "error": {"type": "Missing", "message": "not probed"}}


def _normal_outcome(r: dict) -> dict:
    out = dict(r)
    out["ok"] = r.get("ok") is True
    err = r.get("error")
    if err is None or err == {}:
        out["error"] = None if out["ok"] else {"type": "Error", "message": "the probe gave no error text"}
    elif isinstance(err, dict):
        out["error"] = {k: (v if isinstance(v, (str, int, float, bool, list, type(None))) else str(v))
                        for k, v in err.items()}
        for key, default in (("type", "Error"), ("message", "")):
            if not isinstance(out["error"].get(key), str):
                out["error"][key] = default if out["error"].get(key) is None else str(out["error"][key])
    else:
        out["error"] = {"type": "Error", "message": str(err)}
    return out


def error_text(result: dict) -> str:
    err = result.get("error") or {}
    if not isinstance(err, dict):
        return str(err)
    return f"{err.get('type', 'Error')}: {err.get('message', '')}".strip()
