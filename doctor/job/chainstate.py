"""The launch chain's data (chain.py resolves it): what a command line runs (Chain, its steps, torchrun's World) and
the resolver's working state (_State), which the parts (interp.py, peel.py, uvrun.py) read and change. A leaf of
doctor/job: the parts import it, never chain.py, so no part imports the resolver that calls it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ChainStep:
    """A program peeled from the front: its name as written, its kind, the manual its grammar was read from."""

    name: str
    kind: str  # wrapper | builtin | shell | launcher | runner | submitter | interpreter
    manual: str
    via: str = ""  # "the #! line of ./train.py" when the program came from a script's #! line

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "manual": self.manual, **({"via": self.via} if self.via else {})}


@dataclass
class World:
    """The launcher's world size (torchrun): a number per field, its text as given, or why it is not known."""

    nnodes: int | None = None
    nproc_per_node: int | None = None
    raw: dict[str, str] = field(default_factory=dict)  # "nnodes" / "nproc_per_node" -> the value as given
    not_known: dict[str, str] = field(default_factory=dict)  # field -> why
    invalid: dict[str, str] = field(default_factory=dict)  # field -> why torchrun refuses its value

    def size(self) -> int | None:
        """Nodes x processes per node (torchrun's --nnodes defaults to 1); None when not known."""
        if self.not_known or self.invalid or self.nproc_per_node is None or (self.nnodes is None and "nnodes" in
                                                                               self.raw):
            return None
        return (self.nnodes or 1) * self.nproc_per_node

    def to_dict(self) -> dict:
        return {"nnodes": self.nnodes, "nproc_per_node": self.nproc_per_node, "size": self.size(),
                **({"not_known": dict(self.not_known)} if self.not_known else {}),
                **({"invalid": dict(self.invalid)} if self.invalid else {})}


@dataclass
class Chain:
    """What a command line runs. `interpreter` is the Python that imports the stack (verl's Ray workers' when the
    command sets runtime_env.py_executable; `entry_interpreter` then runs the entry)."""

    cwd: str | None
    steps: list[ChainStep] = field(default_factory=list)
    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: list[str] = field(default_factory=list)
    env_cleared: bool = False
    env_not_known: str | None = None  # why the job's environment is not known in full (bash -l, srun --export)
    interpreter: str | None = None
    interpreter_why: str = "not known: the command names no Python"
    entry_interpreter: str | None = None
    interpreter_flags: tuple[str, ...] = ()
    entry_kind: str | None = None  # "module" | "script" | "code"
    entry: str | None = None
    args: list[str] = field(default_factory=list)
    sys_path0: str | None = None
    sys_path0_why: str = "not known: the command names no Python entry"
    world: World | None = None
    stopped: str | None = None  # why the chain ends before the entry, naming the word
    stopped_at: str | None = None  # that word
    malformed: str | None = None  # a known program's grammar the command breaks (a usage error)
    remote: str | None = None  # "ray job submit", "sbatch --wrap": the interpreter is the remote host's
    hidden: list[str] = field(default_factory=list)  # unexpanded words where a setting could be
    hidden_launcher: list[str] = field(default_factory=list)  # such words among torchrun's options (world size)

    def to_dict(self) -> dict:
        """The chain as a report carries it: names and paths, never the arguments' values (they may be secrets)."""
        from .shape import entry_shown, shape_program

        out: dict[str, Any] = {
            "steps": [s.to_dict() for s in self.steps[:16]], "interpreter": self.interpreter,
            "interpreter_why": self.interpreter_why, "entry_kind": self.entry_kind,
            "entry": entry_shown(self.entry) if self.entry_kind != "code" else "-c", "cwd": self.cwd,
            "sys_path0": self.sys_path0, "sys_path0_why": self.sys_path0_why,
            "env_set": sorted(self.env_set)[:50], "env_unset": self.env_unset[:50], "args_count": len(self.args)}
        if self.entry_interpreter is not None:
            out["entry_interpreter"] = self.entry_interpreter
        for name in ("env_cleared", "env_not_known", "remote", "stopped"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.stopped_at is not None:
            out["stopped_at"] = shape_program(self.stopped_at).strip("'")
        if self.interpreter_flags:
            out["interpreter_flags"] = list(self.interpreter_flags)
        if self.world is not None:
            out["world"] = self.world.to_dict()
        if self.hidden:
            out["hidden"] = self.hidden[:8]
        return out


class _State:
    """The resolver's working state: the environment as the chain changes it, lookups the chain makes unknowable."""

    def __init__(self, chain: Chain, environ: Mapping[str, str]) -> None:
        self.chain = chain
        self.env = {k: v for k, v in environ.items() if isinstance(k, str) and isinstance(v, str)}
        self.depth = 0
        self.lookup_not_known: str | None = None  # names looked up on PATH are not known (a runner's env missing)
        self.path_notes: dict[str, str] = {}  # PATH folders a runner put first -> why
        self.via = ""  # the #! line the next program came from
        self.default_path = False  # `command -p`: the next lookup uses the default PATH
        self.shell_vars: dict[str, str] = {}
        self.origin = ""  # the script whose #! line the interpreter came from
        self.shebangs = 0

    def set(self, name: str, value: str) -> None:
        self.env[name] = value
        self.chain.env_set[name] = value
        if name in self.chain.env_unset:
            self.chain.env_unset.remove(name)

    def unset(self, name: str) -> None:
        self.env.pop(name, None)
        self.chain.env_set.pop(name, None)
        if name not in self.chain.env_unset:
            self.chain.env_unset.append(name[:200])

    def clear(self) -> None:
        self.env.clear()
        self.chain.env_set.clear()
        self.chain.env_cleared = True

    def chdir(self, folder: str) -> None:
        """`cd`, `env -C`, `srun -D`, `uv run --directory`: relative to the folder before it."""
        if self.chain.cwd is not None:
            self.chain.cwd = os.path.normpath(os.path.join(self.chain.cwd, folder))

    def step(self, name: str, kind: str, manual: str) -> None:
        self.chain.steps.append(ChainStep(name[:120], kind, manual, self.via))
        self.via = ""

    def stop(self, word: str, why: str) -> None:
        from .shape import entry_shown

        self.chain.stopped_at = word[:200]
        self.chain.stopped = f"`{entry_shown(os.path.basename(word)[:200]) or ''}` {why}"

    def malformed(self, why: str) -> None:
        self.chain.malformed = why
        self.chain.stopped = why
