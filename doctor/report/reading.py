"""How much the text report shows by default, the same for every status, and a fix several rows share shown once.

The rule: in the default report a row that is shown (a failure, an error, a warning, a skip's notice) gives its
summary's first sentence in at most SUMMARY_LINES lines at the report's width, cut at a word with "…" where it is
longer (inside a long path); a fix without commands gives its description under the same rule. Fix commands are
never cut (they stay copy-pastable). `-v` shows every row's summary and fixes in full. One line each keeps the report
of an empty environment (seven failures, each with its commands) within 40 lines at 80 columns.

A fix that several rows share: a prerequisite (a step the plan runs before anything installs, such as pip's own
ensurepip) is shown once before the groups, at every level, and under no row; by default, any other shared fix with
commands is shown under the first row that has it, the later rows naming that row (a fix without commands, one line,
is said again). `dsv4-doctor fix` stays the place for the whole plan, in order. No rich here: plain strings, which
report/terminal.py styles.
"""

from __future__ import annotations

import shlex
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .output import line_text

if TYPE_CHECKING:
    from ..model.report import Report, Row, ShownFix

SUMMARY_LINES = 1  # a shown row's summary (every status alike), a skip's notice, a fix without commands
# The phases whose steps come before anything installs (doctor/fix/steps.py Phase): a shared one is a prerequisite.
PREREQUISITE_PHASES = ("path", "toolchain")


def first_sentence(text: str) -> str:
    """A summary's or a fix's first sentence, on one line (the rest is for -v)."""
    line = " ".join(str(text).split())
    cut = line.find(". ")
    return line[:cut + 1] if cut > 0 else line


def _cells(char: str) -> int:
    """The columns a character takes in a terminal (wide East Asian characters two, combining marks none)."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _fitting(text: str, start: int, width: int) -> int:
    """The end of the longest run of `text` from `start` that fits `width` columns."""
    used, end = 0, start
    while end < len(text) and used + _cells(text[end]) <= width:
        used += _cells(text[end])
        end += 1
    return end


def clip(text: str, first: int, rest: int, lines: int, ellipsis: str = "…") -> int | None:
    """Where to cut `text` so that it, with `ellipsis` after it, fits `lines` lines wrapped at words: `first`
    columns on the first line, `rest` on each after (a hanging indent); at a word, or inside a word so long that
    cutting before it would leave a third of the last line empty. None when the whole text fits."""
    pos = 0
    for line in range(max(1, lines)):
        width = max(1, first if line == 0 else rest)
        while line and pos < len(text) and text[pos] == " ":
            pos += 1  # a wrapped line starts at a word
        end = _fitting(text, pos, width)
        if end >= len(text):
            return None
        if line == lines - 1:
            end = _fitting(text, pos, width - sum(map(_cells, ellipsis)))
        space = text.rfind(" ", pos, end + 1)  # the break at a word: the last space the line reaches
        if line == lines - 1:  # at a word, unless that leaves a third of the line empty (a long path): inside it
            return space if space > pos + 2 * (end - pos) // 3 else end
        pos = space + 1 if space > pos else end
    return None


def clipped(text: str, first: int, rest: int, lines: int, ellipsis: str = "…") -> str:
    """`text` cut by `clip`, with the ellipsis where it was cut."""
    cut = clip(text, first, rest, lines, ellipsis)
    return text if cut is None else text[:cut].rstrip() + ellipsis


def _key(fix: ShownFix) -> tuple:
    """A fix as the report shows it: two rows share a fix when they show the same one."""
    return (fix.phase, fix.manual, fix.description, tuple(fix.commands))


@dataclass
class Shared:
    """The fixes of the rows shown, with what several of them share taken out."""

    prerequisites: list[Any] = field(default_factory=list)  # shown once, before the groups
    needed_by: int = 0  # how many rows shown need the prerequisites
    with_commands: int = 0  # how many rows shown have a command to run besides them
    own: dict[str, list[Any]] = field(default_factory=dict)  # per row id: the fixes shown under it
    same_as: dict[str, list[str]] = field(default_factory=dict)  # per row id: the earlier rows that show the rest
    same_at: dict[str, int] = field(default_factory=dict)  # per row id: where among its own fixes they are named


def shared(rows: list[tuple[Row, list]], dedupe: bool = True) -> Shared:
    """`rows` (each with the fixes it shows, in the report's order): the prerequisites two or more of them share,
    and, when `dedupe`, each later row's share of the fixes an earlier row shows."""
    counts: dict[tuple, int] = {}
    for _, fixes in rows:
        for key in {_key(f) for f in fixes}:
            counts[key] = counts.get(key, 0) + 1
    out = Shared()
    prerequisite_keys: list[tuple] = []
    shown_under: dict[tuple, str] = {}
    for row, fixes in rows:
        own: list[Any] = []
        same: list[str] = []
        needs = False
        for fix in fixes:
            key = _key(fix)
            if fix.phase in PREREQUISITE_PHASES and counts[key] > 1:
                needs = True
                if key not in prerequisite_keys:
                    prerequisite_keys.append(key)
                    out.prerequisites.append(fix)
            elif dedupe and key in shown_under and fix.commands:  # prose is one line: said again
                out.same_at.setdefault(row.id, len(own))
                if shown_under[key] not in same:
                    same.append(shown_under[key])
            else:
                shown_under.setdefault(key, row.id)
                own.append(fix)
        out.needed_by += needs
        out.with_commands += any(f.commands for f in fixes if f not in out.prerequisites)
        out.own[row.id], out.same_as[row.id] = own, same
    return out


def _python_word(report: Report) -> str:
    """The target interpreter as a command's first word: its path where it prints safely, else `python`."""
    path = report.target_python.get("executable")
    if isinstance(path, str) and path.startswith("/") and path.isprintable() and line_text(path) == path \
            and "REDACTED" not in path and len(path) <= 160:
        return shlex.quote(path)
    return "python"


def command_shown(report: Report, fix: ShownFix, index: int) -> str:
    """A fix's command as the text report prints it: a pip command as `pip ...`; the target's own ensurepip or venv
    with the interpreter that runs it (`/venv/bin/python -I -m ensurepip --upgrade`), as the plan runs it."""
    text = fix.commands[index]
    argv = fix.argv[index] if index < len(fix.argv) else ()
    if argv and argv[0] in ("ensurepip", "venv") and text.endswith(shlex.join(argv)):
        head = text[:len(text) - len(shlex.join(argv))]
        return f"{head}{_python_word(report)} -I -m {shlex.join(argv)}"
    return text
