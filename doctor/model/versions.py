"""Versions and requirements read from probe answers: PEP 440 versions, specifiers and Requires-Dist lines, parsed
defensively (every text here came from an inspected environment)."""

from __future__ import annotations

import functools
import re
from typing import Any

from packaging.version import InvalidVersion, Version

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


_SAFE_SPECIFIER = re.compile(r"(?:==|!=|<=|>=|~=|<|>)[0-9][0-9A-Za-z.*+!_-]{0,40}"
                             r"(?:,(?:==|!=|<=|>=|~=|<|>)[0-9][0-9A-Za-z.*+!_-]{0,40}){0,5}")


def safe_specifier(text: str | None) -> str | None:
    """`text` if it is a plain version specifier (`>=4.8.0`, `~=13.4.4,<14`) that may go into a fix command: no
    `===` (which takes any text), no shell characters. Else None."""
    if isinstance(text, str) and _SAFE_SPECIFIER.fullmatch(text.replace(" ", "")):
        return text.replace(" ", "")
    return None


def safe_version(text: str | None) -> str | None:
    """`text` if it is a plain public version that may be put into a fix command, else None."""
    if isinstance(text, str) and _SAFE_VERSION.fullmatch(text):
        return text
    return None


MAX_REQUIREMENTS = 2000  # Requires-Dist lines read per distribution (a real one has well under 200)
MARKER_KEYS = ("implementation_name", "implementation_version", "os_name", "platform_machine", "platform_release",
               "platform_system", "platform_version", "python_full_version", "platform_python_implementation",
               "python_version", "sys_platform")


def requirement_text(req) -> str:
    """A requirement as people read it, without its environment marker: `nvidia-cutlass-dsl[cu13]>=4.5.0`."""
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras}{req.specifier}"


def parse_requirement(line) -> Any:
    """A Requires-Dist line as a packaging Requirement, or None (not text, too long, or invalid); cached, since
    every check that reads a distribution's requirements parses the same lines."""
    return _requirement(line) if isinstance(line, str) and len(line) <= 4096 else None


@functools.lru_cache(maxsize=4096)
def _requirement(line: str):
    from packaging.requirements import InvalidRequirement, Requirement  # 15 ms: only when a check needs it

    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def requirements(dist: dict | None, extras: tuple[str, ...] = ()) -> list:
    """What a distribution declares (METADATA Requires-Dist) when installed with `extras`.

    Requirements under `extra == "X"` count only for the extras asked for; unconditional ones always count (frontend
    1.32.0 requires nvidia-cutlass-dsl unconditionally, 1.26/1.27 only in its `cutedsl` extra). Markers are evaluated
    for the target interpreter (`marker_env`, which StaticFacts puts on every copy it hands out), not for the
    doctor's own: `python_version >= "3.12"` must hold on the target."""
    out = []
    dist = dist if isinstance(dist, dict) else {}
    lines = dist.get("requires")
    target = dist.get("marker_env")
    env = {k: v for k, v in target.items() if k in MARKER_KEYS and isinstance(v, str)} \
        if isinstance(target, dict) else {}
    for line in lines[:MAX_REQUIREMENTS] if isinstance(lines, list) else []:
        req = parse_requirement(line)
        if req is None:
            continue
        if req.marker is None:
            out.append(req)
            continue
        try:
            if any(req.marker.evaluate(dict(env, extra=e)) for e in ("", *extras)):
                out.append(req)
        except Exception:  # a marker this environment cannot evaluate: not ours to judge
            continue
    return out


def extra_requirements(dist: dict | None, extra: str) -> list:
    """Requirements a distribution declares only for `extra`."""
    base = {str(r) for r in requirements(dist)}
    return [r for r in requirements(dist, (extra,)) if str(r) not in base]
