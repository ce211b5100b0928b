"""The command line on typer: the default command, suggestions, no abbreviations, true help, completion, exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import run_doctor

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"
COMMANDS = ("check", "smoke", "list", "explain", "fix", "preflight")


def _parse(words: list[str]):
    from dsv4_doctor.cli import parse_command_line

    return parse_command_line(words)


def test_check_is_the_default_command():
    assert _parse([]).command == "check"
    args = _parse(["--cp", "2", "-f", "json"])
    assert (args.command, args.cp, args.format, args.distributed) == ("check", 2, "json", "auto")
    assert _parse(["check", "--no-distributed"]).distributed == "off"


@pytest.mark.parametrize("words, suggestion", [
    (["chek"], "'check'"), (["lsit"], "'list'"), (["--cpp", "2"], "--cp"),
    (["check", "--verbose-r"], "--verbose-ranks"), (["--stat"], "--static-only"),
])
def test_a_mistyped_command_or_option_is_refused_with_a_suggestion(words, suggestion):
    run = run_doctor(*words)
    assert run.returncode == 2 and run.stdout == ""
    assert "did you mean" in run.stderr.lower() and suggestion in run.stderr and "Traceback" not in run.stderr


def test_abbreviations_are_off():
    for words in (["--verbose-r"], ["--stat"], ["check", "--only-"], ["fix", "--app"]):
        with pytest.raises(SystemExit) as exc:
            _parse(words)
        assert exc.value.code == 2


def test_preflight_keeps_the_job_s_words_verbatim():
    args = _parse(["preflight", "--strict", "--", "torchrun", "--cp", "3", "--", "--help", "-f", "yaml"])
    assert args.job_command == ["--", "torchrun", "--cp", "3", "--", "--help", "-f", "yaml"]
    assert args.strict and args.cp is None and args.format == "text"


@pytest.mark.parametrize("hostile", [f"--hf-token={SECRET}", "--x\x1b]52;c;ZXZpbA==\x07", "--y\x1b[31mred"])
def test_an_unknown_option_never_reaches_stderr_raw(hostile):
    run = run_doctor("check", hostile)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert SECRET not in run.stderr and "\x1b" not in run.stderr and "\x07" not in run.stderr


def _help_options(text: str) -> list[str]:
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--help"})


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_a_help_names_is_taken(command):
    """`fix --help` and `smoke --help` named options the commands refused."""
    from typer.testing import CliRunner

    from dsv4_doctor.cli import _app

    app, _ = _app()
    help_text = CliRunner().invoke(app, [command, "--help"], terminal_width=400).output
    assert help_text.startswith("Usage: dsv4-doctor " + command)
    for option in _help_options(help_text):
        if option in ("--distributed", "--no-distributed", "--install-completion", "--show-completion"):
            continue
        words = [command, option] if command != "explain" else [command, "python.version", option]
        result = CliRunner().invoke(app, words + ["--help"])
        assert "No such option" not in result.output, (command, option, result.output)


def test_root_help_version_and_completion():
    help_run = run_doctor("--help")
    assert help_run.returncode == 0 and "--install-completion" in help_run.stdout and "Exit codes" in help_run.stdout
    version = run_doctor("--version")
    assert version.returncode == 0 and version.stdout.startswith("dsv4-doctor ")
    shown = subprocess.run([sys.executable, "-m", "dsv4_doctor", "--show-completion", "bash"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "complete" in shown.stdout


def test_explain_json_and_list_titles():
    entry = json.loads(run_doctor("explain", "te.version", "-f", "json").stdout)
    assert entry["id"] == "te.version" and entry["sources"] and entry["explanation"]
    listing = run_doctor("list").stdout
    assert "Python version" in listing or "Python" in listing.splitlines()[0] or "python.version" in listing
    from dsv4_doctor.registry import load

    titles = {c.id: c.title for c in load().checks}
    assert all(titles[line.split()[0]].split()[0] in line for line in listing.splitlines() if line.split()[0] in titles)
