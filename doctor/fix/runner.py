"""How `fix --apply` and `fix --download` run one command: an argv list in its own process group (never a shell),
its output relayed to the doctor's stderr as it comes and its last lines kept (bounded) to name the error, a wall-clock
limit, and a stop when a signal arrives (the caller's handler kills the group; this only notices).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..hostio.procs import kill_group

TAIL_BYTES = 16384  # what is kept of a command's output to name its error
POLL_S = 0.2
EXITED_GRACE_S = 1.0  # after the command exited: its remaining output, not a background child's lifetime


@dataclass(frozen=True)
class Ran:
    code: int  # the exit code; -N for a signal; None never (a timeout kills it: its code is what the kill gave)
    tail: str  # the last TAIL_BYTES of its output, decoded
    timed_out: bool = False

    def error(self, limit_s: float | None = None) -> str:
        """One line that says why it failed: pip's (or git's) last `ERROR:`/`fatal:` line, else its last line."""
        if self.timed_out:
            return f"timed out after {limit_s or 0:.0f} s (killed)"
        lines = [" ".join(line.split()) for line in self.tail.splitlines() if line.strip()]
        said = next((line for line in reversed(lines) if line.startswith(("ERROR:", "error:", "fatal:"))),
                    lines[-1] if lines else "")
        return f"exit code {self.code}" + (f": {said}" if said else "")


def stderr_fd() -> int | None:
    """Where the output goes: the doctor's stderr, or nowhere when the doctor has none."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def run_relayed(procs, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = 1800.0,
                interrupted: Callable[[], bool] = lambda: False, cwd: str | None = None) -> Ran:
    """Run `argv` (tracked by `procs`), relaying its output to stderr and keeping its tail."""
    proc = procs.spawn(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=dict(env) if env is not None else None, cwd=cwd)
    try:
        if interrupted():  # the signal came while it was starting, before the handler could see it
            kill_group(proc)
        pipe = getattr(proc, "stdout", None)
        if pipe is None:  # a stand-in process without output
            return Ran(proc.wait(), "")
        tail, timed_out = _relay(proc, pipe, time.monotonic() + timeout_s, interrupted)
        code = proc.wait()
        return Ran(code, tail.decode("utf-8", "replace"), timed_out)
    finally:
        pipe = getattr(proc, "stdout", None)
        if pipe is not None:
            pipe.close()
        procs.release(proc)


def _relay(proc, pipe, deadline: float, interrupted: Callable[[], bool]) -> tuple[bytes, bool]:
    out = stderr_fd()
    tail = b""
    fd = pipe.fileno()
    while True:
        left = deadline - time.monotonic()
        if proc.poll() is not None:  # it exited: a child it left may hold the pipe open, so drain briefly, not wait
            deadline = min(deadline, time.monotonic() + EXITED_GRACE_S)
            left = deadline - time.monotonic()
            if left <= 0:
                return tail, False
        if left <= 0:
            kill_group(proc)
            return tail, True
        if interrupted():
            kill_group(proc)
        try:
            ready, _, _ = select.select([fd], [], [], min(POLL_S, left))
        except InterruptedError:
            continue
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return tail, False
        tail = (tail + chunk)[-TAIL_BYTES:]
        if out is not None:
            try:
                rest = chunk
                while rest:
                    rest = rest[os.write(out, rest):]
            except OSError:
                out = None  # stderr went away: keep running, keep the tail
