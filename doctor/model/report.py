"""The report of a run, typed: what the session produces and every renderer, the fix planner and the fleet read.

Its wire form is the versioned JSON `dsv4-doctor.report/1` (`to_dict`, `from_wire`). Fields are only ever added
within a schema version; a change that breaks consumers bumps the version (as pip inspect does). The JSON Schema
ships in dsv4_doctor/schema/.

A Report is made from the redacted and cleaned wire form (report/assemble.py), so every text a renderer reads has been
through the Redactor. The one exception is `actions`: the fixes as the checks made them, with their real commands,
which only the fix planner reads (`fix --apply` runs a command whose secret the script withholds); it is not part of
the wire form and no renderer reads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..fix.steps import Fix
from .core import CheckReport, Source, Status
from ..engine.registry import PluginInfo

# The report's types are read, never compared (eq=False): every `check` defines them, and the comparison methods
# would only cost start-up time.
SCHEMA = "dsv4-doctor.report/1"
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema" / "report-1.schema.json"


def _obj(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _number(value: Any, default: float = 0.0) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else default


def _texts(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _status(value: Any) -> Status:
    """A status from the wire; one this version does not know is an error, never a pass."""
    try:
        return Status(value)
    except ValueError:
        return Status.ERROR


@dataclass(frozen=True, eq=False)
class ShownFix:
    """A fix as a report shows it, after redaction: each command as a printable line (WITHHELD in place of one that
    held a secret, whose argv is then masked too), never a command to run."""

    description: str
    commands: tuple[str, ...] = ()
    argv: tuple[tuple[str, ...], ...] = ()
    id: str = ""
    phase: str = "pin"
    manual: bool = False
    notes: tuple[str, ...] = ()
    env: tuple[Mapping[str, str], ...] | None = None  # one mapping per command, when any command has one
    installer: str | None = None  # how its pip commands run ("pip" or "uv"), when it has any
    action: Mapping[str, str] | None = None  # what it changes where the job imports from (Fix.action)

    def to_dict(self) -> dict:
        out: dict = {"description": self.description, "commands": list(self.commands),
                     "argv": [list(a) for a in self.argv], "id": self.id, "phase": self.phase,
                     "manual": self.manual, "notes": list(self.notes)}
        if self.env is not None:
            out["env"] = [dict(e) for e in self.env]
        if self.installer is not None:
            out["installer"] = self.installer
        if self.action is not None:
            out["action"] = dict(self.action)
        return out

    @staticmethod
    def from_wire(data: Any) -> ShownFix:
        data = _obj(data)
        argv = data.get("argv")
        env = data.get("env")
        return ShownFix(
            description=_text(data.get("description")), commands=_texts(data.get("commands")),
            argv=tuple(_texts(a) for a in argv if isinstance(a, list)) if isinstance(argv, list) else (),
            id=_text(data.get("id")), phase=_text(data.get("phase"), "pin"), manual=data.get("manual") is True,
            notes=_texts(data.get("notes")),
            env=tuple({k: v for k, v in e.items() if isinstance(v, str)} for e in env if isinstance(e, dict))
            if isinstance(env, list) else None,
            installer=data["installer"] if data.get("installer") in ("pip", "uv") else None,
            action={k: v for k, v in data["action"].items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(data.get("action"), dict) and isinstance(data["action"].get("kind"), str) else None)


Row = CheckReport[ShownFix]


def row_from_wire(data: Any) -> Row:
    data = _obj(data)
    status = _status(data.get("status"))
    return CheckReport(
        id=_text(data.get("id")), title=_text(data.get("title")), status=status, summary=_text(data.get("summary")),
        details=_text(data.get("details")), evidence=_obj(data.get("evidence")),
        fixes=[ShownFix.from_wire(f) for f in data.get("fixes") or [] if isinstance(f, dict)],
        sources=[Source(_text(s.get("title")), _text(s.get("url"))) for s in data.get("sources") or []
                 if isinstance(s, dict)],
        duration_s=_number(data.get("duration_s")), origin=_text(data.get("origin"), "dsv4-doctor"),
        internal_error=data.get("internal_error") is True, accepted=_accepted(data.get("accepted"), status))


def _accepted(data: Any, status: Status) -> Mapping[str, str] | None:
    """A row's acceptance from the wire: only on a warning (a failure is never accepted), its two texts."""
    if not isinstance(data, dict) or status is not Status.WARN:
        return None
    return {"reason": _text(data.get("reason")), "from": _text(data.get("from"))}


@dataclass(frozen=True, eq=False)
class Summary:
    """The verdict: the worst status, the exit code every format shares, and how the run went."""

    status: Status
    exit_code: int
    strict: bool = False
    counts: Mapping[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    internal_errors: tuple[str, ...] = ()
    budget_s: float | None = None
    partial: str | None = None  # a fleet report that holds only part of the fleet, and why
    interrupted: str | None = None  # the signal that cut the run short (SIGINT, ...)
    critical_path: Mapping[str, Any] | None = None  # the probe that ended last: the run's long pole
    job_not_read: str | None = None  # why the job's command was not read (its settings not known), naming the word
    # The run's acceptances (engine/accept.py): each {id, reason, from, applied, status}; `applied` False is stale.
    accepted: tuple[Mapping[str, Any], ...] = ()
    # The checks that apply but the selection left out ({count, by, checks}): no "ready to train" then.
    left_out: Mapping[str, Any] | None = None

    def count(self, status: str) -> int:
        value = self.counts.get(status)
        return value if isinstance(value, int) else 0

    def to_dict(self) -> dict:
        out: dict = {"status": self.status.value, "exit_code": self.exit_code, "strict": self.strict,
                     "counts": dict(self.counts), "duration_s": self.duration_s,
                     "internal_errors": list(self.internal_errors)}
        for key in ("budget_s", "partial", "interrupted", "critical_path", "job_not_read", "left_out"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.accepted:
            out["accepted"] = [dict(a) for a in self.accepted]
        return out

    @staticmethod
    def from_wire(data: Any) -> Summary:
        data = _obj(data)
        status = _status(data.get("status"))
        code = data.get("exit_code")
        counts = _obj(data.get("counts"))
        budget = data.get("budget_s")
        return Summary(status=status, exit_code=code if isinstance(code, int) else 3, strict=data.get("strict") is True,
                       counts={k: v for k, v in counts.items() if isinstance(v, int)},
                       duration_s=_number(data.get("duration_s")), internal_errors=_texts(data.get("internal_errors")),
                       budget_s=_number(budget) if budget is not None else None,
                       partial=data["partial"] if isinstance(data.get("partial"), str) else None,
                       critical_path=_obj(data.get("critical_path")) or None,
                       interrupted=data["interrupted"] if isinstance(data.get("interrupted"), str) else None,
                       job_not_read=data["job_not_read"] if isinstance(data.get("job_not_read"), str) else None,
                       left_out=_left_out(data.get("left_out")),
                       accepted=tuple({"id": _text(a.get("id")), "reason": _text(a.get("reason")),
                                       "from": _text(a.get("from")), "applied": a.get("applied") is True,
                                       "status": _text(a.get("status"))}
                                      for a in data.get("accepted") or [] if isinstance(a, dict)))


def _left_out(data: Any) -> Mapping[str, Any] | None:
    if not isinstance(data, dict) or not isinstance(data.get("count"), int):
        return None
    return {"count": data["count"], "by": _text(data.get("by")),
            "checks": [c for c in data.get("checks") or [] if isinstance(c, str)]}


def _plugin_from_wire(data: dict) -> PluginInfo:
    version, error, checks = data.get("version"), data.get("error"), data.get("checks")
    return PluginInfo(name=_text(data.get("name")), value=_text(data.get("value")),
                      distribution=_text(data.get("distribution")),
                      version=version if isinstance(version, str) else None, loaded=data.get("loaded") is True,
                      checks=checks if isinstance(checks, int) else 0, error=error if isinstance(error, str) else None)


@dataclass(frozen=True, eq=False)
class Report:
    """One run's report (or a fleet's, merged). `profile`, `environment`, `job_settings` and `fleet` are JSON trees
    as the report shows them (the profile's job by shape); the rows are typed."""

    profile: Mapping[str, Any]
    environment: Mapping[str, Any]
    summary: Summary
    checks: tuple[Row, ...]
    plugins: tuple[PluginInfo, ...] = ()
    schema: str = SCHEMA
    doctor_version: str = __version__
    created: str = ""
    job_settings: Mapping[str, Any] | None = None
    redactions: int = 0  # how many secrets the Redactor masked
    fleet: Mapping[str, Any] | None = None  # a fleet report's own section: ranks, hosts, timings
    # The fix planner's only input besides the rows: each check's fixes as it made them (real argv and env).
    actions: Mapping[str, tuple[Fix, ...]] = field(default_factory=dict, repr=False, compare=False)
    # For the planner too: each distribution's version in the copy the job imports (canonical name -> version), so
    # that a plan never repeats an install the re-check found done. Not part of the wire form.
    installed: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code

    @property
    def target_python(self) -> Mapping[str, Any]:
        return _obj(self.environment.get("target_python"))

    @property
    def job(self) -> Mapping[str, Any] | None:
        """The training command's settings as the report shows them, when the run had one."""
        job = self.profile.get("job")
        return job if isinstance(job, dict) else None

    def row(self, check_id: str) -> Row | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def with_exit_code(self, code: int) -> Report:
        return replace(self, summary=replace(self.summary, exit_code=int(code)))

    def with_rows(self, rows: Iterable[Row], actions: Mapping[str, tuple[Fix, ...]] | None = None) -> Report:
        """The same report with these rows in place of the ones with their ids (the verdict is left as it was)."""
        by_id = {r.id: r for r in rows}
        merged_actions = dict(self.actions)
        for check_id in by_id:
            merged_actions.pop(check_id, None)
        merged_actions.update({k: v for k, v in (actions or {}).items() if k in by_id})
        return replace(self, checks=tuple(by_id.get(c.id, c) for c in self.checks), actions=merged_actions)

    def to_dict(self) -> dict:
        """The wire form, `dsv4-doctor.report/1`."""
        out: dict = {"schema": self.schema, "doctor": {"name": "dsv4-doctor", "version": self.doctor_version},
                     "created": self.created, "profile": dict(self.profile), "environment": dict(self.environment),
                     "plugins": [p.to_dict() for p in self.plugins], "summary": self.summary.to_dict(),
                     "checks": [c.to_dict() for c in self.checks]}
        if self.job_settings is not None:
            out["job_settings"] = dict(self.job_settings)
        out["redactions"] = {"count": self.redactions}
        if self.fleet is not None:
            out["fleet"] = dict(self.fleet)
        return out

    @staticmethod
    def from_wire(data: Any, actions: Mapping[str, tuple[Fix, ...]] | None = None) -> Report:
        """A report from its wire form: one the doctor redacted itself (assemble, the fleet merge) or one read back
        from a file. Whatever does not fit is left out, never a crash."""
        data = _obj(data)
        count = _obj(data.get("redactions")).get("count")
        settings, fleet = data.get("job_settings"), data.get("fleet")
        return Report(
            profile=_obj(data.get("profile")), environment=_obj(data.get("environment")),
            summary=Summary.from_wire(data.get("summary")),
            checks=tuple(row_from_wire(c) for c in data.get("checks") or [] if isinstance(c, dict)),
            plugins=tuple(_plugin_from_wire(p) for p in data.get("plugins") or [] if isinstance(p, dict)),
            schema=_text(data.get("schema"), SCHEMA), doctor_version=_text(_obj(data.get("doctor")).get("version")),
            created=_text(data.get("created")), job_settings=settings if isinstance(settings, dict) else None,
            redactions=count if isinstance(count, int) else 0, fleet=fleet if isinstance(fleet, dict) else None,
            actions=dict(actions or {}))
