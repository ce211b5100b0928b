"""Check discovery through the `dsv4_doctor.checks` entry-point group.

Built-in checks register through that same group (see pyproject.toml), as flake8 and pytest do with their own
plugins. Entry points are listed from metadata without importing anything; the built-ins are then imported here,
while third-party plugins are only ever imported inside a plugin host subprocess (`pluginhost`), so a plugin that
hangs, exits or crashes at import cannot take the doctor down.

What an entry point names (plugin API 2): a module with a `CHECKS` list, a list of checks, a single check, or a
callable returning checks. API 1 (a module whose every `Check` attribute is a check) still works; the same Check
object reached twice is registered once.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import sys
import traceback
from dataclasses import dataclass
from types import ModuleType
from collections.abc import Container, Iterable, Sequence

from ..model.core import Check, Interrupted
from ..upstream.texts import UpstreamText
from ..hostio.redact import cut_tail

GROUP = "dsv4_doctor.checks"
# Ids are a public contract (CI gates on them) and must fit the report schema.
CHECK_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}(\.[a-z0-9][a-z0-9_-]{0,63}){1,4}$")


@dataclass
class PluginInfo:
    name: str  # the entry point's name
    value: str  # "module:attr"
    distribution: str
    version: str | None
    builtin: bool = False
    loaded: bool = False
    checks: int = 0
    error: str | None = None
    traceback: str = ""
    # A third-party check that breaks a rule built-ins must keep (see `rule_problems`): it still loads.
    warnings: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "distribution": self.distribution, "version": self.version,
                "loaded": self.loaded, "checks": self.checks, "error": self.error}

    @property
    def row_id(self) -> str:
        return plugin_row_id(self.name)


def plugin_row_id(name: str) -> str:
    """The id of the row a plugin that failed to load gets: `plugin.<name>`, made a valid id."""
    return "plugin." + (re.sub(r"[^a-z0-9_-]+", "-", str(name).lower()).strip("-_")[:60] or "unnamed")


def collect(obj) -> list[Check]:
    """The checks an entry point's object stands for (see the module docstring)."""
    if isinstance(obj, Check):
        return [obj]
    if isinstance(obj, ModuleType):
        declared = getattr(obj, "CHECKS", None)
        if declared is not None:
            return collect(list(declared))
        # Plugin API 1: the module's Check objects, except built-ins it imported (`from dsv4_doctor.checks.python_checks
        # import python_version` is a use, not a registration: it was a "duplicate check id").
        return [v for v in vars(obj).values() if isinstance(v, Check)
                and not str(getattr(v.run, "__module__", "")).startswith("dsv4_doctor.checks")]
    if callable(obj):
        return collect(list(obj()))
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes)):
        found = []
        for item in obj:
            if not isinstance(item, Check):
                raise TypeError(f"entry point yielded {type(item).__name__}, not a Check")
            found.append(item)
        return found
    raise TypeError(f"entry point gave {type(obj).__name__}, not a module, Check or list of checks")


def _group_entries(text: str) -> list[tuple[str, str]]:
    """The `name = value` lines of our group in an entry_points.txt (an INI file)."""
    out, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            inside = line == f"[{GROUP}]"
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            out.append((name.strip(), value.strip()))
    return out


MAX_FILE = 1 << 20  # what the registry reads of one metadata file: headers, entry points


def _read_regular(path: str) -> str | None:
    """A regular file's first MiB as text, or None: never a FIFO, a device or an unbounded read."""
    from ..hostio.procs import read_bounded

    raw = read_bounded(path, MAX_FILE)
    return None if raw is None else raw.decode("utf-8", "replace")


def _dist_of(folder: str) -> tuple[str, str | None]:
    """(name, version) of a .dist-info/.egg-info folder, read from its METADATA (or PKG-INFO) headers."""
    name, version = os.path.basename(folder).rsplit(".", 1)[0].split("-")[0], None
    for meta in ("METADATA", "PKG-INFO"):
        text = _read_regular(os.path.join(folder, meta))
        if text is None:
            continue
        for line in text.split("\n\n", 1)[0].splitlines():
            key, _, value = line.partition(":")
            if key == "Name":
                name = value.strip()[:200]
            elif key == "Version":
                version = value.strip()[:200]
        break
    return name, version


_BUILTIN_VALUE = re.compile(r"dsv4_doctor\.checks(?:\.([a-z_]+))?")


def builtin_dir() -> str:
    """Where this installation's dsv4_doctor.checks lives (an editable install maps it outside the package)."""
    spec = importlib.util.find_spec("dsv4_doctor.checks")  # imports dsv4_doctor (loaded already), not the checks
    locations = list(spec.submodule_search_locations or []) if spec else []
    return os.path.realpath(locations[0]) if locations else ""


def is_builtin(value: str) -> bool:
    """A built-in is an entry point naming one of this installation's own check modules, module only (no attribute
    chain): whatever a distribution's metadata calls itself, nothing else is imported into the doctor's process."""
    m = _BUILTIN_VALUE.fullmatch(value.strip())
    if not m:
        return False
    name, here = m.group(1) or "", builtin_dir()
    if not name:
        return bool(here) and os.path.isfile(os.path.join(here, "__init__.py"))
    return bool(here) and (os.path.isfile(os.path.join(here, name + ".py")) or
                           os.path.isfile(os.path.join(here, name, "__init__.py")))


def entry_points(path: list[str] | None = None) -> list[PluginInfo]:
    """Every entry point of the group, from the entry_points.txt files on sys.path (nothing is imported).

    importlib.metadata does the same, at several times the cost (it parses every distribution's METADATA)."""
    unique: dict[tuple[str, str], PluginInfo] = {}
    for directory in path if path is not None else sys.path:
        try:
            entries = sorted(e.name for e in os.scandir(directory or ".")
                             if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        for entry in entries:
            folder = os.path.join(directory or ".", entry)
            text = _read_regular(os.path.join(folder, "entry_points.txt"))
            if text is None or GROUP not in text:
                continue
            dist, version = _dist_of(folder)
            for name, value in _group_entries(text):
                # One distribution on sys.path twice (an editable and a regular copy) lists its entry points twice.
                unique.setdefault((name, value), PluginInfo(name=name[:100], value=value[:300], distribution=dist,
                                                            version=version, builtin=is_builtin(value)))
    # Built-ins first, so a plugin that reuses a built-in id is the one reported as the duplicate.
    return sorted(unique.values(), key=lambda p: (not p.builtin, p.distribution, p.name))


def validate_check(check: Check) -> str | None:
    if not isinstance(check.id, str) or not CHECK_ID.match(check.id):
        return f"invalid check id {check.id!r}"
    if not isinstance(check.title, str) or not check.title.strip():
        return f"empty title for {check.id!r}"
    texts = check.texts if isinstance(check.texts, tuple) else ()
    if len(texts) != len(check.texts) or not all(isinstance(t, UpstreamText) for t in texts):
        return f"{check.id!r}: texts must be a tuple of UpstreamText"
    if len({t.id for t in texts}) != len(texts):
        return f"{check.id!r} declares one upstream text id twice"
    return None


def rule_problems(check: Check, known: Container[str], area: str | None) -> list[str]:
    """The rules every check keeps, beyond a valid id and title: `needs` and `after` name checks that exist, the id
    starts with its module's area, the explanation (the docstring) is written and a source is named."""
    problems = [p for p in [validate_check(check)] if p]
    for kind in ("needs", "after"):
        for other in getattr(check, kind):
            if not isinstance(other, str) or other not in known:
                problems.append(f"{check.id!r} {kind} an unknown check id {other!r}")
    if area is not None and check.id.split(".", 1)[0] != area:
        problems.append(f"{check.id!r} is defined in the {area!r} area: its id must start with {area + '.'!r}")
    if not check.doc():
        problems.append(f"{check.id!r} has no explanation (its docstring)")
    if not check.sources:
        problems.append(f"{check.id!r} names no source")
    return problems


def _add_error(info: PluginInfo, problem: str) -> None:
    info.error = (info.error + "; " if info.error else "") + problem


def admit_builtins(info: PluginInfo, found: list[Check], seen: set[str]) -> list[Check]:
    """The built-in checks that keep every rule; each one that does not is an error on `info`, not registered."""
    known = {c.id for c in found}
    checks = []
    for check in found:
        if check.id in seen:
            _add_error(info, f"duplicate check id {check.id!r}")
            continue
        seen.add(check.id)
        # Stamped by the rulebook when it lists the check (Check.area); a built-in without one could keep no area rule.
        problems = rule_problems(check, known, check.area) if check.area else [f"{check.id!r} carries no area"]
        if problems:
            _add_error(info, "; ".join(problems))
            continue
        checks.append(check)
    return checks


def load_entry_point(info: PluginInfo) -> list[Check]:
    """Import one entry point and return its valid checks; errors are recorded on `info`, never raised."""
    try:
        module, _, attr = info.value.partition(":")
        obj = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        found = collect(obj)
    except Interrupted:
        raise  # the run's own stop signal, not the entry point's failure (otherwise: it was swallowed)
    except BaseException as exc:  # a plugin must never take the doctor down, not even with SystemExit
        info.error = f"{type(exc).__name__}: {exc}"
        info.traceback = cut_tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), 4000)
        return []
    info.loaded = True
    checks, seen = [], set()
    for check in found:
        if id(check) in seen:
            continue
        seen.add(id(check))
        problem = validate_check(check)
        if problem:
            info.error = (info.error + "; " if info.error else "") + problem
            continue
        checks.append(dataclasses.replace(check, origin=info.distribution))
    info.checks = len(checks)
    return checks


@dataclass
class Registry:
    checks: list[Check]  # built-ins, loaded in-process, sorted by id
    builtins: list[PluginInfo]
    plugins: list[PluginInfo]  # third-party entry points: loaded only in a plugin host
    # The built-in areas in report order: as the built-in entry point lists its checks, each stamped with its area.
    areas: tuple[str, ...] = ()

    def get(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)


_loaded_areas: tuple[str, ...] | None = None  # the areas of the last load(): the same built-ins in every load


def load() -> Registry:
    global _loaded_areas
    builtins, plugins, checks = [], [], []
    seen: set[str] = set()
    for info in entry_points():
        if not info.builtin:
            plugins.append(info)
            continue
        builtins.append(info)
        admitted = admit_builtins(info, load_entry_point(info), seen)
        info.checks = len(admitted)
        checks += admitted
    areas = tuple(dict.fromkeys(c.area for c in checks if c.area))
    _loaded_areas = areas
    # Reports list checks by id: stable across runs, plugins and installs.
    return Registry(checks=sorted(checks, key=lambda c: c.id), builtins=builtins, plugins=plugins, areas=areas)


def area_order() -> tuple[str, ...]:
    """The built-in areas in report order (`Registry.areas`), for a renderer: the run's own load when it made one,
    else one load (the built-in checks imported, as a run imports them)."""
    return load().areas if _loaded_areas is None else _loaded_areas


def near_misses(wanted: str, ids: Sequence[str]) -> list[str]:
    """The check ids (or groups) a mistyped one most likely meant: compared without punctuation and case, so that
    `cudnnfe` finds `cudnn-fe.*` and `cudnn-fe.version` finds `cudnn-fe.version`'s neighbours."""
    import difflib

    def bare(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    groups = sorted({i.split(".", 1)[0] for i in ids})
    names = list(ids) + [g + ".*" for g in groups]
    key = bare(wanted.rstrip("*"))
    if not key:
        return []
    by_bare: dict[str, list[str]] = {}
    for name in names:
        by_bare.setdefault(bare(name.rstrip("*")), []).append(name)
    hits = [n for b in difflib.get_close_matches(key, list(by_bare), n=4, cutoff=0.75) for n in by_bare[b]]
    hits += [n for n in names if key and bare(n).startswith(key) and n not in hits]
    return hits[:6]
