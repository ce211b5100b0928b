"""Every child process and temporary directory the doctor makes, so that none outlives it.

Children start in their own session (their own process group), so a kill takes their grandchildren too. A
`Processes` object is owned by the session that runs the doctor; on a signal, a usage error or the end of a run it
kills every group still alive and removes every temporary directory it handed out.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence


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


def kill_orphan_group(pid: int) -> None:
    """SIGKILL the process group a (killed) plugin host's probe led, if that process still leads its own session."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
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


def exec_job(command: list[str]) -> int:
    """Replace this process with the job (same pid and environment; the job's exit code is the caller's). The
    session already reaped every probe, removed its temporary files and restored the signal dispositions, which
    exec would skip (no finally, no atexit)."""
    import contextlib
    import sys

    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    # Python ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal stays ignored across exec: put them back
    # to the default, as subprocess's restore_signals does (otherwise: the job's `yes | head` printed "Broken
    # pipe" instead of ending quietly).
    for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
        if hasattr(signal, name):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except (OSError, ValueError) as exc:  # ValueError: an empty program name or a NUL in a word
        from .job.shape import shape_program
        from .render.output import say

        say(f"dsv4-doctor preflight: could not start {shape_program(command[0])}: "
            f"{getattr(exc, 'strerror', None) or exc}")
        return 127 if isinstance(exc, (FileNotFoundError, ValueError)) else 126
    return 126  # not reached: exec does not return
