"""The text report's reading levels (doctor/report/reading.py, terminal.py), with the real CLI on real virtual
environments: an empty one with pip (`bare_python`, made as `python -m venv` makes it) and one made with
`python -m venv --without-pip`, whose every pip step needs the interpreter's own ensurepip first.

- The default report of an empty venv fits 40 lines at 80 columns, with pip or without: the shared ensurepip step
  is shown once, before the groups, and under no row.
- One truncation rule for every status: a shown row's summary is its first sentence on one line, cut at a word with
  "…", a failure's and a warning's alike.
- -v shows every row's summary, details and fixes in full; -vv adds the evidence; -vvv the sources.
- A fix with commands that several rows share is shown under the first of them; the others name that row.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import run_doctor
from dsv4_doctor.report.reading import clip, clipped, first_sentence

ROW_HEAD = re.compile(r"^    \S (PASS|WARN|FAIL|ERROR|SKIP)\s+(\S+)  (.*)$")
FIRST = "  # first: every command below needs pip"


@pytest.fixture(scope="module")
def no_pip_python(tmp_path_factory) -> str:
    """A real `python -m venv --without-pip`: no pip, but the interpreter's ensurepip with its bundled wheel."""
    root = tmp_path_factory.mktemp("nopip") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    return str(root / "bin" / "python")


@pytest.fixture(scope="module")
def pythons(bare_python, no_pip_python) -> dict[str, str]:
    return {"with pip": bare_python, "without pip": no_pip_python}


def _check(python: str, *args: str, columns: int = 80, sites=()) -> str:
    """The piped text report of `dsv4-doctor check` at `columns` columns."""
    run = run_doctor("check", *args, python=python, sites=sites, env={"COLUMNS": str(columns)})
    assert run.returncode == 1 and "\x1b" not in run.stdout, run.stderr[-2000:]
    return run.stdout


def _json(python: str, *args: str, sites=()) -> dict:
    return run_doctor("check", *args, "-f", "json", python=python, sites=sites).report


def _heads(text: str) -> dict[str, str]:
    """Each row shown: its id and its head line's text after the id."""
    return {m.group(2): m.group(3) for m in map(ROW_HEAD.match, text.splitlines()) if m}


@pytest.mark.parametrize("which", ["with pip", "without pip"])
def test_an_empty_venv_s_report_is_at_most_40_lines_at_80_columns(pythons, which):
    python = pythons[which]
    text = _check(python)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= 40, f"{len(lines)} lines:\n{text}"
    assert all(len(line) <= 80 or line.startswith("      ") for line in lines), text  # only commands pass 80
    report = _json(python)
    failures = [c for c in report["checks"] if c["status"] == "fail"]
    assert len(failures) >= 7 and set(_heads(text)) >= {c["id"] for c in failures}
    ensurepip = [c["id"] for c in failures for f in c["fixes"] if "ensurepip --upgrade" in f["commands"]]
    if which == "with pip":
        assert not ensurepip and "ensurepip" not in text and FIRST not in text
        return
    # Every failure's fixes start with the interpreter's own ensurepip; the report says it once, before the groups.
    assert sorted(ensurepip) == sorted(c["id"] for c in failures)
    first = f"      {python} -I -m ensurepip --upgrade{FIRST}"  # the command, copy-pastable, and why
    assert text.count("ensurepip") == 1 and lines.count(first) == 1
    assert lines.index(first) < next(i for i, line in enumerate(lines) if line.startswith("[")), "not first"


def test_one_truncation_rule_for_a_failure_and_a_warning_alike(no_pip_python):
    """Each shown row's summary: its first sentence, whole where it fits the line, else cut at a word with "…"
    (a failure's and a warning's by the same rule); the line never wraps."""
    text = _check(no_pip_python)
    lines = text.splitlines()
    heads = _heads(text)
    cut = set()
    for row in _json(no_pip_python)["checks"]:
        if row["id"] not in heads:
            continue
        shown, sentence = heads[row["id"]], first_sentence(row["summary"])
        line = next(i for i, line in enumerate(lines) if ROW_HEAD.match(line) and f"  {row['id']}  " in line)
        assert len(lines[line]) <= 80 and not lines[line + 1].startswith("            "), lines[line:line + 2]
        if shown == sentence:
            continue
        assert shown.endswith("…"), shown
        kept = shown[:-1]
        assert sentence.startswith(kept) and sentence[len(kept)] == " ", (kept, sentence)  # at a word
        assert len(lines[line]) + len(sentence.split()[len(kept.split())]) + 1 > 80  # the next word had no room
        cut.add(row["status"])
    assert {"fail", "warn"} <= cut, f"no failure and warning long enough to show the rule: {cut}\n{text}"


@pytest.mark.parametrize("level", ["default", "-v", "-vv", "-vvv"])
def test_each_verbose_level_shows_what_it_says(no_pip_python, level):
    report = _json(no_pip_python)
    text = _check(no_pip_python, *([] if level == "default" else [level]), columns=200)
    words = " ".join(text.split())
    rows = report["checks"]
    shown = set(_heads(text))
    full = [" ".join(c["summary"].split()) for c in rows if c["status"] == "fail"]
    torch_fix = next(f for c in rows if c["id"] == "torch.install" for f in c["fixes"] if f["manual"])
    assert text.count("ensurepip") == 1 and FIRST in text  # the prerequisite once, at every level
    if level == "default":
        assert shown == {c["id"] for c in rows if c["status"] in ("fail", "warn", "error")}
        assert "-v shows every row in full, -vv with its evidence, -vvv its sources" in words
        assert [s for s in full if s not in words], "no failure's summary is longer than its first sentence"
        assert torch_fix["description"] not in words and "evidence:" not in text
        return
    # -v and more: every row (passes and skips too), summaries and fix descriptions in full, each row's details.
    assert shown == {c["id"] for c in rows}
    assert all(s in words for s in full)
    assert " ".join(torch_fix["description"].split()[:12]) in words and "Fix (manual): " in text
    details = [c for c in rows if c["details"].strip()]
    assert details and all(" ".join(c["details"].split()[:6]) in words for c in details)
    assert "-v shows every row" not in text
    assert ("evidence:" in text) is (level != "-v")
    assert ("Long pole: probe " in text) is (level != "-v")
    assert ("source: " in text) is (level == "-vvv")
    assert [c for c in rows if c.get("sources")]


def test_a_fix_several_rows_share_is_shown_under_the_first_of_them(no_pip_python):
    """The frontend 1.26.0 and tvm-ffi 0.1.9 wheels for a GB200 job: cudnn-fe.csa and cudnn-fe.dsa share the tested
    set's commands and torch's manual step with torch.install. By default each command is shown once, the later rows
    naming the row above that shows it; -v shows each row's fixes in full."""
    from wheels import ensure

    sites = (ensure("nvidia-cudnn-frontend-1.26.0"), ensure("apache-tvm-ffi-0.1.9"))
    args = ("--gpu-arch", "10.0", "--only", "torch.*,cudnn-fe.*,tvm-ffi.*")
    report = _json(no_pip_python, *args, sites=sites)
    rows = {c["id"]: c for c in report["checks"] if c["status"] in ("fail", "warn", "error")}
    commands = {cmd for c in rows.values() for f in c["fixes"] for cmd in f["commands"] if "ensurepip" not in cmd}
    shared = {cmd for cmd in commands if sum(any(cmd in f["commands"] for f in c["fixes"]) for c in rows.values()) > 1}
    assert {"cudnn-fe.csa", "cudnn-fe.dsa", "torch.install"} <= set(rows) and shared, rows.keys()
    text = _check(no_pip_python, *args, columns=400, sites=sites)
    lines = [line.strip().removesuffix("  # manual step") for line in text.splitlines()]
    assert all(lines.count(cmd) == 1 for cmd in commands), text
    assert "Fix: as for cudnn-fe.csa and torch.install (above)" in lines, text
    verbose = [line.strip() for line in _check(no_pip_python, "-v", *args, columns=400, sites=sites).splitlines()]
    assert all(verbose.count(cmd) > 1 for cmd in shared) and not [line for line in verbose if "as for" in line]


@pytest.mark.parametrize("text, first, rest, lines, cut", [
    ("short enough", 20, 20, 1, None),
    ("one two three four", 10, 10, 1, 7),  # "one two" and the ellipsis: at a word
    ("one two three four", 10, 8, 2, 13),  # "one two" / "three…"
    ("see (/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib, ...)", 30, 30, 1, 29),  # inside a path
    ("全角の文字 wide text", 8, 8, 1, 3),  # two columns each: three and the ellipsis fill seven of eight
])
def test_clip_cuts_at_a_word_within_the_lines_given(text, first, rest, lines, cut):
    assert clip(text, first, rest, lines) == cut
    if cut is not None:
        assert clipped(text, first, rest, lines).endswith("…")
