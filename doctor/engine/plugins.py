"""The doctor's side of the plugin hosts: a third-party plugin is imported, described and run in a host process of
its own (engine/pluginhost.py), so that a plugin that hangs, crashes or prints cannot take the run with it.

The hosts start within the session's process tracking and within the probes' concurrency limit: a host holds one of
the probe pool's slots from its start to its end, so probes and hosts together never run more than `workers()`
children at once. Each host starts from a thread of its own as soon as a slot is free; ending one kills its group and
whatever probes it started, and frees its slot.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from ..model.core import Check, CheckReport, Profile, Status
from ..hostio.procs import REQUEST_FILE, Helper, Processes, read_bounded_at, start_helper, write_request
from ..hostio.redact import read_tail
from .registry import PluginInfo, Registry
from ..hostio.safeio import ReadRefused, decode_json
from ..hostio.signals import GATE

DESCRIBE_BUDGET_S = 30.0  # third-party plugins: import and describe, all at once
MARGIN_S = 5.0
NO_SLOT = "never started: no probe slot came free in time"


def log_tail(path: str) -> str:
    return read_tail(path, 3000).strip()  # a cut first line is dropped: it may end a secret


class Host:
    """One plugin host: its files, and its process once a slot let it start (`ready` is set when it started or
    gave up)."""

    def __init__(self, info: PluginInfo, events: str, log: str, checks: Sequence[Check] = ()) -> None:
        self.info, self.events, self.log, self.checks = info, events, log, list(checks)
        self.helper: Helper | None = None
        self.not_started: str | None = None  # why it never started
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False  # its end came before its start: it must not start any more
        self.holds_slot = False


class PluginHosts:
    """Every plugin host of one session: describe them all at load, run the selected plugin checks beside the
    built-ins, collect what they answered."""

    def __init__(self, procs: Processes, python: str, timeout: float, gpus: Callable[[], list[dict]],
                 slots: threading.BoundedSemaphore) -> None:
        self.procs, self.python, self.timeout, self.gpus = procs, python, timeout, gpus
        self.slots = slots  # the probe pool's: a host counts as one probe while it runs
        self.registry: Registry | None = None
        self.plugin_checks: dict[str, list[Check]] = {}  # entry point name -> its described checks

    def _host(self, info: PluginInfo, mode: str, extra: dict, budget_s: float, deadline: float,
              checks: Sequence[Check] = ()) -> Host:
        """One plugin host, started from a thread of its own once a slot is free (or never, when none is before
        `deadline`)."""
        tmp = self.procs.tempdir("dsv4-doctor-plugin-")
        host = Host(info, os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "host.log"), checks)
        fields = {k: getattr(info, k) for k in ("name", "value", "distribution", "version")}
        # The request goes in a file, as every child's does (procs.write_request): hundreds of selected plugin check
        # ids overflow one argv string, and the profile holds the job's settings.
        request_path = write_request(os.path.join(tmp, REQUEST_FILE), dict(extra, mode=mode, plugin=fields))
        from .probes import child_env

        argv = [sys.executable, "-m", "dsv4_doctor.engine.pluginhost", request_path, host.events]
        threading.Thread(target=self._start, args=(host, argv, child_env(budget_s), deadline), daemon=True,
                         name=f"plugin-host-{info.name[:40]}").start()
        return host

    def _start(self, host: Host, argv: list[str], env: dict, deadline: float) -> None:
        try:
            while not self.slots.acquire(timeout=max(0.0, min(0.25, deadline - time.monotonic()))):
                if host.abandoned or time.monotonic() >= deadline:
                    host.not_started = NO_SLOT
                    return
            with host.lock:
                if host.abandoned:
                    self.slots.release()
                    return
                host.holds_slot = True
            try:
                host.helper = start_helper(self.procs, argv, host.log, env)
            except (OSError, RuntimeError) as exc:  # RuntimeError: the session is shutting down
                host.not_started = f"could not start ({exc})"
                self._release(host)
        finally:
            host.ready.set()
        if host.helper is not None:
            # The slot is free as soon as the host has exited, not when the caller gets round to this host: the
            # caller waits for the hosts in their order, and a host that got its slot first would otherwise keep it
            # while an earlier one waits for a slot (with one slot: every other host until the deadline).
            with contextlib.suppress(Exception):
                host.helper.proc.wait()
            self._release(host)

    def _release(self, host: Host) -> None:
        with host.lock:
            if host.holds_slot:
                host.holds_slot = False
                self.slots.release()

    def _end_host(self, host: Host, deadline: float):
        """Wait for a host until the deadline, kill it and whatever it started, free its slot; (its events, how it
        ended, its log)."""
        from .pluginhost import HostAnswer, read_events
        from ..hostio.procs import kill_orphan_group, remove_tempdir

        GATE.wait(host.ready.wait, deadline)  # a stop signal ends it (signals.GATE.wait)
        with host.lock:
            if not host.ready.is_set():
                host.abandoned = True
                host.not_started = NO_SLOT
        if host.helper is None:
            return HostAnswer(), host.not_started or NO_SLOT, ""
        try:
            end = host.helper.finish(deadline)
        finally:
            self._release(host)
        if end.stopped:
            how = f"was stopped on {end.stopped}"
        elif end.timed_out or end.returncode is None:
            how = "did not finish in time and was killed"
        elif end.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-end.returncode).name}"
            except ValueError:
                how = "did not finish in time and was killed"
        elif time.monotonic() >= deadline - 0.5:
            # The host ends itself at the run's deadline: a check still running then ran out of time, not "the
            # plugin host exited while this check ran".
            how = "stopped at the run's deadline"
        else:
            how = "" if end.returncode == 0 else f"exited with code {end.returncode}"
        answer = read_events(host.events)
        for pid in answer.spawned:  # a killed host cannot clean up its probes: the doctor does
            kill_orphan_group(pid)
        for path in answer.tempdirs:
            remove_tempdir(path)
        return answer, how, log_tail(host.log)

    def describe(self, registry: Registry) -> None:
        """Every third-party plugin of `registry` imported and described, each in its host, all at once; a plugin
        that failed records why on its PluginInfo."""
        from .pluginhost import describe_check

        self.registry = registry
        deadline = time.monotonic() + min(DESCRIBE_BUDGET_S, self.timeout)
        started = [self._host(info, "describe", {"deadline": deadline}, DESCRIBE_BUDGET_S, deadline)
                   for info in self.registry.plugins]
        taken = {c.id: "dsv4-doctor" for c in self.registry.checks}
        for host in started:
            info = host.info
            answer, how, log = self._end_host(host, deadline)
            problems = list(answer.problems)
            if answer.plugin is None:
                ended = how if host.helper is None else f"{how or 'exited'} before the plugin loaded"
                info.error = "; ".join([f"the plugin host {ended}", *problems])
                info.traceback = log
                continue
            info.loaded = bool(answer.plugin.get("loaded"))
            info.traceback = answer.traceback or log
            checks = []
            for meta in answer.checks:
                try:
                    check = describe_check(meta, info.distribution)
                except ValueError as exc:
                    problems.append(str(exc))
                    continue
                if check.id in taken:
                    problems.append(f"duplicate check id {check.id!r} (already from {taken[check.id]})")
                    continue
                taken[check.id] = info.distribution
                checks.append(check)
            info.error = "; ".join(x for x in [answer.plugin.get("error"), *problems] if x) or None
            info.checks = len(checks)
            self.plugin_checks[info.name] = checks
        # A plugin check may build on a built-in or on another plugin's check; the rules are warnings here.
        from .registry import rule_problems

        for info in self.registry.plugins:
            for check in self.plugin_checks.get(info.name, []):
                info.warnings += rule_problems(check, taken, None)

    def runs_for(self, ids: set[str]) -> list[str]:
        """The plugins (entry point names) whose hosts a run of these check ids starts."""
        return [name for name, checks in self.plugin_checks.items() if any(c.id in ids for c in checks)]

    def start_runs(self, profile: Profile, ids: set[str], deadline: float) -> list[Host]:
        if not ids:
            return []
        hosts = []
        request = {"profile": profile.to_dict(), "python": self.python, "timeout_s": self.timeout,
                   "deadline": deadline - MARGIN_S, "gpus": self.gpus()}
        for name in self.runs_for(ids):
            mine = [c for c in self.plugin_checks[name] if c.id in ids]
            assert self.registry is not None
            info = next(p for p in self.registry.plugins if p.name == name)
            hosts.append(self._host(info, "run", dict(request, selected=[c.id for c in mine]),
                                    max(1.0, deadline - time.monotonic()), deadline, mine))
        return hosts

    def collect(self, hosts: list[Host], deadline: float, unfinished: str | None = None) -> list[CheckReport]:
        from .pluginhost import report_from

        out = []
        for host in hosts:
            info = host.info
            answer, how, log = self._end_host(host, deadline)
            running = [i for i in answer.started if i not in answer.results]
            for check in host.checks:
                if check.id in answer.results:
                    out.append(report_from(answer.results[check.id], check))
                    continue
                if unfinished:
                    why = unfinished
                elif check.id in running:
                    why = f"the plugin host {how or 'exited'} while this check ran"
                elif host.helper is None:
                    why = f"not run: the plugin host {how}"
                elif answer.plugin is None:
                    why = f"the plugin host {how or 'exited'} before the plugin loaded"
                else:
                    why = f"not run: the plugin host {how or 'exited'} before this check started"
                out.append(CheckReport(id=check.id, title=check.title, status=Status.ERROR, summary=why,
                                       details=log, evidence={"plugin": info.name, "distribution": info.distribution,
                                                              "host": how or "exited", "events": answer.problems},
                                       sources=list(check.sources), origin=check.origin,
                                       internal_error=unfinished is None))
        return out


WATCH_INTERVAL_S = 0.25  # how often a live display's plugin hosts' events are read (the runner's STAGE_POLL_S)
EVENT_LINE_BYTES = 1024  # a start, stage or done event is shorter; a longer line (a result) is skipped unread
WATCH_READ_BYTES = 64 * 1024  # what one read of a host's events takes at most


class _EventTail:
    """A running plugin host's events file, read as it grows: the start, stage and done events of the checks the
    host was asked to run, each once and in order (a stage or done only after that check's start). Anything else,
    and any line too long to be one of these, is skipped; every read is bounded."""

    def __init__(self, path: str, ids: set[str]) -> None:
        self.path, self.ids = path, ids
        self.offset = 0
        self.partial: bytes | None = b""  # None: inside a line too long to be one of these events
        self.started: set[str] = set()
        self.done: set[str] = set()

    def _chunk(self) -> bytes:
        chunk = read_bounded_at(self.path, self.offset, WATCH_READ_BYTES)
        self.offset += len(chunk)
        return chunk

    def read(self) -> list[tuple[str, str, str | None]]:
        lines = self._chunk().split(b"\n")
        if self.partial is None:
            if len(lines) == 1:
                return []
            lines[0], self.partial = b"", b""
        lines[0] = self.partial + lines[0]
        rest = lines.pop()
        self.partial = rest if len(rest) <= EVENT_LINE_BYTES else None
        out = []
        for line in lines:
            if line and len(line) <= EVENT_LINE_BYTES:
                out += self._take(line)
        return out

    def _take(self, line: bytes) -> list[tuple[str, str, str | None]]:
        try:
            event = decode_json(line)
        except ReadRefused:  # not UTF-8 JSON, or nested too deeply (RecursionError)
            return []
        if not isinstance(event, dict) or event.get("check") not in self.ids:
            return []
        check_id, kind = str(event["check"]), event.get("event")
        if kind == "start" and check_id not in self.started:
            self.started.add(check_id)
            return [("start", check_id, None)]
        if check_id not in self.started or check_id in self.done:
            return []
        if kind == "stage":
            from .probes import stage_text

            stage = event.get("stage")
            return [("stage", check_id, stage_text(stage) if isinstance(stage, str) and stage else None)]
        if kind == "done":
            self.done.add(check_id)
            return [("done", check_id, None)]
        return []


class HostWatch:
    """The plugin checks of a run, for a live display: every WATCH_INTERVAL_S each host's events are read as they
    grow (_EventTail) and their start, stage and done are passed on as the runner passes on the built-ins'.
    `stop()` reads what is left and ends every row still open, whether or not its host said done."""

    def __init__(self, hosts: Sequence[Host], on_event: Callable[..., None]) -> None:
        self.on_event = on_event
        self.tails = [_EventTail(h.events, {c.id for c in h.checks}) for h in hosts]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="plugin-progress")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            self.poll()

    def poll(self) -> None:
        for tail in self.tails:
            for event in tail.read():
                try:
                    self.on_event(*event)
                except Exception:  # a display that breaks costs its rows only
                    continue

    def _joined(self, seconds: float) -> bool:
        self._thread.join(timeout=seconds)
        return not self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        GATE.wait(self._joined, time.monotonic() + 2)
        if self._thread.is_alive():
            return
        self.poll()
        for tail in self.tails:
            for check_id in sorted(tail.started - tail.done):
                tail.done.add(check_id)
                try:
                    self.on_event("done", check_id)
                except Exception:
                    continue


def plugin_error_rows(plugins: Sequence[PluginInfo]) -> list[CheckReport]:
    return [
        CheckReport(id=p.row_id, title=f"Plugin {p.name} loads", status=Status.ERROR,
                    summary=f"plugin {p.name!r} from distribution {p.distribution} failed to load: {p.error}",
                    details=p.traceback, evidence={"entry_point": p.value, "distribution": p.distribution,
                                                   "version": p.version},
                    origin=p.distribution, internal_error=True)
        for p in plugins if p.error
    ]
