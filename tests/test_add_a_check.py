"""Adding a check is one decorated function in one module, registered through a plugin entry point: it appears in
`list`, `explain`, a report and a fix plan, and no other file changes. The real CLI, in subprocesses."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import REPO, run_doctor

EXAMPLE = '''
from dsv4_doctor.api import Finding, Fix, Source, Status, check

PIN = Fix("Install the example package the job pins", [["pip", "install", "example-package==1.0"]], key="example:pin")


@check("example.pin", "The example package is installed at the job's pin", applies_when="always",
       detects="the example package's version", needs=("python.version",), fixes=(PIN,),
       sources=(Source("Example release notes", "https://example.invalid/notes"),))
def example_pin(ctx):
    """The job imports the example package at its pinned version; another version computes something else.

    This paragraph is what `dsv4-doctor explain example.pin` prints."""
    yield Finding(Status.PASS, "the interpreter answered")
    yield Finding(Status.FAIL, "example-package is not installed", fixes=(PIN,))
'''


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                 and "__pycache__" not in p.parts)
    for path in paths:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


# The engine, the built-in checks and the generated check reference: none of them is edited to add a check.
UNTOUCHED = ("doctor", "checks", "docs/checks.md")


def test_a_new_check_is_one_module_and_an_entry_point(site, bare_python):
    before = {name: _digest(REPO / name) for name in UNTOUCHED}
    site.dist("example-checks", "1.0", entry_points="[dsv4_doctor.checks]\nexample = example_checks\n")
    site.file("example_checks.py", EXAMPLE)
    sites = (site.root,)

    listed = run_doctor("list", "-f", "json", sites=sites)
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    entry = next(c for c in listing["checks"] if c["id"] == "example.pin")
    assert entry["title"] == "The example package is installed at the job's pin"
    assert entry["origin"] == "example-checks"
    plugin = next(p for p in listing["plugins"] if p["name"] == "example")
    assert plugin["error"] is None and plugin["checks"] == 1 and plugin["warnings"] == []  # it keeps every rule

    explained = run_doctor("explain", "example.pin", sites=sites)
    assert explained.returncode == 0
    assert "This paragraph is what `dsv4-doctor explain example.pin` prints." in " ".join(explained.stdout.split())
    assert "needs (skipped when one fails): python.version" in explained.stdout
    assert "https://example.invalid/notes" in explained.stdout and "example-package==1.0" in explained.stdout

    run = run_doctor("check", "-f", "json", "--only", "example.pin", sites=sites, python=bare_python)
    row = run.check("example.pin")  # the report is schema-checked
    assert row["status"] == "fail" and row["summary"] == "example-package is not installed", row
    assert row["fixes"][0]["commands"] == ["pip install example-package==1.0"]
    assert row["sources"] == [{"title": "Example release notes", "url": "https://example.invalid/notes"}]
    assert run.returncode == 1 and row["origin"] == "example-checks"

    plan = run_doctor("fix", "--only", "example.pin", sites=sites, python=bare_python)
    assert '"$PY" -I -m pip install example-package==1.0' in plan.stdout and "[example.pin]" in plan.stdout

    made = sorted(str(p.relative_to(site.root)) for p in site.root.rglob("*") if p.is_file()
                  and "__pycache__" not in p.parts)
    assert made == ["example_checks-1.0.dist-info/INSTALLER", "example_checks-1.0.dist-info/METADATA",
                    "example_checks-1.0.dist-info/entry_points.txt", "example_checks.py"]
    assert {name: _digest(REPO / name) for name in UNTOUCHED} == before
