"""docs/checks.md is generated from the check definitions (`python -m dsv4_doctor.commands.gendocs`) and must be
current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from markdown_it import MarkdownIt

from dsv4_doctor.checks import AREAS, CHECKS

DOCS = Path(__file__).resolve().parent.parent / "docs" / "checks.md"


def generated() -> str:
    run = subprocess.run([sys.executable, "-m", "dsv4_doctor.commands.gendocs"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_docs_checks_md_is_current():
    assert DOCS.read_text(encoding="utf-8") == generated(), \
        "docs/checks.md is stale: python -m dsv4_doctor.commands.gendocs > docs/checks.md"


def test_every_rule_has_its_page_under_its_area_in_report_order_and_no_html():
    tokens = MarkdownIt("commonmark").parse(DOCS.read_text(encoding="utf-8"))
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    areas = [h for h in headings if h in AREAS]
    assert areas == [a for a in AREAS if any(c.id.startswith(a + ".") for c in CHECKS)]
    area, rules = None, []
    for h in headings:
        if h in AREAS:
            area = h
        elif h.startswith("`"):
            rule_id = h.split("`")[1]
            assert rule_id.split(".")[0] == area, h
            rules.append(rule_id)
    assert sorted(rules) == sorted(c.id for c in CHECKS)
    text = DOCS.read_text(encoding="utf-8")
    for c in CHECKS:
        for fix in c.fixes:
            for cmd in fix.commands:
                assert cmd.shell() in text, cmd.shell()  # exact, copy-pastable
        for s in c.sources:
            assert s.url in text
