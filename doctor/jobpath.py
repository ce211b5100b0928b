"""The job interpreter's start, as far as module lookup goes: its sys.path[0] (the entry script's folder for
`python SCRIPT` and `torchrun SCRIPT`, the working directory for `-m` and `-c`, torchrun -m too), the interpreter
flags that change the path (-I, -E, -s, -S, -P), and the variables the command sets in front that change it
(PYTHONPATH, PYTHONNOUSERSITE, PYTHONUSERBASE, PYTHONSAFEPATH). The static probe starts the same way, so it finds
the copy the job will import.

Read from the command's words alone (the job/ parser reads its settings); a command the doctor cannot follow (a
shell script, another program) leaves sys.path[0] not known, and the probe then adds nothing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .job.keys import ENV_ASSIGNMENT, PYTHON_VALUE_OPTIONS, TORCHRUN_VALUE_OPTIONS

TORCHRUNS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
# Variables in front of the command that change where the interpreter looks.
PATH_VARIABLES = ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH")
# Interpreter flags that change sys.path, passed on to the probe as the job gives them.
PATH_FLAGS = frozenset("IEsSP")


@dataclass(frozen=True)
class JobPath:
    """path: the job's sys.path[0] (absolute), or None (not known, or none: -I, -P, PYTHONSAFEPATH); why: in words."""

    path: str | None
    why: str
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def request(self) -> dict | None:
        return {"path": self.path, "why": self.why} if self.path else None

    def to_dict(self) -> dict:
        return {"path": self.path, "why": self.why, "flags": list(self.flags), "env": dict(self.env)}


def _python_flags(argv: list[str], i: int, flags: list[str]) -> int:
    """Past `python`'s options up to -m, -c or the script; the path flags are collected."""
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c", "-", "--"):
        arg = argv[i]
        if arg in PYTHON_VALUE_OPTIONS:
            i += 2
            continue
        if not arg.startswith("--") and re.fullmatch(r"-[A-Za-z]+", arg) and arg[1] not in "WXQ":
            flags += [f"-{c}" for c in arg[1:] if c in PATH_FLAGS and f"-{c}" not in flags]
        i += 1
    if i < len(argv) and argv[i] == "--":
        i += 1
    return i


def _after_torchrun(argv: list[str], i: int) -> tuple[int, bool, bool]:
    """Past torchrun's options: (index of the entry, -m given, --no-python given)."""
    module = no_python = False
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
        name, has_eq, _ = arg.lstrip("-").partition("=")
        if arg in ("-m", "--module"):
            module = True
        elif arg in ("--no-python", "--no_python"):
            no_python = True
        elif name in TORCHRUN_VALUE_OPTIONS and not has_eq:
            i += 1
        i += 1
    return i, module, no_python


def job_path(argv: list[str], cwd: str, environ: dict[str, str] | None = None) -> JobPath:
    """Where the job's sys.path[0] points, from its command line and working directory."""
    environ = dict(os.environ if environ is None else environ)
    env: dict[str, str] = {}
    flags: list[str] = []
    i = 0
    while i < len(argv) and ENV_ASSIGNMENT.fullmatch(argv[i]):
        name, value = argv[i].split("=", 1)
        env[name] = value
        i += 1
    if i < len(argv) and os.path.basename(argv[i]) == "env":
        i += 1
        while i < len(argv) and (argv[i].startswith("-") or ENV_ASSIGNMENT.fullmatch(argv[i])):
            arg = argv[i]
            if arg in ("-C", "--chdir") and i + 1 < len(argv):
                cwd = os.path.join(cwd, argv[i + 1])
                i += 2
                continue
            if arg.startswith("--chdir="):
                cwd = os.path.join(cwd, arg.split("=", 1)[1])
            elif arg in ("-S", "--split-string") or arg.startswith("--split-string="):
                return JobPath(None, "not known: `env -S` splits its own command")
            elif arg in ("-u", "--unset") and i + 1 < len(argv):
                env.pop(argv[i + 1], None)
                i += 1
            elif ENV_ASSIGNMENT.fullmatch(arg):
                name, value = arg.split("=", 1)
                env[name] = value
            i += 1
    kept = tuple((k, v) for k, v in env.items() if k in PATH_VARIABLES)

    def made(path: str | None, why: str) -> JobPath:
        if path is not None and ("-I" in flags or "-P" in flags or (env.get("PYTHONSAFEPATH") or (
                environ.get("PYTHONSAFEPATH") if "-E" not in flags else ""))):
            return JobPath(None, "none: the job's interpreter adds no sys.path[0] (-I, -P or PYTHONSAFEPATH)",
                           tuple(flags), kept)
        return JobPath(os.path.realpath(path) if path else None, why, tuple(flags), kept)

    while i < len(argv):
        prog = os.path.basename(argv[i])
        if prog in TORCHRUNS or (prog.startswith("python") and argv[i + 1:i + 3] in (
                ["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"])):
            i = i + 1 if prog in TORCHRUNS else i + 3
            i, module, no_python = _after_torchrun(argv, i)
            if no_python or i >= len(argv):
                return made(None, "not known: torchrun --no-python runs a program, not a Python script")
            if module:
                return made(cwd, "the working directory (torchrun -m)")
            # Its workers run `python -u SCRIPT`: the script's folder with its symbolic links resolved, as below.
            return made(os.path.dirname(os.path.realpath(os.path.join(cwd, argv[i]))), "the script's folder")
        if re.fullmatch(r"python(\d(\.\d+)?)?", prog):
            i = _python_flags(argv, i + 1, flags)
            if i >= len(argv):
                return made(None, "not known: python without a script")
            if argv[i] in ("-m", "-c"):
                return made(cwd, f"the working directory (python {argv[i]})")
            if argv[i] == "-":
                return made(cwd, "the working directory (python -)")
            # CPython takes the script's folder with its symbolic links resolved.
            return made(os.path.dirname(os.path.realpath(os.path.join(cwd, argv[i]))), "the script's folder")
        return made(None, f"not known: the command runs {prog[:80]}, not python or torchrun")
    return made(None, "not known: no program in the command")
