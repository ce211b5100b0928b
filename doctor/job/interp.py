"""The end of a launch chain (doctor/job/chain.py): the Python that runs the entry, and where it starts.

- A name (`python3`, `torchrun`) is looked up on the job's PATH as execvp does, in the environment the chain made
  (`env -i` leaves glibc's default "/bin:/usr/bin"); a path is taken as given.
- A script run directly is followed through its `#!` line as the kernel reads it (binfmt_script: the first 256 bytes,
  the interpreter and at most one argument, then the script's path), `/usr/bin/env NAME` and `env -S` included.
- torchrun's workers run `sys.executable -u SCRIPT` (or `-m MODULE`) of torchrun's own interpreter (its `#!` line),
  or PYTHON_EXEC (torch/distributed/run.py); its world size is `--nnodes` x `--nproc-per-node` (PET_NNODES,
  PET_NPROC_PER_NODE when not given).
- `uv run` (doctor/job/uvrun.py) puts the project environment's bin folder first on PATH: the lookup names it.
- verl's Ray workers import the stack with `ray_kwargs.ray_init.runtime_env.py_executable` when the command sets it.
- sys.path[0], by CPython's rules (the sys.path docs): the script's folder with its links resolved, the working
  directory for -m and -c, nothing with -I, -P or PYTHONSAFEPATH (which -E and -I make it ignore).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from ..hostio.safeio import ReadRefused, read_file
from .keys import HYDRA_OVERRIDE
from .values import hidden_shown, is_hidden_word, parse_value
from .wrappers import (NPROC_WORDS, PATH_FLAGS, PYTHON_FLAG_LETTERS, PYTHON_LONG, PYTHON_MANUAL, PYTHON_VALUE_LETTERS,
                       TORCHRUN, TORCHRUN_MANUAL, TORCHRUN_NAMES, getopt, shown)

if TYPE_CHECKING:
    from .chainstate import _State

PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
DEFAULT_PATH = "/bin:/usr/bin"  # glibc's execvp and `command -p` (confstr _CS_PATH) when PATH is unset
SHEBANG_BYTES = 256  # Linux binfmt_script reads BINPRM_BUF_SIZE bytes
PY_EXECUTABLE = "ray_kwargs.ray_init.runtime_env.py_executable"
NO_SYS_PATH0 = "none: the job's interpreter adds no sys.path[0] (-I, -P or PYTHONSAFEPATH)"


def lookup(word: str, st: _State) -> tuple[str | None, str]:
    """The file exec runs for `word`, and how it was found (or why not)."""
    cwd = st.chain.cwd
    default, st.default_path = st.default_path, False
    if cwd is None:
        return None, st.lookup_not_known or "not known: the command runs on another host"
    if "/" in word:
        path = os.path.normpath(os.path.join(cwd, word))
        return (path, f"the path {shown(word)}") if executable(path) else \
            (None, f"not known: {shown(word)} is no executable file")
    if st.lookup_not_known:
        return None, st.lookup_not_known
    for folder in (DEFAULT_PATH if default or "PATH" not in st.env else st.env["PATH"]).split(":")[:256]:
        where = os.path.join(cwd, folder)
        path = os.path.join(where, word)
        if executable(path):
            note = st.path_notes.get(folder)
            return path, note or f"{shown(word)} on the job's PATH"
    return None, f"not known: {shown(word)} is not on the job's PATH"


def executable(path: str) -> bool:
    try:
        return os.path.isfile(path) and os.access(path, os.X_OK)
    except (OSError, ValueError):
        return False


def _head(path: str) -> bytes | None:
    try:
        return read_file(path, SHEBANG_BYTES)
    except ReadRefused:
        return None


def shebang(head: bytes) -> tuple[str, str] | None:
    """(interpreter, its one argument or "") of a `#!` line as the kernel splits it; None without one."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "surrogateescape").strip(" \t")
    interpreter, _, argument = line.replace("\t", " ").partition(" ")
    return (interpreter, argument.strip(" ")) if interpreter else None


def script_python(path: str | None, why: str, st: _State) -> tuple[str | None, str]:
    """The Python a console script (torchrun) runs under: its `#!` line's, a name looked up on PATH."""
    if path is None:
        return None, why
    line = shebang(_head(path) or b"")
    if line is None:
        return None, f"not known: {os.path.basename(path)} has no #! line the doctor can read"
    interpreter, argument = line
    name = argument[2:].split()[:1] if argument.startswith("-S") else argument.split()[:1]
    if os.path.basename(interpreter) == "env" and name and not name[0].startswith("-"):
        found, how = lookup(name[0], st)
        return found, f"the #! line of {path} (#!{interpreter} {argument}): {how}"
    if PYTHON_NAME.fullmatch(os.path.basename(interpreter)):
        return interpreter, f"the #! line of {path}"
    return None, f"not known: the #! line of {path} names {interpreter[:80]}"


def program(words: list[str], st: _State) -> list[str] | None:
    """An interpreter, torchrun or a script at the front: the chain's end, or the words its `#!` line makes."""
    word = words[0]
    base = os.path.basename(word)
    if base == "torchrun":
        path, why = lookup(word, st)
        python, how = script_python(path, why, st)
        st.step(base, "launcher", TORCHRUN_MANUAL)
        return torchrun(words[1:], python, how, path, st)
    if PYTHON_NAME.fullmatch(base):
        path, why = lookup(word, st)
        return _python(words, path, why, st)
    return _script(words, st)


def _python(words: list[str], path: str | None, why: str, st: _State) -> list[str] | None:
    flags: list[str] = []
    i, kind, target = 1, None, None
    while i < len(words) and kind is None:
        word = words[i]
        if word == "--" or word == "-" or not word.startswith("-"):
            i += word == "--"
            break
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if name == "--check-hash-based-pycs":
                i += 1 if "=" in word else 2
                continue
            st.stop(words[0], f"runs no training entry with {name[:40]}" if name in PYTHON_LONG else
                    f"has no option {name[:40]}")
            return None
        j = 1
        while j < len(word):
            letter = word[j]
            if letter in "cm" or letter in PYTHON_VALUE_LETTERS:
                value = word[j + 1:]
                if not value:
                    if i + 1 >= len(words):
                        st.malformed(f"`python -{letter}` without a {'module' if letter == 'm' else 'value'} in the "
                                     "training command")
                        return None
                    value, i = words[i + 1], i + 1
                if letter in "cm":
                    kind, target = ("module" if letter == "m" else "code"), value
                break
            if letter not in PYTHON_FLAG_LETTERS or letter in "hV?":
                st.stop(words[0], f"runs no training entry with -{letter}" if letter in "hV?" else
                        f"has no option -{letter[:1]}")
                return None
            if letter in PATH_FLAGS and f"-{letter}" not in flags:
                flags.append(f"-{letter}")
            j += 1
        i += 1
    st.step(os.path.basename(words[0]), "interpreter", PYTHON_MANUAL)
    if kind is None:
        if i >= len(words) or words[i] == "-":
            st.stop(words[0], "reads its program from standard input, which the doctor does not read")
            return None
        kind, target, i = "script", words[i], i + 1
    if kind == "module" and target in TORCHRUN_NAMES:
        st.step(str(target), "launcher", TORCHRUN_MANUAL)
        return torchrun(words[i:], path, why, None, st)
    place(st, path, why, tuple(flags), kind, str(target), words[i:])
    return None


def place(st: _State, python: str | None, why: str, flags: tuple[str, ...], kind: str, entry: str,
          args: list[str], path0: tuple[str | None, str] | None = None) -> None:
    """The chain's end: the interpreter, the entry, its arguments, sys.path[0]."""
    chain = st.chain
    if st.origin and python is not None:
        why = f"{why}, from the #! line of {st.origin}"
    chain.interpreter, chain.interpreter_why = python, why
    chain.interpreter_flags, chain.entry_kind, chain.entry, chain.args = flags, kind, entry, list(args)
    chain.hidden += [hidden_shown(a) for a in args if is_hidden_word(a) or "$(" in a or "`" in a]
    if path0 is not None:
        chain.sys_path0, chain.sys_path0_why = path0
    elif chain.cwd is None:
        chain.sys_path0, chain.sys_path0_why = None, "not known: the remote host's"
    elif "-I" in flags or "-P" in flags or ("-E" not in flags and st.env.get("PYTHONSAFEPATH")):
        chain.sys_path0, chain.sys_path0_why = None, NO_SYS_PATH0
    elif kind == "script":
        folder = os.path.dirname(os.path.realpath(os.path.join(chain.cwd, entry)))
        chain.sys_path0, chain.sys_path0_why = os.path.realpath(folder), "the script's folder"
    else:
        chain.sys_path0 = os.path.realpath(chain.cwd)
        chain.sys_path0_why = f"the working directory (python {'-m' if kind == 'module' else '-c'})"
    if kind == "module" and entry.startswith("verl."):
        _workers_python(chain, args)


def _workers_python(chain: Any, args: list[str]) -> None:
    """verl's ray.init(runtime_env=...) from `ray_kwargs.ray_init.runtime_env.py_executable` (Hydra: the last word
    wins, `~key` removes it): the interpreter Ray starts the workers with, which import the stack."""
    value: str | None = None
    for arg in args:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if m is not None and m.group("key") == PY_EXECUTABLE:
            value = None if m.group("prefix") == "~" else m.group("value")
    if value is None:
        return
    chain.entry_interpreter = chain.interpreter
    given = parse_value(value)
    if chain.remote:
        chain.interpreter, chain.interpreter_why = None, f"not known: the remote host's ({PY_EXECUTABLE})"
    elif isinstance(given, str) and os.path.isabs(given) and not re.search(r"[\s$`{}]", given):
        chain.interpreter, chain.interpreter_why = given, f"verl's Ray workers: {PY_EXECUTABLE}"
    else:
        chain.interpreter = None
        chain.interpreter_why = (f"not known: {PY_EXECUTABLE} is not an absolute path to an interpreter (an "
                                 "unexpanded word, a relative path or a command line)")


def torchrun(words: list[str], python: str | None, why: str, program_path: str | None, st: _State
             ) -> list[str] | None:
    """torchrun's options (argparse: the script ends them), its world size, and its workers' entry."""
    from .chainstate import World

    world, i, events = World(), 0, []
    while True:
        found, i, error = getopt(TORCHRUN, words, i, "torchrun")
        if error:
            st.malformed(error) if "has no value" in error else st.stop("torchrun", error.split(": ", 1)[-1])
            return None
        events += [(k, v) for k, v, _ in found]
        if i < len(words) and is_hidden_word(words[i]):  # `torchrun $DISTRIBUTED_ARGS SCRIPT`: options, maybe
            shown = hidden_shown(words[i])
            st.chain.hidden_launcher.append(shown)
            st.chain.hidden.append(shown)
            events.append(("$", shown))
            i += 1
            continue
        break
    keys = {k for k, _ in events}
    if "h" in keys:
        st.stop("torchrun", "runs no training entry with --help")
        return None
    _world(world, events, st.env)
    st.chain.world = world
    if i >= len(words):
        if "$" in keys:
            st.stop("torchrun", "takes its script from an unexpanded word: what it runs is not known")
        else:
            st.malformed("torchrun without a training script in the training command")
        return None
    module, no_python, run_path = "m" in keys, "no-python" in keys, "run-path" in keys
    if no_python:
        if module:
            st.malformed("torchrun with both --no-python and --module, which torchrun refuses")
            return None
        return words[i:]  # each worker runs the program itself: the chain goes on with it
    if "PYTHON_EXEC" in st.env:
        python, why = lookup(st.env["PYTHON_EXEC"], st)
        why = f"PYTHON_EXEC: {why}"
    path0 = None
    if run_path:
        folder = os.path.dirname(os.path.realpath(program_path)) if program_path else \
            os.path.realpath(st.chain.cwd) if st.chain.cwd else None
        path0 = (folder, "torchrun's own (--run-path runs the script in its process)" if folder else
                 "not known: torchrun's own")
    how = f"torchrun's workers run its interpreter ({why})" if python else why
    place(st, python, how, ("-u",), "module" if module else "script", words[i], words[i + 1:], path0)
    if module and st.chain.sys_path0:
        st.chain.sys_path0_why = "the working directory (torchrun -m)"
    return None


def _world(world: Any, events: list[tuple[str, str | None]], env: dict[str, str]) -> None:
    given: dict[str, str | None] = {"nnodes": env.get("PET_NNODES"), "nproc-per-node": env.get("PET_NPROC_PER_NODE")}
    hidden: str | None = None
    for key, value in events:
        if key == "$":
            given, hidden = {"nnodes": None, "nproc-per-node": None}, value
        elif key in given:
            given[key] = value
    for key, name in (("nnodes", "nnodes"), ("nproc-per-node", "nproc_per_node")):
        value = given[key]
        if value is None:
            if hidden is not None:
                world.not_known[name] = f"the unexpanded word {hidden!r} among torchrun's options may hold --{key}"
            continue
        world.raw[name] = value[:64]
        low, _, high = value.partition(":") if key == "nnodes" else (value, "", "")
        if low.strip().isdigit() and (not high or high.strip() == low.strip()):
            setattr(world, name, int(low))
        elif key == "nnodes" and high:
            world.not_known[name] = f"--nnodes {value[:40]} is an elastic range: the node count is decided at " \
                "rendezvous"
        elif value in NPROC_WORDS:
            world.not_known[name] = f"--nproc-per-node {value} is {NPROC_WORDS[value]}, decided on each node at launch"
        else:
            world.invalid[name] = f"--{key} {value[:40]!r} is no whole number (torchrun refuses it)"


def _script(words: list[str], st: _State) -> list[str] | None:
    """A program run directly: its `#!` line makes the words the kernel runs; a Python script without a readable
    one is an entry whose interpreter is not known."""
    word = words[0]
    path, why = lookup(word, st)
    head = _head(path) if path is not None else None
    line = shebang(head) if head is not None else None
    if line is not None and head is not None:
        if st.shebangs >= 4:
            st.stop(word, "is more than 4 #! interpreters deep (the kernel's limit)")
            return None
        if b"\n" not in head and len(head) >= SHEBANG_BYTES:
            st.stop(word, f"has a #! line longer than the kernel reads ({SHEBANG_BYTES} bytes)")
            return None
        st.shebangs += 1
        interpreter, argument = line
        st.via = st.origin = f"{shown(word)} (#!{shown(interpreter)}{' ' + shown(argument) if argument else ''})"
        return [interpreter] + ([argument] if argument else []) + [word if "/" in word else str(path)] + words[1:]
    if word.endswith(".py"):
        reason = why if path is None else "it cannot be read" if head is None else \
            "it has no #! line (run directly, /bin/sh would run it)"
        place(st, None, f"not known: {shown(word)} is run directly, and {reason.removeprefix('not known: ')}",
              (), "script", word, words[1:])
        return None
    if path is None:
        st.stop(word, f"is a program the doctor does not follow ({why.removeprefix('not known: ')})")
    elif head is not None and head.startswith(b"\x7fELF"):
        st.stop(word, "is a compiled program the doctor does not follow")
    else:
        st.stop(word, "is a script without a #! line the doctor can read (sh would run it)")
    return None
