"""Reading a training command line: what a DSv4 job says about itself (`preflight -- CMD`, `check --job-args`).

Two syntaxes are understood, behind any number of wrappers (`env K=V`, `torchrun ...`, `python -m ...`):

- verl/Hydra overrides: `key=value`, `+key=value`, `++key=value` (and `~key`), values quoted or not, for the actor,
  ref and critic roles (`actor_rollout_ref.actor.megatron.context_parallel_size`, `...megatron.
  override_transformer_config.<field>`, ...) and `data.max_prompt_length` / `data.max_response_length`;
- Megatron-LM flags (`--context-parallel-size 2`, `--cp-partition-mode=contiguous`, ...).

Nothing is run: a value is taken as written, except OmegaConf interpolations in verl overrides, which verl resolves
before Megatron sees them: `${oc.env:NAME}` / `${oc.env:NAME,default}` from the job's environment (the doctor runs in
it at preflight) and `${other.key}` from another override of the same command. One that cannot be resolved stays text
and is reported as not known (a shell variable left unexpanded, `${ACTOR_CP}`, is one). Keys and flags the doctor does
not use are listed by name, never with their values (they may hold secrets). A setting the command does not state is
absent, never guessed: the job checks say "not stated". A string of overrides alone is read as verl's; a command that
is neither verl nor Megatron-LM (a shell script, a launcher) leaves every setting not known, and the profile is then
the stricter job's (CP > 1, cudnn) unless --cp / --dsa-backend state them.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

from ..model import UsageError
from .keys import (BARE_SETTINGS, CONFIG_FIELDS, VERL_COMMON, VERL_ENGINE, MAX_ARG_CHARS, MAX_ARGS, MEGATRON_FLAGS,
                   PYTHON_VALUE_OPTIONS, SHELLS_AND_LAUNCHERS, TORCHRUN_VALUE_OPTIONS, VERL_ROOTS, ENV_ASSIGNMENT,
                   HYDRA_OVERRIDE, flag_name)
from .model import Job, Setting, Unexpanded
from .syntax import parse_hydra, parse_megatron
from .values import hidden_shown, is_hidden_word, names_only, parse_value


def split_job_args(text: str) -> list[str]:
    """`--job-args "..."`: split as a POSIX shell would (nothing is expanded or run)."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--job-args: {exc} (unbalanced quotes?)") from None


def parse(argv: Sequence[str]) -> Job:
    """A Job from a training command's argv. Raises UsageError for a command that cannot be read."""
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
    rest = _strip_wrappers(argv, job)
    if job.entry is not None and os.path.basename(job.entry) in SHELLS_AND_LAUNCHERS:
        # A shell or a launcher runs a script the doctor does not read: whatever follows, the script may add or
        # change settings, so none are known.
        job.unknown = names_only(rest)
        return job
    if any(a.startswith(("actor_rollout_ref.", "+actor_rollout_ref.", "++actor_rollout_ref.", "critic.",
                         "+critic.", "++critic.")) for a in rest) or (job.entry or "").startswith("verl."):
        job.kind, job.syntax = "verl", "hydra"
        if (job.entry or "").rsplit(".", 1)[-1] in SFT_ENTRIES:
            job.trainer = "sft"
        job.overrides = list(rest)
        parse_hydra(rest, job)
        _hide(job, rest, parse_hydra)
    elif any(flag_name(a) in MEGATRON_FLAGS for a in rest if a.startswith("--")) or \
            (job.entry or "").endswith(("pretrain_gpt.py", "pretrain_mamba.py", "train_rl.py")):
        job.kind, job.syntax = "megatron", "megatron"
        parse_megatron(rest, job)
        _hide(job, rest, parse_megatron)
    else:
        job.unknown = names_only(rest)
    return job


# verl's SFT trainers: their Megatron engine is `engine.*` (engine=megatron), not a PPO role's.
SFT_ENTRIES = ("sft_trainer", "sft_trainer_ray")


def _hide(job: Job, rest: list[str], reader) -> None:
    """Whole words the shell did not expand (`$MEGATRON_ARGS`, `"${ACTOR[@]}"`) may hold any setting: every setting
    the checks read that the command does not state after the last of them is not known (a later word wins, in
    Hydra and in argparse). A word in front of the program (torchrun's options) may hold the world size."""
    if not job.hidden and not job.hidden_launcher:
        return
    last = max((i for i, a in enumerate(rest) if is_hidden_word(a)), default=-1)
    after = Job(kind=job.kind, syntax=job.syntax, trainer=job.trainer, env=job.env, unset=job.unset)
    reader(rest[last + 1:], after)
    word = (job.hidden or job.hidden_launcher)[-1]
    marker = Setting(Unexpanded(word), word, "an unexpanded shell word: what it holds is not known", source="hidden")
    for role in job.checked_roles():
        if job.hidden:
            for name in readable_settings(job):
                if name not in after.roles.get(role, {}):
                    job.roles.setdefault(role, {})[name] = marker
    for name in readable_common(job):
        if name in after.common:
            continue
        if job.hidden or name in ("nnodes", "gpus_per_node"):
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



def _strip_wrappers(argv: list[str], job: Job) -> list[str]:
    """Remove `env K=V`, `torchrun [opts]` and `python [opts] (-m mod | script)` from the front; record them."""
    i = 0
    # Leading assignments as a shell reads them (`--job-args "NCCL_NVLS_ENABLE=0 python3 ..."`).
    while i < len(argv) - 1 and ENV_ASSIGNMENT.fullmatch(argv[i]):
        name, value = argv[i].split("=", 1)
        job.env[name] = value
        i += 1
    if i:
        argv = argv[i:]
        i = 0
    # `env` and its assignments (a job script's `env NCCL_NVLS_ENABLE=0 torchrun ...`).
    if os.path.basename(argv[0]) == "env":
        job.launcher.append("env")
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            arg = argv[i]
            if arg == "--":
                i += 1
                break
            if arg in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"):  # GNU env options with a value
                if i + 1 >= len(argv):
                    raise UsageError(f"`env {arg}` without a value in the training command")
                name, value, i = arg, argv[i + 1], i + 2
            elif arg.startswith(("--unset=", "--chdir=", "--split-string=")):
                name, _, value = arg.partition("=")
                i += 1
            elif arg[:2] in ("-u", "-C", "-S") and not arg.startswith("--"):
                name, value, i = arg[:2], arg[2:], i + 1
            else:  # -i, -0, -v, --ignore-signal[=SIG], ...: no separate value
                i += 1
                continue
            if name in ("-u", "--unset"):
                job.unset.append(value[:200])
            elif name in ("-S", "--split-string"):  # `env -S "A=1 prog args"`: its words come next
                argv = argv[:i] + split_job_args(value) + argv[i:]
        while i < len(argv) and ENV_ASSIGNMENT.fullmatch(argv[i]):
            name, value = argv[i].split("=", 1)
            job.env[name] = value
            i += 1
    while i < len(argv):
        if is_hidden_word(argv[i]):  # `torchrun $DISTRIBUTED_ARGS ...`: launcher options, not the program
            job.hidden_launcher.append(hidden_shown(argv[i]))
            i += 1
            continue
        prog = os.path.basename(argv[i])
        if prog in ("torchrun", "torch.distributed.run", "torch.distributed.launch"):
            job.launcher.append(prog)
            i = _skip_torchrun(argv, i + 1, job)
            continue
        if re.fullmatch(r"python(\d(\.\d+)?)?", prog):
            job.launcher.append(prog)
            i += 1
            while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c"):
                i += 2 if argv[i] in PYTHON_VALUE_OPTIONS else 1
            if i < len(argv) and argv[i] == "-c":
                job.entry = "-c"
                return argv[i + 2:]
            if i < len(argv) and argv[i] == "-m":
                if i + 1 >= len(argv):
                    raise UsageError("`python -m` without a module in the training command")
                module = argv[i + 1]
                if module in ("torch.distributed.run", "torch.distributed.launch"):
                    job.launcher.append(module)
                    i = _skip_torchrun(argv, i + 2, job)
                    continue
                job.entry = module
                return argv[i + 2:]
            if i < len(argv):
                job.entry = argv[i]
                return argv[i + 1:]
            return []
        if job.launcher and job.launcher[-1] in ("torchrun", "torch.distributed.run", "torch.distributed.launch"):
            job.entry = argv[i]
            return argv[i + 1:]
        # Any other program: its arguments may still be overrides (a wrapper script passing "$@").
        job.entry = argv[i]
        return argv[i + 1:]
    return []


def _skip_torchrun(argv: list[str], i: int, job: Job) -> int:
    """Past torchrun's own options; `--nnodes`/`--nproc-per-node` are recorded (the world size)."""
    while i < len(argv) and (argv[i].startswith("-") or is_hidden_word(argv[i])):
        arg = argv[i]
        if is_hidden_word(arg):  # `torchrun $DISTRIBUTED_ARGS`: it may hold --nnodes and --nproc-per-node
            job.hidden_launcher.append(hidden_shown(arg))
            i += 1
            continue
        name, has_eq, value = arg.lstrip("-").partition("=")
        if arg in ("-m", "--module", "--no-python", "--no_python", "--standalone", "--run-path", "--run_path"):
            i += 1
            continue
        if name in TORCHRUN_VALUE_OPTIONS:
            if not has_eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"torchrun option {arg} has no value")
                value = argv[i + 1]
            key = name.replace("_", "-")
            if key == "nnodes":
                job.common["nnodes"] = Setting(parse_value(value.split(":")[-1]), value, source="flag")
            elif key == "nproc-per-node":
                job.common["gpus_per_node"] = Setting(parse_value(value), value, source="flag")
            i += 1 if has_eq else 2
            continue
        i += 1  # an option torchrun has that the doctor does not know: assume a flag
    return i
