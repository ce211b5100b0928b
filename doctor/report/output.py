"""Every byte the doctor writes goes through here: the report (stdout, --output, preflight's stderr and --report),
the stderr lines the commands say, the live display's frames, the fix echo, the y/N prompt, annotations and the step
summary. Rendering is the renderers' (render()); which report goes where is the emitter's (report/emitter.py).

The discipline, for every write:
- **Clean, redact, bound.** A line (`say`) is capped, redacted and cleaned here; a report arrives already redacted
  and cleaned by the report pipeline (redacting rendered JSON again could break it) and is only made encodable.
- **Never block past a bound.** A pipe, FIFO, socket or terminal is written in non-blocking steps: a stream that
  takes no byte for IDLE_TIMEOUT seconds, or more than STREAM_TIMEOUT in all, is given up, said once on stderr
  (when stderr still works), and never written again in this run. A file is opened with O_NONBLOCK, so a FIFO
  without a reader or a device never blocks the open.
- **Signals.** A stop signal that arrives while output is written (the SignalGate records it) leaves each write
  SIGNAL_GRACE seconds to finish, then the process ends with 128 + N; whatever was already written stays whole.
- **Exit codes.** A report that could not be written makes the command exit 4 (ExitCode.OUTPUT).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time

from ..model.core import UsageError

IDLE_TIMEOUT = 5.0  # seconds a stream may take no byte at all (a pipe or FIFO nobody reads)
STREAM_TIMEOUT = 30.0  # seconds one write may take in all
SIGNAL_GRACE = 1.0  # seconds a write may still take once a stop signal arrived
MAX_LINE = 16 * 1024  # characters of one stderr line
_CHUNK = 512  # at most PIPE_BUF: a terminal that polls writable takes it without blocking

_given_up: dict[int, str] = {}  # fd -> why it is no longer written (this run)


def _gate_signal() -> int | None:
    from ..hostio.signals import GATE

    return GATE.late


def _stream_fd(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # a test's StringIO, a closed stream
        return None


def write_fd(fd: int, data: bytes, idle: float | None = None, total: float | None = None) -> str | None:
    """Write all of `data` to `fd` within the bounds; None when done, else why not (the fd is then given up)."""
    if fd in _given_up:
        return _given_up[fd]
    idle = IDLE_TIMEOUT if idle is None else idle
    total = STREAM_TIMEOUT if total is None else total
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        return _give_up(fd, exc.strerror or str(exc))
    regular = stat.S_ISREG(mode)
    restore = None
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        import fcntl

        # O_NONBLOCK belongs to the open file, which the parent may share: it is put back right after this write.
        with contextlib.suppress(OSError):
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            if not flags & os.O_NONBLOCK:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
                restore = flags
    import select

    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    view = memoryview(data)
    start = last_progress = time.monotonic()
    deadline = start + total
    signal_seen = False
    try:
        while view:
            now = time.monotonic()
            if not signal_seen and _gate_signal() is not None:
                signal_seen = True
                deadline = min(deadline, now + SIGNAL_GRACE)
            if now >= deadline or now - last_progress >= idle:
                why = ("a stop signal arrived" if signal_seen and now >= deadline
                       else f"nothing was read from it for {idle:g} s" if now - last_progress >= idle
                       else f"writing took over {total:g} s")
                return _give_up(fd, why)
            if not regular:
                try:
                    ready = poller.poll(max(1, int(1000 * min(0.1, deadline - now))))
                except InterruptedError:
                    continue
                if not ready:
                    continue
                events = ready[0][1]
                if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL) and not events & select.POLLOUT:
                    return _give_up(fd, "the reader is gone")
            try:
                n = os.write(fd, view[:_CHUNK] if not regular and restore is None else view)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                return _give_up(fd, exc.strerror or str(exc))
            if n:
                last_progress = time.monotonic()
            view = view[n:]
    finally:
        if restore is not None:
            import fcntl

            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, restore)
    return None


def _give_up(fd: int, why: str) -> str:
    _given_up[fd] = why
    return why


def _write_stream(stream, text: str, idle: float | None = None) -> str | None:
    """`text` to a standard stream, bounded; None when written."""
    if stream is None:
        return "it is closed"
    fd = _stream_fd(stream)
    if fd is None:  # no file descriptor (a test's capture): the stream's own write
        try:
            stream.write(text)
            stream.flush()
            return None
        except (OSError, ValueError) as exc:
            return str(exc) or type(exc).__name__
    with contextlib.suppress(OSError, ValueError):
        stream.flush()  # what Python buffered goes first (nothing, when every write comes through here)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        data = text.encode(encoding, "backslashreplace")  # an ASCII-only stream gets \\uXXXX, valid in JSON too
    except LookupError:
        data = text.encode("utf-8", "backslashreplace")
    return write_fd(fd, data, idle)


def open_nonblocking(path: str, append: bool = False) -> int:
    """A file descriptor for writing `path` (created when missing) that never blocks in open: a FIFO without a
    reader fails at once (ENXIO), a socket cannot be opened, a device opens. OSError when it cannot be."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(exc.errno, "it is a FIFO that no process reads") from None
        raise
    return fd


def write_file(path: str, text: str, append: bool = False) -> str | None:
    """`text` into the file at `path`, bounded like every write; None when written, else why not."""
    try:
        fd = open_nonblocking(path, append)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        return write_fd(fd, text.encode("utf-8", "backslashreplace"))
    finally:
        _given_up.pop(fd, None)  # the number is reused by the next open
        with contextlib.suppress(OSError):
            os.close(fd)


def line_text(message: str) -> str:
    """A line as the doctor may say it: capped, redacted, cleaned (no escapes, no workflow command)."""
    from ..hostio.redact import Redactor, clean_text

    return clean_text(Redactor().redact_then_cap(message, MAX_LINE))  # redacted first: no cut leaves a secret's part


def say(message: str) -> None:
    """A line on stderr, through the discipline; a stderr that is closed or stuck is skipped."""
    write_stderr(line_text(message) + "\n")


def write_stderr(text: str, idle: float | None = None) -> bool:
    """Text already made safe (a rendered report, a cleaned line) to stderr; False when it could not be written."""
    return _write_stream(sys.stderr, text, idle) is None


def write_stdout(text: str) -> bool:
    """Write to stdout; False when there is none (started with it closed), it broke, or nobody reads it."""
    why = _write_stream(sys.stdout, text)
    if why is not None:
        _quiet_stdout()
    return why is None


def _quiet_stdout() -> None:
    """A broken stdout is pointed at /dev/null, so the interpreter's last flush at exit has nothing to complain
    about ("Exception ignored ... BrokenPipeError" and exit 120)."""
    fd = _stream_fd(sys.stdout)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def live_frame(text: str) -> None:
    """A frame of the live display: cosmetic, so it is dropped rather than waited for."""
    write_stderr(text, idle=0.2)


def finish_streams() -> None:
    """Last thing before exit: flush what Python still buffers, and silence a stdout that broke meanwhile."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout:
                _quiet_stdout()


def check_output_path(path: str | None, option: str = "--output") -> None:
    """A report file that cannot be written is a usage error, said before any work."""
    if path is None:
        return
    if not os.path.isabs(path):
        try:
            os.getcwd()
        except OSError:
            raise UsageError(f"{option} {path!r} is relative, and the working directory no longer exists; "
                             "give an absolute path") from None
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a directory")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
        # A FIFO would block the finished run until some reader appears; a socket cannot be opened at all.
        raise UsageError(f"{option} {path!r} is not a regular file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path!r}: {parent} is not a directory")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path!r} is not writable")
    elif not os.access(parent, os.W_OK):
        raise UsageError(f"{option} {path!r}: {parent} is not writable")


def isatty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False


def wants_live_display(stream, fmt: str) -> bool:
    """Whether a run shows the live display on `stream` (stderr): for the text format, on a terminal, or when
    FORCE_COLOR asks for what a terminal gets. Never on a terminal that cannot move the cursor (TERM=dumb), nor
    into a CI log (CI set, no terminal), where every frame would stay as lines of its own."""
    if fmt != "text" or os.environ.get("TERM") == "dumb":
        return False
    return isatty(stream) or bool(os.environ.get("FORCE_COLOR")) and not os.environ.get("CI")
