"""A training command as the doctor shows it: its shape, never its values.

Wherever a command is echoed (the dry-run line, errors about it), every value is replaced by HIDDEN unless its key
is one the doctor reads and knows to be harmless (a parallel size, a partition mode, ...) and the value is a plain
word or number. Names (flags, keys, the program) are shown when they are plain words that redaction leaves alone.
Every syntax the job parser accepts is covered: `--flag value`, `--flag=value`, `key=value`, `+key=value`,
`++key=value`, `~key`, `env K=V`, `python -m module`, `python -c CODE`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import lru_cache

from .keys import CONFIG_FIELDS, MEGATRON_FLAGS, ROLE_HEADS, VERL_COMMON, VERL_ENGINE

HIDDEN = "…"
MAX_WORDS = 24
# A value shown for a known key: a number or one plain word (`2`, `contiguous`, `cudnn`, `True`).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.@/-]{0,200}")
_FLAG = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]{0,100}")
_PROGRAM = re.compile(r"[A-Za-z0-9_./+-]{1,200}")
# Launchers and interpreters: the word after one is a program, script or module, shown by name.
LAUNCHERS = {"env", "torchrun", "srun", "mpirun", "bash", "sh", "deepspeed", "accelerate", "uv", "nohup", "exec",
             "numactl", "taskset", "time"}
# torchrun options whose values say only how many processes start where.
HARMLESS_LAUNCH_FLAGS = {"--nnodes", "--nproc-per-node", "--nproc_per_node", "--node-rank", "--node_rank"}


@lru_cache(maxsize=1)
def harmless_keys() -> frozenset[str]:
    """The Hydra keys the doctor reads (verl's parallel sizes, the transformer-config fields the job checks read)."""
    keys = set(VERL_COMMON)
    for head in ROLE_HEADS.values():
        keys.update(f"{head}{name}" for name in VERL_ENGINE)
        keys.update(f"{head}override_transformer_config.{name}" for name in CONFIG_FIELDS)
    return frozenset(keys)


def _is_python(word: str) -> bool:
    return bool(re.fullmatch(r"python(\d(\.\d+)?)?", os.path.basename(word)))


def _safe_name(name: str, pattern: re.Pattern) -> bool:
    from ..hostio.redact import Redactor

    return bool(pattern.fullmatch(name)) and Redactor({}).text(name) == name


def _value(shown_ok: bool, value: str) -> str:
    return value if shown_ok and _PLAIN_VALUE.fullmatch(value) else HIDDEN


def _split_assignment(word: str) -> tuple[str, str, str]:
    """(name, "=" or "", value) of `name=value`, copying no more of a huge word than a name and a plain value can
    be: a longer name is no name (""), a longer value is no plain value (HIDDEN)."""
    at = word.find("=", 0, 256)
    if at < 0:
        return (word, "", "") if len(word) <= 256 else ("", "", "")
    value = word[at + 1:] if len(word) - at - 1 <= 64 else HIDDEN
    return word[:at], "=", value


def plain_or_hidden(value: object) -> str:
    """A value of a key the doctor reads, as an error may quote it: one plain word, else HIDDEN."""
    return _value(True, value) if isinstance(value, str) else HIDDEN


# Options without a value of the launchers the parser steps over (python's, torchrun's).
NO_VALUE_OPTIONS = {"python": set("bBdEhiIOqsSuvVxP") | {"-OO"},
                    "torchrun": {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path",
                                 "--module"}}


def _flag_takes_value(flag: str, following: str | None, launcher: str | None) -> bool:
    """Whether the next word is this flag's value: known Megatron flags and launcher options say; an unknown flag
    is taken to have one when the next word is not a flag itself (hiding a name is better than showing a value)."""
    known = MEGATRON_FLAGS.get(flag[2:].replace("_", "-")) if flag.startswith("--") else None
    if known is not None:
        return known[1]
    if launcher == "python" and (flag in NO_VALUE_OPTIONS["python"] or (len(flag) == 2 and
                                                                        flag[1] in NO_VALUE_OPTIONS["python"])):
        return False
    if launcher == "torchrun" and flag in NO_VALUE_OPTIONS["torchrun"]:
        return False
    return following is not None and not following.startswith("-")


def _launcher(word: str) -> str | None:
    base = os.path.basename(word)
    if _is_python(word):
        return "python"
    if base in ("torchrun", "torch.distributed.run", "torch.distributed.launch"):
        return "torchrun"
    return base if base in LAUNCHERS else None


def shape_words(argv: Sequence[str], limit: int | None = None) -> list[str]:
    """The command's words, each a name, a harmless value, or HIDDEN; the first `limit` of them (at least)."""
    out: list[str] = []
    # Each word gives one shown word, so `limit` words need no more than limit + 1 of them (a flag and its value).
    argv = [w if isinstance(w, str) else "" for w in (argv if limit is None else list(argv[:limit + 2]))]
    launcher: str | None = None  # the launcher whose options come now; the next bare word is a program
    program_next = True
    i = 0
    while i < len(argv) and (limit is None or len(out) < limit):
        word = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        i += 1
        if word in ("-", "--"):
            out.append(word)
        elif word.startswith("-"):
            name, eq, value = _split_assignment(word)
            if not _safe_name(name, _FLAG):
                out.append(HIDDEN)
                continue
            known = (name.startswith("--") and name[2:].replace("_", "-") in MEGATRON_FLAGS) or \
                name in HARMLESS_LAUNCH_FLAGS
            if eq:
                out.append(f"{name}={_value(known, value)}")
            elif name == "-m" and launcher in ("python", "torchrun") and following is not None:  # -m MODULE
                module = following
                out += [name, module if _safe_name(module, _PROGRAM) else HIDDEN]
                i += 1
                launcher = _launcher(module)
                program_next = launcher is not None
            elif name == "-c" and launcher == "python" and following is not None:  # python -c CODE
                out += [name, HIDDEN]
                i += 1
                launcher, program_next = None, False
            elif _flag_takes_value(name, following, launcher if program_next else None):
                out += [name, _value(known, following or "")]
                i += 1
            else:
                out.append(name)
        elif "=" in word:
            key, _, value = _split_assignment(word)
            prefix = "++" if key.startswith("++") else "+" if key.startswith("+") else ""
            key = key[len(prefix):]
            if _safe_name(key, _NAME):
                out.append(f"{prefix}{key}={_value(key in harmless_keys(), value)}")
            else:
                out.append(HIDDEN)
        elif word.startswith("~") and _safe_name(word[1:], _NAME):
            out.append(word)  # a deletion: a key alone
        elif (program_next or word.endswith((".py", ".sh"))) and _safe_name(word, _PROGRAM):
            out.append(word)
            launcher = _launcher(word) if program_next else None
            program_next = launcher is not None
        else:
            out.append(HIDDEN)
            launcher, program_next = None, False
    return out


def shape(argv: Sequence[str], max_words: int = MAX_WORDS) -> str:
    """The command as one line (`python3 train.py --hf-token … actor.password=…`), at most `max_words` words."""
    words = shape_words(argv, max_words)  # no more than is shown: a command of a million words costs the same
    line = " ".join(words[:max_words]) if words else "(an empty command)"
    return line + (f" … ({len(argv)} words in all)" if len(words) > max_words or len(argv) > len(words) else "")


# Environment names whose values the job checks read (job.env): shown when they are one plain word.
HARMLESS_ENV = frozenset({"NCCL_NVLS_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_MNNVL_ENABLE"})


def entry_shown(word: object) -> str | None:
    """The job's program, script or module as a report carries it: the word when it is a plain name redaction
    leaves alone, else HIDDEN."""
    if word is None:
        return None
    return word if isinstance(word, str) and _safe_name(word, _PROGRAM) else HIDDEN


def job_shown(job: dict) -> dict:
    """The parsed job as a report carries it (`profile.job`): its entry by shape and each `env K=V` value HIDDEN
    unless K is one the doctor reads and the value one plain word; the checks read the parsed job itself."""
    out = dict(job)
    if "entry" in out:
        out["entry"] = entry_shown(out["entry"])
    env = out.get("env")
    if isinstance(env, dict):
        out["env"] = {k: _value(k in HARMLESS_ENV, v) if isinstance(v, str) else HIDDEN for k, v in env.items()}
    return out


def shape_program(word: str) -> str:
    """A program name as the doctor may print it."""
    return repr(word) if _safe_name(word, _PROGRAM) else HIDDEN
