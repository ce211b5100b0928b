"""The inputs as streams: each PATH a file, or a folder whose every regular file (any depth) is one stream; `-`
standard input. What is not read is named with why, never waited on: FIFOs, devices, sockets, symlink loops,
links to folders (not followed) and files that cannot be opened. Files are read through the doctor's one read path
(safeio.read_chunks: O_NONBLOCK, checked on the opened descriptor), in pieces, never whole."""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from ..hostio.safeio import ReadRefused, fd_chunks, read_chunks

CHUNK = 1 << 20
MAX_STREAMS = 10_000  # files in all; more are named as skipped, not read
MAX_DEPTH = 32
STDIN = "<stdin>"


@dataclass(frozen=True)
class Stream:
    name: str  # as the user named it (the path, or <stdin>)
    path: str | None  # None: standard input


@dataclass(frozen=True)
class Skipped:
    name: str
    why: str


def _natural(name: str) -> list:
    """rank10 after rank2: numbers in a name compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _kind(mode: int) -> str | None:
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _look(path: str) -> str | None:
    """Why `path` is not read (None: a regular file, possibly through a link). stat only: nothing is opened."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return "a link to nothing"
        return exc.strerror or str(exc)
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    kind = _kind(st.st_mode)
    if kind is not None:
        return f"{kind}, not a regular file"
    if not os.access(path, os.R_OK):
        return "not readable (permission denied)"
    return None


def _walk(folder: str, streams: list[Stream], skipped: list[Skipped], depth: int = 0) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: _natural(e.name))
    except OSError as exc:
        skipped.append(Skipped(folder, exc.strerror or str(exc)))
        return
    for entry in entries:
        path = entry.path
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError as exc:
            skipped.append(Skipped(path, exc.strerror or str(exc)))
            continue
        if is_dir:
            if depth >= MAX_DEPTH:
                skipped.append(Skipped(path, f"deeper than {MAX_DEPTH} folders"))
            else:
                _walk(path, streams, skipped, depth + 1)
            continue
        why = _look(path)
        if why == "a folder" and is_link:
            why = "a link to a folder (not followed)"
        if why is not None:
            skipped.append(Skipped(path, why))
        elif len(streams) >= MAX_STREAMS:
            skipped.append(Skipped(path, f"more than {MAX_STREAMS} files"))
        else:
            streams.append(Stream(path, path))


def gather(paths: list[str]) -> tuple[list[Stream], list[Skipped]]:
    """The streams PATHs name, in their order (a folder's files sorted by name, numbers as numbers), and what was
    skipped. No PATH or `-`: standard input."""
    streams: list[Stream] = []
    skipped: list[Skipped] = []
    for path in paths or ["-"]:
        if path == "-":
            if not any(s.path is None for s in streams):
                streams.append(Stream(STDIN, None))
            continue
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            is_dir = False
        if is_dir:
            _walk(path, streams, skipped)
            continue
        why = _look(path)
        if why is not None:
            skipped.append(Skipped(path, why))
        else:
            streams.append(Stream(path, path))
    return streams, skipped


def chunks(stream: Stream) -> Iterator[bytes]:
    """The stream's bytes in pieces. Raises ReadRefused (at the first piece) when it cannot be read after all: it
    changed between the look and the open (a FIFO put in its place is refused, never waited on)."""
    if stream.path is None:
        return fd_chunks(sys.stdin.fileno(), CHUNK)
    return read_chunks(stream.path, CHUNK)


MAX_LINE = 8 * 1024  # bytes of one line kept; the rest of a longer line is dropped (and said)


def lines(pieces: Iterator[bytes]) -> Iterator[tuple[bytes, bool]]:
    """(line without its end, cut) for each line, at most MAX_LINE bytes of each: a 10 MB line costs one kept
    prefix, never 10 MB in memory. Lines are numbered as an editor numbers them (a CRLF line ends at its LF)."""
    head = b""  # the kept start of the line that is not yet ended
    cut = False
    for piece in pieces:
        parts = piece.split(b"\n")
        for part in parts[:-1]:
            if cut:
                yield head, True
            else:
                line = head + part if head else part
                if line.endswith(b"\r"):
                    line = line[:-1]
                yield (line[:MAX_LINE], True) if len(line) > MAX_LINE else (line, False)
            head, cut = b"", False
        tail = parts[-1]
        if not cut:
            head += tail
            if len(head) > MAX_LINE:
                head, cut = head[:MAX_LINE], True
    if head or cut:
        yield head, cut


__all__ = ["ReadRefused", "Skipped", "Stream", "chunks", "gather", "lines"]
