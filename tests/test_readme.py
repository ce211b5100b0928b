"""The README's promises and the docs' integrity: the README's two set-up commands (the second one is what CI runs), its
length and table of contents, its example report and the rules table current, every relative link of the README and
docs/ resolving, and no line of them telling the project's history."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from markdown_it import MarkdownIt

from conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 300  # prose and examples for a user, the first run's real report (at most 40 lines) uncut
# Phrases that tell how the code came to be instead of what it does now: such text belongs in commits, not in the
# README or docs/ (the dated run records under docs/gpu-runs/<run>/ are history by design and are not checked).
HISTORY_PHRASES = ("found in review", "review fix", "before this change", "since fixed")


def _pages() -> list[Path]:
    """The README and the docs pages (docs/*.md and the GPU runs' index)."""
    return [README, *sorted(DOCS.glob("*.md")), DOCS / "gpu-runs" / "README.md"]


def _tokens(text: str):
    return MarkdownIt("commonmark").parse(text)


def _inline_text(inline) -> str:
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))


def _slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (word characters, spaces and hyphens stay), spaces as
    hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _headings(text: str) -> list[tuple[int, str]]:
    tokens = _tokens(text)
    return [(int(t.tag[1]), _inline_text(tokens[i + 1])) for i, t in enumerate(tokens) if t.type == "heading_open"]


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, title in _headings(text):
        base = _slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


def _links(tokens) -> list[str]:
    found = []
    for t in tokens:
        for child in t.children or []:
            if child.type == "link_open":
                found.append(child.attrs.get("href", ""))
            elif child.type == "image":
                found.append(child.attrs.get("src", ""))
    return found


def _fences_by_heading(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each heading's fenced blocks as (info, content), up to the next heading of any level."""
    blocks: dict[str, list[tuple[str, str]]] = {}
    tokens = _tokens(text)
    current = ""
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            current = _inline_text(tokens[i + 1])
            blocks.setdefault(current, [])
        elif t.type == "fence":
            blocks.setdefault(current, []).append((t.info.strip(), t.content))
    return blocks


def test_readme_has_one_setup_command_and_ci_runs_the_test_one():
    """From a clone, one command installs and runs the doctor; one command runs the tests, and CI runs exactly it (the
    second form, PyPI alone for an environment that already has a CPU torch, is the same command without the index)."""
    blocks = _fences_by_heading(README.read_text())
    setup = blocks["From a clone"]
    tests = blocks["Run the tests"]
    assert [info for info, _ in setup] == ["sh"] and [info for info, _ in tests] == ["sh", "sh"]
    first, second, plain = setup[0][1].strip(), tests[0][1].strip(), tests[1][1].strip()
    assert "\n" not in first and "\n" not in second and "\n" not in plain
    assert "dsv4-doctor check" in first and first.startswith("pip install .")
    assert second.startswith("PIP_RETRIES=0 ") and "--extra-index-url https://download.pytorch.org/whl/cpu" in second
    assert plain == "pip install '.[test]' && " + second.split(" && ", 1)[1]
    ci = (REPO / ".ci" / "run").read_text()
    assert second in ci.splitlines()


def test_readme_is_at_most_300_lines():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail to a page under docs/"


def test_readme_table_of_contents_lists_every_section_and_its_anchors_exist():
    text = README.read_text()
    contents = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = _links(_tokens(contents))
    anchors = _anchors(text)
    targets = [link[1:] for link in links if link.startswith("#")]
    assert targets and not [t for t in targets if t not in anchors], sorted(set(targets) - anchors)
    sections = [_slug(title) for level, title in _headings(text) if level == 2 and title != "Contents"]
    assert sections and not [s for s in sections if s not in targets], "sections missing from the table of contents"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for link in _links(_tokens(text)):
            if not link or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link):
                continue  # an absolute URL (https:, mailto:)
            path, _, fragment = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: {link}"
            if not target.is_file() or REPO not in target.parents:
                broken.append(f"{where} (no such file in the repository)")
            elif fragment and target.suffix == ".md" and fragment not in _anchors(target.read_text(encoding="utf-8")):
                broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_no_readme_or_docs_line_tells_history():
    told = [f"{page.relative_to(REPO)}:{n}: {line.strip()}"
            for page in _pages()
            for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if any(phrase in line.lower() for phrase in HISTORY_PHRASES)]
    assert not told, "say what the tool does now:\n" + "\n".join(told)


def test_readme_first_run_is_a_whole_report_of_at_most_40_lines_at_80_columns():
    """The first run is shown uncut: a real report, verdict first and last, each line within 80 columns except fix
    commands, which are never wrapped."""
    text = README.read_text()
    start = text.index("```text\n", text.index("<!-- first-run:")) + len("```text\n")
    lines = text[start:text.index("```\n", start)].rstrip("\n").splitlines()
    assert len(lines) <= 40 and lines[0].startswith("Python ") and "..." not in lines  # the versions block first
    assert any(line.startswith("dsv4-doctor ") for line in lines[1:5])
    verdicts = [i for i, line in enumerate(lines) if line.startswith("Verdict: ")]
    assert len(verdicts) == 2 and verdicts[0] <= 4 and verdicts[1] >= len(lines) - 2
    assert all(len(line) <= 80 or line.startswith("      ") for line in lines)


def test_readme_example_report_is_the_doctor_rendering_of_the_committed_run():
    """The example is real output: docs/readme-examples.sh renders the committed H200 report as a terminal shows it."""
    text = README.read_text()
    begin = text.index("<!-- example:begin")
    start = text.index("```text\n", begin) + len("```text\n")
    end = text.index("```\n<!-- example:end -->", start)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    run = subprocess.run(["bash", "docs/readme-examples.sh", "readme"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() and text[start:end] == run.stdout.rstrip("\n") + "\n", (
        "README's example report is stale: replace it with the output of `bash docs/readme-examples.sh readme`")


def test_rules_table_is_generated_from_the_check_definitions():
    from dsv4_doctor.engine.registry import load
    from dsv4_doctor.report.rules import rules_table

    page = (DOCS / "rules.md").read_text()
    begin = page.index("<!-- rules:begin")
    start = page.index("\n", begin) + 1
    end = page.index("<!-- rules:end -->")
    expected = rules_table(load().checks)  # built-ins only: plugins are not part of the docs
    assert page[start:end] == expected, (
        "docs/rules.md's rules table is stale: replace it with the output of `dsv4-doctor list --format markdown`")
