"""Check discovery through the `dsv4_doctor.checks` entry-point group.

Built-in checks register through that same group (see pyproject.toml), as flake8 and pytest do with their own
plugins. An entry point may name a module (every `Check` in it, in definition order), a list of checks, a single
check, or a callable returning checks. A plugin that fails to load becomes a `PluginError`, never a crash.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Iterable

from .model import Check

GROUP = "dsv4_doctor.checks"
# Ids are a public contract (CI gates on them) and must fit the report schema.
CHECK_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)+$")


@dataclass
class PluginInfo:
    name: str  # the entry point's name
    value: str  # "module:attr"
    distribution: str
    version: str | None
    loaded: bool = False
    checks: int = 0
    error: str | None = None
    traceback: str = ""

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "distribution": self.distribution,
            "version": self.version,
            "loaded": self.loaded,
            "checks": self.checks,
            "error": self.error,
        }


@dataclass
class Registry:
    checks: list[Check]
    plugins: list[PluginInfo]

    def get(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)


def _collect(obj) -> list[Check]:
    if isinstance(obj, Check):
        return [obj]
    if isinstance(obj, ModuleType):
        return [v for v in vars(obj).values() if isinstance(v, Check)]
    if callable(obj):
        return _collect(list(obj()))
    if isinstance(obj, Iterable):
        found = []
        for item in obj:
            if not isinstance(item, Check):
                raise TypeError(f"entry point yielded {type(item).__name__}, not a Check")
            found.append(item)
        return found
    raise TypeError(f"entry point gave {type(obj).__name__}, not a module, Check or list of checks")


def _dist_name(ep: metadata.EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else ""


def _builtin(ep: metadata.EntryPoint) -> bool:
    return _dist_name(ep) == "dsv4-doctor" and ep.value.startswith("dsv4_doctor.checks.")


def _entry_points() -> list[metadata.EntryPoint]:
    eps = metadata.entry_points(group=GROUP)
    # One distribution installed twice (e.g. an editable and a regular copy) lists its entry points twice.
    unique = {}
    for ep in eps:
        unique.setdefault((ep.name, ep.value), ep)
    # Built-ins first, so a plugin that reuses a built-in id is the one reported as the duplicate.
    return sorted(unique.values(), key=lambda ep: (not _builtin(ep), _dist_name(ep), ep.name))


def load() -> Registry:
    checks: list[Check] = []
    plugins: list[PluginInfo] = []
    seen: dict[str, str] = {}
    for ep in _entry_points():
        dist = ep.dist.name if ep.dist is not None else "unknown"
        info = PluginInfo(name=ep.name, value=ep.value, distribution=dist,
                          version=ep.dist.version if ep.dist is not None else None)
        plugins.append(info)
        try:
            found = _collect(ep.load())
        except BaseException as exc:  # a plugin must never take the doctor down, not even with SystemExit
            info.error = f"{type(exc).__name__}: {exc}"
            info.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
            continue
        info.loaded = True
        for check in found:
            if not isinstance(check.id, str) or not CHECK_ID.match(check.id) or not str(check.title).strip():
                info.error = (info.error or "") + f"invalid check id or empty title: {check.id!r}; "
                continue
            if check.id in seen:
                info.error = (info.error or "") + f"duplicate check id {check.id!r} (already from {seen[check.id]}); "
                continue
            seen[check.id] = dist
            checks.append(dataclasses.replace(check, origin=dist))
            info.checks += 1
    # Reports list checks by id: stable across runs, plugins and installs (setuptools sorts entry points anyway).
    return Registry(checks=sorted(checks, key=lambda c: c.id), plugins=plugins)
