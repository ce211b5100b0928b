"""The keys and flags the doctor reads in a training command, and how a setting is written back in the command's
own syntax."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

VERL_ROLES = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}
# Where each role's Megatron engine keys are: the PPO roles' `<role>.megatron.`, the SFT trainer's `engine.`
# (verl.trainer.sft_trainer with engine=megatron: verl/trainer/config/engine/megatron.yaml, the same
# McoreEngineConfig).
ROLE_HEADS = {**{role: base + ".megatron." for role, base in VERL_ROLES.items()}, "engine": "engine."}


def role_head(role: str) -> str:
    return ROLE_HEADS.get(role, ROLE_HEADS["actor"])

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
    "apply_rope_fusion",
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
    "no-rope-fusion": ("apply_rope_fusion", False),  # store_false, dest apply_rope_fusion (arguments.py L3718-3723)
    "dynamic-context-parallel": ("dynamic_context_parallel", False),
    "hybrid-context-parallel": ("dynamic_context_parallel", False),
    "use-varlen-dataset": ("use_varlen_dataset", False),
    "overlap-moe-expert-parallel-comm": ("overlap_moe_expert_parallel_comm", False),
    "csa-dense-mode": ("csa_dense_mode", False),
}
# The setting each Megatron flag writes back as, for "the line to add".
MEGATRON_FLAG_OF = {setting: flag for flag, (setting, _) in MEGATRON_FLAGS.items()
                    if flag not in ("hybrid-context-parallel", "no-dsa-kernel-fusion", "no-rope-fusion")}
HYDRA_OVERRIDE = re.compile(r"(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_][A-Za-z0-9_.@/\-]*)(?:=(?P<value>.*))?", re.S)
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
# A config file the command names (Hydra's --config-name/--config-path, a --config-dir whose files come before verl's
# own, Megatron-LM's --yaml-cfg): what the command does not state, the file may set, so it is not known (never the
# default).
CONFIG_FILE_FLAGS = {"hydra": ("--config-name", "--config-path", "-cn", "-cp", "--config-dir", "-cd"),
                     "megatron": ("--yaml-cfg",)}
BRIDGE_DECIDES = "megatron-bridge"  # Job.dsa_backend(): not stated; Megatron-Bridge's provider decides
MAX_ARGS = 10_000
MAX_ARG_CHARS = 65_536


def flag_name(arg: str) -> str:
    return arg[2:].split("=", 1)[0].replace("_", "-")


def line_to_add(job: Any, role: str, setting: str, value: Any) -> str:
    """The exact argument that states `setting`, in the syntax the command already uses (`job`: a Job, or a mapping
    with its "syntax")."""
    shown = value if not isinstance(value, bool) else ("True" if value else "False")
    syntax = job.get("syntax") if isinstance(job, Mapping) else getattr(job, "syntax", None)
    if syntax == "megatron":
        flag = MEGATRON_FLAG_OF.get(setting, setting.replace("_", "-"))
        if isinstance(value, bool):
            return f"--{flag}" if value else ""
        return f"--{flag} {shown}"
    if syntax == "bridge":  # Megatron-Bridge's recipe launcher: a trailing ConfigContainer override of its model
        field = {"cp": "context_parallel_size", "tp": "tensor_model_parallel_size",
                 "pp": "pipeline_model_parallel_size", "ep": "expert_model_parallel_size"}.get(setting, setting)
        return f"{'dataset' if setting == 'seq_length' else 'model'}.{field}={shown}"
    base = role_head(role)
    engine = {v: k for k, v in VERL_ENGINE.items()}
    if setting in ("cp", "tp", "pp", "ep", "dynamic_context_parallel", ENGINE_MAX_SEQLEN):
        return f"{base}{engine[setting]}={shown}"
    return f"++{base}override_transformer_config.{setting}={shown}"

