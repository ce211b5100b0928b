"""The early start: what a run of the target starts first (the handshake, nvidia-smi, the registry and the static
probe), started from a pre-scan of the words before typer is imported, so that it runs while the command line is
parsed; the run adopts it when the parser agrees on the interpreter and the limits, else it is closed. The pre-scan
never reads a job's command: where the stack rows judge the interpreter that command runs (target.judged_python) and
it is another than the one started early, the early start is closed unread and the run starts on the job's.

The handshake and nvidia-smi start before the session module is imported (its import, with the plugins, the report
assembly and the runner's dependencies, is most of what comes before them): only the target's resolution
(engine/target.py) and the probe pool (engine/runner.py) are needed to start them; the session then adopts that pool."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.core import UsageError

if TYPE_CHECKING:
    from .session import Session

# The session started before the command line was parsed (start_early), until the run adopts it (session_for).
_early: Session | None = None


def start_early(python: str | None, timeout: float | None) -> bool:
    """Start what a run of this target starts first (the handshake, nvidia-smi, the registry and the static probe),
    so that it runs while the command line is still being parsed. Nothing starts for a --python a session refuses:
    the run says why, as it would have. True when something started; close_early() ends it if no run adopts it."""
    global _early
    close_early()
    from .target import resolve_python, workers

    try:
        executable = resolve_python(python)
    except UsageError:
        return False
    import threading

    from .probes import NVIDIA_SMI, handshake_probe
    from ..hostio.procs import Processes
    from .runner import ProbePool

    spawned = threading.Semaphore(0)
    pool = ProbePool.for_target(executable, timeout, workers(), Processes(on_spawn=lambda pid: spawned.release()))
    session = None
    try:
        # The same probes Session.start submits (by key: once), spawned from the pool's threads before the session
        # module is imported: its import would otherwise hold the interpreter while they wait to start.
        _until_spawned(spawned, [pool.submit(handshake_probe(executable)), pool.submit(NVIDIA_SMI)])
        from .session import Session

        session = Session(python, timeout, pool)
        session.start()
        session.load(describe_plugins=False)
    except BaseException as exc:  # whatever broke here breaks again in the run, which reports it
        if session is not None:
            session.close()
        else:
            pool.procs.close()  # what started before the session was made
        if not isinstance(exc, Exception):
            raise
        return False
    _early = session
    return True


def _until_spawned(spawned, slots, bound_s: float = 0.25) -> None:
    """Wait, at most `bound_s`, until each probe of `slots` was spawned (`spawned` counts the spawns) or ended
    without one (no nvidia-smi on this host)."""
    import time

    deadline, count = time.monotonic() + bound_s, 0
    while count < sum(not slot.done.is_set() for slot in slots):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        count += spawned.acquire(timeout=min(left, 0.005))


def session_for(python: str | None, timeout: float | None) -> Session:
    """The session of a run: the early one when it inspects the same interpreter under the same limits (adopted
    once), else a new one (and the early one, which nothing will read, is closed)."""
    from .session import Session

    global _early
    early, _early = _early, None
    if early is not None:
        if early.serves(python, timeout):
            return early
        early.close()
    return Session(python, timeout)


def close_early() -> None:
    """End an early start no run adopted (a usage error, --help, an interrupted parse): its children are killed and
    reaped, its temporary files removed. Idempotent."""
    global _early
    early, _early = _early, None
    if early is not None:
        early.close()
