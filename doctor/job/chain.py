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
(doctor/hostio/safeio.py); a -c string is read at most 8 levels deep.

The parts: wrappers.py (the grammars, as data, with their sources), peel.py (wrappers, srun, shells' -c strings,
submitters), shellwords.py (a shell string's words), interp.py (the interpreter, `#!` lines, torchrun, sys.path[0],
verl's py_executable), uvrun.py (`uv run`'s project environment).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .keys import ENV_ASSIGNMENT, MAX_ARGS
from .values import hidden_shown, is_hidden_word
from .chainstate import Chain, ChainStep, World, _State  # noqa: F401  (read from here too)
from .wrappers import NOT_FOLLOWED, SHELLS, WRAPPERS

MAX_DEPTH = 8  # -c strings and env -S strings inside each other
MAX_STEPS = 64  # programs peeled in all
_BY_NAME = {name: w for w in WRAPPERS for name in w.names}


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
