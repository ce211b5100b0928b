"""`fix --download DIR` as a command: the folder's checks, the fetch with its own process tracking and signal
handling, and what it says at the end (what was fetched, what failed, what is left to a person). The fetching itself is
fix/offline.py's.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence

from .offline import download
from .plan import Plan
from .runner import Ran, run_relayed
from .steps import plain_value
from ..model.core import ExitCode, UsageError


def offline_folder(download_dir: str | None, from_dir: str | None, applying: bool) -> str:
    """The folder of `fix --download DIR` or `fix --from DIR`, absolute ("" for neither); a usage error where it
    cannot be one."""
    if download_dir is not None and from_dir is not None:
        raise UsageError("--download fetches into DIR on a connected machine, --from installs from it: give one")
    if download_dir is not None and applying:
        raise UsageError("--download only fetches; install with --apply --from DIR (offline) afterwards")
    given = download_dir if download_dir is not None else from_dir
    if given is None:
        return ""
    option = "--download" if download_dir is not None else "--from"
    if not given or not plain_value(given) or not plain_value(os.path.abspath(given)):
        raise UsageError(f"{option} {given!r}: not a folder name a fix command can carry (empty, or a control "
                         "character in it)")
    folder = os.path.abspath(given)
    if from_dir is not None and not os.path.isdir(folder):
        raise UsageError(f"--from {given!r}: no such folder (make it with `fix --download DIR` on a connected machine)")
    if download_dir is not None and os.path.lexists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--download {given!r}: it exists and is not a folder")
    return folder


def download_plan(plan: Plan, python: str, folder: str, say: Callable[[str], None]) -> int:
    """Fetch what `plan` installs into `folder` and say how it went; the exit code (1 when anything failed, 128 + n
    for a signal)."""
    from ..hostio.procs import Processes
    from ..hostio.signals import ApplySignals

    procs = Processes()
    try:
        with ApplySignals(procs) as signals:
            def run(argv: Sequence[str], timeout_s: float, cwd: str | None) -> Ran:
                if signals.signum is not None:
                    return Ran(128 + signals.signum, "interrupted")
                return run_relayed(procs, argv, None, timeout_s, lambda: signals.signum is not None, cwd)

            try:
                fetched = download(plan, python, folder, run, say)
            except OSError as exc:  # the folder cannot be made or written
                say(f"fetched nothing: {folder}: {exc.strerror or exc}")
                return int(ExitCode.FAILED)
    finally:
        procs.close()
    if signals.signum is not None:
        import signal

        say(f"interrupted by {signal.Signals(signals.signum).name}; {folder} may hold part of the plan")
        return 128 + signals.signum
    say(f"fetched into {folder}: {len(fetched.files)} new file(s)" + (
        ": " + ", ".join(fetched.files[:12]) + (", ..." if len(fetched.files) > 12 else "") if fetched.files else ""))
    for line in fetched.failed:
        say("not fetched: " + line)
    for line in fetched.left:
        say("left for you: " + line)
    if not fetched.failed:
        say(f"offline, with the same interpreter: dsv4-doctor fix --apply --from {shlex.quote(folder)} (and this run's "
            "options)")
    return int(ExitCode.FAILED) if fetched.failed else 0
