"""The early start: what a run of the target starts first (the handshake, nvidia-smi, the registry and the static
probe), started from a pre-scan of the words before typer is imported, so that it runs while the command line is
parsed; the run adopts it when the parser agrees on the interpreter and the limits, else it is closed."""

from __future__ import annotations

from .model import UsageError
from .session import Session

# The session started before the command line was parsed (start_early), until the run adopts it (session_for).
_early: Session | None = None


def start_early(python: str | None, timeout: float | None) -> bool:
    """Start what a run of this target starts first (the handshake, nvidia-smi, the registry and the static probe),
    so that it runs while the command line is still being parsed. Nothing starts for a --python a session refuses:
    the run says why, as it would have. True when something started; close_early() ends it if no run adopts it."""
    global _early
    close_early()
    try:
        session = Session(python, timeout)
    except UsageError:
        return False
    try:
        session.start()
        session.load(describe_plugins=False)
    except Exception:  # whatever broke here breaks again in the run, which reports it
        session.close()
        return False
    _early = session
    return True


def session_for(python: str | None, timeout: float | None) -> Session:
    """The session of a run: the early one when it inspects the same interpreter under the same limits (adopted
    once), else a new one (and the early one, which nothing will read, is closed)."""
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
