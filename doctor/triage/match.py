"""Causes, from the one upstream-text registry (`upstream_texts`, each rule's `texts=`), read as anchors: the most
specific text first (the longest module path of `No module named`), a text inside another's variable part before it.
Two rules more, for a job's log, where the smoke knows what it ran and triage does not:
- a text that several rules declare alike (`no kernel image is available`), or that its rule marks as printed by
  several causes (`cause=False`: TE's "No dot product attention backend is available"), names no cause;
- on an `undefined symbol` line, only a text that names the library (the package that owns it) is a cause; the
  symbol alone (`_ZN3c10`: a torch symbol) does not say whose extension was built against another torch.
A cause is only ever what a matched line supports: each carries its evidence lines."""

from __future__ import annotations

import functools

from ..upstream.registry import TextIndex, TextMatch, builtin_index

UNDEFINED = "undefined symbol"


@functools.cache
def _index() -> TextIndex:
    return builtin_index()


@functools.cache
def _ambiguous(check_id: str, text_id: str) -> bool:
    """A text several rules declare alike, or one its rule marks as printed by several causes (`cause=False`)."""
    index = _index()
    texts = [e.text for e in index.entries if e.check.id == check_id and e.text.id == text_id]
    return bool(texts) and (not texts[0].cause or len(index.declared_by(texts[0].text)) > 1)


def _names_the_library(line: str, found: TextMatch) -> bool:
    at = line.find(UNDEFINED)
    entry = next(e for e in _index().entries if e.check.id == found.check_id and e.text.id == found.text_id)
    return any(UNDEFINED not in f and 0 <= line.find(f) < at for f in entry.fragments)


def causes_in(line: str) -> list[TextMatch]:
    """The registry texts one line supports as a cause, most specific first."""
    found = [m for m in _index().anchored(line) if not _ambiguous(m.check_id, m.text_id)]
    if UNDEFINED in line:
        found = [m for m in found if _names_the_library(line, m)]
    return found


def check_of(check_id: str):
    """The built-in check with this id (its title and fixes), or None."""
    return next((e.check for e in _index().entries if e.check.id == check_id), None)
