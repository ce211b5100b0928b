"""Every read of a path the environment or the command line names, and of every file the doctor's own children write
(probe answers, probe and helper logs, stage lines): bounded, never blocking, read once where it is used once.

- Opened with O_NONBLOCK (a FIFO with no writer opens at once instead of waiting for one), O_CLOEXEC, and with
  `follow_links=False` O_NOFOLLOW; checked on the opened descriptor (fstat), so what is read is what was checked.
- Only a regular file is read, at most `limit` bytes. A FIFO (or a pipe, as `<(...)` gives) is read only where the
  caller allows it (`fifo_s`): in slices of a tenth of a second, until its writer closes it, `limit` bytes came or
  `fifo_s` passed; a stop signal noted by the signal gate meanwhile ends the read with `Interrupted`. Devices,
  sockets and directories are refused.
- Refusals are `ReadRefused` with a reason a person can act on ("it is a FIFO", "larger than 65536 bytes").
- What is read is decoded by the guarded decoders here (`decode_json`, `load_json`, `parse_python`): whatever a
  decoder raises on hostile bytes (a 100,000-deep nest: RecursionError or MemoryError; bad UTF-8; bad syntax) is a
  `ReadRefused` too. The engine decodes no YAML: verl's generated config is read by its lines (job/generated.py).

The probes, in the target interpreter, have their own copy of these rules (probes/dsv4probe_read.py, re-exported by
dsv4probe_common: read_bounded, read_tail, open_regular, decode_json, load_json, parse_python): stdlib only, Python
3.8+.
"""

from __future__ import annotations

import ast
import json
import os
import select
import stat
import time
from collections.abc import Iterator
from typing import Any

TICK_S = 0.1  # a FIFO's read is re-checked for a signal this often


class ReadRefused(Exception):
    """A path that is not read: its reason, in words ("it is a FIFO that no process writes")."""


def _open(path: str, follow_links: bool) -> int:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, flags)
    except OSError as exc:
        raise ReadRefused(exc.strerror or str(exc)) from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return name
    return "not a regular file"


def _stop_signal() -> int | None:
    from .signals import GATE

    return GATE.late or GATE.fired or GATE.pending


def _read_fifo(fd: int, limit: int, seconds: float) -> bytes:
    from ..model.core import Interrupted

    chunks: list[bytes] = []
    got, end = 0, time.monotonic() + seconds
    while got < limit:
        signum = _stop_signal()
        if signum is not None:
            raise Interrupted(signum)
        left = end - time.monotonic()
        if left <= 0:
            raise ReadRefused(f"it is a FIFO that gave no end of its text within {seconds:g} s"
                              if got else f"it is a FIFO that no process wrote to within {seconds:g} s")
        ready, _, _ = select.select([fd], [], [], min(TICK_S, left))
        if not ready:
            continue
        try:
            chunk = os.read(fd, limit - got)
        except BlockingIOError:
            continue
        if not chunk:
            break  # its writer closed it
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _fstat(fd: int) -> os.stat_result:
    try:
        return os.fstat(fd)
    except OSError as exc:
        raise ReadRefused(exc.strerror or str(exc)) from None


def _regular(st: os.stat_result) -> None:
    """What was opened is a regular file, else ReadRefused naming what it is (checked on the descriptor: no race)."""
    if not stat.S_ISREG(st.st_mode):
        raise ReadRefused(f"it is {_kind(st.st_mode)}, not a regular file")


def read_file(path: str, limit: int, follow_links: bool = True, fifo_s: float = 0.0, strict_size: bool = False
              ) -> bytes:
    """At most `limit` bytes of the regular file at `path` (of a FIFO too, within `fifo_s` seconds, when it is
    above 0). With `strict_size`, a regular file larger than `limit` is refused rather than cut. Raises
    ReadRefused, or model.Interrupted when a stop signal comes while a FIFO is read."""
    fd = _open(path, follow_links)
    try:
        st = _fstat(fd)
        if stat.S_ISFIFO(st.st_mode) and fifo_s > 0:
            return _read_fifo(fd, limit, fifo_s)
        _regular(st)
        if strict_size and st.st_size > limit:
            raise ReadRefused(f"it is larger than {limit} bytes ({st.st_size} bytes)")
        chunks, left = [], limit
        try:
            while left > 0:
                chunk = os.read(fd, left)
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as exc:
            raise ReadRefused(exc.strerror or str(exc)) from None
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_chunks(path: str, chunk: int = 1 << 20, follow_links: bool = True) -> Iterator[bytes]:
    """The regular file at `path`, front to back, in pieces of at most `chunk` bytes, for a file of any size read
    once (triage's logs): never more than one piece in memory. Opened and checked at the first `next()`, which raises
    ReadRefused for anything but a regular file; the descriptor is closed when the iteration ends or is dropped."""
    fd = _open(path, follow_links)
    try:
        _regular(_fstat(fd))
        yield from fd_chunks(fd, chunk)
    finally:
        os.close(fd)


def fd_chunks(fd: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """What an open descriptor gives until its end (standard input: the user's own pipe or file), in pieces of at
    most `chunk` bytes. A descriptor in non-blocking mode is waited on in slices (select), so a stop signal noted by
    the signal gate ends the read with `Interrupted`."""
    from ..model.core import Interrupted

    while True:
        try:
            data = os.read(fd, chunk)
        except BlockingIOError:
            signum = _stop_signal()
            if signum is not None:
                raise Interrupted(signum) from None
            select.select([fd], [], [], TICK_S)
            continue
        except OSError as exc:
            raise ReadRefused(exc.strerror or str(exc)) from None
        if not data:
            return
        yield data


def read_bounded(path: str, limit: int, follow_links: bool = True) -> bytes | None:
    """`read_file` of a regular file, or None when it is refused."""
    try:
        return read_file(path, limit, follow_links)
    except ReadRefused:
        return None


def read_at(path: str, offset: int, limit: int) -> bytes:
    """At most `limit` bytes of a regular file from `offset` (b"" when there are none, or it is no regular file)."""
    try:
        fd = _open(path, True)
    except ReadRefused:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.pread(fd, max(0, limit), max(0, offset))
    except OSError:
        return b""
    finally:
        os.close(fd)


def read_tail(path: str, limit: int) -> tuple[bytes, int]:
    """The last `limit` bytes of a regular file and its size ((b"", 0) when it is refused): a log a child wrote."""
    try:
        fd = _open(path, True)
    except ReadRefused:
        return b"", 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", 0
        size = st.st_size
        return os.pread(fd, limit, max(0, size - limit)), size
    except OSError:
        return b"", 0
    finally:
        os.close(fd)


def _said(exc: BaseException, limit: int = 300) -> str:
    """A decoder's message on one line, cut plainly: it holds no text of what was read (a position, a byte's value,
    a file name), so no secret can be cut in half."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def decode_json(raw: bytes | bytearray | str, errors: str = "strict") -> Any:
    """The JSON value of `raw` (UTF-8 bytes, decoded with `errors`, or text). Raises ReadRefused, whatever is wrong
    with it: not UTF-8, not JSON, a 100,000-deep nest (RecursionError), more than memory holds (MemoryError)."""
    try:
        return json.loads(raw.decode("utf-8", errors) if isinstance(raw, (bytes, bytearray)) else raw)
    except RecursionError:
        raise ReadRefused("its JSON is nested too deeply to decode (RecursionError)") from None
    except MemoryError:
        raise ReadRefused("its JSON is too large or too deeply nested to decode (MemoryError)") from None
    except UnicodeError as exc:
        raise ReadRefused(f"it is not UTF-8 text ({_said(exc, 200)})") from None
    except ValueError as exc:
        raise ReadRefused(f"it is not JSON ({_said(exc, 200)})") from None


def load_json(path: str, limit: int, follow_links: bool = True, fifo_s: float = 0.0, errors: str = "strict") -> Any:
    """The JSON value of the regular file at `path` (of a FIFO too, within `fifo_s` seconds), of at most `limit`
    bytes: a larger one is refused, never cut. Raises ReadRefused (or model.Interrupted, as read_file)."""
    raw = read_file(path, limit + 1, follow_links, fifo_s)
    if len(raw) > limit:
        raise ReadRefused(f"it is larger than {limit} bytes")
    return decode_json(raw, errors)


class NoTomlParser(ReadRefused):
    """Python 3.10 without tomli: no TOML file can be read."""


def load_toml(path: str, limit: int = 1 << 20) -> dict:
    """The TOML document of the regular file at `path`, of at most `limit` bytes (a larger one is refused, never
    cut). Raises ReadRefused for a file that cannot be read or is not TOML, NoTomlParser where neither tomllib
    (Python 3.11+) nor tomli imports."""
    try:
        import tomllib as toml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10
        try:
            import tomli as toml  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise NoTomlParser("reading TOML needs tomllib (Python 3.11+) or tomli") from None
    raw = read_file(path, limit, strict_size=True)
    try:
        return toml.loads(raw.decode("utf-8"))
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise ReadRefused(f"it is not TOML ({type(exc).__name__}: {str(exc)[:200]})") from None


def parse_python(raw: bytes | str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """ast.parse of `raw` (source bytes, or text). Raises ReadRefused, whatever is wrong with it: a syntax error, a
    100,000-deep expression (RecursionError or MemoryError, by Python version and shape), a NUL byte, text that is
    neither UTF-8 nor in the encoding its coding line names."""
    try:
        return ast.parse(raw, filename, mode)
    except SyntaxError as exc:  # IndentationError too ("too many levels of indentation")
        raise ReadRefused(f"it does not parse as Python ({type(exc).__name__}: {_said(exc)})") from None
    except (RecursionError, MemoryError) as exc:
        said = _said(exc, 200)
        raise ReadRefused(f"its Python is nested too deeply to parse ({type(exc).__name__}"
                          f"{': ' + said if said else ''})") from None
    except UnicodeError as exc:
        raise ReadRefused(f"it is not text in its encoding ({type(exc).__name__}: {_said(exc, 200)})") from None
    except (ValueError, OverflowError) as exc:  # a NUL byte (before 3.12)
        raise ReadRefused(f"it does not parse as Python ({type(exc).__name__}: {_said(exc, 200)})") from None
