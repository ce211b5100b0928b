"""The early start: a command that inspects a target starts its first probes (the handshake, nvidia-smi, the static
probe) from a pre-scan of its words, before typer is imported, and the run adopts them. The pre-scan must read what
the parser reads, start nothing for help, version, completion, list and explain, and leave no process behind when
the command line turns out to be wrong."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from dsv4_doctor.cli import main as cli
from dsv4_doctor.engine import earlystart as session_module, runreport
from dsv4_doctor.cli.main import early_target, parse_command_line
from dsv4_doctor.cli.grammar import INSPECTING_COMMANDS, VALUE_OPTIONS

from conftest import run_doctor

PY = sys.executable

# Words the pre-scan reads for certain: its answer must be the parser's.
SCANNED = [
    [], ["-f", "json"], ["--python", PY], [f"--python={PY}"], ["check", "--python", PY, "--timeout", "7"],
    ["check", "--timeout=12.5", "--no-kernel-cache", "--static-only"], ["--cp", "2", "--python", PY, "-v", "-v"],
    ["check", "-vv", "-fjson", "--only", "python.version", "--skip", "te.*"],
    ["check", "--job-args", "--python /elsewhere", "--python", PY],  # a value is never an option
    ["check", "--output", "--python"],  # nor is an option's value, whatever it looks like
    ["check", "--python", "/first", "--python", PY],  # the last one counts
    ["smoke", "--device", "cpu", "--python", PY], ["check", "--device=cpu", "--python", PY],
    ["fix", "--python", PY, "--only", "te.*"],
    ["fix", "--apply", "--yes", "--python", PY], ["fix", "--apply", "-y"],
    ["preflight", "--python", PY, "--no-kernel-cache", "--", "torchrun", "--python", "/job/python", "--timeout", "2"],
    ["preflight", "--cp", "2", "--", "--help"],
    ["check", "--deep", "--python", PY, "--cp", "2"], ["smoke", "--python", PY, "--deep", "--timeout", "9"],
    ["preflight", "--deep", "--python", PY, "--", "torchrun", "--deep"], ["fleet", "--deep", "--", "x"],
]


@pytest.mark.parametrize("words", SCANNED, ids=lambda w: " ".join(w) or "(none)")
def test_the_pre_scan_reads_what_the_parser_reads(words):
    target = early_target(words, {})
    assert target is not None
    opts = parse_command_line(words)
    assert (target.python, target.timeout, target.no_kernel_cache) == (opts.python, opts.timeout,
                                                                       opts.no_kernel_cache)


@pytest.mark.parametrize("words", [
    ["--help"], ["-h"], ["check", "--help"], ["smoke", "-h"], ["fix", "--python", PY, "--help"],
    ["preflight", "--help", "--", "x"], ["--version"], ["--show-completion"], ["--install-completion"],
    ["list"], ["explain", "python.version"], ["list", "--python", PY],
    ["check", "-vh"],  # a combined short option: the parser's to judge
    ["fix", "--apply"],  # refused without --yes when stdin is no terminal, before any work
    ["check", "--timeout", "0"], ["check", "--timeout"],  # refused by the parser
])
def test_nothing_starts_early_for_words_that_inspect_nothing(words):
    assert early_target(words, {}) is None


def test_nothing_starts_early_for_a_completion_request():
    assert early_target(["check", "--python", PY], {"_DSV4_DOCTOR_COMPLETE": "complete_bash"}) is None
    assert early_target(["check", "--python", PY], {}) is not None


def test_preflight_s_job_words_are_never_scanned():
    target = early_target(["preflight", "--", "python", "--python", "/job/python", "--help"], {})
    assert target is not None and target.python is None
    assert early_target(["preflight", "torchrun", "--python", "/x"], {}).python is None  # type: ignore[union-attr]


def test_the_pre_scan_knows_every_option_that_takes_a_value():
    """VALUE_OPTIONS is the pre-scan's copy of the grammar: every option of an inspecting command that takes a
    value, and every other option a flag (a short one is -v, -y or -h)."""
    import typer

    from dsv4_doctor.cli.grammar import _app

    group = typer.main.get_command(_app()[0])
    takes_value, flags = set(), set()
    for name in INSPECTING_COMMANDS:
        for param in group.commands[name].params:  # type: ignore[attr-defined]
            if param.param_type_name != "option":
                continue
            names = set(param.opts) | set(param.secondary_opts)
            (flags if param.is_flag or param.count else takes_value).update(names)
    assert takes_value == set(VALUE_OPTIONS)
    assert {f for f in flags if not f.startswith("--")} == {"-v", "-y"}


def _fake_python(tmp_path: Path, body: str) -> tuple[Path, Path]:
    """An executable that says it is Python: it records its pid, then runs `body` (shell)."""
    pids = tmp_path / "pids"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho $$ >> '{pids}'\n{body}\n")
    fake.chmod(0o755)
    return fake, pids


def _wait_for_lines(path: Path, n: int, seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= n:
            return [int(x) for x in lines]
        time.sleep(0.02)
    raise AssertionError(f"{n} processes did not start within {seconds} s")


def _gone(pid: int) -> bool:
    """Neither running nor left unreaped (a zombie still has its /proc entry)."""
    return not os.path.exists(f"/proc/{pid}")


def test_a_usage_error_after_the_early_start_leaves_no_process(tmp_path, monkeypatch, capfd):
    """The handshake and the static probe started from the pre-scan (the fake interpreter records both) are killed
    and reaped when the parser then refuses the command line."""
    fake, pids = _fake_python(tmp_path, "exec sleep 60")
    parse = cli.parse_command_line

    def parse_once_both_started(words):
        _wait_for_lines(pids, 2)  # the handshake and the static probe run while the words are parsed
        return parse(words)

    monkeypatch.setattr(cli, "parse_command_line", parse_once_both_started)
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "--python", str(fake), "--cp", "0"])
    assert exc.value.code == 2
    assert "--cp must be between 1 and 1024" in capfd.readouterr().err
    started = _wait_for_lines(pids, 2)
    assert all(_gone(pid) for pid in started), started
    assert session_module._early is None


def test_help_version_and_list_start_nothing(monkeypatch, capfd):
    calls = []
    monkeypatch.setattr(session_module, "start_early", lambda *a: calls.append(a) or True)
    for words in (["check", "--python", PY, "--help"], ["--version"], ["preflight", "--python", PY, "-h"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(words)
        assert exc.value.code == 0
    assert calls == []
    with pytest.raises(SystemExit):
        cli.main(["check", "--python", PY, "--cp", "0"])
    assert calls == [(PY, None)]  # the spy is live: a command that inspects does start early
    capfd.readouterr()


def test_the_run_adopts_the_probes_started_early(tmp_path, monkeypatch, bare_python):
    """One static probe in all: the run reads the one the pre-scan started, in the session that started it."""
    from dsv4_doctor.hostio.procs import Processes

    spawned: list[list[str]] = []
    spawn = Processes.spawn

    def recording_spawn(self, argv, **kwargs):
        spawned.append(list(argv))
        return spawn(self, argv, **kwargs)

    monkeypatch.setattr(Processes, "spawn", recording_spawn)
    started, adopted = [], []
    start_early, session_for = session_module.start_early, runreport.session_for

    def recording_start(*args):
        assert start_early(*args)
        started.append(session_module._early)
        return True

    def recording_session_for(*args):
        adopted.append(session_for(*args))
        return adopted[-1]

    monkeypatch.setattr(session_module, "start_early", recording_start)
    monkeypatch.setattr(runreport, "session_for", recording_session_for)
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "--static-only", "-f", "json", "-o", str(out), "--python", bare_python])
    assert exc.value.code == 1
    assert len(started) == 1 and started[0] is not None and adopted == started
    static = [argv for argv in spawned if any(w.endswith("dsv4probe_static.py") for w in argv)]
    assert len(static) == 1 and static[0][0] == bare_python
    report = json.loads(out.read_text())
    assert report["environment"]["target_python"]["executable"] == bare_python
    assert {c["id"]: c["status"] for c in report["checks"]}["te.version"] == "fail"  # the static facts were read


def test_an_early_start_for_another_interpreter_is_closed_not_adopted(bare_python):
    assert session_module.start_early(PY, None)
    early = session_module._early
    assert early is not None and early.pool.submitted[:2] == ["handshake", "nvidia-smi"]
    other = session_module.session_for(bare_python, None)
    try:
        assert other is not early and other.python == bare_python
        assert early.procs.closed and session_module._early is None
    finally:
        other.close()
    assert session_module.start_early(PY, None)
    assert session_module.session_for(PY, 5.0) is not session_module._early  # another --timeout: another session
    session_module.close_early()


def test_a_signal_while_the_words_are_parsed_ends_the_run_with_its_report(tmp_path, monkeypatch):
    """The signal gate is up before anything starts early: a SIGTERM during the parse is kept, the run stops at
    once with a report that says so (exit 143), and nothing it started is left."""
    parse = cli.parse_command_line

    def parse_with_a_signal(words):
        os.kill(os.getpid(), signal.SIGTERM)
        return parse(words)

    monkeypatch.setattr(cli, "parse_command_line", parse_with_a_signal)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "--static-only", "-f", "json", "-o", str(out), "--python", PY])
    assert exc.value.code == 143
    report = json.loads(out.read_text())
    assert report["summary"]["interrupted"] == "SIGTERM"
    assert [c["id"] for c in report["checks"]] == ["doctor.interrupted"]
    assert session_module._early is None
    assert signal.getsignal(signal.SIGTERM) == before  # the gate is down again


@pytest.mark.parametrize("kind", ["not a python", "missing"])
def test_a_python_the_session_refuses_is_the_same_usage_error(tmp_path, kind):
    if kind == "missing":
        run = run_doctor("check", "--static-only", python=str(tmp_path / "nope"))
        assert run.returncode == 2 and f"--python: no executable interpreter at '{tmp_path / 'nope'}'" in run.stderr
        return
    fake, pids = _fake_python(tmp_path, "echo hello")
    run = run_doctor("check", "--static-only", python=str(fake))
    assert run.returncode == 2 and run.stdout == ""
    assert f"--python {fake} is not a Python interpreter the doctor can run (it printed no Python version)" \
        in run.stderr
    assert "Traceback" not in run.stderr


def test_the_first_probes_start_before_the_session_module_is_imported(bare_python):
    """The handshake and nvidia-smi start before doctor.session (and the plugins, the report's assembly) is
    imported: only the target's resolution and the probe pool come first. A Python audit hook sees each spawn, in a
    fresh process (this one imported the session long ago), and the run still adopts them (one handshake in all)."""
    import subprocess

    code = ("import sys\n"
            "spawns = []\n"
            "def hook(event, args):\n"
            "    if event == 'subprocess.Popen':\n"
            "        spawns.append((list(args[1])[:3], 'dsv4_doctor.engine.session' in sys.modules))\n"
            "sys.addaudithook(hook)\n"
            "from dsv4_doctor.cli.main import main\n"
            "try:\n"
            f"    main(['check', '--static-only', '-f', 'json', '--python', {bare_python!r}])\n"
            "except SystemExit as exc:\n"
            "    sys.stderr.write('\\nCODE=%s\\n' % exc.code)\n"
            "import json\n"
            "sys.stderr.write('SPAWNS=' + json.dumps(spawns) + '\\n')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = done.stderr.splitlines()
    assert "CODE=1" in lines, done.stderr[-2000:]  # the run's verdict: a bare target fails
    spawns = json.loads(next(x for x in lines if x.startswith("SPAWNS="))[len("SPAWNS="):])
    assert [argv[:2] for argv, _ in spawns[:2]] == [[bare_python, "-S"], ["nvidia-smi", "--query-gpu=index,name,"
                                                                          "compute_cap,memory.total,driver_version"]] \
        or sorted(argv[0] for argv, _ in spawns[:2]) == sorted([bare_python, "nvidia-smi"])
    assert [imported for _, imported in spawns[:2]] == [False, False]
    assert sum(argv[1:2] == ["-S"] for argv, _ in spawns) == 1  # the run adopted the early handshake
    json.loads(done.stdout)  # and wrote its report


def test_a_pool_started_for_another_interpreter_is_closed_not_adopted(bare_python):
    """The session adopts an early pool only when it runs the same interpreter; another one's is closed."""
    from dsv4_doctor.engine.runner import ProbePool
    from dsv4_doctor.engine.session import Session

    pool = ProbePool.for_target(PY, None, 4)
    session = Session(bare_python, None, pool)
    try:
        assert session.pool is not pool and pool.procs.closed and session.pool.python == bare_python
    finally:
        session.close()
    same = ProbePool.for_target(PY, 7.0, 4)
    session = Session(PY, 7.0, same)
    try:
        assert session.pool is same and session.procs is same.procs and not same.procs.closed
    finally:
        session.close()
