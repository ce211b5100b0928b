"""Small helpers checks share for reading probe answers: versions, requirements, import outcomes."""

from __future__ import annotations

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


def version(text: str | None) -> Version | None:
    """A PEP 440 version, or None. NVIDIA builds such as 2.5.0a0+nv24.10 and 2.9.0+abc parse fine."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def at_least(text: str | None, minimum: str) -> bool | None:
    """Plain Version ordering, as Megatron's is_te_min_version uses: 2.9.0+abc >= 2.9.0, 2.9.0.dev0 < 2.9.0."""
    v = version(text)
    return None if v is None else v >= Version(minimum)


def extra_requirements(dist: dict | None, extra: str) -> list:
    """Requirements a distribution declares for `extra` (from its METADATA Requires-Dist)."""
    from packaging.requirements import InvalidRequirement, Requirement  # 15 ms: only when a check needs it

    out = []
    for line in (dist or {}).get("requires", []) or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and req.marker.evaluate({"extra": extra}) and \
                not req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def canonical(name: str) -> str:
    return canonicalize_name(name)


def outcome(answer: dict, target: str) -> dict:
    """One target's result from an import probe answer."""
    for r in answer.get("results", []):
        if r.get("target") == target:
            return r
    return {"target": target, "ok": False, "error": {"type": "Missing", "message": "not probed"}}


def error_text(result: dict) -> str:
    err = result.get("error") or {}
    return f"{err.get('type', 'Error')}: {err.get('message', '')}".strip()
