"""docs/screenshots/: the terminal report of a healthy and of a broken stack, made by docs/screenshots/make.py from
committed H200 reports, are what the code renders now."""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import REPO

SHOTS = REPO / "docs" / "screenshots"


def _make():
    spec = importlib.util.spec_from_file_location("screenshots_make", SHOTS / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["healthy", "broken"])
def test_the_screenshots_are_current(name):
    make = _make()
    svg, text = make.render(name)
    committed_text = (SHOTS / f"{name}.txt").read_text(encoding="utf-8")
    assert text == committed_text, f"docs/screenshots/{name}.txt is stale: run python docs/screenshots/make.py"
    committed = (SHOTS / f"{name}.svg").read_text(encoding="utf-8")
    # The picture holds the report's text, in order (rich splits it into styled runs; a fix command longer than the
    # width goes on in the next row, as on a terminal: nothing is cut).
    root = ET.fromstring(committed)
    runs = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert runs[0].replace("\xa0", " ") == make.SCREENSHOTS[name][1]
    assert re.sub(r"\s+", "", "".join(runs[1:])) == re.sub(r"\s+", "", committed_text)
    if make.rich_marker() not in committed:
        pytest.skip(f"docs/screenshots/{name}.svg was rendered by another rich release than this one; its text is "
                    "current (checked above), its bytes are compared under the release it names")
    assert svg == committed, f"docs/screenshots/{name}.svg is stale: run python docs/screenshots/make.py"


def test_the_healthy_stack_is_ready_and_the_broken_one_fails_with_its_fix():
    make = _make()
    healthy, broken = make.render("healthy")[1], make.render("broken")[1]
    assert "Verdict: WARN" in healthy and "ready to train" in healthy and "[✗]" not in healthy
    assert "Verdict: FAIL" in broken and "[✗] te  1 fail" in broken
    assert "pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'" in broken
    assert make.main(["--check"]) == 0
