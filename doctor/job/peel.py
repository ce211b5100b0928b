"""The programs in front of a training entry, peeled with their own grammar (doctor/job/wrappers.py): process
wrappers and shell builtins, srun, a shell's `-c` string (its setup commands applied, its last command followed), and
the submitters whose command runs on another host (`ray job submit -- CMD`, `sbatch --wrap CMD`). Each function takes
the command's words and the chain's state (doctor/job/chain.py) and returns the words it runs next, or None where the
chain ends (stopped, or a usage error).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from .keys import ENV_ASSIGNMENT, MAX_ARGS
from .shellwords import ShellError, Word, commands, split_assignment, tokens
from .values import hidden_shown, is_hidden_word
from .wrappers import (RAY_MANUAL, RAY_SUBMIT, SBATCH, SHELL_LONG_FLAGS, SHELL_MANUAL, SHELL_VALUE_OPTIONS, SRUN,
                       Wrapper, getopt, shown)

if TYPE_CHECKING:
    from .chainstate import _State

_NICE_NUMBER = re.compile(r"-[-+]?\d")  # nice's own loop takes `-N`, `--N`, `-+N` before getopt (src/nice.c)


def wrapper(w: Wrapper, words: list[str], st: _State) -> list[str] | None:
    prog = os.path.basename(words[0])
    if w.not_followed:
        st.stop(words[0], w.not_followed)
        return None
    i = 1
    legacy = _NICE_NUMBER if w.legacy_number else None
    while True:
        while legacy is not None and i < len(words) and legacy.match(words[i]):
            i += 1
        found, i, error = getopt(w.options, words, i, prog, legacy)
        if error:
            st.malformed(error) if "has no value" in error else st.stop(words[0], error.split(": ", 1)[-1])
            return None
        for key, value, end in found:
            if key in w.runs_nothing:
                st.stop(words[0], f"runs no command with its option -{'-' * (len(key) > 1)}{key}")
                return None
            if key == w.split and value is not None:  # env -S: its words take its place, and are read again
                st.depth += 1
                split = _split_string(value, st)
                if split is None:
                    st.stop(words[0], "-S holds shell syntax env does not split: not followed")
                    return None
                return [words[0]] + split + words[end:]
            reason = _effect(w, key, value, st)
            if reason is not None:
                st.stop(words[0], reason)
                return None
        if i + 1 < len(words) and is_hidden_word(words[i]) and not (w.positionals or w.optional_positional):
            shown = hidden_shown(words[i])  # `srun $SRUN_ARGS python ...`: options, maybe
            st.chain.hidden.append(shown)
            st.chain.env_not_known = f"the unexpanded word {shown!r} among {prog}'s options may change it"
            i += 1
            continue
        if legacy is None or i >= len(words) or not legacy.match(words[i]):
            break
    if w.assignments:
        if i < len(words) and words[i] == "-":
            st.clear()
            i += 1
        while i < len(words) and ENV_ASSIGNMENT.fullmatch(words[i]):
            name, value = words[i].split("=", 1)
            st.set(name, value)
            i += 1
    i += len(w.positionals)
    if w.optional_positional and i + 1 < len(words) and words[i].isdigit():
        i += 1
    if i >= len(words):
        st.malformed(f"`{prog}` without a command in the training command")
        return None
    st.step(prog, w.kind, w.manual)
    return words[i:]


def _effect(w: Wrapper, key: str, value: str | None, st: _State) -> str | None:
    """What an option does to the state; a reason when the chain ends at it."""
    if key == w.chdir and value is not None:
        st.chdir(value)
    elif key == w.unset and value is not None:
        st.unset(value)
    elif key == w.clear:
        st.clear()
    elif w.names == ("command",) and key == "p":
        st.default_path = True
    elif w is SRUN and key == "multi-prog":
        return "--multi-prog runs the programs of a configuration file, which the doctor does not read"
    elif w is SRUN and key == "export" and value is not None:
        items = value.split(",")
        if items[0].upper() != "ALL":
            st.chain.env_not_known = f"srun --export={items[0][:40]} passes only the variables it names"
        for item in items[1:]:
            name, eq, text = item.partition("=")
            if eq and name.isidentifier():
                st.set(name, text)
    return None


def _split_string(value: str, st: _State) -> list[str] | None:
    """env -S: words split at blanks with quotes, `${NAME}` from the environment (coreutils env(1) -S)."""
    try:
        items = tokens(value)
    except ShellError:
        return None
    out = []
    for item in items:
        if not isinstance(item, Word):
            return None
        expanded = item.expanded(st.env)
        out.append(item.text() if expanded is None else expanded)
    return out


def srun(words: list[str], st: _State) -> list[str] | None:
    rest = wrapper(SRUN, words, st)
    if rest is not None and ":" in rest:
        st.stop(":", "in srun's command starts another heterogeneous component, which the doctor does not follow")
        return None
    return rest


def shell(words: list[str], st: _State) -> list[str] | None:
    """`bash [options] -c STRING [NAME [ARG...]]`: the string's last command, after its setup commands."""
    prog, i, has_c, login = os.path.basename(words[0]), 1, False, False
    while i < len(words):
        word = words[i]
        if word in ("--", "-"):
            i += 1
            break
        if word in SHELL_VALUE_OPTIONS:
            i += 2
            continue
        if word in SHELL_LONG_FLAGS:
            if word in ("--help", "--version"):
                st.stop(words[0], f"runs no command with {word}")
                return None
            login |= word == "--login"
            i += 1
            continue
        if len(word) < 2 or word[0] not in "-+" or word.startswith("--"):
            break
        letters = word[1:]
        has_c |= word[0] == "-" and "c" in letters
        login |= word[0] == "-" and ("l" in letters or "i" in letters)
        i += 1 + letters.count("o") + letters.count("O")
    if not has_c:
        target = shown(words[i]) if i < len(words) else ""
        st.stop(words[0], f"runs the script {target}, which the doctor does not read" if target else
                "reads its commands from standard input, which the doctor does not read")
        return None
    if i >= len(words):
        st.malformed(f"`{prog} -c` without a command string in the training command")
        return None
    string, name0, params = words[i], (words[i + 1] if i + 1 < len(words) else prog), words[i + 2:]
    st.step(f"{prog} -c", "shell", SHELL_MANUAL)
    if login:
        st.chain.env_not_known = f"{prog} -l/-i reads start-up files, which may change the environment"
        st.lookup_not_known = st.chain.env_not_known
    return shell_string(string, params, name0, prog, st)


def shell_string(string: str, params: list[str] | None, name0: str, prog: str, st: _State) -> list[str] | None:
    """The command a shell string runs as the job, its setup commands applied to the state; None when stopped."""
    st.depth += 1
    try:
        items = tokens(string, params, name0)
    except ShellError as exc:
        st.stop(prog, f"-c: the shell would refuse its string ({exc})")
        return None
    if len(items) > MAX_ARGS:
        st.stop(prog, f"-c: its string has more than {MAX_ARGS} words: not read")
        return None
    cmds, why = commands(items)
    for cmd in cmds:
        head = cmd.words[0].text() if cmd.words else ""
        if cmd is cmds[-1] or head == "exec" and len(cmd.words) > 1:
            for name, value in cmd.assignments:
                st.set(name, _expanded(value, st))
            if not cmd.words:
                break
            if why is not None and cmd is cmds[-1]:
                st.stop(prog, f"-c: {why}")
                return None
            return [_tilde(w, st) for w in cmd.words]
        if not _setup(cmd, head, st, prog):
            return None
    st.stop(prog, f"-c: {why}" if why else "-c: its string runs no command")
    return None


def _tilde(word: Word, st: _State) -> str:
    """A word of the job's command: `~` is the shell's HOME; every other expansion stays as written."""
    if word.parts[:1] == [("var", "~")] and "HOME" in st.env:
        return st.env["HOME"] + Word(word.parts[1:]).text()
    return word.text()


def _expanded(word: Word, st: _State) -> str:
    got = word.expanded({**st.env, **st.shell_vars})
    return word.text() if got is None else got


def _setup(cmd: Any, head: str, st: _State, prog: str) -> bool:
    """A command before the job in a shell string: its effect on the state, or False (stopped)."""
    args = [w for w in cmd.words[1:]]
    for name, value in cmd.assignments if not cmd.words else []:
        if name in st.env:  # an exported variable: the job gets the new value
            st.set(name, _expanded(value, st))
        else:
            st.shell_vars[name] = _expanded(value, st)
    if head == "cd":
        target = (args[0].expanded({**st.env, **st.shell_vars}) if args else st.env.get("HOME"))
        if target is None or target == "-":
            st.stop(prog, "-c: `cd` to a folder the doctor cannot know (an unexpanded word, `cd -`)")
            return False
        st.chdir(target)
    elif head == "export":
        for arg in args:
            text = arg.text()
            if text.startswith("-"):
                continue
            assignment = split_assignment(arg)
            if assignment is not None:
                st.set(assignment[0], _expanded(assignment[1], st))
            elif text in st.shell_vars:
                st.set(text, st.shell_vars[text])
    elif head == "unset":
        for arg in args:
            if not arg.text().startswith("-"):
                st.unset(arg.text())
    elif head == "set":
        texts, at = [a.text() for a in args], 0
        while at < len(texts):
            if texts[at][:1] not in "-+" or texts[at] in ("-", "--"):
                st.stop(prog, "-c: `set` changes the positional parameters")
                return False
            at += 1 + texts[at].count("o")
    elif head not in (":", "true", "echo", "") and not (head == "exec" and not args):  # `exec >log 2>&1`
        st.stop(prog, f"-c: {shown(head)} runs before the job, and the doctor does not read what it does")
        return False
    return True


def submit(words: list[str], st: _State) -> list[str] | None:
    """`ray job submit [options] -- CMD` and `sbatch [options] --wrap CMD`: the command runs on another host."""
    if os.path.basename(words[0]) == "ray":
        if words[1:3] != ["job", "submit"]:
            st.stop(words[0], f"{' '.join(words[1:3])[:40]!r} is no `ray job submit`, which the doctor does not read")
            return None
        found, i, error = getopt(RAY_SUBMIT, words, 3, "ray job submit")
        if error:
            st.stop(words[0], error.split(": ", 1)[-1])
            return None
        if words[i - 1] != "--" and any(w.startswith("-") for w in words[i:]):
            st.stop(words[0], "job submit without `--`: click reads the entrypoint's options as ray's")
            return None
        st.step("ray job submit", "submitter", RAY_MANUAL)
        _remote("ray job submit", st)
        if i >= len(words):
            st.malformed("`ray job submit` without an entrypoint in the training command")
            return None
        return words[i:]
    found, i, error = getopt(SBATCH.options, words, 1, "sbatch")
    wrap = next((value for key, value, _ in found if key == "wrap"), None)
    if error or wrap is None or i < len(words) or any(key in SBATCH.runs_nothing for key, _, _ in found):
        st.stop(words[0], error.split(": ", 1)[-1] if error else
                "runs a batch script on a compute node, which the doctor does not read (only --wrap is followed)"
                if wrap is None or i >= len(words) else "refuses script arguments with --wrap")
        return None
    st.step("sbatch --wrap", "submitter", SBATCH.manual)
    _remote("sbatch --wrap", st)
    return shell_string(wrap, [], "sh", "sbatch --wrap", st)


def _remote(name: str, st: _State) -> None:
    st.chain.remote = name
    st.chain.cwd = None
    st.lookup_not_known = f"not known: the remote host's (the command runs there after {name})"
