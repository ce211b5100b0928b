"""Shell completion: the root's `--show-completion [SHELL]` and `--install-completion [SHELL]` (an explicit shell
wins; without one the running shell, else the login shell in $SHELL: under `sh`, which has no programmable
completion, the user's own shell), and the check ids and groups that `explain`, `--only` and `--skip` complete."""

from __future__ import annotations

import os

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


class NoShell(ValueError):
    """No shell completion can be written for: the message says what to pass."""


def shell_for(value: str | None, environ=os.environ) -> str:
    """The shell to complete for: `value` when given, else the running shell, else the login shell ($SHELL)."""
    if value:
        if value not in SHELLS:
            raise NoShell(f"no completion for the shell {value!r}: pass one of {', '.join(SHELLS)}")
        return value
    detected = None
    try:
        import shellingham

        detected = shellingham.detect_shell()[0]
    except Exception:  # no /proc, an unknown parent: fall back to $SHELL
        pass
    login = os.path.basename(environ.get("SHELL", ""))
    for name in (detected, login):
        if name in SHELLS:
            return str(name)
    seen = detected or login or "unknown"
    raise NoShell(f"cannot complete for the shell {seen!r}: pass the shell to complete for, one of "
                  f"{', '.join(SHELLS)} (e.g. --show-completion bash)")


def script(prog: str, complete_var: str, shell: str) -> str:
    """The completion script for `shell`, the one typer's completion protocol answers."""
    from typer._completion_classes import completion_init
    from typer._completion_shared import get_completion_script

    completion_init()
    return get_completion_script(prog_name=prog, complete_var=complete_var, shell=shell)


def install(prog: str, complete_var: str, shell: str) -> str:
    """Install the completion script for `shell` in the user's shell start-up files; the path written."""
    from typer._completion_classes import completion_init
    from typer._completion_shared import install as typer_install

    completion_init()
    _, path = typer_install(shell=shell, prog_name=prog, complete_var=complete_var)
    return str(path)


def check_names() -> list[str]:
    """Every built-in check id and group (`cudnn-fe`, and the glob `cudnn-fe.*`), sorted."""
    from ..engine.registry import load

    ids = sorted({c.id for c in load().checks})
    groups = sorted({i.split(".", 1)[0] for i in ids})
    return ids + groups + [g + ".*" for g in groups]


def complete_check(incomplete: str) -> list[str]:
    """The check ids and groups that start with what was typed (after the last comma of `--only a,b`)."""
    head, _, last = incomplete.rpartition(",")
    prefix = head + "," if head else ""
    try:
        names = check_names()
    except Exception:  # completion never fails the shell
        return []
    return [prefix + n for n in names if n.startswith(last) and not n.endswith(".*")] or \
        [prefix + n for n in names if n.startswith(last)]
