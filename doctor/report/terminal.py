"""The report as a person reads it in a terminal: grouped by area, worst first, the verdict first and last.

Built from rich `Text` objects only, so nothing read from the environment is ever parsed as markup; every string
from the report passes the output layer's cleaning and redaction first. Fix commands are printed with soft wrap:
rich never wraps, crops or re-flows them, so they stay copy-pastable. Only this module imports rich, and only the
text report imports this module: JSON, JUnit and markdown never load it.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from .shown import (LABEL, accepted_shown, cp_hint, cp_shown, fixes_shown, level_shown, python_why, shown,
                    verdict_line)
from .hint import fix_command as fix_command, next_step
from .output import line_text

if TYPE_CHECKING:
    from ..model.report import Report, Row

# Worst first: a failure before an error of the doctor's own, then warnings, passes and skips.
WORST_FIRST = ("fail", "error", "warn", "pass", "skip")
STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim", "error": "bold magenta"}
GLYPHS = {"pass": "[✓]", "warn": "[!]", "fail": "[✗]", "error": "[✗]", "skip": "[-]"}
ASCII_GLYPHS = {"pass": "[+]", "warn": "[!]", "fail": "[x]", "error": "[x]", "skip": "[-]"}
MARKS = {"pass": "✓", "warn": "!", "fail": "✗", "error": "✗", "skip": "-"}
ASCII_MARKS = {"pass": "+", "warn": "!", "fail": "x", "error": "x", "skip": "-"}
ARCH_FROM = {"option": " (from --gpu-arch)", "detected": " (from nvidia-smi)"}  # where a known arch came from
EVIDENCE_LINES = 40  # of one row's evidence at -v; the JSON report has all of it


# Accessors: the only places that know the report's shape (report.Report).
def _checks(report: Report) -> tuple[Row, ...]:
    return report.checks


def _profile(report: Report) -> Any:
    return report.profile


def _target_python(report: Report) -> Any:
    return report.target_python


def _clean(value: Any) -> str:
    """A report string as the terminal may show it: redacted, without escapes or workflow commands."""
    return line_text(shown(value, ""))


def _text(value: Any, style: str = "") -> Text:
    return Text(_clean(value), style=style)


def area_of(check_id: str) -> str:
    return str(check_id).split(".", 1)[0]


def _area_key(area: str, order: tuple[str, ...]) -> tuple[int, str]:
    return (order.index(area) if area in order else len(order), area)


def _status(c: Row) -> str:
    s = c.status.value
    return s if s in WORST_FIRST else "error"


def worst(statuses: list[str]) -> str:
    """An area's status: its worst row's, or skip when every row was skipped."""
    for s in ("fail", "error", "warn", "pass"):
        if s in statuses:
            return s
    return "skip"


def grouped(report: Report) -> list[tuple[str, list[Row]]]:
    """The rows by area, worst first inside each, by id among equals."""
    areas: dict[str, list[Row]] = {}
    for c in _checks(report):
        areas.setdefault(area_of(c.id), []).append(c)
    from ..engine.registry import area_order

    order = (*area_order(), "plugin")  # the built-in areas as listed, then plugin rows; any other after, by name
    return [(area, sorted(rows, key=lambda c: (WORST_FIRST.index(_status(c)), c.id)))
            for area, rows in sorted(areas.items(), key=lambda kv: _area_key(kv[0], order))]


def top_line(report: Report) -> str:
    p = _profile(report)
    parts = [f"dsv4-doctor {shown(report.doctor_version)} checked",
             f"profile cp={cp_shown(p)} dsa-backend={shown(p.get('dsa_backend'))} "
             f"gpu-arch={shown(p.get('gpu_arch'))}{ARCH_FROM.get(str(p.get('gpu_arch_source')), '')}"
             + (" static-only" if p.get("static_only") else "") + level_shown(p),
             ]  # the interpreter and the GPUs: in the versions block above it
    said = [python_why(report), cp_hint(p)]
    return "; ".join(parts + [s for s in said if s])


def kernel_subruns_not_run(report: Report) -> list[str]:
    """The smoke.dsv4-kernels sub-runs that did not pass, even when the row itself passed."""
    lines = []
    for c in _checks(report):
        if c.id != "smoke.dsv4-kernels":
            continue
        subruns = c.evidence.get("subruns")
        for name, run in (subruns.items() if isinstance(subruns, dict) else []):
            if isinstance(run, dict) and run.get("status") != "pass":
                lines.append(f"kernel sub-run {name}: {shown(run.get('status'))}: {shown(run.get('summary'))}")
    return lines


class _Out:
    """Lines onto a rich console: wrapped prose with a hanging indent, or commands never wrapped."""

    def __init__(self, console: Console):
        self.console = console

    def line(self, text: Text, indent: int = 0, hang: int = 2) -> None:
        text.overflow = "fold"
        self.console.print(Padding(_hanging(text, hang), (0, 0, 0, indent)) if indent or hang else text)

    def raw(self, text: Text, indent: int = 0) -> None:
        self.console.print(Text(" " * indent) + text, soft_wrap=True, overflow="ignore", no_wrap=True, crop=False)

    def blank(self) -> None:
        self.console.print()


def _hanging(text: Text, hang: int) -> Any:
    return _Hang(text, hang) if hang else text


class _Hang:
    """A paragraph whose wrapped continuation lines are indented by `hang` columns."""

    def __init__(self, text: Text, hang: int):
        self.text, self.hang = text, hang

    def __rich_console__(self, console: Console, options: Any):
        from rich.segment import Segment

        width = max(20, options.max_width)
        # The text's own style as a span: the pieces below are rendered one by one, and a piece's render() applies
        # its spans only, never the style it inherited.
        styled = Text()
        styled.append(self.text)
        for p, para in enumerate(styled.split("\n", allow_blank=True)):
            lines = [] if p else list(para.wrap(console, width, overflow="fold"))[:1]
            if lines:
                yield from lines[0].render(console)
                yield Segment.line()
                offset = len(lines[0].plain)
                while offset < len(para.plain) and para.plain[offset] == " ":
                    offset += 1
                para = para[offset:]
            if not para.plain:
                continue
            for piece in para.wrap(console, width - self.hang, overflow="fold"):
                yield Segment(" " * self.hang)
                yield from piece.render(console)
                yield Segment.line()


def _row_head(c: Row, marks: dict[str, str]) -> Text:
    s = _status(c)
    accepted = f" [{_clean(accepted_shown(c))}]" if c.accepted else ""  # the team's acceptance, beside its warning
    return Text.assemble((f"{marks[s]} {LABEL[s]:<5} ", STYLE[s]), (_clean(c.id), "bold"), "  ", _clean(c.summary),
                         (accepted, "dim"))


def _notice(c: Row) -> str | None:
    """A skipped row's one-line notice (evidence `notice`): shown by default, a skip all the same."""
    notice = c.evidence.get("notice") if _status(c) == "skip" and isinstance(c.evidence, dict) else None
    return notice if isinstance(notice, str) and notice else None


def first_sentence(text: str) -> str:
    """A summary's or a fix's first sentence, on one line (the rest is for -v)."""
    line = " ".join(str(text).split())
    cut = line.find(". ")
    return line[:cut + 1] if cut > 0 else line


def _one_line(out: _Out, text: Text, indent: int, ascii_only: bool) -> None:
    """`text` on one line at `indent`: cut with an ellipsis where it would wrap (-v shows it in full)."""
    room = max(20, out.console.width - indent)
    if len(text.plain) > room:
        text.truncate(room - 1 if not ascii_only else room - 3)
        text.append("..." if ascii_only else "…")
    out.raw(text, indent=indent)


def _short(out: _Out, c: Row, fixes: list, marks: dict[str, str], ascii_only: bool) -> None:
    """A row that needs attention, as the default report gives it: a failure's summary as its first sentence on one
    line (a warning's in full), then each fix's commands (never cut: copy-pastable), or a fix without commands as its
    first sentence."""
    s = _status(c)
    if s == "warn":  # a warning's summary is all it has to say (it seldom has a command): in full
        out.line(_row_head(c, marks), indent=4, hang=8)
    else:
        _one_line(out, Text.assemble((f"{marks[s]} {LABEL[s]:<5} ", STYLE[s]), (_clean(c.id), "bold"), "  ",
                                     _clean(first_sentence(c.summary))), 4, ascii_only)
    for fix in fixes:
        for cmd in fix.commands:  # a manual step says so in a shell comment: the line stays copy-pastable
            out.raw(_text(cmd, "cyan") + Text("  # manual step" if fix.manual else "", "dim"), indent=6)
        if not fix.commands:
            _one_line(out, Text.assemble(("Fix: ", "bold"), _text(first_sentence(fix.description))), 6, ascii_only)


def _fixes(out: _Out, fixes: list) -> None:
    for fix in fixes:
        tag = " (manual)" if fix.manual else ""
        first, *more = fix.description.splitlines() or [""]
        out.line(Text.assemble((f"Fix{tag}: ", "bold"), _text(first)), indent=6, hang=4)
        for line in more:
            if line.startswith("  "):
                out.raw(_text(line.strip()), indent=10)
            else:
                out.line(_text(line), indent=10)
        for cmd in fix.commands:
            out.raw(_text(cmd, "cyan"), indent=10)
        if fix.notes:
            out.line(_text(" ".join(fix.notes)), indent=10)


def _details(out: _Out, c: Row) -> None:
    for line in c.details.rstrip().splitlines():
        # An indented line is preformatted (a command, a job setting, a quoted log line): never wrapped.
        if line.startswith("  "):
            out.raw(_text(line), indent=6)
        else:
            out.line(_text(line), indent=6)


def _evidence(out: _Out, c: Row) -> None:
    evidence = c.evidence
    if not evidence:
        return
    try:
        lines = json.dumps(evidence, indent=2, ensure_ascii=False, default=str).splitlines()
    except (TypeError, ValueError):
        lines = [str(evidence)]
    more = len(lines) - EVIDENCE_LINES
    out.line(Text("evidence:", style="dim"), indent=6)
    for line in lines[:EVIDENCE_LINES]:
        out.line(_text(line, "dim"), indent=8, hang=4)
    if more > 0:
        out.line(Text(f"... {more} more lines (-f json has all)", style="dim"), indent=8)


def _sources(out: _Out, c: Row) -> None:
    for src in c.sources:
        title = _clean(src.title)
        out.line(Text.assemble(("source: ", "dim"), title + (": " if title else "")) +
                 _text(src.url, "blue"), indent=6, hang=4)


def _body(report: Report, out: _Out, verbosity: int, ascii_only: bool) -> None:
    from .text import fleet_lead, job_line, long_pole_line

    glyphs, marks = (ASCII_GLYPHS, ASCII_MARKS) if ascii_only else (GLYPHS, MARKS)
    verdict = Text(_clean(verdict_line(report)), style=STYLE.get(report.summary.status.value, ""))
    from .versions import report_lines

    for line in report_lines(report, out.console.width):  # what was found, first; packed to fit, never wrapped
        out.raw(_text(line))
    out.line(_text(top_line(report), "bold"))
    out.line(verdict.copy())
    pole = long_pole_line(report) if verbosity >= 1 else None
    if pole:
        out.line(_text(pole, "dim"))
    job = job_line(report)
    if job:
        out.line(_text(job))
    lead = fleet_lead(report)
    if lead:
        out.blank()
        for line in lead:
            out.line(_text(line.strip()), indent=2 if line.startswith("  ") else 0, hang=4)
    subruns = kernel_subruns_not_run(report)
    if subruns:
        out.blank()
        for line in subruns:
            out.line(_text(line, "yellow"), hang=4)
    out.blank()
    skipped = 0
    fine: list[Text] = []  # default: the areas with nothing to attend to, on shared lines after the rest
    for area, rows in grouped(report):
        statuses = [_status(c) for c in rows]
        state = worst(statuses)
        counts = ", ".join(f"{statuses.count(s)} {LABEL[s].lower()}" for s in WORST_FIRST if s in statuses)
        head = Text.assemble((glyphs[state] + " ", STYLE[state]), (_clean(area), "bold"), f"  {counts}")
        if verbosity == 0 and state in ("pass", "skip") and not any(map(_notice, rows)):
            skipped += statuses.count("skip")
            fine.append(head)
            continue
        out.line(head)
        for c in rows:
            s = _status(c)
            if verbosity == 0 and s in ("pass", "skip"):
                skipped += s == "skip"
                if _notice(c):  # a skip that still has something to say, in one line
                    _one_line(out, Text.assemble((f"{marks[s]} NOTE  ", STYLE[s]), (_clean(c.id), "bold"), "  ",
                                                 _clean(_notice(c))), 4, ascii_only)
                continue
            if verbosity == 0:
                _short(out, c, fixes_shown(report, c), marks, ascii_only)
                continue
            out.line(_row_head(c, marks), indent=4, hang=8)
            if s in ("fail", "error", "warn") or verbosity:
                if verbosity:
                    _details(out, c)
                _fixes(out, fixes_shown(report, c))
            if verbosity:
                _evidence(out, c)
            if verbosity >= 2:
                _sources(out, c)
    packed = Text()
    for head in fine:  # packed, never an area's head split across lines
        if packed.plain and len(packed.plain) + 3 + len(head.plain) > out.console.width:
            out.raw(packed)
            packed = Text()
        packed.append_text(Text("   ") if packed.plain else Text())
        packed.append_text(head)
    if packed.plain:
        out.raw(packed)
    _trailer(report, out)
    out.blank()
    if verbosity == 0 and (skipped or any(_status(c) != "pass" for c in _checks(report))):
        more = f"{skipped} skipped; " if skipped else ""
        out.line(Text(f"{more}-v shows every row in full (details, fix descriptions, evidence)", style="dim"))
    step = next_step(report)
    if step.startswith("next: ") and len(verdict.plain) + 2 + len(step) > out.console.width:
        # The command on a line of its own, never wrapped (as a fix command): it stays copy-pastable.
        out.line(Text.assemble(verdict, "; next:"))
        out.raw(_text(step[len("next: "):], "cyan"), indent=6)
    else:
        out.line(Text.assemble(verdict, f"; {step}"))


def _trailer(report: Report, out: _Out) -> None:
    """What the text report says after the rows: plugins that failed to load, and the job settings to add."""
    from ..engine.registry import plugin_row_id

    row_ids = {c.id for c in _checks(report)}
    for p in report.plugins:
        if p.error and plugin_row_id(p.name or "") not in row_ids:
            out.line(_text(f"Plugin {p.name} from {p.distribution} failed to load: {p.error}", "bold magenta"))
    settings = report.job_settings
    cp_args = settings.get("cp_args") if settings else None
    block = cp_args if isinstance(cp_args, dict) else {}
    if settings and (block.get("missing") or settings.get("exports")):
        from ..job.settings import comment_lines

        out.blank()
        out.line(Text("Job settings (for the training command and the job script; the doctor never runs them):",
                      style="bold"))
        for line in comment_lines(settings):
            if line.startswith("  "):
                out.raw(_text(line), indent=2)
            else:
                out.line(_text(line), indent=2)


def make_console(width: int = 100, color: bool = False, record: bool = False) -> Console:
    return Console(file=StringIO(), width=max(40, width), force_terminal=color, no_color=not color,
                   color_system="standard" if color else None, record=record, highlight=False, emoji=False,
                   markup=False, legacy_windows=False, soft_wrap=False, force_jupyter=False,
                   force_interactive=False, _environ={})


def render_to(console: Console, report: Report, verbosity: int = 0, ascii_only: bool = False) -> None:
    _body(report, _Out(console), max(0, min(2, verbosity)), ascii_only)


def render_terminal(report: Report, verbosity: int = 0, width: int = 100, color: bool = False,
                    encoding: str = "utf-8") -> str:
    """The terminal report as text (ANSI styles only when `color`); ASCII glyphs when `encoding` is not UTF-8."""
    console = make_console(width, color)
    render_to(console, report, verbosity, ascii_only=not _is_utf8(encoding))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in out.splitlines()) + "\n"


def _is_utf8(encoding: str | None) -> bool:
    return str(encoding or "").lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
