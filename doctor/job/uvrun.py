"""`uv run`, as uv runs it: the command with the project environment's bin folder first on PATH (and VIRTUAL_ENV
set), the environment found as uv finds it (uv 26a9dd4b: crates/uv-workspace/src/workspace.rs
VirtualProject::discover, find_workspace and Workspace::environment_selection; docs/concepts/projects/config.md
"Project environment path"; crates/uv/src/commands/project/run.rs): the nearest pyproject.toml at or above the
working directory (`--project DIR` starts the search there; `--directory DIR` changes the working directory first),
the workspace root above it whose tool.uv.workspace members include it (and do not exclude it), then
UV_PROJECT_ENVIRONMENT (relative to the workspace root) or the root's `.venv`, or VIRTUAL_ENV with `--active`. What
uv decides otherwise is not known, and says why: `--with`, `--isolated`, `--python`, `--no-project`, no project
above the folder, tool.uv.managed = false, a script with inline metadata (PEP 723), an environment not made yet.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from typing import TYPE_CHECKING, Any

from ..hostio.safeio import NoTomlParser, ReadRefused, load_toml, read_file
from .interp import executable
from .wrappers import UV, UV_MANUAL, UV_NOT_FOLLOWED, getopt, shown

if TYPE_CHECKING:
    from .chainstate import _State


def uv_run(words: list[str], st: _State) -> list[str] | None:
    """`uv [options] run [options] COMMAND...`: the command with the project environment first on PATH."""

    found, i, error = getopt(UV, words, 1, "uv")
    if not error and (i >= len(words) or words[i] != "run"):
        error = f"`uv`: {(words[i] if i < len(words) else '')[:40]!r} is not `uv run`, which the doctor does not follow"
    more, j, error = (getopt(UV, words, i + 1, "uv run") if not error else ([], i, error))
    if error:
        st.stop(words[0], error.split(": ", 1)[-1])
        return None
    keys = {k: v for k, v, _ in found + more}
    env = st.env
    for variable, key in (("UV_WORKING_DIR", "directory"), ("UV_PROJECT", "project"), ("UV_PYTHON", "p"),
                          ("UV_ENV_FILE", "env-file")):
        if env.get(variable) and key not in keys:
            keys[key] = env[variable]
    for variable, key in (("UV_NO_PROJECT", "no-project"), ("UV_ISOLATED", "isolated")):
        if env.get(variable, "").lower() in ("1", "true", "yes", "on"):
            keys.setdefault(key, None)
    if keys.keys() & {"h", "help", "V", "version"}:
        st.stop(words[0], "runs no command with --help or --version")
        return None
    command = words[j:]
    if not command:
        st.malformed("`uv run` without a command in the training command")
        return None
    st.step("uv run", "runner", UV_MANUAL)
    if keys.get("directory"):
        st.chdir(str(keys["directory"]))
    if "env-file" in keys and "no-env-file" not in keys:
        st.chain.env_not_known = "uv run --env-file loads variables from a file the doctor does not read"
    reason = next((why for key, why in UV_NOT_FOLLOWED.items() if key in keys), None)
    if "m" in keys:
        command = ["python", "-m"] + command
    elif "s" in keys or command[0].endswith(".py"):
        if reason is None and _inline_metadata(command[0], st):
            reason = f"{shown(command[0])} declares inline script metadata (PEP 723): uv runs it in its own environment"
        command = ["python"] + command
    venv = None
    if reason is None:
        venv, reason = uv_environment(keys.get("project"), st, "active" in keys and "no-active" not in keys)
    if venv is None:
        st.lookup_not_known = f"not known: uv run: {reason}"
        return command
    folder = os.path.join(venv, "bin")
    env["PATH"] = folder + (":" + env["PATH"] if env.get("PATH") else "")
    env["VIRTUAL_ENV"] = venv
    st.path_notes[folder] = f"uv run: the project's environment ({venv})"
    return command


def _inline_metadata(script: str, st: _State) -> bool:
    if st.chain.cwd is None:
        return False
    try:
        text = read_file(os.path.join(st.chain.cwd, script), 65536)
    except ReadRefused:
        return False
    return re.search(rb"(?m)^# /// script[ \t]*\r?$", text) is not None


def uv_environment(project: str | None, st: _State, active: bool) -> tuple[str | None, str]:
    """The project environment uv run selects, or None and why it is not known."""
    cwd = st.chain.cwd
    if cwd is None:
        return None, "the remote host's"
    start = os.path.normpath(os.path.join(cwd, project)) if project else cwd
    found = next((d for d in _ancestors(start) if os.path.isfile(os.path.join(d, "pyproject.toml"))), None)
    if found is None:
        return None, ("no project above the working directory: uv searches for an interpreter itself (VIRTUAL_ENV, "
                      "a .venv, the PATH), which the doctor does not follow")
    data, why = _toml(os.path.join(found, "pyproject.toml"))
    if data is None:
        return None, why
    tool_uv = _table(_table(data, "tool"), "uv")
    root = found
    if "project" in data:
        if tool_uv.get("managed") is False:
            return None, "the project sets tool.uv.managed = false, so uv treats it as no project"
        if "workspace" not in tool_uv:
            root = _workspace_root(found) or found
    chosen = st.env.get("UV_PROJECT_ENVIRONMENT")
    venv = (chosen if os.path.isabs(chosen) else os.path.join(root, chosen)) if chosen else os.path.join(root, ".venv")
    if active and st.env.get("VIRTUAL_ENV"):
        venv = os.path.join(cwd, st.env["VIRTUAL_ENV"])
    venv = os.path.normpath(venv)
    if not executable(os.path.join(venv, "bin", "python")):
        return None, f"the project environment {venv} does not exist yet (uv run would create it)"
    return venv, ""


def _ancestors(path: str) -> list[str]:
    out = [path]
    while os.path.dirname(out[-1]) != out[-1] and len(out) < 256:
        out.append(os.path.dirname(out[-1]))
    return out


def _table(data: Any, name: str) -> dict:
    value = data.get(name) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _toml(path: str) -> tuple[dict | None, str]:
    try:
        return load_toml(path), ""
    except NoTomlParser:
        return None, "reading its pyproject.toml needs tomllib (Python 3.11+) or tomli"
    except ReadRefused as exc:
        return None, f"{path} cannot be read ({exc})"


def _workspace_root(project: str) -> str | None:
    """The workspace root above a project (uv's find_workspace: the first pyproject.toml above it decides)."""
    for folder in _ancestors(project)[1:]:
        if not os.path.isfile(os.path.join(folder, "pyproject.toml")):
            continue
        data, _ = _toml(os.path.join(folder, "pyproject.toml"))
        workspace = _table(_table(_table(data or {}, "tool"), "uv"), "workspace")
        if not workspace:
            return None
        included = _listed(workspace.get("members"), folder, project)
        return folder if included and not _listed(workspace.get("exclude"), folder, project) else None
    return None


def _listed(patterns: Any, root: str, project: str) -> bool:
    """Whether a tool.uv.workspace glob list (members, exclude) names the project's folder."""
    return isinstance(patterns, list) and any(
        os.path.realpath(match) == os.path.realpath(project) for pattern in patterns[:64] if isinstance(pattern, str)
        for match in itertools.islice(glob.iglob(os.path.join(root, pattern)), 1024))
