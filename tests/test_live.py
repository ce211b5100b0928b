"""The live display and the probe-stage channel it shows: real probe processes announce their stage in a file the
doctor names, the runner reads it (bounded, cleaned) while it waits, and the display shows it, cut to the width."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from rich.cells import cell_len

from dsv4_doctor.model.core import Check, Profile, passed
from dsv4_doctor.engine.probes import STAGE_CHARS, Probe
from dsv4_doctor.hostio.procs import Processes
from dsv4_doctor.engine.runner import WAITING_FOR_SLOT, ProbePool, RunContext, Runner

# A probe script as the doctor's probes start: dsv4probe_common from the folder the doctor names, then serve().
# It says STAGES one after the other, each after the test created the file `go<i>` in GATE (so the test sees each).
STAGED = """
import os, sys, time
sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
from dsv4probe_common import serve, stage
GATE, STAGES = {gate!r}, {stages!r}

def answer(request):
    for i, text in enumerate(STAGES):
        stage(text)
        while not os.path.exists(os.path.join(GATE, "go%d" % i)):
            time.sleep(0.02)
    return {{"ok": True}}

serve(answer)
"""

# A probe that does something hostile with its stage file (the one the library took from its environment before the
# launcher ran the script), then waits for the test's go.
HOSTILE = """
import os, sys, time
path = sys.modules["dsv4probe_common"]._STAGE_FILE
GATE, WHAT = {gate!r}, {what!r}
if WHAT == "huge":
    with open(path, "w") as fh:
        fh.write("\\x1b[31m" + "A" * 5000000 + "\\n")
elif WHAT == "escapes":
    with open(path, "w") as fh:
        fh.write("first line\\n\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07 \\x1b[2J[bold red]x\\u202e::error::y\\r\\n")
elif WHAT == "fifo":
    os.mkfifo(path)
elif WHAT == "zero":
    os.symlink("/dev/zero", path)
elif WHAT == "link":
    os.symlink({secret_file!r}, path)
open(os.path.join(GATE, "ready"), "w").close()
while not os.path.exists(os.path.join(GATE, "go")):
    time.sleep(0.02)
sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
from dsv4probe_common import serve
serve(lambda request: {{}})
"""


def _wait_for(condition, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


@pytest.fixture
def procs():
    p = Processes()
    yield p
    p.close()


def _probe(tmp_path: Path, name: str, text: str) -> Probe:
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    return Probe.python(name, str(script))


def test_a_probe_s_stages_reach_the_doctor_while_it_waits(tmp_path, procs):
    gate = tmp_path / "gate"
    gate.mkdir()
    stages = ["importing torch", "tier 2: fused build at forward+backward"]
    probe = _probe(tmp_path, "staged", STAGED.format(gate=str(gate), stages=stages))
    pool = ProbePool(sys.executable, 30.0, 2, procs)
    slot = pool.submit(probe)
    for i, text in enumerate(stages):
        assert _wait_for(lambda said=text: pool.stage(probe.key) == said)
        (gate / f"go{i}").touch()
    assert slot.done.wait(30) and slot.result is not None and slot.result.ok
    assert pool.stage(probe.key) is None  # done: nothing running, its temporary directory is gone
    assert pool.stage("never-submitted") is None


def test_a_queued_probe_waits_for_a_slot_and_a_silent_one_shows_its_key(tmp_path, procs):
    gate = tmp_path / "gate"
    gate.mkdir()
    busy = _probe(tmp_path, "busy", STAGED.format(gate=str(gate), stages=["holding the only slot"]))
    silent = _probe(tmp_path, "silent", STAGED.format(gate=str(gate / "never"), stages=[]))
    pool = ProbePool(sys.executable, 30.0, 1, procs)
    pool.submit(busy)
    assert _wait_for(lambda: pool.stage(busy.key) == "holding the only slot")
    pool.submit(silent)
    assert pool.stage(silent.key) == WAITING_FOR_SLOT
    (gate / "go0").touch()
    assert pool.result(busy, 30).ok
    assert pool.result(silent, 30).ok  # a probe that says nothing is shown by its key while it runs


@pytest.mark.parametrize("what", ["huge", "escapes", "fifo", "zero", "link"])
def test_a_hostile_stage_file_cannot_stall_flood_or_restyle_the_display(tmp_path, procs, what, monkeypatch):
    gate = tmp_path / "gate"
    gate.mkdir()
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("a line the doctor must not follow a link to\n")
    probe = _probe(tmp_path, "hostile", HOSTILE.format(gate=str(gate), what=what, secret_file=str(secret_file)))
    pool = ProbePool(sys.executable, 30.0, 2, procs)
    pool.submit(probe)
    _wait_for(lambda: (gate / "ready").exists())
    start = time.monotonic()
    shown = pool.stage(probe.key)
    assert time.monotonic() - start < 1.0  # a FIFO without a writer, /dev/zero: never a blocking or endless read
    assert shown is not None and len(shown) <= STAGE_CHARS and "\n" not in shown
    assert not re.search(r"[\x00-\x1f\x7f\u202e]", shown)
    if what == "huge":  # one word longer than the line: never shown in part (it could be a secret cut in two)
        assert shown == "probe hostile"
    elif what == "escapes":
        assert shown == "click [bold red]x\\u202e::error::y"  # the last line, escapes gone, the rest literal
    else:  # not a regular file, or a link: not read at all
        assert shown == "probe hostile" and "must not" not in shown
    (gate / "go").touch()
    assert pool.result(probe, 30).ok


CHILD = """
import os, subprocess, sys
sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
from dsv4probe_common import serve, stage
def answer(request):
    stage("spawning a child")
    seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('DSV4_DOCTOR_STAGE_FILE'))"],
                          capture_output=True, text=True).stdout.strip()
    return {"child_sees": seen}
serve(answer)
"""


def test_the_probe_s_children_do_not_inherit_its_stage_file(tmp_path, procs, monkeypatch):
    theirs = tmp_path / "theirs.txt"  # a stage file the caller's environment names: never the doctor's to use
    monkeypatch.setenv("DSV4_DOCTOR_STAGE_FILE", str(theirs))
    pool = ProbePool(sys.executable, 30.0, 2, procs)
    result = pool.result(_probe(tmp_path, "parent", CHILD), 30)
    assert result.ok and result.data == {"child_sees": "None"}
    command = pool.result(Probe.command("env", ["env"]), 30)
    assert command.ok and "DSV4_DOCTOR_STAGE_FILE" not in command.data
    assert not theirs.exists()


def test_the_runner_sends_start_stage_and_done(tmp_path, procs):
    gate = tmp_path / "gate"
    gate.mkdir()
    probe = _probe(tmp_path, "staged", STAGED.format(gate=str(gate), stages=["compiling the DSA kernel"]))
    check = Check(id="demo.staged", title="t", explanation="x", applies_when="always", detects="x",
                  run=lambda ctx: passed("ok") if ctx.require(probe) else None, probes=(probe,))
    events: list[tuple] = []

    def on_event(*event):
        events.append(event)
        if event[0] == "stage" and event[2] == "compiling the DSA kernel":
            (gate / "go0").touch()

    ctx = RunContext(profile=Profile(), python=sys.executable, pool=ProbePool(sys.executable, 30.0, 2, procs),
                     static_probe=Probe.python("static", "dsv4probe_static.py"))
    runner = Runner([check], ctx, time.monotonic() + 60, on_event)
    runner.begin()
    runner.wait()
    assert ctx.outcomes["demo.staged"].status.value == "pass"
    assert events[0] == ("start", "demo.staged") and events[-1] == ("done", "demo.staged")
    assert ("stage", "demo.staged", "compiling the DSA kernel") in events


# --- the display --------------------------------------------------------------------------------------------------

def _display(width: int):
    from dsv4_doctor.report.live import LiveDisplay

    display = LiveDisplay(color=True, width=width)
    display._live.stop()  # frames only: nothing on the test's stderr
    return display


@pytest.mark.parametrize("width", [60, 80])
def test_every_row_fits_the_width_and_data_is_never_markup_or_escapes(width, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnop1234")
    display = _display(width)
    display("start", "torch.install")
    display("stage", "torch.install", "importing torch")
    display("start", "smoke.thd-cp")
    display("stage", "smoke.thd-cp", "[bold red]x \x1b[31mred\x1b[0m \x1b]8;;http://e\x07y " + "z" * 300)
    display("start", "plugin.x")
    display("stage", "plugin.x", "token hf_abcdefghijklmnop1234 leaked")
    lines = display.frame(width, 40)
    plain = [line.plain for line in lines]
    assert plain[0].startswith("dsv4-doctor checking: 3 running, 0 done")
    assert all(cell_len(p) <= width - 1 for p in plain)
    assert plain[1].startswith("  ") and "torch.install" in plain[1] and plain[1].endswith("importing torch")
    assert "[bold red]x red y" in plain[2] and plain[2].endswith("…")
    assert not any("\x1b" in p or "\x07" in p for p in plain)
    assert "hf_abcdefghijklmnop1234" not in " ".join(plain) and "token" in plain[3]
    display("done", "torch.install")
    assert [p.split()[1] for p in (line.plain for line in display.frame(width, 40)[1:])] == ["smoke.thd-cp",
                                                                                           "plugin.x"]
    display.stop()
    assert display.frame(width, 40) == []


def test_rows_are_cut_to_the_terminal_s_height():
    display = _display(80)
    for i in range(30):
        display("start", f"area.check{i:02d}")
    assert len(display.frame(80, 6)) == 5  # the header, 3 rows, "... and 27 more"
    assert display.frame(80, 6)[-1].plain == "  ... and 27 more"
    assert len(display.frame(80, 40)) == 10  # at most 8 rows
    display.stop()


@pytest.mark.parametrize("fmt, tty, env, shown", [
    ("text", True, {}, True),
    ("json", True, {"FORCE_COLOR": "1"}, False),
    ("markdown", True, {}, False),
    ("junit", True, {}, False),
    ("text", False, {}, False),
    ("text", False, {"FORCE_COLOR": "1"}, True),
    ("text", False, {"FORCE_COLOR": "1", "CI": "true"}, False),
    ("text", True, {"TERM": "dumb"}, False),
])
def test_when_the_live_display_is_shown(fmt, tty, env, shown, monkeypatch):
    from dsv4_doctor.report.output import wants_live_display

    for key in ("FORCE_COLOR", "CI", "TERM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    class Stream:
        def isatty(self):
            return tty

    assert wants_live_display(Stream(), fmt) is shown


def test_the_probe_side_stage_is_a_no_op_without_the_doctor():
    import probe_modules

    common = probe_modules.common()
    saved = common._STAGE_FILE
    try:
        common._STAGE_FILE = None
        common.stage("nothing to write to")  # no file named: nothing happens, nothing raises
        common._STAGE_FILE = os.path.join("/nonexistent-dir", "stage.txt")
        common.stage("cannot be written")  # cosmetic: an unwritable file never raises
    finally:
        common._STAGE_FILE = saved
