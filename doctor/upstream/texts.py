"""What an upstream source (`Source`) and an upstream error or warning text are, as a rule declares them (`@check(...,
sources=..., texts=...)`); the engine's registry of the texts, and the classifier, are in upstream/registry.py. Imports
nothing of the doctor: the model re-exports both."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass


# What a text's id, kind and literal parts may be: a plugin declares texts as data, and they reach `explain`, docs and
# reports; bounded so that one text cannot make classifying a message slow.
TEXT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
TEXT_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
MAX_TEXT = 2000
MAX_FRAGMENTS = 24
MIN_LITERAL = 12  # characters of literal text a text must have, so that it cannot match any message


@dataclass(frozen=True)
class Source:
    """An upstream source a rule is based on."""

    title: str
    url: str = ""

    def to_dict(self) -> dict:
        return {"title": self.title, "url": self.url}


@dataclass(frozen=True)
class UpstreamText:
    """An error or warning text an upstream project writes, declared with the rule it belongs to.

    `text` is the upstream message as written, its variable parts as `{name}` fields (str.format syntax, so a check's
    own message constant can be declared as it is). It is recognised in a message by its literal parts, found in
    order (`fragments`); `match`, when given, names those literal parts instead (the stable prefix of a text whose
    end varies or is not recorded). Matching is literal `str.find`, never a regular expression: a text is data, and a
    hostile message of any length costs a linear scan."""

    id: str  # "M15": the knowledge base's id, unique within its check's texts
    text: str
    source: Source
    kind: str  # "ValueError", "warning", ...: what upstream raises or logs
    match: tuple[str, ...] = ()
    # False for a text that several causes print (TE's "No dot product attention backend is available": any input no
    # backend fits): it still points at its rule, but names no cause on its own (triage says a symptom, not a cause).
    cause: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not TEXT_ID.fullmatch(self.id):
            raise ValueError(f"invalid upstream text id {self.id!r}")
        if not isinstance(self.kind, str) or not TEXT_KIND.fullmatch(self.kind):
            raise ValueError(f"invalid kind {self.kind!r} of upstream text {self.id}")
        if not isinstance(self.source, Source):
            raise ValueError(f"upstream text {self.id}: source must be a Source")
        if not isinstance(self.text, str) or not self.text.strip() or len(self.text) > MAX_TEXT:
            raise ValueError(f"upstream text {self.id}: text must be 1 to {MAX_TEXT} characters")
        if not isinstance(self.cause, bool):
            raise ValueError(f"upstream text {self.id}: cause must be True or False")
        if not isinstance(self.match, tuple) or not all(isinstance(m, str) and m for m in self.match):
            raise ValueError(f"upstream text {self.id}: match must be a tuple of non-empty strings")
        parts = self.fragments  # raises on a malformed `{field}`
        if len(parts) > MAX_FRAGMENTS or sum(len(p) for p in parts) < MIN_LITERAL:
            raise ValueError(f"upstream text {self.id}: at most {MAX_FRAGMENTS} literal parts and at least "
                             f"{MIN_LITERAL} literal characters")

    @property
    def fragments(self) -> tuple[str, ...]:
        """The literal parts that recognise the text, in order: `match`, or the text without its `{fields}`."""
        if self.match:
            return self.match
        return tuple(literal for literal, *_ in string.Formatter().parse(self.text) if literal)

    def shown(self) -> str:
        """The text as `explain` and the docs print it: each variable part as `…`."""
        return "".join(literal + ("…" if name is not None else "")
                       for literal, name, *_ in string.Formatter().parse(self.text))

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "text": self.text, "source": self.source.to_dict(),
                **({"match": list(self.match)} if self.match else {}), **({} if self.cause else {"cause": False})}
