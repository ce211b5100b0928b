"""Plugin checks in the live display: a plugin check runs in its plugin host, which writes its start, its probes'
stages and its done as it goes; the doctor reads them while the host runs (bounded, only the host's own check ids,
cleaned) and shows them beside the built-ins."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest

from dsv4_doctor.model.core import Profile
from dsv4_doctor.engine.runreport import run_check

SLOW_PLUGIN = """
import json, os, sys
from dsv4_doctor.model.core import Check, passed
from dsv4_doctor.engine.probes import Probe
PROBE = Probe.beside(__file__, "slow:kernel", "slow_probe.py", {{}})
HOSTILE = {hostile!r}

def _run(ctx):
    if HOSTILE:  # what a plugin could write into its host's events file (the host's last argument)
        with open(sys.argv[-1], "a") as fh:
            fh.write(json.dumps({{"event": "start", "check": "python.version"}}) + "\\n")
            fh.write(json.dumps({{"event": "start", "check": "slow.other"}}) + "\\n")
            fh.write(json.dumps({{"event": "stage", "check": "slow.check",
                                  "stage": "\\x1b[2J\\x1b]8;;http://evil\\x07click " + "B" * 500}}) + "\\n")
            fh.write("{{" + "A" * 5000000 + "\\n")
            fh.write('{{"event": "done", "check": "slow.check", "pad": "' + "C" * 5000 + '"}}\\n')
            fh.flush()
    return passed("the probe said " + ctx.require(PROBE)["said"])

CHECKS = [Check(id="slow.check", title="A slow plugin check", explanation="x", applies_when="always", detects="x",
                run=_run, probes=(PROBE,)),
          Check(id="slow.other", title="Not selected", explanation="x", applies_when="always", detects="x",
                run=lambda ctx: passed("ok"))]
"""

SLOW_PROBE = """
import os, sys, time
sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
from dsv4probe_common import serve, stage

def answer(request):
    stage("warming the plugin's kernel")
    time.sleep(1.5)
    return {"said": "warm"}

serve(answer)
"""


def _slow_plugin(site, hostile: bool = False) -> None:
    site.file("slow_plugin/__init__.py", SLOW_PLUGIN.format(hostile=hostile))
    site.file("slow_plugin/slow_probe.py", SLOW_PROBE)
    site.dist("slow-plugin", "1.0", entry_points="[dsv4_doctor.checks]\nslow = slow_plugin\n")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[float, str, str, str | None]] = []
        self.lock = threading.Lock()

    def __call__(self, event: str, check_id: str, detail: str | None = None) -> None:
        with self.lock:
            self.events.append((time.monotonic(), event, check_id, detail))

    def of(self, check_id: str) -> list[tuple[float, str, str | None]]:
        return [(t, e, d) for t, e, c, d in self.events if c == check_id]


def _run_in_process(site, monkeypatch, only: list[str]) -> tuple[Recorder, object]:
    monkeypatch.syspath_prepend(str(site.root))
    monkeypatch.setenv("PYTHONPATH", str(site.root))
    recorder = Recorder()
    report = run_check(sys.executable, None, Profile(), only, [], False, on_event=recorder)
    return recorder, report


def test_a_plugin_check_s_start_stage_and_done_arrive_while_it_runs(site, monkeypatch):
    _slow_plugin(site)
    recorder, report = _run_in_process(site, monkeypatch, ["slow.check", "python.version"])
    assert report.row("slow.check").status.value == "pass"  # type: ignore[attr-defined,union-attr]
    mine = recorder.of("slow.check")
    kinds = [e for _, e, _ in mine]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("start") == kinds.count("done") == 1
    stages = [(t, d) for t, e, d in mine if e == "stage"]
    assert ("warming the plugin's kernel" in [d for _, d in stages])
    start, done = mine[0][0], mine[-1][0]
    said = next(t for t, d in stages if d == "warming the plugin's kernel")
    assert done - start >= 1.0 and done - said >= 1.0  # live: the probe sleeps 1.5 s after it says its stage
    assert [e for _, e, _ in recorder.of("python.version")] == ["start", "done"]  # the built-ins as before


def test_what_a_plugin_writes_into_its_events_cannot_reach_the_display_raw(site, monkeypatch):
    """A plugin runs in its host and can append to the host's events file: an id it was not asked to run, an
    escape-laden stage and a 5 MB line. The display only gets the host's selected ids, short cleaned stages, and
    every read is bounded."""
    _slow_plugin(site, hostile=True)
    recorder, report = _run_in_process(site, monkeypatch, ["slow.check"])
    assert report.row("slow.check").status.value == "pass"  # type: ignore[attr-defined,union-attr]
    assert {c for _, _, c, _ in recorder.events} == {"slow.check"}
    details = [d for _, e, c, d in recorder.events if e == "stage" and d]
    assert details and all("\x1b" not in d and "\x07" not in d and len(d) <= 80 for d in details)
    assert [e for _, e, _ in recorder.of("slow.check")].count("done") == 1


def test_a_plugin_check_shows_in_the_live_display_on_a_terminal(site):
    """End to end: `check` on a pseudo-terminal, the plugin's row among the live display's frames."""
    import fcntl
    import pty
    import struct
    import termios

    from conftest import doctor_command

    _slow_plugin(site)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "CI", "COLUMNS", "LINES")}
    env.update(PYTHONPATH=str(site.root), TERM="xterm", PYTHONIOENCODING="utf-8")
    proc = subprocess.Popen(doctor_command() + ["check", "--only", "slow.check", "--python", sys.executable],
                            stdin=follower, stdout=subprocess.DEVNULL, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode("utf-8", "replace"))
    assert re.search(r"slow\.check  \d+\.\d s  warming the plugin's kernel", text), text[-2000:]


@pytest.mark.parametrize("chunks", [1, 7])
def test_the_events_tail_reads_whole_lines_only(tmp_path, chunks, monkeypatch):
    """Lines split across reads are joined; an overlong line is skipped to its end, whatever the read size."""
    import json

    from dsv4_doctor.engine import plugins

    path = tmp_path / "events.jsonl"
    lines = [json.dumps({"event": "start", "check": "a.b"}), "x" * 3000,
             json.dumps({"event": "stage", "check": "a.b", "stage": "one"}),
             json.dumps({"event": "done", "check": "a.b"})]
    data = ("\n".join(lines) + "\n").encode()
    monkeypatch.setattr(plugins, "WATCH_READ_BYTES", max(1, len(data) // chunks // 3))
    tail = plugins._EventTail(str(path), {"a.b"})
    got = []
    for i in range(0, len(data), 50):
        with open(path, "ab") as fh:
            fh.write(data[i:i + 50])
        for _ in range(200):
            more = tail.read()
            got += more
            if not more and tail.offset == path.stat().st_size:
                break
    assert got == [("start", "a.b", None), ("stage", "a.b", "one"), ("done", "a.b", None)]
