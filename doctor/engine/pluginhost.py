"""Third-party plugins run here, in a subprocess of the doctor's own interpreter, one per entry point.

`python -m dsv4_doctor.engine.pluginhost REQUEST_FILE EVENTS_FILE` (the request in a file of the doctor's own, as every
child's: procs.write_request) imports one entry point and either describes its checks
("describe") or runs the selected ones ("run"), writing one JSON event per line as it goes. The doctor reads the
events after the host exits or is killed at its deadline: a plugin that hangs, calls os._exit, segfaults, prints to
stdout or returns an unserialisable result costs a row of its own, never the report. Built-in checks do not come
here.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field

from ..fix.steps import Fix
from ..model.core import Check, CheckReport, Profile, Source, Status
from ..upstream.texts import MAX_FRAGMENTS, UpstreamText
from ..hostio.redact import sanitize, shorten

HOST_WORKERS = 2  # probes one plugin host runs at once

# --------------------------------------------------------------------------------------------------- host side


def _describe(check: Check) -> dict:
    return {"id": check.id, "title": check.title, "explanation": check.doc(), "applies_when": str(check.applies_when),
            "detects": str(check.detects), "sources": [s.to_dict() for s in check.sources],
            "fixes": [f.to_dict() for f in check.fixes], "texts": [t.to_dict() for t in check.texts],
            "origin": check.origin, "only_with": check.only_with,
            "per_gpu": bool(check.per_gpu), "needs": list(check.needs), "after": list(check.after)}


class _Events:
    def __init__(self, path: str):
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, event: dict) -> None:
        try:
            line = json.dumps(sanitize(event), ensure_ascii=True)
        except Exception as exc:  # sanitize leaves only JSON types; this is a last resort
            line = json.dumps({"event": "broken", "error": f"{type(exc).__name__}: {exc}"})
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()


def host_main(argv: list[str]) -> None:
    from ..probes import dsv4probe_common  # its import starts the watchdog: no host outlives the doctor

    # Whatever a plugin prints goes to the log, never to a stream the doctor reads.
    os.dup2(2, 1)
    try:
        request = dsv4probe_common.read_request(argv[0])
    except dsv4probe_common.RequestUnreadable as exc:  # one line in the host's log, which the doctor shows
        sys.stderr.write(f"dsv4-doctor plugin host: {exc}\n")
        sys.stderr.flush()
        os._exit(3)
    events = _Events(argv[1])
    from .registry import PluginInfo, load_entry_point

    info = PluginInfo(**request["plugin"])
    events.write({"event": "loading"})
    checks = load_entry_point(info)
    events.write({"event": "described", "plugin": info.to_dict(), "traceback": info.traceback,
                  "checks": [_describe(c) for c in checks]})
    if request["mode"] != "run":
        os._exit(0)
    selected = [c for c in checks if c.id in set(request["selected"])]
    if not selected:
        os._exit(0)
    from .probes import StaticRequest, static_probe_for
    from ..hostio.procs import Processes
    from .runner import ProbePool, RunContext, Runner

    profile = Profile(**{k: v for k, v in request["profile"].items() if k in Profile.__dataclass_fields__})
    procs = Processes(on_spawn=lambda pid: events.write({"event": "spawned", "pid": pid}),
                      on_tempdir=lambda path: events.write({"event": "tempdir", "path": path}))
    # CLOCK_MONOTONIC is one clock for every process on the machine: the doctor's deadline, as is.
    deadline = float(request["deadline"])
    pool = ProbePool(request["python"], float(request["timeout_s"]), HOST_WORKERS, procs)
    pool.deadline = deadline
    static = static_probe_for(StaticRequest.merge(c.static for c in selected), float(request["timeout_s"]))
    ctx = RunContext(profile=profile, python=request["python"], pool=pool, static_probe=static,
                     gpu_list=request.get("gpus") or [])

    def on_event(kind: str, check_id: str, detail: str | None = None) -> None:
        # start, stage and done are short lines the doctor reads while the host runs (plugins.HostWatch: the live
        # display); the result, which may be large, is read once the host has ended.
        if kind == "start":
            events.write({"event": "start", "check": check_id})
        elif kind == "stage":
            events.write({"event": "stage", "check": check_id, "stage": detail})
        elif kind == "done":
            events.write({"event": "result", "report": ctx.outcomes[check_id].to_dict()})
            events.write({"event": "done", "check": check_id})

    runner = Runner(selected, ctx, deadline, on_event)
    runner.begin()
    runner.wait()
    procs.close()
    events.write({"event": "finished"})
    os._exit(0)


# --------------------------------------------------------------------------------------------------- doctor side


@dataclass
class HostAnswer:
    plugin: dict | None = None
    traceback: str = ""
    checks: list[dict] = field(default_factory=list)  # descriptions
    results: dict[str, dict] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    spawned: list[int] = field(default_factory=list)  # the host's probes, for the doctor to kill
    tempdirs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # events that could not be read


def read_events(path: str) -> HostAnswer:
    """The host's events; a line that is not a well-formed event is recorded as a problem, never raised."""
    answer = HostAnswer()
    from ..hostio.safeio import decode_json, read_bounded

    raw = read_bounded(path, 64 * 1024 * 1024)  # a regular file only, never blocking
    if raw is None:
        return answer
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            event = sanitize(decode_json(line))  # ReadRefused for a line that is not JSON or nests too deep
            if not isinstance(event, dict):
                raise ValueError("not an object")
            _take(answer, event)
        except Exception as exc:  # includes RecursionError from a deeply nested line
            if len(answer.problems) < 5:
                answer.problems.append(f"an unreadable event ({type(exc).__name__}: {shorten(str(exc), 200)})")
    return answer


def _take(answer: HostAnswer, event: dict) -> None:
    kind = event.get("event")
    if kind == "described":
        plugin = event.get("plugin")
        if not isinstance(plugin, dict):
            raise ValueError("a description without its plugin")
        error = plugin.get("error")
        answer.plugin = {"loaded": plugin.get("loaded") is True, "error": None if error is None else str(error)}
        answer.traceback = str(event.get("traceback") or "")
        answer.checks = [c for c in event.get("checks") or [] if isinstance(c, dict)]
    elif kind == "start":
        answer.started.append(str(event.get("check")))
    elif kind == "result" and isinstance(event.get("report"), dict):
        answer.results[str(event["report"].get("id"))] = event["report"]
    elif kind == "spawned" and isinstance(event.get("pid"), int) and event["pid"] > 1:
        answer.spawned.append(event["pid"])
    elif kind == "tempdir" and isinstance(event.get("path"), str):
        answer.tempdirs.append(event["path"])


def plugin_fix(data: dict, distribution: str) -> Fix:
    """A plugin's fix as the doctor keeps it: its key namespaced (`plugin:<distribution>:<key>`), so that it can
    never collide with a built-in fix's key and take over that step of a plan (plans de-duplicate on keys).
    Raises ValueError on anything odd."""
    fix = Fix.from_dict(data)
    return Fix(fix.description, fix.commands, key=f"plugin:{distribution}:{fix.key}", phase=fix.phase,
               manual=fix.manual, notes=fix.notes)


def describe_check(meta: dict, distribution: str) -> Check:
    """A plugin check as the doctor knows it: metadata only, validated; it never runs in the doctor's process.
    Raises ValueError for an id or title the report could not carry."""
    from .registry import CHECK_ID

    check_id, title = meta.get("id"), meta.get("title")
    if not isinstance(check_id, str) or not CHECK_ID.match(check_id):
        raise ValueError(f"invalid check id {check_id!r}")
    if not isinstance(title, str) or not title.strip():
        raise ValueError(f"empty title for {check_id!r}")

    def not_here(ctx):  # pragma: no cover - plugin checks run in their host
        raise RuntimeError("plugin checks run in the plugin host")

    fixes = []
    for f in meta.get("fixes") or []:
        try:
            fixes.append(plugin_fix(f, distribution))
        except Exception:
            continue
    sources = tuple(Source(str(s.get("title") or "?"), str(s.get("url") or "")) for s in meta.get("sources") or []
                    if isinstance(s, dict))
    texts = []
    for t in (meta.get("texts") or [])[:200] if isinstance(meta.get("texts"), list) else []:
        try:  # a text is data: it is rebuilt (and bounded) here, whatever the host sent
            src = t.get("source") or {}
            match = t.get("match") if isinstance(t.get("match"), list) else []
            texts.append(UpstreamText(str(t["id"]), str(t["text"]), Source(shorten(str(src.get("title") or "?"), 300),
                                      shorten(str(src.get("url") or ""), 500)), str(t["kind"]),
                                      match=tuple(str(m) for m in match[:MAX_FRAGMENTS + 1])))
        except Exception:
            continue
    if len({t.id for t in texts}) != len(texts):
        texts = []

    def ids(key: str) -> tuple[str, ...]:
        value = meta.get(key)
        return tuple(shorten(str(v), 300) for v in value[:100]) if isinstance(value, list) else ()

    return Check(id=check_id, title=title, explanation=str(meta.get("explanation") or ""),
                 applies_when=str(meta.get("applies_when") or ""), detects=str(meta.get("detects") or ""),
                 run=not_here, sources=sources, texts=tuple(texts), fixes=tuple(fixes), origin=distribution,
                 only_with=meta.get("only_with") if meta.get("only_with") in ("job", "fleet") else None,
                 per_gpu=meta.get("per_gpu") is True, needs=ids("needs"), after=ids("after"))


def report_from(data: dict, check: Check) -> CheckReport:
    """A result that crossed from a plugin host; anything malformed is the plugin's bug (an internal error)."""
    try:
        status = Status(data.get("status"))
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError("a result needs a one-line summary")
        details: str = data["details"] if isinstance(data.get("details"), str) else ""
        evidence: dict = data["evidence"] if isinstance(data.get("evidence"), dict) else {}
        fixes = [plugin_fix(f, check.origin) for f in data.get("fixes") or []]  # anything odd raises: its bug
        duration: float = data["duration_s"] if isinstance(data.get("duration_s"), (int, float)) else 0.0
        return CheckReport(id=check.id, title=check.title, status=status, summary=summary, details=details,
                           evidence=evidence, fixes=fixes, sources=list(check.sources), duration_s=float(duration),
                           origin=check.origin, internal_error=bool(data.get("internal_error")))
    except Exception as exc:
        return CheckReport(id=check.id, title=check.title, status=Status.ERROR,
                           summary=f"the plugin's result could not be read: {type(exc).__name__}: {exc}",
                           sources=list(check.sources), origin=check.origin, internal_error=True)


if __name__ == "__main__":
    host_main(sys.argv[1:])
