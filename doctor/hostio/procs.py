"""Every child process and temporary directory the doctor makes, so that none outlives it.

Children start in their own session (their own process group), so a kill takes their grandchildren too. A
`Processes` object is owned by the session that runs the doctor; on a signal, a usage error or the end of a run it
kills every group still alive and removes every temporary directory it handed out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .redact import TAIL_CUT, read_tail
from .safeio import read_at, read_bounded

__all__ = ["HelperEnd", "Helper", "Processes", "read_bounded", "read_bounded_at", "run_helper", "start_helper",
           "write_request"]


class Processes:
    def __init__(self, on_spawn: Callable[[int], None] | None = None,
                 on_tempdir: Callable[[str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, subprocess.Popen] = {}
        self._dirs: set[str] = set()
        self.closed = False
        # A plugin host reports what it starts, so that the doctor can clean up after a host it had to kill.
        self._on_spawn, self._on_tempdir = on_spawn, on_tempdir

    def spawn(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Popen in a new session, tracked until `release`; refused once the registry is closed."""
        with self._lock:
            if self.closed:
                raise RuntimeError("the doctor is shutting down")
            if kwargs.get("env") is not None:  # a probe's: its watchdog (dsv4probe_common) knows its parent by it
                kwargs["env"] = dict(kwargs["env"], DSV4_DOCTOR_PARENT_PID=str(os.getpid()))
            proc = subprocess.Popen(list(argv), start_new_session=True, close_fds=True, **kwargs)
            self._live[proc.pid] = proc
        if self._on_spawn:
            self._on_spawn(proc.pid)
        return proc

    def release(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._live.pop(proc.pid, None)

    def tempdir(self, prefix: str = "dsv4-doctor-") -> str:
        with self._lock:
            if self.closed:
                raise RuntimeError("the doctor is shutting down")
            path = tempfile.mkdtemp(prefix=prefix)
            self._dirs.add(path)
        if self._on_tempdir:
            self._on_tempdir(path)
        return path

    def remove_dir(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)
        with self._lock:
            self._dirs.discard(path)

    def kill_live(self) -> None:
        """SIGKILL every tracked group without taking the lock: safe inside a signal handler."""
        for proc in list(self._live.values()):
            kill_group(proc)

    def kill_all(self) -> None:
        """Refuse new children and kill every process group still alive (their files stay, to be read)."""
        with self._lock:
            self.closed = True
            live = list(self._live.values())
        for proc in live:
            kill_group(proc)
        for proc in live:
            try:
                proc.wait(timeout=2)
            except Exception:
                pass

    def close(self) -> None:
        """Kill every process group still alive and remove every temporary directory; idempotent, never raises."""
        self.kill_all()
        with self._lock:
            dirs = list(self._dirs)
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)
        with self._lock:
            self._live.clear()
            self._dirs.clear()


@dataclass
class HelperEnd:
    """How a helper process ended: its exit status (negative: the signal), whether the doctor had to kill it at its
    deadline, or on a stop signal (`stopped`: the signal's name) that could not interrupt where the wait was."""

    returncode: int | None
    timed_out: bool
    stopped: str | None = None


MIN_WAIT_S = 0.1  # the least a helper is waited for, even when its deadline has passed


class Helper:
    """One child the doctor talks to through files (a probe, a plugin host, the fleet exchange): it runs in its own
    process group, its output goes to a log, and `finish` leaves nothing of its group alive."""

    def __init__(self, procs: Processes, proc: subprocess.Popen) -> None:
        self.procs, self.proc = procs, proc

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def kill(self) -> None:
        kill_group(self.proc)

    def finish(self, deadline: float, reap_s: float = 5.0) -> HelperEnd:
        """Wait until `deadline` (time.monotonic; at least MIN_WAIT_S), then kill the group (whatever the helper left
        in it too), reap the helper and stop tracking it. The wait is the gate's (signals.GATE.wait): a stop signal
        ends it within a slice, by Interrupted where the run is armed (the group is killed all the same)."""
        from .signals import GATE

        until = max(deadline, time.monotonic() + MIN_WAIT_S)
        exited = early = False
        try:
            exited = GATE.wait(self._exits_within, until)
            early = not exited and time.monotonic() < until  # only a stop signal ends it so (main thread)
        finally:
            kill_group(self.proc)
            try:
                self.proc.wait(timeout=reap_s)
            except subprocess.TimeoutExpired:
                pass
            self.procs.release(self.proc)
        stopped = GATE.stopping if early else None
        return HelperEnd(self.proc.returncode, timed_out=not exited and stopped is None,
                         stopped=signal.Signals(stopped).name if stopped is not None else None)

    def _exits_within(self, seconds: float) -> bool:
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True


def start_helper(procs: Processes, argv: Sequence[str], log_path: str, env: Mapping[str, str],
                 stdout_path: str | None = None, pass_fds: Sequence[int] = ()) -> Helper:
    """Start a helper with no stdin; stdout and stderr go to `log_path`, or stdout to `stdout_path` (a command whose
    output is its answer). `pass_fds`: the only descriptors it inherits, at the same numbers (the kernel cache's).
    Raises OSError when it cannot start."""
    with open(log_path, "wb") as log, open(os.devnull, "rb") as devnull, \
            open(stdout_path or os.devnull, "wb") as out:
        extra = {"pass_fds": tuple(pass_fds)} if pass_fds else {}
        proc = procs.spawn(argv, stdin=devnull, stdout=out if stdout_path else log, stderr=log, env=dict(env),
                           **extra)
    return Helper(procs, proc)


def run_helper(procs: Processes, argv: Sequence[str], log_path: str, env: Mapping[str, str], timeout_s: float,
               stdout_path: str | None = None, pass_fds: Sequence[int] = ()) -> HelperEnd:
    """Start a helper and wait for it at most `timeout_s`; its group is gone when this returns."""
    return start_helper(procs, argv, log_path, env, stdout_path, pass_fds).finish(time.monotonic() + timeout_s)


# A child's request is a file, never a word of its command line (world-readable in /proc/PID/cmdline, and capped at
# 128 KiB): `python SCRIPT ANSWER_PATH REQUEST_PATH`, the request in a folder of the doctor's own (Processes.tempdir:
# mode 0700). The probes' side (dsv4probe_common.request_beside / read_request) follows the same rules.
REQUEST_FILE = "request.json"


def write_request(path: str, request: Any) -> str:
    """Write a child's request (JSON text, or a value to encode) at `path`: mode 0600, created exclusively (O_EXCL:
    an existing file is refused), never through a link (O_NOFOLLOW). `path`, for the child's command line. Raises
    OSError."""
    text = request if isinstance(request, str) else json.dumps(request)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(text.encode("utf-8", "surrogateescape"))
    return path


def read_bounded_at(path: str, offset: int, limit: int) -> bytes:
    """At most `limit` bytes of a regular file from `offset` (safeio.read_at)."""
    return read_at(path, offset, limit)


def kill_orphan_group(pid: int) -> None:
    """SIGKILL the process group a (killed) plugin host's probe led, if that process still leads its own session."""
    try:
        fields = (read_bounded(f"/proc/{pid}/stat", 4096) or b"").decode("ascii", "replace").rsplit(")", 1)[1].split()
        if int(fields[3]) == pid:  # session id: our probes start their own session, so a reused pid rarely does
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


def remove_tempdir(path: str) -> None:
    """Remove a temporary directory a killed plugin host left, if it is one of the doctor's."""
    real = os.path.realpath(path)
    if os.path.dirname(real) == os.path.realpath(tempfile.gettempdir()) and \
            os.path.basename(real).startswith("dsv4-doctor-"):
        shutil.rmtree(real, ignore_errors=True)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it is its own session leader); never raises."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass


def read_crash_tail(path: str, limit: int) -> str:
    """A crashed process's stderr tail without faulthandler's "Extension modules: ..." line: on a fatal signal it
    lists every loaded extension, kilobytes with a real stack, which would push the crash's own words out of `limit`.
    A cut first line is dropped, as read_tail drops it (it may end a secret)."""
    text = "\n".join(ln for ln in read_tail(path, 8 * limit).splitlines() if not ln.startswith("Extension modules: "))
    if len(text) > limit:
        text = TAIL_CUT + text[-limit:].partition("\n")[2]
    return text.strip()
