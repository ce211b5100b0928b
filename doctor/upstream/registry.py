"""The upstream error-text registry: which rule an upstream error or warning message belongs to.

Every check declares its rule's upstream texts once (`@check(..., texts=(UpstreamText(...), ...))`, plugins too);
`classify(message)` finds those whose literal parts occur, in order, in the message, most specific first. The settings
probe maps an exception raised by the stack's own configuration code to its rule with it, and triage reads the same
registry.

Matching is bounded by construction: each text is a short tuple of literal parts found with `str.find` (a linear scan,
no regular expression, so no backtracking), the message is cut to `MAX_MESSAGE` characters at each end, and the
answer carries only the registry's own data, never a piece of the message.
"""

from __future__ import annotations

import re
import string
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ..model.core import Check, Source
from .texts import MAX_FRAGMENTS, UpstreamText  # noqa: F401 (what plugins and the engine import)

MAX_MESSAGE = 1 << 21  # characters read from each end of a longer message


@dataclass(frozen=True)
class TextMatch:
    """One declared text found in a message: the rule it belongs to and where upstream writes it."""

    check_id: str
    text_id: str
    source: Source
    kind: str
    origin: str  # the distribution that declared it ("dsv4-doctor" for the built-ins)
    text: str  # the declared text (`UpstreamText.text`), never the message's copy

    def to_dict(self) -> dict:
        return {"check_id": self.check_id, "text_id": self.text_id, "source": self.source.to_dict(),
                "kind": self.kind, "origin": self.origin, "text": self.text}


@dataclass(frozen=True)
class _Entry:
    check: Check
    text: UpstreamText
    fragments: tuple[str, ...]
    weight: int  # literal characters: the more a text pins down, the more specific it is


class TextIndex:
    """The texts of a set of checks, most specific first; `classify` is safe to call from any thread."""

    def __init__(self, checks: Iterable[Check]):
        entries = []
        for order, check in enumerate(checks):
            for text in getattr(check, "texts", ()) or ():
                if not isinstance(text, UpstreamText):
                    continue
                fragments = text.fragments
                entries.append((-sum(len(f) for f in fragments), order, _Entry(check, text, fragments,
                                                                                 sum(len(f) for f in fragments))))
        # Specific first: a text with more literal characters is the narrower rule; ties keep the checks' order.
        self.entries: list[_Entry] = [e for *_, e in sorted(entries, key=lambda t: (t[0], t[1]))]

    def classify(self, message: str) -> list[TextMatch]:
        if not isinstance(message, str) or not message:
            return []
        scanned = cleaned(message)
        found = []
        for entry in self.entries:
            if _contains_in_order(scanned, entry.fragments):
                found.append(TextMatch(entry.check.id, entry.text.id, entry.text.source, entry.text.kind,
                                       entry.check.origin, entry.text.text))
        return found

    def anchored(self, message: str, check_ids: Collection[str] | None = None) -> list[TextMatch]:
        """`classify` among the texts of `check_ids` (all when None), read as anchors, most specific first:
        - a text whose literal parts all lie within a more specific text found is left out: it says less about
          the same words (`No module named 'megatron` within `No module named 'megatron.bridge…`);
        - a text found inside a variable part of a broader one comes before it: it names what the broader one
          leaves open (`flash_mla (https:` in the list of missing packages of Megatron's dependency check)."""
        if not isinstance(message, str) or not message:
            return []
        scanned = cleaned(message)
        found: list[tuple[_Entry, list[tuple[int, int]]]] = []
        for entry in self.entries:
            if check_ids is not None and entry.check.id not in check_ids:
                continue
            spans = _spans(scanned, entry.fragments)
            if spans is None:
                continue
            if any(_contains_in_order(kept.text.text, entry.fragments) for kept, _ in found
                   if kept.weight > entry.weight):
                continue
            found.append((entry, spans))
        ordered: list[tuple[_Entry, list[tuple[int, int]]]] = []
        for entry, spans in found:
            at = next((i for i, (broader, gaps) in enumerate(ordered)
                       if _inside_a_gap(spans, gaps, broader.text, len(scanned))), len(ordered))
            ordered.insert(at, (entry, spans))
        return [TextMatch(e.check.id, e.text.id, e.text.source, e.text.kind, e.check.origin, e.text.text)
                for e, _ in ordered]

    def declared_by(self, text: str) -> set[str]:
        """The checks that declare a text with the same literal parts as this declared text."""
        fragments = {e.fragments for e in self.entries if e.text.text == text}
        return {e.check.id for e in self.entries if e.fragments in fragments}

    def texts_named(self, text_id: str) -> list[tuple[Check, UpstreamText]]:
        """The declared texts with this id (case-insensitive), with their checks, in the registry's order."""
        wanted = text_id.casefold()
        hits = [(e.check, e.text) for e in self.entries if e.text.id.casefold() == wanted]
        return sorted(hits, key=lambda hit: (hit[0].id, hit[1].id))


# A terminal's colour and cursor sequences (CSI) and OSC strings, removed so that a coloured log line still matches.
# Every repetition is bounded and no two overlap: a linear scan.
_ESCAPES = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")


def cleaned(message: str) -> str:
    """The message as it is matched: at most MAX_MESSAGE characters from each end, terminal escapes removed."""
    if len(message) > 2 * MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "\n" + message[-MAX_MESSAGE:]
    return _ESCAPES.sub("", message) if "\x1b" in message else message


def _spans(message: str, fragments: Sequence[str]) -> list[tuple[int, int]] | None:
    """Where each literal part is found, in order, or None."""
    at, spans = 0, []
    for fragment in fragments:
        hit = message.find(fragment, at)
        if hit < 0:
            return None
        at = hit + len(fragment)
        spans.append((hit, at))
    return spans


def _inside_a_gap(spans: list[tuple[int, int]], broader: list[tuple[int, int]], text: UpstreamText,
                  length: int) -> bool:
    """Whether the text found at `spans` lies within a variable part of the broader text found at `broader`."""
    start, end = spans[0][0], spans[-1][1]
    gaps = [(a[1], b[0]) for a, b in zip(broader, broader[1:], strict=False)]
    parsed = list(string.Formatter().parse(text.text))
    if parsed and parsed[-1][1] is not None or text.match:  # a field (or an unrecorded end) after the last part
        gaps.append((broader[-1][1], length))
    if parsed and parsed[0][0] == "" and parsed[0][1] is not None:
        gaps.append((0, broader[0][0]))
    return any(lo <= start and end <= hi for lo, hi in gaps)


def _contains_in_order(message: str, fragments: Sequence[str]) -> bool:
    at = 0
    for fragment in fragments:
        hit = message.find(fragment, at)
        if hit < 0:
            return False
        at = hit + len(fragment)
    return True


_BUILTIN: TextIndex | None = None
_LOCK = threading.Lock()


def builtin_index() -> TextIndex:
    """The built-in checks' texts (the registry is loaded once per process)."""
    global _BUILTIN
    with _LOCK:
        if _BUILTIN is None:
            from ..engine.registry import load

            _BUILTIN = TextIndex(load().checks)
        return _BUILTIN


def classify(message: str, checks: Iterable[Check] | None = None) -> list[TextMatch]:
    """The declared upstream texts found in `message`, most specific first: each names its check, its text id and
    its source. `checks`: the checks whose texts count (a session's built-ins and plugins); the built-ins when None.
    An empty list means no declared text was recognised, which is no verdict."""
    index = builtin_index() if checks is None else TextIndex(checks)
    return index.classify(message)


def anchored(message: str, check_ids: Collection[str] | None = None) -> list[TextMatch]:
    """The built-in texts found in `message` as anchors (`TextIndex.anchored`), among those of `check_ids` when
    given: the smoke's cause lookup and triage read the registry this way."""
    return builtin_index().anchored(message, check_ids)
