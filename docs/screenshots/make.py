"""The screenshots in this folder: the terminal report (concise, as `dsv4-doctor check` prints it on a terminal) of a
healthy and of a broken DSv4 stack, rendered from committed JSON reports of real H200 runs.

    python docs/screenshots/make.py          # writes NAME.svg and NAME.txt for each screenshot
    python docs/screenshots/make.py --check  # exit 1 when a committed file is not what this code renders

Each SVG comes from rich's `Console(record=True).export_svg`, 100 columns, with a fixed title and id: the same
report, doctor and rich always give the same bytes. NAME.txt is the same report as plain text; rich's SVG layout
changes between rich releases, so tests/test_screenshots.py compares the text always and the SVG when it is made
with the rich release named in it.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE.parent / "gpu-runs"
WIDTH = 100
# name: (the committed report, the title over the picture)
SCREENSHOTS = {
    "healthy": (RUNS / "2026-12-03-h200" / "complete" / "check-cp2.json",
                "dsv4-doctor check --cp 2: the complete DSv4 stack on an H200 (exit 0)"),
    "broken": (RUNS / "2026-12-02-h200" / "k19" / "check-cp2.json",
               "dsv4-doctor check --cp 2: the same stack without Transformer Engine (exit 1)"),
}


def rich_marker() -> str:
    return f"<!-- dsv4-doctor screenshot, rendered with rich {version('rich')} -->"


def render(name: str) -> tuple[str, str]:
    """(the SVG, the plain text) of screenshot `name`."""
    from rich.text import Text

    from dsv4_doctor.report.terminal import make_console, render_terminal
    from dsv4_doctor.model.report import Report

    path, title = SCREENSHOTS[name]
    report = Report.from_wire(json.loads(path.read_text(encoding="utf-8")))
    console = make_console(WIDTH, color=True, record=True)
    # The report as the terminal gets it, then each line folded at the width as a terminal folds it: a fix command
    # is never wrapped by the doctor, so in a 100-column picture it goes on in the next row, as on the screen
    # (rich's SVG would cut it at the width).
    for line in render_terminal(report, verbosity=0, width=WIDTH, color=True).splitlines():
        text = Text.from_ansi(line)
        for piece in text.divide(range(WIDTH, len(text), WIDTH)):
            console.print(piece, no_wrap=True, overflow="ignore", crop=False)
    svg = console.export_svg(title=title, unique_id=f"dsv4-doctor-{name}")
    first, rest = svg.split("\n", 1)
    return f"{first}\n{rich_marker()}\n{rest}", render_terminal(report, verbosity=0, width=WIDTH)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in SCREENSHOTS:
        for path, text in zip((HERE / f"{name}.svg", HERE / f"{name}.txt"), render(name), strict=True):
            if check:
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    stale.append(path.name)
            else:
                path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale: {', '.join(stale)}; run python docs/screenshots/make.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
