"""Small helpers checks share for reading probe answers: versions, requirements, import outcomes."""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


class StaticFacts:
    """Convenience reads over the static probe's answer; a malformed answer reads as "nothing found"."""

    def __init__(self, data: dict):
        self.data = data if isinstance(data, dict) else {}

    def _section(self, name: str) -> dict:
        section = self.data.get(name)
        return section if isinstance(section, dict) else {}

    @property
    def python(self) -> dict:
        return self._section("python")

    def dist_copies(self, name: str) -> list[dict]:
        entry = self._section("distributions").get(name)
        copies = entry.get("copies") if isinstance(entry, dict) else None
        return [c for c in copies if isinstance(c, dict)] if isinstance(copies, list) else []

    def dist(self, name: str) -> dict | None:
        """The copy Python would use (first on sys.path), or None when not installed."""
        copies = self.dist_copies(name)
        return copies[0] if copies else None

    def readable_dist(self, name: str) -> dict | None:
        """The first copy whose METADATA could be read (broken metadata is reported by deps.metadata)."""
        return next((c for c in self.dist_copies(name) if not c.get("error") and c.get("version")), None)

    def version(self, name: str) -> str | None:
        d = self.readable_dist(name)
        v = d.get("version") if d else None
        return v if isinstance(v, str) else None

    def unreadable(self) -> dict[str, str]:
        """Distributions whose METADATA could not be read: name -> why."""
        out = {}
        for name in self._section("distributions"):
            for c in self.dist_copies(name):
                if c.get("error"):
                    out[f"{name} ({c.get('path')})"] = str(c.get("error"))
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

    def dependents(self) -> dict[str, dict]:
        """Other installed distributions that require one of the DSv4 packages (as the static probe found them)."""
        section = self._section("dependents")
        return {k: v for k, v in section.items() if isinstance(v, dict)}

    def module(self, name: str) -> dict:
        m = self._section("modules").get(name)
        return m if isinstance(m, dict) else {"found": False}

    def source(self, module: str) -> dict:
        m = self._section("sources").get(module)
        return m if isinstance(m, dict) else {"found": False}


def version(text: str | None) -> Version | None:
    """A PEP 440 version, or None. NVIDIA builds such as 2.5.0a0+nv24.10 and 2.9.0+abc parse fine."""
    if not text or not isinstance(text, str) or len(text) > 200:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def at_least(text: str | None, minimum: str) -> bool | None:
    """Plain Version ordering, as Megatron's is_te_min_version uses: 2.9.0+abc >= 2.9.0, 2.9.0.dev0 < 2.9.0."""
    v = version(text)
    return None if v is None else v >= Version(minimum)


# A version that may become part of a command: digits, dots and the usual PEP 440 suffixes, nothing else.
_SAFE_VERSION = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6}){0,4}((a|b|rc)[0-9]{1,4})?(\.post[0-9]{1,4})?(\.dev[0-9]{1,6})?")


def safe_version(text: str | None) -> str | None:
    """`text` if it is a plain public version that may be put into a fix command, else None."""
    if isinstance(text, str) and _SAFE_VERSION.fullmatch(text):
        return text
    return None


def requirements(dist: dict | None, extras: tuple[str, ...] = ()) -> list:
    """What a distribution declares (METADATA Requires-Dist) when installed with `extras`.

    Requirements under `extra == "X"` count only for the extras asked for; unconditional ones always count (frontend
    1.32.0 requires nvidia-cutlass-dsl unconditionally, 1.26/1.27 only in its `cutedsl` extra)."""
    from packaging.requirements import InvalidRequirement, Requirement  # 15 ms: only when a check needs it

    out = []
    for line in (dist or {}).get("requires", []) or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None:
            out.append(req)
            continue
        try:
            if any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                out.append(req)
        except Exception:  # a marker this environment cannot evaluate: not ours to judge
            continue
    return out


def extra_requirements(dist: dict | None, extra: str) -> list:
    """Requirements a distribution declares only for `extra`."""
    base = {str(r) for r in requirements(dist)}
    return [r for r in requirements(dist, (extra,)) if str(r) not in base]


def canonical(name: str) -> str:
    return canonicalize_name(name)


def outcome(answer: dict, target: str) -> dict:
    """One target's result from an import probe answer."""
    for r in (answer or {}).get("results", []) if isinstance(answer, dict) else []:
        if isinstance(r, dict) and r.get("target") == target:
            return r
    return {"target": target, "ok": False, "error": {"type": "Missing", "message": "not probed"}}


def error_text(result: dict) -> str:
    err = result.get("error") or {}
    if not isinstance(err, dict):
        return str(err)
    return f"{err.get('type', 'Error')}: {err.get('message', '')}".strip()
