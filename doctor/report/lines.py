"""The lines of the terminal report on a rich console: wrapped prose with a hanging indent, commands never wrapped,
and prose cut to the default report's rule (report/reading.py). Only report/terminal.py imports this module."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from .reading import clip


class Out:
    """Lines onto a rich console: wrapped prose with a hanging indent, or commands never wrapped."""

    def __init__(self, console: Console):
        self.console = console

    def line(self, text: Text, indent: int = 0, hang: int = 2) -> None:
        text.overflow = "fold"
        self.console.print(Padding(hanging(text, hang), (0, 0, 0, indent)) if indent or hang else text)

    def raw(self, text: Text, indent: int = 0) -> None:
        self.console.print(Text(" " * indent) + text, soft_wrap=True, overflow="ignore", no_wrap=True, crop=False)

    def blank(self) -> None:
        self.console.print()


def hanging(text: Text, hang: int) -> Any:
    return Hang(text, hang) if hang else text


class Hang:
    """A paragraph whose wrapped continuation lines are indented by `hang` columns."""

    def __init__(self, text: Text, hang: int):
        self.text, self.hang = text, hang

    def __rich_console__(self, console: Console, options: Any):
        from rich.segment import Segment

        width = max(20, options.max_width)
        # The text's own style as a span: the pieces below are rendered one by one, and a piece's render() applies
        # its spans only, never the style it inherited.
        styled = Text()
        styled.append(self.text)
        for p, para in enumerate(styled.split("\n", allow_blank=True)):
            lines = [] if p else list(para.wrap(console, width, overflow="fold"))[:1]
            if lines:
                yield from lines[0].render(console)
                yield Segment.line()
                offset = len(lines[0].plain)
                while offset < len(para.plain) and para.plain[offset] == " ":
                    offset += 1
                para = para[offset:]
            if not para.plain:
                continue
            for piece in para.wrap(console, width - self.hang, overflow="fold"):
                yield Segment(" " * self.hang)
                yield from piece.render(console)
                yield Segment.line()


def clipped_text(out: Out, text: Text, indent: int, hang: int, lines: int, ascii_only: bool) -> Text:
    """`text` cut to `lines` lines at `indent` (continuations `hang` further in), at a word, with an ellipsis."""
    width = max(20, out.console.width) - indent
    ellipsis = "..." if ascii_only else "…"
    cut = clip(text.plain, width, width - hang, lines, ellipsis)
    if cut is None:
        return text
    text = text[:cut]
    text.rstrip()
    return text + Text(ellipsis)
