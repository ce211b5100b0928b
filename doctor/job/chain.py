"""The launch chain: a training command line read as the OS and each launcher in it will run it.

`resolve(argv, cwd, environ)` peels each program in front of the training entry with its own option grammar
(doctor/job/wrappers.py: coreutils and util-linux wrappers, numactl, the shell builtins exec and command, srun,
`sh -c` strings with their positional parameters, `ray job submit -- ...` and `sbatch --wrap`, `uv run`, torchrun),
follows a script run directly through its `#!` line, and ends at the interpreter and its entry (a script, `-m
module` or `-c`). The Chain says what the job runs: the interpreter (and why), the entry and its arguments, the
working directory, sys.path[0] by CPython's rules, what the chain does to the environment, and torchrun's world size.

A word it cannot place (an unknown program, `bash run.sh`, `mpirun`, a pipe in a `-c` string) ends the chain:
`stopped` names it, and the job's settings are then not known. After a remote submitter (`remote`) the settings are
read, but the interpreter and its sys.path belong to the remote host. Unexpanded words (`$(...)`, backquotes, `$@`,
`$*`, `$NAME`) are never settings: where one could carry a setting it is listed in `hidden`. Nothing is run: the
resolver reads words, looks names up on the job's PATH and reads at most 256 bytes of a script's `#!` line
(doctor/safeio.py); a -c string is read at most 8 levels deep.

The parts: wrappers.py (the grammars, as data, with their sources), peel.py (wrappers, srun, shells' -c strings,
submitters), shellwords.py (a shell string's words), interp.py (the interpreter, `#!` lines, torchrun, sys.path[0],
verl's py_executable), uvrun.py (`uv run`'s project environment).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .keys import ENV_ASSIGNMENT, MAX_ARGS
from .values import hidden_shown, is_hidden_word
from .wrappers import NOT_FOLLOWED, SHELLS, WRAPPERS

MAX_DEPTH = 8  # -c strings and env -S strings inside each other
MAX_STEPS = 64  # programs peeled in all
_BY_NAME = {name: w for w in WRAPPERS for name in w.names}


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


def resolve(argv: list[str], cwd: str, environ: Mapping[str, str] | None = None) -> Chain:
    """The chain the command runs, from the working directory `cwd` in the environment `environ` (the doctor's own
    when None: at preflight it is the job's)."""
    chain = Chain(cwd=os.path.abspath(cwd))
    state = _State(chain, os.environ if environ is None else environ)
    _run(list(argv[:MAX_ARGS + 1]), state)
    return chain


def _run(words: list[str], st: _State) -> None:
    """Peel programs off the front until the entry is placed or the chain stops."""
    from . import interp, peel, uvrun

    while True:
        if len(words) > MAX_ARGS:
            st.stop(words[0], f"has more than {MAX_ARGS} words: not read")
            return
        i = 0
        while i < len(words) - 1 and ENV_ASSIGNMENT.fullmatch(words[i]):  # `NAME=VALUE CMD`, as a shell reads it
            name, value = words[i].split("=", 1)
            st.set(name, value)
            i += 1
        words = words[i:]
        if not words:
            st.chain.stopped = "the command runs no program"
            return
        word = words[0]
        base = os.path.basename(word)
        if is_hidden_word(word) or "$(" in word or "`" in word:
            st.stop(hidden_shown(word), "is the program, a word the shell did not expand: what it runs is not known")
            return
        if st.depth > MAX_DEPTH or len(st.chain.steps) > MAX_STEPS:
            st.stop(word, f"is more than {MAX_DEPTH} -c strings deep or {MAX_STEPS} programs long: not followed")
            return
        if base in _BY_NAME:
            rest = peel.wrapper(_BY_NAME[base], words, st)
        elif base == "srun":
            rest = peel.srun(words, st)
        elif base in SHELLS:
            rest = peel.shell(words, st)
        elif base in ("sbatch", "ray"):
            rest = peel.submit(words, st)
        elif base == "uv":
            rest = uvrun.uv_run(words, st)
        elif base in NOT_FOLLOWED:
            st.stop(word, f"is not followed: {NOT_FOLLOWED[base]}")
            rest = None
        else:
            rest = interp.program(words, st)
        if rest is None:
            return
        words = rest
