"""`preflight`'s last step: the job replaces the doctor's process."""

from __future__ import annotations

import contextlib
import os
import sys

from ..report.output import say


def exec_job(command: list[str]) -> int:
    """Replace this process with the job (same pid and environment; the job's exit code is the caller's). The
    session already reaped every probe, removed its temporary files and restored the signal dispositions, which
    exec would skip (no finally, no atexit)."""
    import signal

    from ..engine.earlystart import close_early

    close_early()  # exec skips every `finally`: nothing started before the command line was parsed may stay
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    # Python ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal stays ignored across exec: put them back
    # to the default, as subprocess's restore_signals does (otherwise the job's `yes | head` printed "Broken pipe"
    # instead of ending quietly).
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except (OSError, ValueError) as exc:  # ValueError: an empty program name or a NUL in a word
        from ..job.shape import shape_program

        say(f"dsv4-doctor preflight: could not start {shape_program(command[0])}: "
            f"{getattr(exc, 'strerror', None) or exc}")
        return 127 if isinstance(exc, (FileNotFoundError, ValueError)) else 126
    return 126  # not reached: exec does not return
