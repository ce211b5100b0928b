"""The rich terminal report (doctor/report/terminal.py) on real reports: one the doctor writes here, in a real
subprocess, and the JSON reports of a real H200 run committed under docs/gpu-runs/."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4_doctor.checks import AREAS as BUILTIN_AREAS
from dsv4_doctor.report.terminal import render_terminal
from dsv4_doctor.model.report import Report

from conftest import has_torch, run_doctor

H200_RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-runs" / "2026-12-02-h200-b"
H200_REPORTS = sorted(H200_RUN.glob("complete/*.json")) + sorted(H200_RUN.glob("exit0/*.json"))
AREA_HEAD = re.compile(r"^\[(.)\] (\S+)  (.*)$")
# An area's head: on a line of its own, or (an area with nothing to attend to, by default) packed with others.
_COUNT = r"\d+ (?:pass|warn|fail|error|skip)"
AREA_ANYWHERE = re.compile(rf"\[(.)\] (\S+)  ({_COUNT}(?:, {_COUNT})*)")
ROW_HEAD = re.compile(r"^    (\S) (PASS|WARN|FAIL|ERROR|SKIP)\s+(\S+)  ")
RANK = {"fail": 0, "error": 1, "warn": 2, "pass": 3, "skip": 4}
STATUS_OF_LABEL = {"PASS": "pass", "WARN": "warn", "FAIL": "fail", "ERROR": "error", "SKIP": "skip"}


@pytest.fixture(scope="module")
def local_report(bare_python) -> dict:
    """A real static-only report of an interpreter with nothing installed: failures with fix commands, skips."""
    run = run_doctor("check", "--static-only", "-f", "json", python=bare_python)
    assert run.returncode == 1, run.stderr
    return run.report


def _terminal(report: dict, **options) -> str:
    """The terminal report of a report in its wire form (a file, or what a test made of one)."""
    return render_terminal(Report.from_wire(report), **options)


def _h200(name: str) -> dict:
    return json.loads((H200_RUN / "complete" / name).read_text())


def _areas(text: str) -> list[tuple[str, str, str]]:
    return [m.groups() for line in text.splitlines() if line.startswith("[")  # type: ignore[misc]
            for m in AREA_ANYWHERE.finditer(line)]


def _rows(text: str) -> list[tuple[str, str, str]]:
    return [m.groups() for m in map(ROW_HEAD.match, text.splitlines()) if m]  # type: ignore[misc]


def _expected_areas(report: dict) -> list[str]:
    seen = {c["id"].split(".", 1)[0] for c in report["checks"]}
    return [a for a in BUILTIN_AREAS if a in seen]


def _worst(statuses: set[str]) -> str:
    return min(statuses, key=RANK.__getitem__) if statuses != {"skip"} else "skip"


@pytest.mark.parametrize("path", H200_REPORTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_h200_reports_grouped_by_area_in_module_order_worst_first(path):
    report = json.loads(path.read_text())
    text = _terminal(report, verbosity=1, width=100)
    areas = _areas(text)
    assert [a for _, a, _ in areas] == _expected_areas(report)
    by_area: dict[str, set[str]] = {}
    for c in report["checks"]:
        by_area.setdefault(c["id"].split(".", 1)[0], set()).add(c["status"])
    glyph = {"pass": "✓", "warn": "!", "fail": "✗", "error": "✗", "skip": "-"}
    for g, area, _counts in areas:
        assert g == glyph[_worst(by_area[area])], (area, by_area[area])
    # -v shows every row once, inside its area, worst first, by id among equals.
    rows = _rows(text)
    assert sorted(r[2] for r in rows) == sorted(c["id"] for c in report["checks"])
    for area in by_area:
        mine = [(RANK[STATUS_OF_LABEL[label]], cid) for _, label, cid in rows if cid.split(".", 1)[0] == area]
        assert mine == sorted(mine), area


def test_concise_shows_only_problems_and_counts_skips():
    report = _h200("check-cp2.json")
    concise = _terminal(report, verbosity=0, width=100)
    problems = sorted(c["id"] for c in report["checks"] if c["status"] in ("fail", "error", "warn"))
    assert sorted(r[2] for r in _rows(concise)) == problems
    assert "evidence:" not in concise
    skipped = sum(c["status"] == "skip" for c in report["checks"])
    assert f"{skipped} skipped; -v shows every row in full" in concise
    verbose = _terminal(report, verbosity=1, width=100)  # -v: every row in full, no evidence
    assert sorted(r[2] for r in _rows(verbose)) == sorted(c["id"] for c in report["checks"])
    assert "evidence:" not in verbose and "-v shows every row" not in verbose and "source: " not in verbose
    evidenced = _terminal(report, verbosity=2, width=100)  # -vv: with the evidence
    assert "evidence:" in evidenced and "source: " not in evidenced
    very = _terminal(report, verbosity=3, width=100)  # -vvv: with the sources
    sourced = [c for c in report["checks"] if c.get("sources")]
    if sourced:
        assert "source: " in very
    assert len(very) >= len(evidenced) > len(verbose) > len(concise)


def test_verdict_first_and_last_with_the_next_step(local_report):
    text = _terminal(local_report, verbosity=0, width=100)
    lines = [line for line in text.splitlines() if line]
    first_area = next(i for i, line in enumerate(lines) if AREA_HEAD.match(line))
    verdicts = [i for i, line in enumerate(lines) if line.startswith("Verdict: ")]
    head = next(line for line in lines if line.startswith("dsv4-doctor "))  # after the versions block
    assert lines[0].startswith("Python ") and lines.index(head) <= 4 and "profile cp=1" in head
    assert len(verdicts) == 2 and verdicts[0] < first_area
    assert all(line.startswith("  ") for line in lines[verdicts[1] + 1:])  # the last paragraph, wrapped
    verdict = lines[verdicts[0]]
    assert verdict.startswith("Verdict: FAIL (3 failed")
    last = " ".join(line.strip() for line in lines[verdicts[1]:])
    # The hint carries what `fix` needs to plan the same profile: here the target interpreter (--python).
    python = local_report["environment"]["target_python"]["executable"]
    assert last == verdict + f"; next: dsv4-doctor fix --cp 1 --python {python} > fix.sh"
    assert "CP 1 assumed: pass --cp N" in " ".join(line.strip() for line in lines[:verdicts[0]])
    h200 = _terminal(_h200("check-cp2.json"), width=100).rstrip().split("\n\n")[-1]
    assert " ".join(line.strip() for line in h200.splitlines()).endswith(
        "; next: read the rows above (no fix the doctor can write)")


def test_fix_commands_are_never_wrapped(local_report):
    commands = [cmd for c in local_report["checks"] for f in c.get("fixes") or [] for cmd in f.get("commands") or []]
    long = [cmd for cmd in commands if len(cmd) > 60]
    assert long, "the bare interpreter's report has no long fix command"
    text = _terminal(local_report, verbosity=0, width=60)
    lines = text.splitlines()
    for cmd in commands:
        assert any(line.strip() == cmd for line in lines), cmd
    # Prose wraps at 60; only unbreakable commands (a fix's, the `next:` hint's) go past it.
    assert all(len(line) <= 60 or line.strip() in commands or line.startswith("      dsv4-doctor fix ")
               for line in lines)


def test_ascii_fallback_when_the_terminal_is_not_utf8(local_report):
    text = _terminal(local_report, verbosity=1, width=100, encoding="ascii")
    text.encode("ascii")
    glyphs = {g for g, _, _ in _areas(text)}
    assert glyphs <= {"+", "!", "x", "-"} and "x" in glyphs and "+" in glyphs
    utf8 = _terminal(local_report, verbosity=1, width=100, encoding="UTF-8")
    assert "[✗] " in utf8 and "[✓] " in utf8


def test_colour_only_when_asked(local_report):
    assert "\x1b[" not in _terminal(local_report, width=100)
    assert "\x1b[" in _terminal(local_report, width=100, color=True)


HOSTILE = {"markup": "[bold red]x", "link": "[link=http://e]y", "csi": "\x1b[31mred\x1b[0m",
           "osc": "\x1b]8;;http://evil\x07click\x1b]8;;\x07", "workflow": "\n::error::injected", "bidi": "\u202eevil"}


@pytest.mark.parametrize("where", ["summary", "evidence", "fix"])
@pytest.mark.parametrize("color", [False, True])
def test_hostile_values_come_out_literally_and_cleaned(local_report, where, color):
    report = copy.deepcopy(local_report)
    row = next(c for c in report["checks"] if c["status"] == "fail" and c.get("fixes"))
    value = " ".join(HOSTILE.values())
    if where == "summary":
        row["summary"] = value
    elif where == "evidence":
        row["evidence"] = {"note": value}
    else:
        row["fixes"][0]["description"] = value
        row["fixes"][0]["commands"] = [value]
    text = _terminal(report, verbosity=3, width=200, color=color)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the renderer's own colour codes, when asked for
    assert "[bold red]x" in plain and "[link=http://e]y" in plain  # markup shown as text, not applied
    assert "\x1b" not in plain and "\x07" not in plain and "\u202e" not in text
    assert not any(line.lstrip().startswith("::error::") for line in plain.splitlines())
    assert "\x1b]" not in text  # no hyperlink or title sequence, even with colour


def test_json_check_imports_no_rich(bare_python):
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsv4_doctor", "check", "--static-only",
                          "-f", "json", "--python", bare_python], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr[-2000:]
    json.loads(run.stdout)
    imported = [line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")]
    assert "dsv4_doctor.cli.main" in imported  # the log is real
    assert not [m for m in imported if m == "rich" or m.startswith("rich.")]
    assert "dsv4_doctor.report.terminal" not in imported


def _on_a_terminal(args: list[str], columns: int = 80, env: dict | None = None) -> tuple[int, str]:
    """The doctor with stdin, stdout and stderr on a pseudo-terminal `columns` wide; its exit code and output."""
    code, data, _ = _on_a_pty(args, columns, env=env)
    return code, data.decode("utf-8", "replace").replace("\r\n", "\n")


def _on_a_pty(args: list[str], columns: int = 80, rows: int = 40, env: dict | None = None,
              stdout_piped: bool = False) -> tuple[int, bytes, str]:
    """The doctor on a pseudo-terminal `columns` x `rows` (stdout on a pipe when `stdout_piped`): its exit code, the
    bytes the terminal received, and what went to the pipe."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    from conftest import doctor_command

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY",
                             "CI")}
    full_env.update({"PYTHONIOENCODING": "utf-8", "TERM": "xterm"}, **(env or {}))
    proc = subprocess.Popen(doctor_command() + args, stdin=follower, stderr=follower, env=full_env, close_fds=True,
                            stdout=subprocess.PIPE if stdout_piped else follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    piped = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""
    code = proc.wait(timeout=120)
    return code, b"".join(chunks), piped


def _final_screen(data: bytes, columns: int, rows: int) -> list[str]:
    """Every line a terminal of that size shows after `data`, the lines scrolled off the top included."""
    import pyte

    screen = pyte.HistoryScreen(columns, rows, history=100000)
    pyte.ByteStream(screen).feed(data)
    top = ["".join(line[x].data for x in range(columns)) for line in screen.history.top]
    return [line.rstrip() for line in top + list(screen.display)]


@pytest.mark.parametrize("colour", ["on", "NO_COLOR"])
def test_check_on_a_terminal_prints_the_grouped_report(bare_python, colour):
    env = {"NO_COLOR": "1"} if colour == "NO_COLOR" else {}
    code, out = _on_a_terminal(["check", "--static-only", "--python", bare_python], env=env)
    assert code == 1, out[-3000:]
    report = out[re.search(r"dsv4-doctor \S+ checked", out).start():]  # type: ignore[union-attr]  # after the live display, which stderr shows on a terminal
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", report)
    assert "\r" not in plain
    assert bool(re.search(r"\x1b\[[0-9;]*m", report)) is (colour == "on")
    areas = _areas(plain)
    assert {"python", "torch", "gpu"} <= {a for _, a, _ in areas}
    assert ("✗", "te", "1 fail, 1 skip") in areas
    assert "skipped; -v shows every row in full" in plain
    fixes = [line for line in plain.splitlines() if line.strip().startswith(("pip install ", "dsv4-doctor fix "))]
    assert fixes and any(len(line) > 80 for line in fixes)  # a command stays whole on one line
    assert all(len(line) <= 80 for line in plain.splitlines() if line not in fixes)
    verbose_code, verbose = _on_a_terminal(["check", "--static-only", "-v", "--python", bare_python], env=env)
    assert verbose_code == 1 and "-v shows every row" not in verbose
    fix = "Install Transformer Engine 2.12.0 with its PyTorch extension"  # te.version's fix, in full with -v only
    assert fix in verbose and fix not in out


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_piped_text_is_the_terminal_s_grouped_report(bare_python, verbose):
    """A CI log gets what a terminal shows: verdict first, the rows that need attention with their fixes, passes and
    skips counted (with -v every row), the next step last; no colour, no live display."""
    words = ["check", "--static-only", *verbose, "--python", bare_python]
    run = run_doctor(*words, env={"COLUMNS": "80"})
    assert run.returncode == 1 and "\x1b" not in run.stdout
    json_run = run_doctor(*words[:-2], "-f", "json", python=bare_python)
    expected = render_terminal(Report.from_wire(json_run.report), len(verbose), width=80)
    strip = re.compile(r"/tmp/\S+|\d+\.\d+ ?s\b")  # paths of the run's own temporary files, timings
    assert strip.sub("", run.stdout) == strip.sub("", expected) or _areas(run.stdout) == _areas(expected)
    lines = run.stdout.splitlines()
    first_verdict = next(i for i, line in enumerate(lines) if line.startswith("Verdict: FAIL"))
    assert first_verdict < next(i for i, line in enumerate(lines) if line.startswith("["))  # the verdict first
    assert f"next: dsv4-doctor fix --cp 1 --python {bare_python} > fix.sh" in " ".join(run.stdout.split())
    rows = {r[2] for r in _rows(run.stdout)}
    if verbose:
        assert rows == {c["id"] for c in json_run.report["checks"]}
    else:
        assert rows == {c["id"] for c in json_run.report["checks"] if c["status"] in ("fail", "warn", "error")}


@pytest.mark.parametrize("command", ["check", "smoke", "preflight"])
def test_help_says_what_verbose_does(command):
    run = run_doctor(command, "--help", env={"COLUMNS": "200"})
    assert run.returncode == 0
    words = " ".join(run.stdout.split())
    assert "-v, --verbose Text report (a terminal or a log alike): -v shows every row" in words
    assert "-vv adds the evidence, -vvv the sources" in words


def test_the_profile_line_says_which_smoke_level_runs():
    """level=default or level=deep where the smoke runs (a GPU seen, --device, `smoke`); nothing where no smoke runs
    or in a report from before the field. The markdown report's line says the same."""
    from dsv4_doctor.report.dispatch import level_shown

    gpu = {"smoke": "auto", "device": "auto", "gpus": 1}
    assert level_shown(dict(gpu, deep=False)) == " level=default" and level_shown(dict(gpu, deep=True)) == " level=deep"
    assert level_shown({"smoke": "on", "device": "cpu", "gpus": 0, "deep": True}) == " level=deep"
    for quiet in (gpu, dict(gpu, deep="yes"), dict(gpu, deep=True, smoke="off"), dict(gpu, deep=True, static_only=True),
                  {"smoke": "auto", "device": "auto", "gpus": 0, "deep": True}):
        assert level_shown(quiet) == ""
    run = run_doctor("check", "--device", "cpu", "--deep", "--only", "python.version", "-f", "markdown")
    assert " · level=deep · python " in run.stdout, run.stdout[:600]
    terminal = run_doctor("check", "--device", "cpu", "--only", "python.version", env={"COLUMNS": "200"})
    assert re.search(r"^dsv4-doctor \S+ checked; profile cp=1 dsa-backend=cudnn gpu-arch=\S+ level=default;",
                     terminal.stdout, re.M), terminal.stdout[:300]


@pytest.mark.parametrize("args, source, hint, shown", [
    ([], "default", True, "profile cp=1 "),
    (["--cp", "1"], "option", False, "profile cp=1 "),
    (["--job-args", "torchrun pretrain_gpt.py --context-parallel-size 2 --experimental-attention-variant dsv4_hybrid"],
     "job", False, "profile cp=2 (from the job) "),
])
def test_the_first_line_says_where_the_cp_size_came_from(bare_python, args, source, hint, shown):
    base = ["check", "--static-only", "--only", "python.version", *args]
    run = run_doctor(*base, "-f", "json", python=bare_python)
    assert run.returncode == 0, run.stderr
    assert run.report["profile"]["cp_source"] == source
    terminal = run_doctor(*base, python=bare_python, env={"FORCE_COLOR": "1", "NO_COLOR": "1", "CI": "1"})
    head = terminal.stdout[terminal.stdout.index("\ndsv4-doctor ") + 1:]  # the line after the versions block
    first = " ".join(line.strip() for line in head.split("\nVerdict: ")[0].splitlines())
    assert first.startswith("dsv4-doctor ") and shown in first
    assert ("CP 1 assumed: pass --cp N" in first) is hint
    plain = run_doctor(*base, python=bare_python).stdout.split("\nVerdict: ")[0]
    plain = " ".join(line.strip() for line in plain.splitlines())
    assert ("CP 1 assumed: pass --cp N" in plain) is hint
    assert ("cp=2 (from the job)" in plain) is (source == "job")


# What only the live display writes: its header and the stages its rows show.
LIVE_HEADER = "dsv4-doctor checking: "
STAGES = ("importing torch", "tier 1: CP 2 THD attention", "CP 2 in 2 gloo processes", "waiting for a free probe slot")


@pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")
# One width in the fast suite; the other (seconds of a real check on a terminal) with the slow tests.
@pytest.mark.parametrize("columns, colour", [pytest.param(60, "NO_COLOR", marks=pytest.mark.slow), (80, "FORCE_COLOR")])
def test_the_live_display_shows_each_check_s_stage_and_leaves_nothing_on_screen(columns, colour):
    """A real check of this test environment (its CPU torch: the torch probe imports it, the smoke runs CP 2 in two
    gloo processes) on a 24-line terminal: the live display shows running checks with their probes' stages, and the
    screen it leaves holds the report alone, from its first line, at 60 and 80 columns."""
    rows = 24
    piped = colour == "FORCE_COLOR"  # FORCE_COLOR: the report goes to a pipe, coloured; stderr is the terminal
    code, data, stdout = _on_a_pty(["check", "--device", "cpu", "--cp", "2", "--python", sys.executable], columns,
                                   rows, env={colour: "1"}, stdout_piped=piped)
    assert code == 1, data[-3000:]
    sgr = re.compile(r"\x1b\[[0-9;]*m")
    shown = data.decode("utf-8", "replace")
    live = sgr.sub("", shown)
    assert LIVE_HEADER in live and "torch.install" in live
    assert [stage for stage in STAGES if stage in live], "no probe stage was shown"
    assert "running:" not in live  # rows of the live display, never a "running: ID" line
    screen = [line for line in _final_screen(data, columns, rows)]
    text = "\n".join(screen)
    assert LIVE_HEADER not in text and not [stage for stage in STAGES if stage in text], text
    assert not re.search(r"\d\.\d s", text)  # no row's elapsed time either
    if piped:
        assert screen == [""] * len(screen)  # the terminal got the live display only, and it is gone
        assert sgr.search(stdout)  # FORCE_COLOR: the report in colour, grouped, though stdout is no terminal
        report = sgr.sub("", stdout)
    else:
        assert not sgr.search(shown)  # NO_COLOR: neither the display nor the report has colour
        first = next(i for i, line in enumerate(screen) if line)
        assert first == 0 and screen[0].startswith("Python "), screen[:3]  # the versions block, then the header
        assert any(re.match(r"dsv4-doctor \S+ checked; profile cp=2 ", line) for line in screen[1:6]), screen[:6]
        report = text
    areas = _areas(report)
    assert {"python", "torch", "gpu"} <= {a for _, a, _ in areas}
    assert ("✗", "torch", "1 fail") in areas and ("✓", "python", "1 pass") in areas
    assert "Verdict: FAIL" in report


def test_a_json_check_on_a_terminal_shows_no_live_display_and_imports_no_rich(bare_python):
    code, data, stdout = _on_a_pty(["check", "--static-only", "-f", "json", "--python", bare_python], 80,
                                   env={"FORCE_COLOR": "1", "PYTHONPROFILEIMPORTTIME": "1"}, stdout_piped=True)
    assert code == 1
    json.loads(stdout)
    log = data.decode("utf-8", "replace")
    imported = [line.split("|")[-1].strip() for line in log.splitlines() if line.startswith("import time:")]
    assert "dsv4_doctor.cli.main" in imported and not [m for m in imported if m == "rich" or m.startswith("rich.")]
    assert LIVE_HEADER not in log and "\x1b[" not in log


def test_colour_marks_only_what_it_is_for(local_report):
    """The verdict in its status colour, the top line bold, a row's mark and label in their colour, the id bold; a
    summary, a fix's text and an area's counts stay plain."""
    text = _terminal(local_report, verbosity=0, width=400, color=True)
    lines = text.splitlines()
    assert lines[0].startswith("Python ")  # the versions block, plain, then the top line in bold
    assert any(line.startswith("\x1b[1mdsv4-doctor ") for line in lines[1:5])
    verdict = next(line for line in lines if "Verdict: " in line)
    assert re.match(r"\x1b\[1;31mVerdict: FAIL \(.*\)\x1b\[0m$", verdict), verdict
    row = next(line for line in lines if "FAIL  " in line and "te.version" in line)
    assert re.match(r"    \x1b\[1;31m✗ FAIL  \x1b\[0m\x1b\[1mte\.version\x1b\[0m  [^\x1b]+$", row), row
    area = next(line for line in lines if line.endswith("1 fail, 1 skip") and "te" in line)
    assert re.match(r"\x1b\[1;31m\[✗\] \x1b\[0m\x1b\[1mte\x1b\[0m  1 fail, 1 skip$", area), area
    fix = next(line for line in lines if "Fix: " in line)
    assert re.match(r"      \x1b\[1mFix: \x1b\[0m[^\x1b]+$", fix), fix
    last = lines[-1]
    assert re.search(r"\x1b\[0m; next: dsv4-doctor fix --cp 1 --python \S+ > fix\.sh$", last), last


def test_the_empty_venv_report_at_80_columns_leads_with_the_verdict_and_every_failure_s_fix(bare_python):
    """The first run of a newcomer (an interpreter with nothing installed): within 40 lines at 80 columns, the verdict
    first, then every failure's one-line summary with its fix commands, before the rest."""
    run = run_doctor("check", "--python", bare_python, env={"COLUMNS": "80"})
    lines = run.stdout.rstrip("\n").splitlines()
    assert run.returncode == 1 and len(lines) <= 40, run.stdout
    first_verdict = next(i for i, line in enumerate(lines) if line.startswith("Verdict: FAIL"))
    assert first_verdict <= 4
    report = run_doctor("check", "-f", "json", "--python", bare_python).report
    failures = [c for c in report["checks"] if c["status"] == "fail"]
    assert failures
    for c in failures:
        at = next(i for i, line in enumerate(lines) if re.match(rf"    \S FAIL  {re.escape(c['id'])}  ", line))
        assert len(lines[at]) <= 80
        for command in [cmd for f in c.get("fixes") or [] for cmd in f.get("commands") or []]:
            assert any(line.strip().startswith(command) for line in lines[at + 1:at + 8]), (c["id"], command)
    assert all(len(line) <= 80 or line.startswith("      ") for line in lines)  # only commands pass the width


@pytest.mark.parametrize("args, said, never", [
    (["check", "--gpu-arch", "10.0"], "gpu-arch=10.0 (from --gpu-arch)", "(from the"),
    (["check", "--job-args", "python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.megatron."
      "context_parallel_size=2"], "cp=2 (from the job) dsa-backend=cudnn gpu-arch=unknown;", "(from the verl"),
    (["preflight", "--dry-run", "--", "python3", "-c", "pass"], "gpu-arch=unknown;", "unknown command"),
])
def test_the_profile_line_says_where_each_fact_came_from_without_misreadings(bare_python, args, said, never):
    command, rest = args[0], args[1:]
    run = run_doctor(command, "--only", "python.version", "--python", bare_python, *rest)
    out = run.stdout + run.stderr
    head = " ".join(out.split("\nVerdict: ")[0].split())
    assert said in head and never not in out, head


def _fix_hint(text: str) -> str:
    """The `next:` hint's command, from the report's last paragraph."""
    last = " ".join(text.rstrip().split("\n\n")[-1].split())
    return last[last.index("next: ") + len("next: "):]


def _with(report: dict, profile: dict | None = None, python: str | None = None, doctor: str | None = None) -> dict:
    report = copy.deepcopy(report)
    report["profile"].update(profile or {})
    if python is not None:
        report["environment"]["target_python"]["executable"] = python
    if doctor is not None:
        report["environment"]["doctor_python"] = doctor
    return report


def test_the_next_hint_carries_the_options_that_shaped_the_run(local_report):
    """`fix` plans the same profile only with the options the run had: --gpu-arch and --dsa-backend when they came
    from options, --python when the target is not the doctor's own interpreter; a detected arch, a default backend
    and the doctor's own interpreter add nothing."""
    plain = _with(local_report, python="/venv/bin/python3", doctor="/venv/bin/python")
    assert _fix_hint(_terminal(plain)) == "dsv4-doctor fix --cp 1 > fix.sh"
    detected = _with(plain, {"gpu_arch": "9.0", "gpu_arch_source": "detected", "cp": 2, "cp_source": "option"})
    assert _fix_hint(_terminal(detected)) == "dsv4-doctor fix --cp 2 > fix.sh"
    given = _with(local_report, {"gpu_arch": "10.0", "gpu_arch_source": "option", "dsa_backend": "none",
                                 "dsa_backend_source": "option"}, python="/images/job env/bin/python",
                  doctor="/usr/bin/python3")
    hint = _fix_hint(_terminal(given, width=80))
    assert hint == "dsv4-doctor fix --cp 1 --gpu-arch 10.0 --dsa-backend none --python '/images/job env/bin/python'" \
        " > fix.sh", hint
    import shlex

    assert shlex.split(hint.removesuffix(" > fix.sh"))[-1] == "/images/job env/bin/python"


@pytest.mark.parametrize("python", ["/tmp/x; rm -rf ~ #/python", "/tmp/$(reboot)/`id`/python", "/tmp/a'b/python"])
def test_the_next_hint_quotes_a_hostile_interpreter_path_as_one_word(local_report, python):
    import shlex

    hint = _fix_hint(_terminal(_with(local_report, python=python, doctor="/usr/bin/python3"), width=200))
    command = hint.removesuffix(" > fix.sh")
    assert shlex.split(command) == ["dsv4-doctor", "fix", "--cp", "1", "--python", python], hint


@pytest.mark.parametrize("profile, python, same", [
    ({"gpu_arch": "10.0; reboot", "gpu_arch_source": "option"}, None, "--gpu-arch"),
    ({"dsa_backend": "$(reboot)", "dsa_backend_source": "option"}, None, "--dsa-backend"),
    ({}, "/tmp/" + "p" * 300 + "/python", "--python"),
    ({}, "/tmp/bell\x07/python", "--python"),
    ({}, "/tmp/***REDACTED***/python", "--python"),
])
def test_a_value_the_hint_cannot_print_safely_is_named_as_the_same_option(local_report, profile, python, same):
    hint = _fix_hint(_terminal(_with(local_report, profile, python=python, doctor="/usr/bin/python3"), width=400))
    assert f"(the same {same})" in hint, hint
    assert "reboot" not in hint and "ppppp" not in hint and "REDACTED" not in hint and "\x07" not in hint


def test_the_next_hint_of_a_training_command_asks_for_the_same_job_args(local_report):
    """A report holds the training command by shape only: the hint names --job-args instead of printing it, and
    leaves --cp to the job when the job gave it."""
    job = _with(local_report, {"cp": 2, "cp_source": "job", "job": {"kind": "megatron"}},
                python="/venv/bin/python", doctor="/venv/bin/python")
    assert _fix_hint(_terminal(job)) == "dsv4-doctor fix (the same --job-args/--job-cwd) > fix.sh"
    given = _with(job, {"cp_source": "option"})
    assert _fix_hint(_terminal(given)) == "dsv4-doctor fix --cp 2 (the same --job-args/--job-cwd) > fix.sh"


def test_a_fix_step_already_met_is_not_shown_as_a_command_to_run(local_report):
    """The plan drops a pip step whose pins the copy the job imports already has (fixplan.already_met); the text and
    markdown reports do too, and a fix whose every command is met goes whole. The JSON keeps every fix."""
    from dataclasses import replace

    from dsv4_doctor.report.dispatch import render

    frontend = ["pip", "install", "--force-reinstall", "--no-deps", "nvidia-cudnn-frontend==1.27.0"]
    tvm = ["pip", "install", "--no-deps", "apache-tvm-ffi==0.1.11"]
    report = _with(local_report)
    row = next(c for c in report["checks"] if c["status"] == "fail" and c.get("fixes"))
    others = [cmd for f in row["fixes"] for cmd in f["commands"]]
    row["fixes"] += [
        {"description": "Install the tested set", "commands": [" ".join(frontend), " ".join(tvm)],
         "argv": [frontend, tvm], "id": "fe-set", "phase": "pin", "manual": False, "notes": []},
        {"description": "Install the frontend alone", "commands": [" ".join(frontend)], "argv": [frontend],
         "id": "fe-only", "phase": "pin", "manual": False, "notes": []}]
    met = replace(Report.from_wire(report), installed={"nvidia-cudnn-frontend": "1.27.0"})
    for fmt, verbosity in (("text", 0), ("text", 1), ("markdown", 0)):
        text = render(met, fmt, width=400, verbosity=verbosity)
        assert "nvidia-cudnn-frontend==1.27.0" not in text and "Install the frontend alone" not in text, fmt
        assert all(cmd in text for cmd in [*others, " ".join(tvm)]), fmt
    json_text = render(met, "json")
    assert " ".join(frontend) in json_text and "Install the frontend alone" in json_text
    older = replace(met, installed={"nvidia-cudnn-frontend": "1.26.0"})  # a pin that differs stays
    for fmt in ("text", "markdown"):
        text = render(older, fmt, width=400, verbosity=1)
        assert " ".join(frontend) in text and "Install the frontend alone" in text, fmt
    assert "Install the frontend alone" in render(Report.from_wire(report), "text", width=400, verbosity=1)
