"""The command line on typer: the default command, suggestions, no abbreviations, true help, completion, exit 2."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import run_doctor

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"
COMMANDS = ("check", "smoke", "list", "explain", "fix", "preflight")


def _parse(words: list[str]):
    from dsv4_doctor.cli.main import parse_command_line

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


def test_deep_is_one_option_of_the_commands_that_run_the_smoke_and_reaches_the_profile():
    """--deep (the smoke's tier 2) on check, smoke, preflight and fleet; the default is the default level; `fix`
    runs no smoke and takes no --deep."""
    from dsv4_doctor.commands.usecases import profile_from_options

    for words in (["check"], ["smoke"], ["preflight", "--", "x"], ["fleet", "--", "x"]):
        assert _parse(words).deep is False
        deep = _parse([words[0], "--deep", *words[1:]])
        assert deep.deep is True and profile_from_options(deep, "auto").deep is True
        assert profile_from_options(deep, "auto").to_dict()["deep"] is True
    assert profile_from_options(_parse([]), "auto").to_dict()["deep"] is False
    with pytest.raises(SystemExit) as exc:
        _parse(["fix", "--deep"])
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

    from dsv4_doctor.cli.main import _app

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
    assert "..." not in help_run.stdout.split("Commands:", 1)[1], "a command's summary is cut"
    version = run_doctor("--version")
    assert version.returncode == 0 and version.stdout.startswith("dsv4-doctor ")
    shown = subprocess.run([sys.executable, "-m", "dsv4_doctor", "--show-completion", "bash"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "complete" in shown.stdout


def _doctor_cmd() -> str:
    return " ".join(shlex.quote(w) for w in (sys.executable, "-m", "dsv4_doctor"))


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o default -F"), ("zsh", "#compdef dsv4-doctor"),
                                           ("fish", "complete --command dsv4-doctor")])
def test_completion_for_a_named_shell_works_under_sh(shell, marker):
    """From `sh` (a Dockerfile RUN, `sh -c`), the shell named wins over the running one."""
    run = subprocess.run(["sh", "-c", f"{_doctor_cmd()} --show-completion {shell}"], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, SHELL="/bin/sh"))
    assert run.returncode == 0 and marker in run.stdout, run.stderr


def test_completion_without_a_shell_under_sh_takes_the_login_shell_or_says_what_to_pass():
    login = subprocess.run(["sh", "-c", f"{_doctor_cmd()} --show-completion"], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, SHELL="/usr/bin/zsh"))
    assert login.returncode == 0 and "#compdef dsv4-doctor" in login.stdout, login.stderr
    none = subprocess.run(["sh", "-c", f"{_doctor_cmd()} --show-completion"], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, SHELL="/bin/sh"))
    assert none.returncode == 2 and none.stdout == "" and "--show-completion bash" in none.stderr
    unknown = run_doctor("--show-completion", "tcsh")
    assert unknown.returncode == 2 and "bash, zsh, fish" in unknown.stderr


def _complete(shell: str, words: str) -> list[str]:
    env = dict(os.environ, _DSV4_DOCTOR_COMPLETE=f"complete_{shell}")
    if shell == "bash":
        env.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
    else:
        env.update(_TYPER_COMPLETE_ARGS=words, _TYPER_COMPLETE_FISH_ACTION="get-args")
    run = subprocess.run([sys.executable, "-m", "dsv4_doctor"], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    if shell == "zsh":
        return re.findall(r'(?:^|\n|\()"([^"]+)"', run.stdout)  # ("value":"help") or ("value"), one a line
    return run.stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
@pytest.mark.parametrize("words, expected", [
    ("dsv4-doctor explain cudnn-fe.v", ["cudnn-fe.version"]),
    ("dsv4-doctor check --only te", ["te.import", "te.version", "te"]),
    ("dsv4-doctor fix --skip cudnn-fe.c", ["cudnn-fe.csa"]),
])
def test_check_ids_and_groups_complete(shell, words, expected):
    assert _complete(shell, words) == expected


@pytest.mark.parametrize("words, near", [
    (["explain", "cudnnfe"], "cudnn-fe.version"), (["explain", "te.versoin"], "te.version"),
    (["check", "--static-only", "--only", "cudnnfe.version"], "cudnn-fe.version"),
    (["check", "--static-only", "--skip", "mcore.dvs4"], "mcore.dsv4"),
])
def test_a_near_miss_check_id_gets_a_suggestion(words, near):
    run = run_doctor(*words)
    assert run.returncode == 2 and "did you mean" in run.stderr and near in run.stderr, run.stderr


def test_explain_a_group_explains_each_of_its_checks():
    run = run_doctor("explain", "te")
    assert run.returncode == 0 and "te.import" in run.stdout and "te.version" in run.stdout


def test_explain_json_and_list_titles():
    entry = json.loads(run_doctor("explain", "te.version", "-f", "json").stdout)
    assert entry["id"] == "te.version" and entry["sources"] and entry["explanation"]
    listing = run_doctor("list").stdout
    assert "Python version" in listing or "Python" in listing.splitlines()[0] or "python.version" in listing
    from dsv4_doctor.engine.registry import load

    titles = {c.id: c.title for c in load().checks}
    assert all(titles[line.split()[0]].split()[0] in line for line in listing.splitlines() if line.split()[0] in titles)


def test_python_given_a_venv_folder_names_its_interpreter(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    run = run_doctor("check", "--static-only", "--python", str(venv))
    assert run.returncode == 2 and run.stdout == ""
    assert f"is a folder, not an interpreter: pass --python {venv}/bin/python" in run.stderr
    bare = run_doctor("check", "--static-only", "--python", str(tmp_path / "venv" / "bin"))
    assert bare.returncode == 2 and "a venv's bin/python" in bare.stderr


@pytest.mark.parametrize("columns", [80, 60])
def test_list_fits_the_width_with_a_header_and_names_only_foreign_origins(columns):
    listing = run_doctor("list", env={"COLUMNS": str(columns)}).stdout
    lines = listing.splitlines()
    assert lines[0].split()[0] == "Check" and "when it applies" in lines[0]
    assert all(len(line) <= columns for line in lines), max(lines, key=len)
    assert "dsv4-doctor" not in listing  # every row is the doctor's own: no origin column
    from dsv4_doctor.engine.registry import load

    ids = [line.split()[0] for line in lines[1:] if not line.startswith(" ")]
    assert ids == [c.id for c in load().checks]
    assert sum(line.strip().startswith("when: ") for line in lines) == len(ids)
