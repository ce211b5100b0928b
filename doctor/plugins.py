"""The doctor's side of the plugin hosts: a third-party plugin is imported, described and run in a host process of
its own (pluginhost.py), so that a plugin that hangs, crashes or prints cannot take the run with it.

The hosts start within the session's process tracking; ending one kills its group and whatever probes it started.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from .model import Check, CheckReport, Profile, Status
from .procs import Processes, start_helper
from .redact import read_tail
from .registry import PluginInfo, Registry

DESCRIBE_BUDGET_S = 30.0  # third-party plugins: import and describe, all at once
MARGIN_S = 5.0


def log_tail(path: str) -> str:
    return read_tail(path, 3000).strip()  # a cut first line is dropped: it may end a secret


class PluginHosts:
    """Every plugin host of one session: describe them all at load, run the selected plugin checks beside the
    built-ins, collect what they answered."""

    def __init__(self, procs: Processes, python: str, timeout: float,
                 critical: Callable[[], AbstractContextManager], gpus: Callable[[], list[dict]]) -> None:
        self.procs, self.python, self.timeout = procs, python, timeout
        self.critical, self.gpus = critical, gpus
        self.registry: Registry | None = None
        self.plugin_checks: dict[str, list[Check]] = {}  # entry point name -> its described checks

    def _host(self, info: PluginInfo, mode: str, extra: dict, budget_s: float) -> dict:
        """Start one plugin host."""
        tmp = self.procs.tempdir("dsv4-doctor-plugin-")
        events, log_path = os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "host.log")
        fields = {k: getattr(info, k) for k in ("name", "value", "distribution", "version")}
        request_path = os.path.join(tmp, "request.json")
        # The request goes in a file: hundreds of selected plugin check ids overflow one argv string (Linux caps it
        # at 128 KiB; otherwise it replaced the whole report with doctor.internal).
        with open(request_path, "w", encoding="utf-8") as fh:
            json.dump(dict(extra, mode=mode, plugin=fields), fh)
        from .probes import child_env

        with self.critical():
            helper = start_helper(self.procs, [sys.executable, "-m", "dsv4_doctor.pluginhost", "@" + request_path,
                                               events], log_path, child_env(budget_s))
        return {"info": info, "helper": helper, "events": events, "log": log_path}

    def _end_host(self, host: dict, deadline: float):
        """Wait for a host until the deadline, kill it and whatever it started; (its events, how it ended, its log)."""
        from .pluginhost import read_events
        from .procs import kill_orphan_group, remove_tempdir

        end = host["helper"].finish(deadline)
        if end.timed_out or end.returncode is None:
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
        answer = read_events(host["events"])
        for pid in answer.spawned:  # a killed host cannot clean up its probes: the doctor does
            kill_orphan_group(pid)
        for path in answer.tempdirs:
            remove_tempdir(path)
        return answer, how, log_tail(host["log"])

    def describe(self, registry: Registry) -> None:
        """Every third-party plugin of `registry` imported and described, each in its host, all at once; a plugin
        that failed records why on its PluginInfo."""
        from .pluginhost import describe_check

        self.registry = registry
        deadline = time.monotonic() + min(DESCRIBE_BUDGET_S, self.timeout)
        started = [self._host(info, "describe", {"deadline": deadline}, DESCRIBE_BUDGET_S)
                   for info in self.registry.plugins]
        taken = {c.id: "dsv4-doctor" for c in self.registry.checks}
        for host in started:
            info = host["info"]
            answer, how, log = self._end_host(host, deadline)
            problems = list(answer.problems)
            if answer.plugin is None:
                info.error = "; ".join([f"the plugin host {how or 'exited'} before the plugin loaded", *problems])
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

    def start_runs(self, profile: Profile, ids: set[str], deadline: float) -> list:
        if not ids:
            return []
        hosts = []
        request = {"profile": profile.to_dict(), "python": self.python, "timeout_s": self.timeout,
                   "deadline": deadline - MARGIN_S, "gpus": self.gpus()}
        for name, checks in self.plugin_checks.items():
            mine = [c for c in checks if c.id in ids]
            if not mine:
                continue
            assert self.registry is not None
            info = next(p for p in self.registry.plugins if p.name == name)
            host = self._host(info, "run", dict(request, selected=[c.id for c in mine]),
                              max(1.0, deadline - time.monotonic()))
            host["checks"] = mine
            hosts.append(host)
        return hosts

    def collect(self, hosts: list, deadline: float, unfinished: str | None = None) -> list[CheckReport]:
        from .pluginhost import report_from

        out = []
        for host in hosts:
            info = host["info"]
            answer, how, log = self._end_host(host, deadline)
            running = [i for i in answer.started if i not in answer.results]
            for check in host["checks"]:
                if check.id in answer.results:
                    out.append(report_from(answer.results[check.id], check))
                    continue
                if unfinished:
                    why = unfinished
                elif check.id in running:
                    why = f"the plugin host {how or 'exited'} while this check ran"
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


def plugin_error_rows(plugins: Sequence[PluginInfo]) -> list[CheckReport]:
    return [
        CheckReport(id=p.row_id, title=f"Plugin {p.name} loads", status=Status.ERROR,
                    summary=f"plugin {p.name!r} from distribution {p.distribution} failed to load: {p.error}",
                    details=p.traceback, evidence={"entry_point": p.value, "distribution": p.distribution,
                                                   "version": p.version},
                    origin=p.distribution, internal_error=True)
        for p in plugins if p.error
    ]
