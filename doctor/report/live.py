"""The live display on stderr while checks run: one row per running check with its elapsed time and what its probes
say they do now ("importing torch", "tier 2: fused build, forward+backward"), gone when the run ends.

Fed by the runner's events (runner.OnEvent), and the plugin checks' from their hosts (plugins.HostWatch). Every check id
and stage passes the output layer's cleaning and redaction once, when it arrives, and is shown as a rich `Text`, never
as markup. Every row is cut to the terminal's width and the rows to its height, so that rich can always move the cursor
back over all of them: a wrapped or scrolled-off line is what would stay on screen. Everything rich writes goes through
the output layer's bounded, non-blocking frame writes (output.live_frame). Only the CLI imports this module, and only
when the display is on.
"""

from __future__ import annotations

import threading
import time
from typing import IO, Any, cast

from rich.console import Console
from rich.live import Live
from rich.text import Text

from .output import line_text, live_frame

REFRESH_PER_SECOND = 8
MAX_ROWS = 8  # running checks shown; the rest are counted
MAX_WIDTH, MAX_HEIGHT = 400, 200  # of the terminal, as the display takes it
STAGE_STYLE = "cyan"
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ASCII_SPINNER = "|/-\\"


class _FrameSink:
    """The file rich writes to: each frame goes to stderr through the output layer as one bounded write, dropped
    rather than waited for when stderr does not take it."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        text, self._parts = "".join(self._parts), []
        if text:
            live_frame(text)

    def isatty(self) -> bool:
        return True


class _Row:
    __slots__ = ("check_id", "started", "stage")

    def __init__(self, check_id: str, started: float) -> None:
        self.check_id, self.started, self.stage = check_id, started, ""


class LiveDisplay:
    """The runner's on_event: start, stage and done events of checks, shown live until `stop()`."""

    def __init__(self, color: bool = True, width: int | None = None, encoding: str = "utf-8") -> None:
        utf8 = str(encoding).lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
        self._spinner = SPINNER if utf8 else ASCII_SPINNER
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._done = 0
        self._started = time.monotonic()
        self._stopped = False
        # _environ={}: the size comes from the terminal itself, never from a COLUMNS left over in the environment.
        self.console = Console(file=cast(IO[str], _FrameSink(encoding)), width=width, force_terminal=True,
                               force_interactive=True, color_system="standard" if color else None, no_color=not color,
                               highlight=False, markup=False, emoji=False, legacy_windows=False, soft_wrap=False,
                               _environ={})
        self._live = Live(_Frame(self), console=self.console, auto_refresh=True,
                          refresh_per_second=REFRESH_PER_SECOND, transient=True, redirect_stdout=False,
                          redirect_stderr=False, vertical_overflow="crop")
        self._live.start()

    def __call__(self, event: str, check_id: str, detail: str | None = None) -> None:
        with self._lock:
            if self._stopped:
                return
            if event == "start":
                self._rows[check_id] = _Row(line_text(check_id), time.monotonic())
            elif event == "stage" and check_id in self._rows:
                self._rows[check_id].stage = line_text(detail) if detail else ""
            elif event == "done" and self._rows.pop(check_id, None) is not None:
                self._done += 1

    def stop(self) -> None:
        """Take the display off the screen (idempotent): the last frame is empty, so nothing is left to erase
        beyond the lines rich knows it drew."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._rows.clear()
        try:
            self._live.stop()
        except Exception:  # cosmetic: a display that cannot be taken down never costs the report
            pass

    def frame(self, width: int, height: int) -> list[Text]:
        """The lines of the display now, each at most `width - 1` cells (a line that fills the last column leaves
        some terminals' cursor on the next line), at most `height - 1` lines."""
        now = time.monotonic()
        with self._lock:
            if self._stopped:
                return []
            rows = sorted(self._rows.values(), key=lambda r: (r.started, r.check_id))
            done = self._done
        spin = self._spinner[int(now * REFRESH_PER_SECOND) % len(self._spinner)]
        room = max(1, height - 1)  # lines: the header, rows, and "... and N more" when they do not all fit
        limit = len(rows) if len(rows) <= min(MAX_ROWS, room - 1) else max(0, min(MAX_ROWS, room - 2))
        head = Text.assemble(("dsv4-doctor", "bold"), f" checking: {len(rows)} running, {done} done",
                             (f"  {now - self._started:.1f} s", "dim"))
        lines = [head]
        for row in rows[:limit]:
            line = Text.assemble(f"  {spin} ", (row.check_id, "bold"), (f"  {now - row.started:.1f} s", "dim"))
            if row.stage:
                line.append("  ")
                line.append(row.stage, style=STAGE_STYLE)
            lines.append(line)
        if len(rows) > limit:
            lines.append(Text(f"  ... and {len(rows) - limit} more", style="dim"))
        cells = max(1, width - 1)
        for line in lines:
            line.no_wrap = True
            line.truncate(cells, overflow="ellipsis")
        return lines[:room]


class _Frame:
    """What rich renders at each refresh: the display's lines for the console's size now, as one Text."""

    def __init__(self, display: LiveDisplay) -> None:
        self.display = display

    def __rich_console__(self, console: Console, options: Any):
        # A terminal's size is clamped (rich takes COLUMNS/LINES or the terminal's word for it).
        width, height = min(max(1, options.max_width), MAX_WIDTH), min(max(1, console.size.height), MAX_HEIGHT)
        text = Text("\n").join(self.display.frame(width, height))
        text.no_wrap, text.end = True, ""
        yield text
