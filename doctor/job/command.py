"""Reading a training command line: what a DSv4 job says about itself (`preflight -- CMD`, `check --job-args`).

The command is first resolved as the OS and each launcher will run it (doctor/job/chain.py: wrappers, shells' -c
strings, torchrun, `uv run`, a script's #! line), which gives the entry and its arguments. Three syntaxes are read
in them:

- verl/Hydra overrides: `key=value`, `+key=value`, `++key=value` (and `~key`), values quoted or not, for the actor,
  ref and critic roles (`actor_rollout_ref.actor.megatron.context_parallel_size`, `...megatron.
  override_transformer_config.<field>`, ...) and `data.max_prompt_length` / `data.max_response_length`;
- Megatron-LM flags (`--context-parallel-size 2`, `--cp-partition-mode=contiguous`, ...);
- Megatron-Bridge's recipe launcher: its options and trailing `model.*` overrides (job/bridge_recipe.py).

Nothing is run: a value is taken as written, except OmegaConf interpolations in verl overrides, which verl resolves
before Megatron sees them: `${oc.env:NAME}` / `${oc.env:NAME,default}` from the job's environment (the doctor runs in
it at preflight) and `${other.key}` from another override of the same command. One that cannot be resolved stays text
and is reported as not known (a shell variable left unexpanded, `${ACTOR_CP}`, is one). Keys and flags the doctor does
not use are listed by name, never with their values (they may hold secrets). A setting the command does not state is
absent, never guessed: the job checks say "not stated". The entry decides the grammar (`entry_grammar`): verl's
Hydra trainers, Megatron-LM's pretrain_*.py, Megatron-Bridge's run_recipe.py; any other entry's words are not read.
A string of overrides alone is read as verl's. A command whose chain stops before its entry (a shell script, an
unknown program, a launcher the doctor does not follow) leaves every setting not known, and the profile is then the
stricter job's (CP > 1, cudnn) unless --cp / --dsa-backend state them. One that runs on another host (`ray job
submit`, `sbatch --wrap`) is read as the entry's grammar reads it; its interpreter is the remote host's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from ..model.core import UsageError
from .bridge_recipe import is_recipe_launcher, parse_recipe_launcher
from .chain import World, resolve
from .keys import (BARE_SETTINGS, CONFIG_FIELDS, VERL_COMMON, VERL_ENGINE, MAX_ARG_CHARS, MAX_ARGS, MEGATRON_FLAGS,
                   VERL_ROOTS, HYDRA_OVERRIDE)
from .model import Job, Setting, Unexpanded
from .shellwords import Op, ShellError, tokens
from .syntax import parse_hydra, parse_megatron
from .shape import entry_shown
from .values import is_hidden_word, names_only, parse_value


def split_job_args(text: str) -> list[str]:
    """`--job-args "..."`: the words a POSIX shell would make of it (nothing is expanded or run; `$(...)` and
    backquotes stay one unexpanded word each). A line that holds shell operators (`cd x && python ...`) is read as
    `sh -c LINE` would run it."""
    try:
        items = tokens(text)
    except ShellError as exc:
        raise UsageError(f"--job-args: the shell would refuse it: {exc}") from None
    words = [item for item in items if not isinstance(item, Op)]
    return ["sh", "-c", text] if len(words) < len(items) else [word.text() for word in words]


def parse(argv: Sequence[str], cwd: str | None = None, environ: Mapping[str, str] | None = None) -> Job:
    """A Job from a training command's argv, run from `cwd` (default: the current folder) in `environ` (default: the
    doctor's own). Raises UsageError for a command that cannot be read."""
    argv = list(argv)
    if not argv:
        raise UsageError("no training command: put it after `--`, e.g. `dsv4-doctor preflight -- python3 -m "
                         "verl.trainer.main_ppo ...`")
    if len(argv) > MAX_ARGS or any(len(a) > MAX_ARG_CHARS for a in argv):
        raise UsageError(f"the training command is too large to read (more than {MAX_ARGS} arguments or an "
                         f"argument of more than {MAX_ARG_CHARS} characters)")
    if any("\x00" in a for a in argv):
        raise UsageError("the training command holds a NUL character")
    job = Job()
    if all(_is_override(a) for a in argv):
        return _overrides_only(argv, job)
    chain = resolve(argv, cwd or os.getcwd(), environ)
    if chain.malformed:
        raise UsageError(chain.malformed)
    job.chain = chain
    job.env, job.unset = dict(chain.env_set), list(chain.env_unset)
    job.launcher = [step.name for step in chain.steps]
    job.hidden_launcher = list(chain.hidden_launcher)
    if chain.world is not None:
        _world(job, chain.world)
    if chain.stopped:
        # The chain ends before the entry: whatever follows may add or change settings, so none are known here. A
        # chain that runs its entry on another host (chain.remote) is read on: its settings are the command's.
        job.entry = chain.stopped_at
        job.unknown = names_only(argv[1:])
        return job
    job.entry = "-c" if chain.entry_kind == "code" else chain.entry
    rest = chain.args
    grammar = entry_grammar(chain.entry_kind, job.entry)
    if grammar == "hydra":
        job.kind, job.syntax = "verl", "hydra"
        job.entry = verl_module(job.entry)
        if (job.entry or "").rsplit(".", 1)[-1] in SFT_ENTRIES:
            job.trainer = "sft"
        job.overrides = list(rest)
        parse_hydra(rest, job)
        _hide(job, rest, parse_hydra)
        if world_from_launcher(job):
            _launcher_world(job, chain.world)
    elif grammar == "megatron":
        job.kind, job.syntax = "megatron", "megatron"
        parse_megatron(rest, job)
        _hide(job, rest, parse_megatron)
    elif grammar == "bridge":
        job.kind, job.syntax = "megatron", "bridge"
        parse_recipe_launcher(rest, job)
        _hide(job, rest, lambda words, job: parse_recipe_launcher(words, job))
    else:
        job.unknown = names_only(rest)
        job.unknown_why = (f"the entry {entry_shown(job.entry) if chain.entry_kind != 'code' else '`-c` code'} "
                           "is not one whose command line the doctor knows (verl's Hydra trainers, Megatron-LM's "
                           "pretrain_*.py, Megatron-Bridge's run_recipe.py), so its settings are not known")
    return job


# Megatron-LM's training scripts (argparse: megatron/training/arguments.py): pretrain_gpt.py, pretrain_mamba.py, ...
MEGATRON_SCRIPTS = re.compile(r"pretrain_[A-Za-z0-9_]+\.py|train_rl\.py")
# verl's Hydra apps: `python -m verl.trainer.<app>` or the file itself (their `@hydra.main` names the config; the
# composition probe reads it, and an entry module without one is said in job.config).
VERL_APP = re.compile(r"verl\.trainer\.[A-Za-z_][A-Za-z0-9_]*")
_VERL_FILE = re.compile(r"(?:.*/)?verl/trainer/(?P<app>[A-Za-z_][A-Za-z0-9_]*)\.py")


def entry_grammar(kind: str | None, entry: str | None) -> str | None:
    """The command-line grammar of the job's entry, from the entry alone (never from the words after it): "hydra"
    (verl's trainers), "megatron" (Megatron-LM's argparse), "bridge" (Megatron-Bridge's recipe launcher), or None:
    not known."""
    if not entry or kind == "code":
        return None
    if kind == "module":
        return "hydra" if VERL_APP.fullmatch(entry) else None
    name = entry.replace("\\", "/").rsplit("/", 1)[-1]
    if _VERL_FILE.fullmatch(entry.replace("\\", "/")):
        return "hydra"
    if MEGATRON_SCRIPTS.fullmatch(name):
        return "megatron"
    return "bridge" if is_recipe_launcher(entry) else None


def verl_module(entry: str | None) -> str | None:
    """A verl app run by its file (`python verl/trainer/main_ppo.py`) as the module it is (verl.trainer.main_ppo)."""
    m = _VERL_FILE.fullmatch((entry or "").replace("\\", "/"))
    return f"verl.trainer.{m.group('app')}" if m else entry


def _world(job: Job, world: World) -> None:
    """torchrun's world size as the job's `nnodes` and `gpus_per_node` (the entry's own settings, read after, win)."""
    for name, common in (("nnodes", "nnodes"), ("nproc_per_node", "gpus_per_node")):
        raw = world.raw.get(name)
        if name in world.not_known:
            word = raw or next(iter(job.hidden_launcher[-1:]), "")
            job.common[common] = Setting(Unexpanded(word), word, world.not_known[name],
                                         source="flag" if raw else "hidden")
        elif raw is not None:  # a number, or a value torchrun refuses (job.config quotes it)
            number = getattr(world, name)
            job.common[common] = Setting(parse_value(raw) if number is None else number, raw, source="flag")


# verl's SFT trainers: their Megatron engine is `engine.*` (engine=megatron), not a PPO role's.
SFT_ENTRIES = ("sft_trainer", "sft_trainer_ray")
# The verl trainers whose world size is the launcher's: sft_trainer.run_sft calls initialize_global_process_group,
# which reads RANK and WORLD_SIZE from the environment torchrun gives (verl 0.9.1 utils/distributed.py L62-75);
# trainer.nnodes and trainer.n_gpus_per_node size the Ray trainers' pools only (sft_trainer_ray L135-137).
LAUNCHER_WORLD_ENTRIES = ("verl.trainer.sft_trainer",)


def world_from_launcher(job: Job) -> bool:
    """Whether the job's world size is its launcher's (torchrun's), not its config's."""
    return job.kind == "verl" and job.entry in LAUNCHER_WORLD_ENTRIES


def _launcher_world(job: Job, world: World | None) -> None:
    """The world size of a trainer that takes it from torchrun: torchrun's --nnodes x --nproc-per-node, whatever the
    command's trainer.* overrides say; without torchrun in the chain, not known."""
    job.common.pop("nnodes", None)
    job.common.pop("gpus_per_node", None)
    if world is not None:
        _world(job, world)
        return
    why = (f"{job.entry} takes its world size from WORLD_SIZE, which torchrun sets, and the command is not "
           "launched by torchrun")
    for name in ("nnodes", "gpus_per_node"):
        job.common[name] = Setting(Unexpanded("(not known)"), "(not known)", why, source="hidden")


def _hide(job: Job, rest: list[str], reader) -> None:
    """Whole words the shell did not expand (`$MEGATRON_ARGS`, `"${ACTOR[@]}"`) may hold any setting: every setting
    the checks read that the command does not state after the last of them is not known (a later word wins, in
    Hydra and in argparse). A word among torchrun's options may hold the world size: the chain's World says which
    of it is not known (a --nnodes after the word is read)."""
    if not job.hidden:
        return
    last = max((i for i, a in enumerate(rest) if is_hidden_word(a)), default=-1)
    after = Job(kind=job.kind, syntax=job.syntax, trainer=job.trainer, env=job.env, unset=job.unset)
    reader(rest[last + 1:], after)
    word = job.hidden[-1]
    marker = Setting(Unexpanded(word), word, "an unexpanded shell word: what it holds is not known", source="hidden")
    for role in job.checked_roles():
        for name in readable_settings(job):
            if name not in after.roles.get(role, {}):
                job.roles.setdefault(role, {})[name] = marker
    for name in readable_common(job):
        if name not in after.common:
            job.common[name] = marker



def readable_settings(job: Job) -> list[str]:
    """The per-role settings the checks read, by the doctor's names."""
    if job.kind == "megatron":
        return sorted({setting for setting, _ in MEGATRON_FLAGS.values()} - {"seq_length"})
    named = {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp"}
    return sorted(set(VERL_ENGINE.values()) | {named.get(f, f) for f in CONFIG_FIELDS})


def readable_common(job: Job) -> list[str]:
    return ["seq_length", "nnodes", "gpus_per_node"] if job.kind == "megatron" else sorted(VERL_COMMON.values())


def _is_override(arg: str) -> bool:
    """A Hydra override word: `key=value`, `+key=value`, `++key=value`, `~key`."""
    m = HYDRA_OVERRIDE.fullmatch(arg)
    return m is not None and (m.group("value") is not None or m.group("prefix") == "~")


def _overrides_only(argv: list[str], job: Job) -> Job:
    """`--job-args "a.b=1 ++c.d=2"`: no program in front, so verl overrides (the only syntax made of `key=value`
    words). A key that is a setting's bare name is refused: verl reads it only under its role's prefix, so taking
    it as written would drop it silently."""
    bare = [a.split("=", 1)[0].lstrip("+~") for a in argv
            if "." not in a.split("=", 1)[0] and a.split("=", 1)[0].lstrip("+~") in BARE_SETTINGS]
    if bare:
        name = bare[0]
        full = BARE_SETTINGS[name]
        raise UsageError(f"the training command is overrides only, read as verl's, but {name!r} is no verl key: "
                         f"verl reads it as {full}=...; give the whole command (`python3 -m verl.trainer.main_ppo "
                         "...`) or the full keys")
    job.kind, job.syntax, job.entry = "verl", "hydra", None
    job.launcher = ["(verl overrides, no program)"]
    parse_hydra(argv, job)
    # A key that names a setting under a root verl's config does not have (`actor.megatron.context_parallel_size`,
    # `cp`) is a mistyped key: refused, never read as the default. Keys under verl's own roots may hold such names
    # for other parts (`actor_rollout_ref.rollout.tensor_model_parallel_size`, the rollout's).
    for key in job.unknown:
        if key.lstrip("+~").split(".", 1)[0] in VERL_ROOTS:
            continue
        leaf = key.lstrip("+~").rsplit(".", 1)[-1]
        name = {"cp": "context_parallel_size", "tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
                "ep": "expert_model_parallel_size"}.get(leaf, leaf)
        if name in BARE_SETTINGS:
            raise UsageError(f"the training command is overrides only, read as verl's, but {key.lstrip('+~')!r} is "
                             f"no verl key: verl reads {name} as {BARE_SETTINGS[name]}=...; give the whole command "
                             "(`python3 -m verl.trainer.main_ppo ...`) or the full keys")
    return job
