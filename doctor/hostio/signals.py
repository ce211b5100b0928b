"""The doctor's one signal policy: the process-wide `GATE` for `check`, `fix` and `preflight` runs (a signal
interrupts the run once and never cuts the report short), and `ApplySignals` while `fix --apply` runs pip (a signal
kills pip's process group and stops the plan).

`GATE.wait` is the doctor's one way to block on something (a probe, a plugin host, the fleet exchange, the Ray
helper, a probe's answer): in slices, so that a stop signal is answered within one slice whatever state the gate is
in (see `SignalGate.wait`).

It imports only the model (for `Interrupted`), so every layer (the CLI, the fix planner, the fleet, the renderers)
may read the gate.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ..model.core import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WAIT_SLICE_S = 0.1  # the longest a wait of the main thread blocks before it looks at the gate again
OTHER_THREAD_SLICE_S = 60.0  # another thread's (no handler runs there)


class SignalGate:
    """The process's SIGINT/SIGTERM/SIGHUP handling, one for the whole run: the CLI installs it first thing and
    restores the original dispositions last (and before exec), so there is no moment in which a signal meets the
    default action (dying without a report) or Python's KeyboardInterrupt in the middle of writing the report.

    Armed (a run is going): the first signal raises Interrupted in the main thread, unless a critical block defers
    it to the block's end. Shielded (the run is over, the report is being written): a signal is only recorded, and
    the caller decides after the report (`late`: preflight then does not exec). A signal before
    the session's handlers were installed killed the doctor; one during the report gave a traceback."""

    def __init__(self):
        self.depth = 0
        self.original: dict[int, Any] = {}
        self.fired: int | None = None
        self.late: int | None = None
        self.shielded = True
        self.deferring = 0
        self.pending: int | None = None

    def install(self) -> bool:
        """Install the handlers; nested calls only count. True for the outermost call (which must `uninstall`)."""
        self.depth += 1
        if self.depth > 1:
            return False
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):  # not the main thread
                self.original[sig] = signal.signal(sig, self._on_signal)
        return True

    def uninstall(self) -> None:
        self.depth = max(0, self.depth - 1)
        if self.depth:
            return
        for sig, handler in self.original.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)
        self.original.clear()

    def arm(self) -> None:
        """A run starts: the next signal interrupts it (one that came while shielded does at once)."""
        self.fired, self.shielded, self.deferring, self.pending = None, False, 0, None
        if self.late is not None:
            signum, self.late = self.late, None
            self.fired = signum
            raise Interrupted(signum)

    def shield(self) -> None:
        self.shielded = True

    @contextlib.contextmanager
    def armed(self):
        """A part of the run after its checks (the Ray nodes' checks): armed again for the block (a signal noted
        since the checks ended interrupts at once), shielded after it, while the report is written. Unlike arm(), it
        keeps an enclosing critical block: there a noted signal is deferred to the block's end."""
        try:
            self.shielded, self.fired = False, None
            signum, self.late = self.late, None
            if signum is not None:
                if self.deferring:
                    self.pending = self.pending or signum
                else:
                    self.fired = signum
                    raise Interrupted(signum)
            yield
        finally:
            self.shield()

    @property
    def stopping(self) -> int | None:
        """The stop signal a wait must end for: one deferred by a critical block, one noted while shielded, or one
        that interrupted the armed run and is still waited through. None otherwise (an earlier run's answered
        signal, once shielded, stops nothing)."""
        return self.pending or self.late or (None if self.shielded else self.fired)

    def wait(self, step: Callable[[float], bool], deadline: float) -> bool:
        """Block until `step` says that what is awaited came (True) or `deadline` (time.monotonic) passed (False).
        `step(seconds)` blocks at most that long and says whether it came; it is called in slices of WAIT_SLICE_S
        (once, with 0, when the deadline has passed already).

        In the main thread, where the handlers run, a stop signal ends the wait within one slice: armed, the
        handler raises Interrupted out of the slice; otherwise (shielded, deferred by a critical block) the wait
        returns False at once, and the caller does what it does at a deadline (kill, then report). Another thread's
        wait is ended by what the session does on the signal (it kills every child), so it takes longer slices."""
        main = threading.current_thread() is threading.main_thread()
        most = WAIT_SLICE_S if main else OTHER_THREAD_SLICE_S
        while True:
            if main and self.stopping is not None:
                return False
            if step(min(most, max(0.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline:
                return False

    def poll(self, ready: Callable[[], bool], deadline: float, every: float = 0.05) -> bool:
        """`wait` for something only a look tells (a file a helper writes): `ready()` now and then every `every`
        seconds, until it is true (True), the deadline or a stop signal (False)."""
        if ready():
            return True

        def step(seconds: float) -> bool:
            time.sleep(min(every, seconds))
            return ready()

        return self.wait(step, deadline)

    @contextlib.contextmanager
    def critical(self):
        """A signal arriving here waits until the block is done (a child started but not yet tracked would leak)."""
        self.deferring += 1
        try:
            yield
        finally:
            self.deferring -= 1
            if not self.deferring and self.pending is not None and self.fired is None and not self.shielded:
                signum, self.pending = self.pending, None
                self.fired = signum
                raise Interrupted(signum)

    @contextlib.contextmanager
    def answering(self):
        """While a y/N prompt waits: a stop signal ends the prompt (as KeyboardInterrupt, which the prompt turns into
        its Abort) and is kept in the yielded list, so that the caller can tell it from the end of input."""
        got: list[int] = []

        def on_signal(signum, frame) -> None:
            got.append(signum)
            if len(got) == 1:
                raise KeyboardInterrupt

        saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, on_signal)
        try:
            yield got
        finally:
            for sig, handler in saved.items():
                with contextlib.suppress(ValueError, OSError, TypeError):
                    signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        if self.shielded or self.fired is not None:
            self.late = self.late or signum
            return
        if self.deferring:
            self.pending = self.pending or signum
            return
        self.fired = signum
        raise Interrupted(signum)


GATE = SignalGate()


class ApplySignals:
    """While pip runs: a signal kills pip's process group and stops the plan (pip runs in its own session, so the
    terminal's Ctrl-C would not reach it). Nothing is raised from the handler, so no child can escape tracking."""

    def __init__(self, procs):
        self.procs = procs
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self):
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        self.signum = self.signum or signum
        self.procs.kill_live()

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)
