"""The report as a person reads it in a terminal: grouped by area, worst first, the verdict first and last.

Built from rich `Text` objects only, so nothing read from the environment is ever parsed as markup; every string
from the report passes the output layer's cleaning and redaction first. Fix commands are printed with soft wrap:
rich never wraps, crops or re-flows them, so they stay copy-pastable. Only this module and its lines
(report/lines.py) import rich, and only the text report imports this module: JSON, JUnit and markdown never load it.
How much the default report shows of a row, and a fix several rows share shown once: report/reading.py.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from .shown import (LABEL, accepted_shown, cp_hint, cp_shown, fixes_shown, level_shown, python_why, shown,
                    verdict_line)
from .hint import fix_command as fix_command, next_step
from .lines import Out, clipped_text
from .reading import SUMMARY_LINES, Shared, command_shown, first_sentence, shared
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
EVIDENCE_LINES = 40  # of one row's evidence at -vv; the JSON report has all of it
# The levels: 0 the rows that need attention, cut to one rule (report/reading.py); -v every row's summary, details and
# fixes in full; -vv with its evidence; -vvv with its sources.
EVIDENCE, SOURCES = 2, 3
NEEDS = {"install-pip": "pip"}  # what a prerequisite step gives, by its action's kind (doctor/fix/steps.py Fix.action)


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


def _row_head(c: Row, marks: dict[str, str]) -> Text:
    s = _status(c)
    accepted = f" [{_clean(accepted_shown(c))}]" if c.accepted else ""  # the team's acceptance, beside its warning
    return Text.assemble((f"{marks[s]} {LABEL[s]:<5} ", STYLE[s]), (_clean(c.id), "bold"), "  ", _clean(c.summary),
                         (accepted, "dim"))


def _notice(c: Row) -> str | None:
    """A skipped row's one-line notice (evidence `notice`): shown by default, a skip all the same."""
    notice = c.evidence.get("notice") if _status(c) == "skip" and isinstance(c.evidence, dict) else None
    return notice if isinstance(notice, str) and notice else None


def _short(out: Out, report: Report, c: Row, found: Shared, marks: dict[str, str], ascii_only: bool) -> None:
    """A row that needs attention, as the default report gives it (one rule for every status, report/reading.py):
    its summary's first sentence in at most SUMMARY_LINES lines; the earlier rows whose fixes it shares; then each of
    its own fixes' commands (never cut: copy-pastable), or a fix without commands under the summary's rule."""
    s = _status(c)
    head = Text.assemble((f"{marks[s]} {LABEL[s]:<5} ", STYLE[s]), (_clean(c.id), "bold"), "  ",
                         _clean(first_sentence(c.summary)))
    accepted = f" [{_clean(accepted_shown(c))}]" if c.accepted else ""  # the team's acceptance, whole
    out.line(clipped_text(out, head, 4, 8, SUMMARY_LINES, ascii_only) + Text(accepted, "dim"), indent=4, hang=8)
    fixes, same_as = found.own[c.id], found.same_as[c.id]
    for n, fix in enumerate([*fixes, None]):
        if same_as and n == found.same_at[c.id]:  # where the row's first shared fix was
            _prose(out, Text.assemble(("Fix: ", "bold"), f"as for {' and '.join(map(_clean, same_as))} (above)"),
                   ascii_only)
        if fix is None:
            break
        for i in range(len(fix.commands)):  # a manual step says so in a shell comment: the line stays copy-pastable
            out.raw(_text(command_shown(report, fix, i), "cyan") + Text("  # manual step" if fix.manual else "",
                                                                        "dim"), indent=6)
        if not fix.commands:
            _prose(out, Text.assemble(("Fix: ", "bold"), _text(first_sentence(fix.description))), ascii_only)


def _prose(out: Out, text: Text, ascii_only: bool) -> None:
    """A fix's line of prose in the default report: at most SUMMARY_LINES lines, as a summary."""
    out.line(clipped_text(out, text, 6, 4, SUMMARY_LINES, ascii_only), indent=6, hang=4)


def _prerequisites(out: Out, report: Report, found: Shared, ascii_only: bool) -> None:
    """The steps several rows' fixes need first, once, before the groups: pip's own ensurepip as its command with a
    comment, on one line (`/venv/bin/python -I -m ensurepip --upgrade  # first: every command below needs pip`);
    another as its description's first sentence, then its commands."""
    for fix in found.prerequisites:
        who = "every command below" if found.needed_by >= found.with_commands else \
            f"the commands of {found.needed_by} rows below"
        need = NEEDS.get(str((fix.action or {}).get("kind")))
        if not need or not fix.commands:
            head = Text.assemble(("First", "bold"), f", for {who}: ", _text(first_sentence(fix.description)))
            out.line(clipped_text(out, head, 0, 4, SUMMARY_LINES, ascii_only), hang=4)
        for i in range(len(fix.commands)):
            said = [*(["manual step"] if fix.manual else []), *([f"first: {who} needs {need}"] if need else [])]
            out.raw(_text(command_shown(report, fix, i), "cyan") + Text(f"  # {'; '.join(said)}" if said else "",
                                                                        "dim"), indent=6)


def _fixes(out: Out, report: Report, fixes: list) -> None:
    for fix in fixes:
        tag = " (manual)" if fix.manual else ""
        first, *more = fix.description.splitlines() or [""]
        out.line(Text.assemble((f"Fix{tag}: ", "bold"), _text(first)), indent=6, hang=4)
        for line in more:
            if line.startswith("  "):
                out.raw(_text(line.strip()), indent=10)
            else:
                out.line(_text(line), indent=10)
        for i in range(len(fix.commands)):
            out.raw(_text(command_shown(report, fix, i), "cyan"), indent=10)
        if fix.notes:
            out.line(_text(" ".join(fix.notes)), indent=10)


def _details(out: Out, c: Row) -> None:
    for line in c.details.rstrip().splitlines():
        # An indented line is preformatted (a command, a job setting, a quoted log line): never wrapped.
        if line.startswith("  "):
            out.raw(_text(line), indent=6)
        else:
            out.line(_text(line), indent=6)


def _evidence(out: Out, c: Row) -> None:
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


def _sources(out: Out, c: Row) -> None:
    for src in c.sources:
        title = _clean(src.title)
        out.line(Text.assemble(("source: ", "dim"), title + (": " if title else "")) +
                 _text(src.url, "blue"), indent=6, hang=4)


def _body(report: Report, out: Out, verbosity: int, ascii_only: bool) -> None:
    from .text import fleet_lead, job_line, long_pole_line

    glyphs, marks = (ASCII_GLYPHS, ASCII_MARKS) if ascii_only else (GLYPHS, MARKS)
    verdict = Text(_clean(verdict_line(report)), style=STYLE.get(report.summary.status.value, ""))
    from .versions import report_lines

    for line in report_lines(report, out.console.width):  # what was found, first; packed to fit, never wrapped
        out.raw(_text(line))
    out.line(_text(top_line(report), "bold"))
    out.line(verdict.copy())
    pole = long_pole_line(report) if verbosity >= EVIDENCE else None
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
    groups = grouped(report)
    found = shared([(c, fixes_shown(report, c)) for _, rows in groups for c in rows
                    if verbosity or _status(c) not in ("pass", "skip")], dedupe=not verbosity)
    _prerequisites(out, report, found, ascii_only)
    skipped = 0
    fine: list[Text] = []  # default: the areas with nothing to attend to, on shared lines after the rest
    for area, rows in groups:
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
                notice = _notice(c)
                if notice:  # a skip that still has something to say, under the rule a summary has
                    note = Text.assemble((f"{marks[s]} NOTE  ", STYLE[s]), (_clean(c.id), "bold"), "  ",
                                         _clean(first_sentence(notice)))
                    out.line(clipped_text(out, note, 4, 8, SUMMARY_LINES, ascii_only), indent=4, hang=8)
                continue
            if verbosity == 0:
                _short(out, report, c, found, marks, ascii_only)
                continue
            out.line(_row_head(c, marks), indent=4, hang=8)
            _details(out, c)
            _fixes(out, report, found.own[c.id])
            if verbosity >= EVIDENCE:
                _evidence(out, c)
            if verbosity >= SOURCES:
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
        out.line(Text(f"{more}-v shows every row in full, -vv with its evidence, -vvv its sources", style="dim"))
    step = next_step(report)
    if step.startswith("next: ") and len(verdict.plain) + 2 + len(step) > out.console.width:
        # The command on a line of its own, never wrapped (as a fix command): it stays copy-pastable.
        out.line(Text.assemble(verdict, "; next:"))
        out.raw(_text(step[len("next: "):], "cyan"), indent=6)
    else:
        out.line(Text.assemble(verdict, f"; {step}"))


def _trailer(report: Report, out: Out) -> None:
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
    _body(report, Out(console), max(0, min(SOURCES, verbosity)), ascii_only)


def render_terminal(report: Report, verbosity: int = 0, width: int = 100, color: bool = False,
                    encoding: str = "utf-8") -> str:
    """The terminal report as text (ANSI styles only when `color`); ASCII glyphs when `encoding` is not UTF-8."""
    console = make_console(width, color)
    render_to(console, report, verbosity, ascii_only=not _is_utf8(encoding))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in out.splitlines()) + "\n"


def _is_utf8(encoding: str | None) -> bool:
    return str(encoding or "").lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
