"""README promises: its two set-up commands, and that CI runs exactly its test command."""

from __future__ import annotations

import re

from conftest import REPO


def _commands(readme: str) -> list[str]:
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    commands = _commands(readme)
    assert len(commands) == 2
    assert "dsv4-doctor check" in commands[0]
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_readme_rules_table_is_generated_from_the_check_definitions():
    from dsv4_doctor.registry import load
    from dsv4_doctor.render.rules import rules_table

    readme = (REPO / "README.md").read_text()
    begin = readme.index("<!-- rules:begin")
    start = readme.index("\n", begin) + 1
    end = readme.index("<!-- rules:end -->")
    expected = rules_table(load().checks)  # built-ins only: plugins are not part of the README
    assert readme[start:end] == expected, (
        "README's rules table is stale: replace it with the output of `dsv4-doctor list --format markdown`")
