"""Whether the doctor read a training command's settings, and if not, why, in a few words that name the word: what
the job.* rows say as "not known" and the verdict line as "the job's command was not read (...)"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shape import entry_shown

if TYPE_CHECKING:
    from .model import Job


def not_read(job: Job | None) -> str | None:
    """Why the command's settings were not read: its launch chain ends before the entry (the word it stopped at), or
    the entry's grammar is not one the doctor knows; None when they were read (or no command was given)."""
    if job is None or job.kind != "unknown":
        return None
    chain = job.chain
    if chain is not None and chain.stopped:
        return chain.stopped
    entry = entry_shown(job.entry)
    if not entry:
        return "the command names no training entry the doctor reads"
    return f"`{entry}` is no entry whose command line the doctor knows"
