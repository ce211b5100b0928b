"""Third-party plugins run here, in a subprocess of the doctor's own interpreter, one per entry point.

`python -m dsv4_doctor.pluginhost REQUEST_JSON EVENTS_FILE` imports one entry point and either describes its checks
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
import time
from dataclasses import dataclass, field

from .model import Check, CheckReport, Fix, Profile, Source, Status
from .redact import sanitize

# --------------------------------------------------------------------------------------------------- host side


def _describe(check: Check) -> dict:
    return {"id": check.id, "title": check.title, "explanation": check.doc(), "applies_when": str(check.applies_when),
            "detects": str(check.detects), "sources": [s.to_dict() for s in check.sources],
            "fixes": [f.to_dict() for f in check.fixes], "origin": check.origin}


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
    # Whatever a plugin prints goes to the log, never to a stream the doctor reads.
    os.dup2(2, 1)
    request = json.loads(argv[0])
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
    from .probes import StaticRequest
    from .procs import Processes
    from .runner import ProbePool, RunContext, Runner
    from .session import static_probe_for

    profile = Profile(**{k: v for k, v in request["profile"].items() if k in Profile.__dataclass_fields__})
    procs = Processes()
    deadline = time.monotonic() + float(request["budget_s"])
    pool = ProbePool(request["python"], float(request["timeout_s"]), 4, procs)
    pool.deadline = deadline
    static = static_probe_for(StaticRequest.merge(c.static for c in selected), float(request["timeout_s"]))
    ctx = RunContext(profile=profile, python=request["python"], pool=pool, static_probe=static,
                     gpu_list=request.get("gpus") or [])

    def on_event(kind: str, check_id: str) -> None:
        if kind == "start":
            events.write({"event": "start", "check": check_id})
        else:
            events.write({"event": "result", "report": ctx.outcomes[check_id].to_dict()})

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
    finished: bool = False
    exit: str = ""  # how the host ended, when it did not finish: "killed by SIGSEGV", "timed out", ...
    log_tail: str = ""


def read_events(path: str) -> HostAnswer:
    answer = HostAnswer()
    try:
        with open(path, "rb") as fh:
            raw = fh.read(64 * 1024 * 1024)
    except OSError:
        return answer
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if not isinstance(event, dict):
            continue
        kind = event.get("event")
        if kind == "described" and isinstance(event.get("plugin"), dict):
            answer.plugin = event["plugin"]
            answer.traceback = str(event.get("traceback") or "")
            answer.checks = [c for c in event.get("checks") or [] if isinstance(c, dict)]
        elif kind == "start":
            answer.started.append(str(event.get("check")))
        elif kind == "result" and isinstance(event.get("report"), dict):
            answer.results[str(event["report"].get("id"))] = event["report"]
        elif kind == "finished":
            answer.finished = True
    return answer


def describe_check(meta: dict, distribution: str) -> Check:
    """A plugin check as the doctor knows it: metadata only; it never runs in the doctor's process."""
    def not_here(ctx):  # pragma: no cover - plugin checks run in their host
        raise RuntimeError("plugin checks run in the plugin host")

    fixes = []
    for f in meta.get("fixes") or []:
        try:
            fixes.append(Fix.from_dict(f))
        except (ValueError, TypeError):
            continue
    sources = tuple(Source(str(s.get("title") or "?"), str(s.get("url") or "")) for s in meta.get("sources") or []
                    if isinstance(s, dict))
    return Check(id=str(meta.get("id")), title=str(meta.get("title") or "?"),
                 explanation=str(meta.get("explanation") or ""), applies_when=str(meta.get("applies_when") or ""),
                 detects=str(meta.get("detects") or ""), run=not_here, sources=sources, fixes=tuple(fixes),
                 origin=distribution)


def report_from(data: dict, check: Check) -> CheckReport:
    """A result that crossed from a plugin host; anything malformed is the plugin's bug (an internal error)."""
    try:
        status = Status(data.get("status"))
        summary = data.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError("a result needs a one-line summary")
        details: str = data["details"] if isinstance(data.get("details"), str) else ""
        evidence: dict = data["evidence"] if isinstance(data.get("evidence"), dict) else {}
        fixes = [Fix.from_dict(f) for f in data.get("fixes") or []]
        duration: float = data["duration_s"] if isinstance(data.get("duration_s"), (int, float)) else 0.0
        return CheckReport(id=check.id, title=check.title, status=status, summary=summary, details=details,
                           evidence=evidence, fixes=fixes, sources=list(check.sources), duration_s=float(duration),
                           origin=check.origin, internal_error=bool(data.get("internal_error")))
    except (ValueError, TypeError, KeyError) as exc:
        return CheckReport(id=check.id, title=check.title, status=Status.ERROR,
                           summary=f"the plugin's result could not be read: {type(exc).__name__}: {exc}",
                           sources=list(check.sources), origin=check.origin, internal_error=True)


if __name__ == "__main__":
    host_main(sys.argv[1:])
