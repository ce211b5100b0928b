"""What a fix is: the commands it runs (argv lists with validated environments, never a shell) and its phase.

The types a check's remediation is built from, and the quoting rules a printed fix script and `fix --apply` share;
doctor/model/core.py re-exports them for checks and plugins. Nothing here imports the rest of the doctor.
"""

from __future__ import annotations

import enum
import re
import shlex
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence


# What a fix command may contain: no shell is ever involved, but a printed script must stay safe to paste, so
# arguments are plain printable text without line breaks or NUL. The same class guards comments and --python.
UNSAFE_CHARS = "\x00-\x1f\x7f-\x9f\u2028\u2029"
_ARG = re.compile(f"[^{UNSAFE_CHARS}]{{1,4096}}")


def plain_value(text: str) -> bool:
    """One line of printable text (an argv part, an interpreter path)."""
    return bool(_ARG.fullmatch(text))


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
# An environment value: plain path-like text, optionally under the target's CUDA toolkit (`${CUDA_HOME}/...`, which
# the script expands with /usr/local/cuda as the default and `--apply` from the doctor's environment).
CUDA_HOME_REF = "${CUDA_HOME}"
DEFAULT_CUDA_HOME = "/usr/local/cuda"
_ENV_VALUE = re.compile(r"(\$\{CUDA_HOME\})?[A-Za-z0-9_./:+=,-]{0,1024}")


def env_assignment(name: str, value: str) -> str:
    """`NAME=value` for a POSIX shell; the CUDA_HOME reference is the one expansion, with its default."""
    if value.startswith(CUDA_HOME_REF):
        return f'{name}="${{CUDA_HOME:-{DEFAULT_CUDA_HOME}}}{value[len(CUDA_HOME_REF):]}"'
    return f"{name}={shlex.quote(value)}"


def env_value(value: str, environ: Mapping[str, str]) -> str:
    """The value as `--apply` passes it: the CUDA_HOME reference resolved from `environ`."""
    if value.startswith(CUDA_HOME_REF):
        return (environ.get("CUDA_HOME") or DEFAULT_CUDA_HOME) + value[len(CUDA_HOME_REF):]
    return value


@dataclass(frozen=True)
class Command:
    """One command as an argv list, with the environment variables it needs (validated names and plain values). It
    is quoted (`shlex.join`) only when printed and never run through a shell."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(a, str) and _ARG.fullmatch(a) for a in self.argv):
            raise ValueError(f"not a valid command argv: {self.argv!r}")
        if not all(isinstance(n, str) and isinstance(v, str) and _ENV_NAME.fullmatch(n) and _ENV_VALUE.fullmatch(v)
                   for n, v in self.env):
            raise ValueError(f"not a valid command environment: {self.env!r}")

    def env_prefix(self) -> str:
        return "".join(env_assignment(n, v) + " " for n, v in self.env)

    @staticmethod
    def parse(text: str) -> Command:
        """A command written as one string by a plugin author (API 1): split like a shell would, never run by one."""
        return Command(tuple(shlex.split(text)))

    def shell(self) -> str:
        return self.env_prefix() + shlex.join(self.argv)

    @property
    def is_pip(self) -> bool:
        return self.argv[0] in ("pip", "pip3")

    @property
    def is_ensurepip(self) -> bool:
        """`ensurepip ...`: the target's own ensurepip (`"$PY" -I -m ensurepip`), which installs its pip."""
        return self.argv[0] == "ensurepip"

    @property
    def is_venv(self) -> bool:
        """`venv ...`: the target's own venv module (`"$PY" -I -m venv`), which makes the virtual environment that
        the pip steps of an externally managed interpreter (PEP 668) install into."""
        return self.argv[0] == "venv"


# How a pip command runs, in the fix script and under `fix --apply`: `<target python> -I -m pip ...`, the target's own
# pip (`-I`: a pip.py in the current directory is not pip), never whichever pip is first on PATH.
PIP = ("-I", "-m", "pip")
# ... or, in a venv uv made (no pip in it), with uv: `uv pip <sub-command> --python <target python> ...`.
INSTALLERS = ("pip", "uv")
# pip's options uv pip spells otherwise, or does not take (it never asks before uninstalling).
UV_SPELLING = {"--no-cache-dir": "--no-cache", "-y": None, "--yes": None, "--pre": "--prerelease=allow"}


def installer_argv(python: str, cmd: Command, installer: str = "pip", uv: str = "uv") -> list[str]:
    """How a pip command runs under an installer: the target's own pip, or uv aimed at the target."""
    if cmd.is_ensurepip or cmd.is_venv:
        return [python, "-I", "-m", *cmd.argv]
    if installer == "uv":
        rest = [UV_SPELLING.get(a, a) for a in cmd.argv[2:]]
        return [uv, "pip", cmd.argv[1], "--python", python, *[a for a in rest if a is not None]] \
            if len(cmd.argv) > 1 else [uv, "pip", "--python", python]
    return [python, *PIP, *cmd.argv[1:]]


BREAK_SYSTEM_PACKAGES = "--break-system-packages"
BREAK_VARIABLE = "PIP_BREAK_SYSTEM_PACKAGES"
_AIMED_ELSEWHERE = ("--target", "-t", "--prefix", "--root")  # pip skips PEP 668's check for an install aimed so


def breaking_system_packages(cmd: Command) -> Command:
    """`cmd` as pip accepts it in an externally managed interpreter (PEP 668), by pip's own override: an install or
    uninstall with --break-system-packages (pip checks the marker for those, except an install aimed elsewhere with
    --target, --prefix or --root, which is left as it is); ensurepip with PIP_BREAK_SYSTEM_PACKAGES=1, which the pip
    it runs reads (ensurepip itself has no such option). Anything else is unchanged."""
    if cmd.is_ensurepip:
        return Command(cmd.argv, (*[(n, v) for n, v in cmd.env if n != BREAK_VARIABLE], (BREAK_VARIABLE, "1")))
    if not cmd.is_pip or len(cmd.argv) < 2 or cmd.argv[1] not in ("install", "uninstall") \
            or BREAK_SYSTEM_PACKAGES in cmd.argv:
        return cmd
    if cmd.argv[1] == "install" and any(a in _AIMED_ELSEWHERE or a.split("=", 1)[0] in _AIMED_ELSEWHERE
                                        for a in cmd.argv[2:]):
        return cmd
    return Command((cmd.argv[0], cmd.argv[1], BREAK_SYSTEM_PACKAGES, *cmd.argv[2:]), cmd.env)


class Phase(str, enum.Enum):
    """Where a fix goes in a plan: the order in which installing things does not undo what came before."""

    PATH = "path"  # where the job imports from (a shadowing copy, the installer itself): before anything installs
    # The build toolchain (nvcc, CUDA_HOME, a C++ compiler, ninja: build.toolchain): it touches no Python package the
    # job imports, so it comes before torch's manual step, is never held back by it, and a missing compiler is known
    # before anything is built.
    TOOLCHAIN = "toolchain"
    RUNTIME = "runtime"  # torch and the CUDA runtime wheels: a manual step, everything compiled must follow it
    BUILD = "build"  # packages compiled against torch (--no-build-isolation)
    PIN = "pin"  # pure-Python pins
    SETTING = "setting"  # a job setting or a choice of image: prose, nothing to run


@dataclass(frozen=True)
class Fix:
    """A remediation: prose apart from the exact commands (argv lists, printed verbatim, never through markup)."""

    description: str
    commands: tuple[Command, ...] = ()
    key: str = ""  # the catalogue entry it came from: plans de-duplicate on it
    phase: Phase = Phase.PIN
    manual: bool = False  # printed, never run by `fix --apply` (a torch reinstall, a source build choice)
    notes: tuple[str, ...] = ()  # e.g. the compiled extensions to rebuild after a torch change
    # What the fix changes where the job imports from, as data a program can carry out ("kind" and its fields:
    # drop-pythonpath-entry, disable-user-site, update-checkout, move-aside, install-into-entry,
    # install-via-staging, install-pip, no-installer; PEP 668's two ways: make-venv, break-system-packages).
    action: tuple[tuple[str, str], ...] = ()
    installer: str = "pip"  # how its pip commands run: "pip" ("$PY" -I -m pip) or "uv" (uv pip --python "$PY")

    def __init__(self, description: str, commands: Iterable[Command | str | Sequence[str]] = (), *, key: str = "",
                 phase: Phase | str = Phase.PIN, manual: bool = False, notes: Iterable[str] = (),
                 action: Mapping[str, str] | None = None, installer: str = "pip"):
        cmds = []
        for c in commands:
            if isinstance(c, Command):
                cmds.append(c)
            elif isinstance(c, str):
                cmds.append(Command.parse(c))
            else:
                cmds.append(Command(tuple(c)))
        phase = Phase(phase)
        object.__setattr__(self, "description", str(description))
        object.__setattr__(self, "commands", tuple(cmds))
        object.__setattr__(self, "key", key or " && ".join(c.shell() for c in cmds) or str(description))
        object.__setattr__(self, "phase", phase)
        object.__setattr__(self, "manual", bool(manual) or phase is Phase.RUNTIME)
        object.__setattr__(self, "notes", tuple(str(n) for n in notes))
        object.__setattr__(self, "action", tuple((str(k), str(v)) for k, v in (action or {}).items()))
        if installer not in INSTALLERS:
            raise ValueError(f"not an installer: {installer!r}")
        object.__setattr__(self, "installer", installer)

    def with_installer(self, installer: str) -> Fix:
        """The same fix, its pip commands run by `installer`."""
        return Fix(self.description, self.commands, key=self.key, phase=self.phase, manual=self.manual,
                   notes=self.notes, action=dict(self.action), installer=installer)

    def to_dict(self) -> dict:
        out = {"description": self.description, "commands": [c.shell() for c in self.commands],
               "argv": [list(c.argv) for c in self.commands], "id": self.key, "phase": self.phase.value,
               "manual": self.manual, "notes": list(self.notes)}
        if any(c.is_pip for c in self.commands):
            out["installer"] = self.installer
        if self.action:
            out["action"] = dict(self.action)
        if any(c.env for c in self.commands):  # one mapping per command, as `--apply` sets it (CUDA_HOME unexpanded)
            out["env"] = [dict(c.env) for c in self.commands]
        return out

    @staticmethod
    def from_dict(data: Mapping) -> Fix:
        """A fix that crossed a process boundary (a plugin host's answer); raises ValueError on anything odd."""
        argv = data.get("argv")
        commands = [tuple(a) for a in argv] if isinstance(argv, list) else list(data.get("commands") or [])
        return Fix(str(data.get("description", "")), commands, key=str(data.get("id", "")),
                   phase=data.get("phase", "pin"), manual=bool(data.get("manual")), notes=data.get("notes") or (),
                   action=data["action"] if isinstance(data.get("action"), Mapping) else None,
                   installer=str(data.get("installer") or "pip"))
