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
from dataclasses import dataclass, field, replace
from collections.abc import Sequence
from typing import Any

from .model import Profile, UsageError

VERL_ROLES = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}
# verl's Megatron engine fields (`<role>.megatron.<name>`), by the doctor's setting names. The engine's
# max_seqlen_per_dp_cp_rank is its own setting, apart from override_transformer_config's: verl 0.9.0 validates the
# engine's (McoreEngineConfig, engine.py L229-236) and, with dynamic CP, writes it over the transformer config's
# (transformer_impl.py L303-311); without dynamic CP verl does not read it.
ENGINE_MAX_SEQLEN = "engine_max_seqlen_per_dp_cp_rank"
VERL_ENGINE = {
    "context_parallel_size": "cp", "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
    "expert_model_parallel_size": "ep", "max_seqlen_per_dp_cp_rank": ENGINE_MAX_SEQLEN,
    "dynamic_context_parallel": "dynamic_context_parallel",
}
# TransformerConfig/ModelParallelConfig fields the job checks read (`...override_transformer_config.<field>`).
CONFIG_FIELDS = (
    "cp_partition_mode", "sequence_packing_scheduler", "max_seqlen_per_dp_cp_rank", "dsa_kernel_backend",
    "apply_dsa_kernel_fusion", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "dsa_indexer_loss_coeff",
    "dsa_indexer_use_sparse_loss", "experimental_attention_variant", "tensor_model_parallel_size",
    "context_parallel_size", "dynamic_context_parallel", "overlap_moe_expert_parallel_comm", "csa_dense_mode",
)
# The top-level groups of verl's trainer config (verl 0.9.0 verl/trainer/config/_generated_ppo_megatron_trainer.yaml,
# its model_engine group, Hydra's own).
VERL_ROOTS = {"actor_rollout_ref", "critic", "data", "trainer", "reward_model", "reward", "algorithm", "ray_kwargs",
              "ray_init", "custom_reward_function", "global_profiler", "model_engine", "transfer_queue", "hydra",
              "distillation", "sandbox_fusion", "skip"}
VERL_COMMON = {"data.max_prompt_length": "max_prompt_length", "data.max_response_length": "max_response_length",
               "trainer.nnodes": "nnodes", "trainer.n_gpus_per_node": "gpus_per_node"}
# A setting's bare name -> the verl key it must be written as (an overrides-only command that uses a bare name).
BARE_SETTINGS = {
    **{name: f"++{VERL_ROLES['actor']}.megatron.override_transformer_config.{name}" for name in CONFIG_FIELDS},
    **{name: f"{VERL_ROLES['actor']}.megatron.{name}" for name in VERL_ENGINE},
    **{key.split(".", 1)[1]: key for key in VERL_COMMON},
}
# Megatron-LM flags: name -> (setting, takes a value). Booleans are `store_true` flags.
MEGATRON_FLAGS = {
    "context-parallel-size": ("cp", True), "tensor-model-parallel-size": ("tp", True),
    "pipeline-model-parallel-size": ("pp", True), "expert-model-parallel-size": ("ep", True),
    "cp-partition-mode": ("cp_partition_mode", True),
    "sequence-packing-scheduler": ("sequence_packing_scheduler", True),
    "max-seqlen-per-dp-cp-rank": ("max_seqlen_per_dp_cp_rank", True),
    "dsa-kernel-backend": ("dsa_kernel_backend", True), "seq-length": ("seq_length", True),
    "experimental-attention-variant": ("experimental_attention_variant", True),
    "moe-token-dispatcher-type": ("moe_token_dispatcher_type", True),
    "moe-flex-dispatcher-backend": ("moe_flex_dispatcher_backend", True),
    "dsa-indexer-loss-coeff": ("dsa_indexer_loss_coeff", True),
    "dsa-indexer-use-sparse-loss": ("dsa_indexer_use_sparse_loss", False),
    "no-dsa-kernel-fusion": ("apply_dsa_kernel_fusion", False),
    "dynamic-context-parallel": ("dynamic_context_parallel", False),
    "hybrid-context-parallel": ("dynamic_context_parallel", False),
    "use-varlen-dataset": ("use_varlen_dataset", False),
    "overlap-moe-expert-parallel-comm": ("overlap_moe_expert_parallel_comm", False),
    "csa-dense-mode": ("csa_dense_mode", False),
}
# The setting each Megatron flag writes back as, for "the line to add".
MEGATRON_FLAG_OF = {setting: flag for flag, (setting, _) in MEGATRON_FLAGS.items()
                    if flag not in ("hybrid-context-parallel", "no-dsa-kernel-fusion")}
TORCHRUN_VALUE_OPTIONS = {
    "nnodes", "nproc-per-node", "nproc_per_node", "node-rank", "node_rank", "master-addr", "master_addr",
    "master-port", "master_port", "rdzv-backend", "rdzv_backend", "rdzv-endpoint", "rdzv_endpoint", "rdzv-id",
    "rdzv_id", "rdzv-conf", "rdzv_conf", "max-restarts", "max_restarts", "monitor-interval", "monitor_interval",
    "start-method", "start_method", "role", "log-dir", "log_dir", "redirects", "tee", "local-addr", "local_addr",
    "local-ranks-filter", "local_ranks_filter", "logs-specs", "logs_specs",
}
PYTHON_VALUE_OPTIONS = {"-W", "-X", "-Q"}
_HYDRA = re.compile(r"(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][A-Za-z0-9_.@/\-]*)(?:=(?P<value>.*))?", re.S)
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
# A config file the command names (Hydra's --config-name/--config-path, Megatron-LM's --yaml-cfg): what the command
# does not state, the file may set, so it is not known (never the default).
CONFIG_FILE_FLAGS = {"hydra": ("--config-name", "--config-path", "-cn", "-cp"), "megatron": ("--yaml-cfg",)}
BRIDGE_DECIDES = "megatron-bridge"  # Job.dsa_backend(): not stated; Megatron-Bridge's provider decides
# Programs that run a script or another program the doctor does not read (its settings are then not known).
SHELLS_AND_LAUNCHERS = {"bash", "sh", "dash", "zsh", "ksh", "srun", "mpirun", "mpiexec", "sbatch", "salloc",
                        "deepspeed", "accelerate", "ray", "docker", "enroot", "singularity", "apptainer", "xargs",
                        "nohup", "timeout", "numactl", "taskset", "stdbuf", "exec"}
MAX_ARGS = 10_000
MAX_ARG_CHARS = 65_536


@dataclass
class Setting:
    value: Any  # int, float, bool, None or str, parsed as Hydra/argparse would
    raw: str  # as written in the command
    resolved: str | None = None  # how an interpolation was resolved ("from the environment", ...)

    def to_dict(self) -> dict:
        out = {"value": self.value, "raw": self.raw}
        if self.resolved:
            out["resolved"] = self.resolved
        return out


def is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


@dataclass
class Job:
    """What a training command states. `roles` holds per-role settings (verl: actor, ref, critic; Megatron:
    model); `common` the sequence lengths and the world size."""

    kind: str = "unknown"  # "verl" | "megatron" | "unknown"
    syntax: str = "unknown"  # how a missing setting is written back: "hydra" | "megatron" | "unknown"
    launcher: list[str] = field(default_factory=list)  # the wrappers in front: env, torchrun, python
    entry: str | None = None  # the module or script that trains
    roles: dict[str, dict[str, Setting]] = field(default_factory=dict)
    common: dict[str, Setting] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # `env K=V` in front of the command
    unset: list[str] = field(default_factory=list)  # `env -u NAME` in front of the command
    unknown: list[str] = field(default_factory=list)  # keys and flags not used by any check (names only)
    config_file: list[str] = field(default_factory=list)  # the config-file flags it gives (names only)

    def effective(self, role: str) -> dict[str, Setting]:
        """A role's settings as its config sees them: verl's ref inherits the actor's megatron settings
        (`oc.select` in megatron_ref.yaml) unless it states its own."""
        if self.kind == "verl" and role == "ref":
            return {**self.roles.get("actor", {}), **self.roles.get("ref", {})}
        return dict(self.roles.get(role, {}))

    def checked_roles(self) -> list[str]:
        if self.kind == "megatron":
            return ["model"]
        if self.kind == "verl":
            return ["actor"] + [r for r in ("ref", "critic") if self.roles.get(r)]
        return []

    def cp(self) -> int | None:
        """The job's CP size: the largest a checked role states (1, the default of verl and Megatron, if none);
        None when a role states one the doctor cannot read (an interpolation it cannot resolve), or states none
        while the command names a config file (which may set it)."""
        sizes = [1]
        for role in self.checked_roles():
            s = self.effective(role).get("cp")
            if s is None:
                if self.config_file:
                    return None
                continue
            if is_interpolation(s.value):
                return None
            sizes.append(_positive_int(s, "context_parallel_size"))
        return max(sizes)

    def dsa_backend(self) -> tuple[str, str]:
        """(backend, how it was decided)."""
        for role in self.checked_roles():
            eff = self.effective(role)
            backend, fusion = eff.get("dsa_kernel_backend"), eff.get("apply_dsa_kernel_fusion")
            value = None if backend is None else "null" if backend.value is None else str(backend.value)
            if fusion is not None and fusion.value in (True, False) and value in (None, "none"):
                # TransformerConfig folds the deprecated switch in: it wins over an unset or "none" backend.
                legacy = "cudnn" if fusion.value else "none"
                return legacy, (f"stated: apply_dsa_kernel_fusion={fusion.raw} (the deprecated switch; {legacy}"
                                + (", over dsa_kernel_backend=none)" if value else ")"))
            if backend is not None and value is not None:
                return value, f"stated: {backend.raw}" + (f" ({backend.resolved})" if backend.resolved else "")
        if self.config_file:
            # Not known: the environment is judged for the fused kernels, the stricter of the two backends.
            return "cudnn", (f"not stated: the config file ({', '.join(self.config_file)}) may set it; the "
                             "environment is checked for cudnn, the stricter")
        if self.kind == "megatron":
            return "cudnn", ("not stated: the Megatron-LM CLI resolves an omitted --dsa-kernel-backend to cudnn for "
                             "dsv4_hybrid")
        if self.kind == "verl":
            # verl leaves it to Megatron-Bridge's DSv4 provider, whose installed rule the session reads (bridgerule).
            return BRIDGE_DECIDES, "not stated: Megatron-Bridge's DeepSeek-V4 provider decides"
        return "cudnn", ("not known: the command is neither verl nor Megatron-LM, so its DSA setting cannot be read; "
                         "the environment is checked for cudnn, the stricter (state it with --dsa-backend)")

    def dense_indexer_loss(self) -> bool | None:
        """Whether a checked role trains with the dense indexer loss (coeff > 0, dsa_indexer_use_sparse_loss not
        True), which makes Megatron require q_causal_offsets on the dense DSA wrappers too; None: not known."""
        answers = []
        for role in self.checked_roles():
            eff = self.effective(role)
            coeff, sparse = eff.get("dsa_indexer_loss_coeff"), eff.get("dsa_indexer_use_sparse_loss")
            if coeff is None:  # Megatron's default is None (no loss); through verl the Bridge provider decides
                answers.append(False if self.kind == "megatron" else None)
            elif isinstance(coeff.value, (int, float)) and not isinstance(coeff.value, bool):
                answers.append(coeff.value > 0 and not (sparse is not None and sparse.value is True))
            else:
                answers.append(None)
        if any(a is True for a in answers):
            return True
        return None if any(a is None for a in answers) or not answers else False

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "syntax": self.syntax, "launcher": self.launcher[:8], "entry": self.entry,
            "roles": {r: {k: s.to_dict() for k, s in v.items()} for r, v in self.roles.items()},
            "common": {k: s.to_dict() for k, s in self.common.items()},
            "env": dict(self.env), "unset": self.unset[:50], "unknown": self.unknown[:200],
            "unknown_count": len(self.unknown), "config_file": self.config_file[:8],
        }


def _positive_int(setting: Setting, name: str) -> int:
    value = setting.value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        from .jobshape import plain_or_hidden

        raise UsageError(f"the job's {name}={plain_or_hidden(setting.raw)} is not a positive whole number")
    return value


def parse_value(raw: str, hydra: bool = True) -> Any:
    """A Hydra value (null, booleans, numbers, else the text, one level of matching quotes removed), or an argparse
    one (`hydra=False`: numbers, else the text; argparse has no null or booleans, so `none` is the text "none", as it
    is in Hydra's grammar too)."""
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    low = text.lower()
    if hydra and low == "null":
        return None
    if hydra and low == "true":
        return True
    if hydra and low == "false":
        return False
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return text


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
        job.unknown = _names(rest)
        return job
    if any(a.startswith(("actor_rollout_ref.", "+actor_rollout_ref.", "++actor_rollout_ref.", "critic.",
                         "+critic.", "++critic.")) for a in rest) or (job.entry or "").startswith("verl."):
        job.kind, job.syntax = "verl", "hydra"
        _parse_hydra(rest, job)
    elif any(_flag_name(a) in MEGATRON_FLAGS for a in rest if a.startswith("--")) or \
            (job.entry or "").endswith(("pretrain_gpt.py", "pretrain_mamba.py", "train_rl.py")):
        job.kind, job.syntax = "megatron", "megatron"
        _parse_megatron(rest, job)
    else:
        job.unknown = _names(rest)
    return job


_NAME = re.compile(r"[+~-]*[A-Za-z_][A-Za-z0-9_.@/\-]*")


def _names(args: list[str]) -> list[str]:
    """The flag and key names among a command's words the doctor does not read. A word that is no name (a `sh -c`
    script, a quoted sentence) is left out whole: what precedes its first `=` may hold a password."""
    names = (a.split("=", 1)[0] for a in args if a.startswith("-") or "=" in a)
    return [n[:200] for n in names if _NAME.fullmatch(n)][:200]


def _is_override(arg: str) -> bool:
    """A Hydra override word: `key=value`, `+key=value`, `++key=value`, `~key`."""
    m = _HYDRA.fullmatch(arg)
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
    _parse_hydra(argv, job)
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


def _flag_name(arg: str) -> str:
    return arg[2:].split("=", 1)[0].replace("_", "-")


def _strip_wrappers(argv: list[str], job: Job) -> list[str]:
    """Remove `env K=V`, `torchrun [opts]` and `python [opts] (-m mod | script)` from the front; record them."""
    i = 0
    # Leading assignments as a shell reads them (`--job-args "NCCL_NVLS_ENABLE=0 python3 ..."`).
    while i < len(argv) - 1 and _ENV.fullmatch(argv[i]):
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
        while i < len(argv) and _ENV.fullmatch(argv[i]):
            name, value = argv[i].split("=", 1)
            job.env[name] = value
            i += 1
    while i < len(argv):
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
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
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
                job.common["nnodes"] = Setting(parse_value(value.split(":")[-1]), value)
            elif key == "nproc-per-node":
                job.common["gpus_per_node"] = Setting(parse_value(value), value)
            i += 1 if has_eq else 2
            continue
        i += 1  # an option torchrun has that the doctor does not know: assume a flag
    return i


def _flat_dict(raw: str) -> dict[str, str] | None:
    """`{a:1,b:'x y'}` (a Hydra dict value, one level) -> {"a": "1", "b": "'x y'"}; None for anything else."""
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    body, items, current, quote = text[1:-1], [], "", ""
    for ch in body:
        if quote:
            current += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote, current = ch, current + ch
        elif ch in "{}[]":
            return None  # nested: not read
        elif ch == ",":
            items.append(current)
            current = ""
        else:
            current += ch
    if quote:
        return None
    if current.strip():
        items.append(current)
    out = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon or not re.fullmatch(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*", key):
            return None
        out[key.strip()] = value.strip()
    return out


_INTERPOLATION = re.compile(r"\$\{(?:oc\.env:(?P<env>[A-Za-z_][A-Za-z0-9_]*)(?:,(?P<default>[^{}$]*))?|"
                            r"(?P<key>[A-Za-z_][A-Za-z0-9_.]*))\}")


def _resolve(setting: Setting, overrides: dict[str, str], env: dict[str, str], depth: int = 0) -> Setting:
    """A value that is exactly one OmegaConf interpolation, resolved as verl's config would resolve it; else as it
    was (and one that cannot be resolved stays the text, which the checks report as not known)."""
    m = _INTERPOLATION.fullmatch(str(setting.value).strip()) if isinstance(setting.value, str) else None
    if m is None or depth > 8:
        return setting
    if m.group("env"):
        name = m.group("env")
        if name in env:
            return Setting(parse_value(env[name]), setting.raw, f"{name} from the job's environment")
        if m.group("default") is not None:
            return Setting(parse_value(m.group("default")), setting.raw, f"{name} unset: the default")
        return setting
    key = m.group("key")
    if key in overrides:
        inner = _resolve(Setting(parse_value(overrides[key]), overrides[key]), overrides, env, depth + 1)
        if not is_interpolation(inner.value):
            return Setting(inner.value, setting.raw, f"from {key}" + (f" ({inner.resolved})" if inner.resolved else ""))
    return setting


def _parse_hydra(args: list[str], job: Job) -> None:
    overrides: dict[str, str] = {}  # every key's text, for ${key} interpolations; never reported
    for arg in args:
        m = _HYDRA.fullmatch(arg)
        if m is not None and not arg.startswith("-") and m.group("value") is not None:
            overrides[m.group("key")] = m.group("value")
            for name, value in (_flat_dict(m.group("value")) or {}).items():
                overrides[f"{m.group('key')}.{name}"] = value
    env = dict(os.environ)
    for name in job.unset:
        env.pop(name, None)
    env.update(job.env)

    def put(target: dict, name: str, raw: str) -> None:
        target[name] = _resolve(Setting(parse_value(raw), raw), overrides, env)

    for arg in args:
        m = _HYDRA.fullmatch(arg)
        if m is None or arg.startswith("-"):
            if arg.startswith("-"):  # a flag's name; its value, if the next word is one, is never listed
                job.unknown += _names([arg])
                if arg.split("=", 1)[0] in CONFIG_FILE_FLAGS["hydra"] and arg.split("=", 1)[0] not in job.config_file:
                    job.config_file.append(arg.split("=", 1)[0])
            continue
        prefix, key, raw = m.group("prefix") or "", m.group("key"), m.group("value")
        if raw is None and prefix != "~":
            # A bare word is no override: most likely a flag's value (`--hf-token hf_...`), so it is not listed
            # (otherwise: a token appeared in profile.job.unknown as a "key").
            continue
        if prefix == "~":  # deleting a key: the default applies, which is "not stated" (also when stated before)
            _delete(job, key)
            continue
        assert raw is not None
        if key in VERL_COMMON:
            put(job.common, VERL_COMMON[key], raw)
            continue
        for role, base in VERL_ROLES.items():
            head = base + ".megatron."
            if not key.startswith(head):
                continue
            name = key[len(head):]
            fields = {}
            if name in VERL_ENGINE:
                put(job.roles.setdefault(role, {}), VERL_ENGINE[name], raw)
            elif name.startswith("override_transformer_config."):
                fields = {name.split(".", 1)[1]: raw}
            elif name == "override_transformer_config" and _flat_dict(raw) is not None:
                fields = _flat_dict(raw) or {}  # `...override_transformer_config={a:1,b:x}`
            else:
                job.unknown.append(key[:200])
            for config, value in fields.items():
                if config in CONFIG_FIELDS:
                    setting = {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp"}.get(config, config)
                    put(job.roles.setdefault(role, {}), setting, value)
                else:
                    job.unknown.append(f"{head}override_transformer_config.{config}"[:200])
            break
        else:
            job.unknown.append(key[:200])


def _delete(job: Job, key: str) -> None:
    """`~key`: Hydra applies the overrides in order, so one stated before the deletion is gone."""
    if key in VERL_COMMON:
        job.common.pop(VERL_COMMON[key], None)
    for role, base in VERL_ROLES.items():
        head = base + ".megatron."
        if key.startswith(head):
            name = key[len(head):]
            config = name.split(".", 1)[1] if name.startswith("override_transformer_config.") else None
            setting = VERL_ENGINE.get(name) if config is None else \
                {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp"}.get(config, config)
            if setting is not None:
                job.roles.get(role, {}).pop(setting, None)


def _parse_megatron(args: list[str], job: Job) -> None:
    settings = job.roles.setdefault("model", {})
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            i += 1
            continue
        name = _flag_name(arg)
        has_eq = "=" in arg
        if name not in MEGATRON_FLAGS:
            job.unknown += _names([arg])
            if f"--{name}" in CONFIG_FILE_FLAGS["megatron"] and f"--{name}" not in job.config_file:
                job.config_file.append(f"--{name}")
            # An unknown flag's value (if any) is skipped as well: it is not a flag.
            i += 1 if has_eq or i + 1 >= len(args) or args[i + 1].startswith("--") else 2
            continue
        setting, takes_value = MEGATRON_FLAGS[name]
        if takes_value:
            if has_eq:
                raw = arg.split("=", 1)[1]
                i += 1
            else:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    raise UsageError(f"{arg} needs a value in the training command")
                raw = args[i + 1]
                i += 2
            target = job.common if setting == "seq_length" else settings
            target[setting] = Setting(parse_value(raw, hydra=False), raw)
        else:
            if has_eq:
                raise UsageError(f"{arg.split('=', 1)[0]} takes no value in Megatron-LM")
            value = name != "no-dsa-kernel-fusion"  # --no-dsa-kernel-fusion: fusion off
            settings[setting] = Setting(value, arg)
            i += 1


def line_to_add(job: dict, role: str, setting: str, value: Any) -> str:
    """The exact argument that states `setting`, in the syntax the command already uses."""
    shown = value if not isinstance(value, bool) else ("True" if value else "False")
    if job.get("syntax") == "megatron":
        flag = MEGATRON_FLAG_OF.get(setting, setting.replace("_", "-"))
        if isinstance(value, bool):
            return f"--{flag}" if value else ""
        return f"--{flag} {shown}"
    base = VERL_ROLES.get(role, VERL_ROLES["actor"]) + ".megatron."
    engine = {v: k for k, v in VERL_ENGINE.items()}
    if setting in ("cp", "tp", "pp", "ep", "dynamic_context_parallel", ENGINE_MAX_SEQLEN):
        return f"{base}{engine[setting]}={shown}"
    return f"++{base}override_transformer_config.{setting}={shown}"


def job_profile(base: Profile, argv: Sequence[str], given_cp: int | None, given_backend: str | None) -> Profile:
    """The profile for the job a command describes: its CP and DSA backend (the options may only agree, or fill in
    a CP the command states in a way the doctor cannot resolve), and what it states, as profile.job."""
    job = parse(argv)
    if job.kind == "unknown":
        return _unknown_job_profile(base, job, given_cp, given_backend)
    cp = job.cp()
    backend, how = job.dsa_backend()
    data = job.to_dict()
    if backend == BRIDGE_DECIDES:
        if given_backend is not None:
            backend, how = given_backend, ("from --dsa-backend (the command does not state it; Megatron-Bridge's "
                                           "DeepSeek-V4 provider would decide)")
        else:
            # Session.resolve decides it from the installed bridge's rule, the GPU and a probe; until then, and
            # wherever that cannot be known, the environment is checked for cudnn, the stricter.
            data["dsa_backend_pending"] = BRIDGE_DECIDES
            backend, how = "cudnn", how + "; not known yet: the environment is checked for cudnn, the stricter"
    if cp is None and given_cp is None and job.config_file and not any(
            is_interpolation(getattr(job.effective(r).get("cp"), "value", None)) for r in job.checked_roles()):
        raise UsageError(f"the job's context_parallel_size is not stated on the command line, and its config file "
                         f"({', '.join(job.config_file)}) may set it: state it in the command ("
                         f"{line_to_add(data, 'actor' if job.kind == 'verl' else 'model', 'cp', 'N')}; --cp N "
                         "also gives it)")
    if cp is None:
        if given_cp is None:
            # In a job script the shell expands the variables before the doctor reads them, so what it reads is
            # what verl gets; --cp (check, fix and preflight) states it otherwise.
            raise UsageError("the job's context_parallel_size is an interpolation the doctor cannot resolve (not in "
                             "the environment, nor another override of the command; a shell variable left "
                             "unexpanded?): pass the command as the job runs it, with its variables expanded (--cp N "
                             "also gives the CP size)")
        cp = data["cp_given"] = given_cp
    elif given_cp not in (None, cp):
        raise UsageError(f"--cp {given_cp} contradicts the job's context_parallel_size {cp}: leave --cp out with "
                         "job arguments")
    if cp > 1024:
        raise UsageError(f"the job's context_parallel_size {cp} is larger than 1024")
    if backend not in ("cudnn", "none"):
        # Megatron rejects it at config validation (job.dsa-backend says so); the environment is judged for the
        # fused kernels, the stricter of the two it accepts.
        data["dsa_backend_stated"] = backend
        how = f"{how}, which Megatron rejects (see job.dsa-backend); the environment is checked for cudnn"
        backend = "cudnn"
    if given_backend not in (None, backend):
        raise UsageError(f"--dsa-backend {given_backend} contradicts the job's ({backend}, {how})")
    data["dsa_backend_decided"] = how
    data["dense_indexer_loss"] = job.dense_indexer_loss()  # cudnn-fe.dsa's q_causal_offsets rule reads it
    return replace(base, cp=cp, dsa_backend=backend, dsa_backend_source="job", job=data)


STRICT_CP = 2  # a CP the doctor cannot know is checked as CP > 1: the CP rules run


def _unknown_job_profile(base: Profile, job: Job, given_cp: int | None, given_backend: str | None) -> Profile:
    """A command that is neither verl nor Megatron-LM (a wrapper script, a launcher): its settings are not known.
    The CP rules and the cudnn rules run, as for the stricter job, unless --cp / --dsa-backend state them."""
    data = job.to_dict()
    program = os.path.basename(job.entry or "") or "the command"
    missing = []
    if given_cp is None:
        cp = STRICT_CP
        data["cp_known"] = False
        missing.append("cp (checked as CP > 1; state it with --cp N)")
    else:
        cp = data["cp_given"] = given_cp
    if given_backend is None:
        backend, how = "cudnn", ("not known: the command is neither verl nor Megatron-LM, so its DSA setting cannot "
                                 "be read; the environment is checked for cudnn, the stricter (state it with "
                                 "--dsa-backend)")
        missing.append("dsa-backend (checked as cudnn; state it with --dsa-backend)")
    else:
        backend, how = given_backend, "from --dsa-backend (the command's own is not known)"
    data["dsa_backend_decided"] = how
    data["not_known"] = (f"{program} runs something the doctor does not read, so the job's settings are not known"
                         + (f": {'; '.join(missing)}" if missing else "") + "; the job.* rows need the training "
                         "command itself (`check --job-args \"python3 -m verl.trainer.main_ppo ...\"`)")
    data["dense_indexer_loss"] = None
    return replace(base, cp=cp, dsa_backend=backend, dsa_backend_source="job", job=data)


# --- reading a parsed job (the report's profile.job) ------------------------------------------------------------

def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def roles_to_check(job: dict) -> list[str]:
    """The roles whose models a job builds: Megatron's one model; verl's actor, and ref/critic when they state
    settings of their own (verl's ref otherwise inherits the actor's)."""
    roles = _dict(job.get("roles"))
    if job.get("kind") == "megatron":
        return ["model"]
    if job.get("kind") == "verl":
        return ["actor"] + [r for r in ("ref", "critic") if roles.get(r)]
    return []


def role_settings(job: dict, role: str) -> dict[str, dict]:
    """A role's settings as its config sees them ({name: {"value", "raw"}})."""
    roles = _dict(job.get("roles"))
    own = _dict(roles.get(role))
    if job.get("kind") == "verl" and role == "ref":
        return {**_dict(roles.get("actor")), **own}
    return dict(own)


def common_setting(job: dict, name: str) -> dict | None:
    value = _dict(job.get("common")).get(name)
    return value if isinstance(value, dict) else None
