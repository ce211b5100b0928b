"""One pass over one stream: its failure candidates, bounded. Every line costs one byte-level look (symptoms.
CANDIDATE); only a line it finds is decoded, cleaned, stripped of its launcher prefixes and classified. A stream
keeps at most KEPT failure lines per rank (or worker) and KEPT consequences, each with a few lines of context, so
memory does not grow with the log."""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field

from ..upstream.registry import cleaned
from ..hostio.validtext import valid_text
from . import layouts, symptoms, timestamps
from .streams import Stream, chunks, lines

KEPT = 32  # failure lines kept per rank (or worker) of a stream, and consequences per stream
BEFORE, AFTER = 4, 3  # lines of context kept around a failure line
LOOKBACK = 40  # lines looked back for a time, when a failure line states none (a traceback's last line)
MAX_KEYS = 1024  # ranks and workers told apart in one stream
MAX_LOGGED = 256  # error-level log lines of a stream looked up in the registry (the rest are not failures)


def registry_matches(text: str) -> bool:
    from .match import causes_in

    return bool(causes_in(text))


@dataclass
class Line:
    stream: int  # the stream's index, in the order the inputs were given
    file: str
    number: int  # 1-based
    text: str  # cleaned, without launcher prefixes, cut
    rank: int | None
    host: str | None
    worker: str | None
    rule: symptoms.Rule
    time: float | None
    cut: bool = False
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)

    @property
    def who(self) -> tuple:
        return (self.stream, self.rank, self.worker, self.host)


@dataclass
class Scanned:
    stream: Stream
    index: int
    failures: list[Line] = field(default_factory=list)
    consequences: list[Line] = field(default_factory=list)
    lines: int = 0
    cut_lines: int = 0
    dropped: int = 0  # failure lines and consequences past the bounds (counted, not kept)
    refused: str | None = None  # why it could not be read after all
    logged_looked: int = 0


def text_of(raw: bytes) -> str:
    """A line as text: undecodable bytes as \\xNN (never an error), terminal escapes removed."""
    return cleaned(valid_text(raw.decode("utf-8", "surrogateescape"))).replace("\x00", "")


def _year(stream: Stream) -> int:
    try:
        stamp = os.stat(stream.path).st_mtime if stream.path else time.time()
    except OSError:
        stamp = time.time()
    return time.gmtime(stamp).tm_year


def scan(stream: Stream, index: int) -> Scanned:
    from .streams import ReadRefused

    out = Scanned(stream, index)
    default = layouts.of_path(stream.path or "")
    year = _year(stream)
    ring: deque[bytes] = deque(maxlen=LOOKBACK)
    waiting: list[Line] = []  # kept lines still taking their AFTER context
    per_key: dict[tuple, int] = {}
    number = 0
    try:
        for raw, was_cut in lines(chunks(stream)):
            number += 1
            out.cut_lines += was_cut
            if waiting:
                shown = text_of(raw)
                for line in waiting:
                    line.after.append(shown)
                waiting = [w for w in waiting if len(w.after) < AFTER]
            if symptoms.CANDIDATE.search(raw) or symptoms.upstream_anchor(raw):
                kept = _candidate(out, raw, was_cut, number, default, year, ring, per_key)
                if kept is not None:
                    waiting.append(kept)
            ring.append(raw)
    except ReadRefused as exc:
        out.refused = str(exc)
    out.lines = number
    return out


def _candidate(out: Scanned, raw: bytes, was_cut: bool, number: int, default: layouts.Where, year: int,
               ring: deque, per_key: dict) -> Line | None:
    where, text = layouts.of_line(text_of(raw))
    rule = symptoms.classify_line(text.strip())
    if rule is None and registry_matches(text):
        rule = symptoms.UPSTREAM_TEXT
    if rule is None:
        return None
    rank = where.rank if where.rank is not None else default.rank
    worker = where.worker or default.worker
    host = where.host or default.host
    if rule.kind == symptoms.CONSEQUENCE:
        if len(out.consequences) >= KEPT:
            out.dropped += 1
            return None
    else:
        if rule.kind == symptoms.LOGGED:  # a failure only where a registry text matches it: looked up now, bounded
            out.logged_looked += 1
            if out.logged_looked > MAX_LOGGED or not registry_matches(text):
                return None
        key = (rank, worker, host, rule.kind)
        if key not in per_key and len(per_key) >= MAX_KEYS:
            out.dropped += 1
            return None
        if per_key.get(key, 0) >= KEPT:
            out.dropped += 1
            return None
        per_key[key] = per_key.get(key, 0) + 1
    stamp = timestamps.parse(text, year)
    if stamp is None:  # a traceback's last line states no time: the last line before it that did
        for earlier in reversed(ring):
            stamp = timestamps.parse(layouts.of_line(text_of(earlier[:timestamps.HEAD * 2]))[1], year)
            if stamp is not None:
                break
    before = [layouts.of_line(text_of(r))[1] for r in list(ring)[-BEFORE:]]
    line = Line(out.index, out.stream.name, number, text.strip(), rank, host, worker, rule, stamp, was_cut, before)
    (out.consequences if rule.kind == symptoms.CONSEQUENCE else out.failures).append(line)
    return line
