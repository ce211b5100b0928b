"""`dsv4-doctor triage [PATH ...]`: what the CLI calls. Exit 0 when a triage was printed (whatever its verdict),
2 on a usage error (no PATH and a terminal on standard input), 3 when the doctor itself failed part-way (what it
had is still printed, with the error), 4 when the output could not be written."""

from __future__ import annotations

import sys

from ..model.core import ExitCode, UsageError, defect_line
from . import doctorreport
from .locate import Located, locate
from .scan import Scanned, scan
from .streams import Skipped, Stream, gather
from .verdict import build


def _reports(streams: list[Stream]) -> tuple[list[Stream], list[doctorreport.DoctorReport]]:
    """The streams that are logs, and the doctor reports among them (by their schema key, not their name)."""
    from ..hostio.safeio import read_at

    logs, reports = [], []
    for stream in streams:
        if stream.path is not None and stream.path.endswith(".json"):
            found = doctorreport.read_report(stream.path, read_at(stream.path, 0, doctorreport.SNIFF))
            if found is not None:
                reports.append(found)
                continue
        logs.append(stream)
    return logs, reports


def triage(paths: list[str]) -> tuple[dict, str, int]:
    """The triage as data, as text, and the exit code (0, or 3 when it failed part-way)."""
    from .render import as_text

    scanned: list[Scanned] = []
    skipped: list[Skipped] = []
    located = Located(None, False)
    note = None
    code = 0
    try:
        streams, skipped = gather(paths)
        logs, reports = _reports(streams)
        for index, stream in enumerate(logs):
            scanned.append(scan(stream, index))
        located = locate(scanned)
        first = located.first
        result = build(located)
        if result["causes"] and reports:
            said = doctorreport.tie_in(reports, result["causes"][0]["check"], first.rank if first else None,
                                       first.host if first else None)
            result = build(located, said)
    except Exception as exc:  # a defect of the doctor's own: the report of what it had, and exit 3
        note = f"dsv4-doctor triage: internal error, the triage is incomplete: {defect_line(exc)}"
        code = int(ExitCode.INTERNAL)
        try:
            result = build(located)
        except Exception:
            result = build(Located(None, False))
    return result, as_text(result, located, scanned, skipped, note), code


def run(paths: list[str], fmt: str, output: str | None) -> int:
    from ..report.output import say, write_file, write_stdout
    from ..hostio.signals import GATE

    if not paths and sys.stdin is not None and sys.stdin.isatty():
        raise UsageError("give the logs to read (files or folders), or `-` or a pipe for standard input")
    GATE.install()
    try:
        GATE.arm()
        result, text, code = triage(list(paths))
    finally:
        GATE.shield()
        GATE.uninstall()
    if fmt == "json":
        from .render import as_json

        text = as_json(result)
    if output:
        problem = write_file(output, text)
        if problem is None:
            return code
        say(f"dsv4-doctor triage: could not write {output}: {problem}; the triage follows on stdout")
    if not write_stdout(text):
        return int(ExitCode.OUTPUT)
    return code if not output else int(ExitCode.OUTPUT)
