"""The job interpreter's start, as far as module lookup goes: its sys.path[0] (the entry script's folder for
`python SCRIPT` and `torchrun SCRIPT`, the working directory for `-m` and `-c`, torchrun -m too), the interpreter
flags that change the path (-I, -E, -s, -S, -P), and the variables the command sets that change it (PYTHONPATH,
PYTHONNOUSERSITE, PYTHONUSERBASE, PYTHONSAFEPATH). The static probe starts the same way, so it finds the copy the job
will import.

Derived from the command's launch chain (job/chain.py), which follows its wrappers, -c strings, launchers and `#!`
lines; a command the chain cannot follow to a Python entry (a shell script, another program) or that runs on another
host leaves sys.path[0] not known, and the probe then adds nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .chain import Chain

# Variables the command sets that change where the interpreter looks.
PATH_VARIABLES = ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH")


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


def of_chain(chain: Chain) -> JobPath:
    """The job's start as its launch chain gives it."""
    kept = tuple((k, v) for k, v in chain.env_set.items() if k in PATH_VARIABLES)
    if chain.stopped or chain.entry_kind is None:
        why = f"not known: {chain.stopped}" if chain.stopped else chain.sys_path0_why
        return JobPath(None, why, chain.interpreter_flags, kept)
    return JobPath(chain.sys_path0, chain.sys_path0_why, chain.interpreter_flags, kept)


def job_path(argv: list[str], cwd: str, environ: Mapping[str, str] | None = None) -> JobPath:
    """Where the job's sys.path[0] points, from its command line and working directory."""
    from .chain import resolve

    return of_chain(resolve(list(argv), cwd, os.environ if environ is None else environ))
