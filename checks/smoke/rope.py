"""The kernel smoke's fused MLA RoPE sub-run (dsv4probe_kernels_rope.py): when it runs (the job's apply_rope_fusion),
its fix (the workaround: apply_rope_fusion=False) and its upstream sources."""

from __future__ import annotations

from dsv4_doctor.api import Fix, Job, Phase, Profile, Source, line_to_add, rope_fusion

from .._upstream import EAV, mlm, pypi

ROPE_SOURCES = (
    mlm("megatron/core/fusions/fused_mla_yarn_rope_apply.py", "408-461",
        "Megatron-LM dev fused_mla_yarn_rope_apply.py L408-461 (fused_mla_rope_inplace, the triton kernel)"),
    mlm(EAV + "deepseek_v4_hybrid_attention.py", "614-860",
        "Megatron-LM dev deepseek_v4_hybrid_attention.py L614-860 (the DSv4 layer's fused and unfused RoPE calls)"),
    mlm(EAV + "csa_utils/cp_utils.py", "45-118",
        "Megatron-LM dev csa_utils/cp_utils.py L45-118 (apply_thd_cp_local_rope_fused / _unfused, CP > 1)"),
    Source("Megatron-Bridge #4321 (DSv4-Flash: NaN at iteration 1 from fused_mla_rope_inplace on H100; workaround "
           "model.apply_rope_fusion=False)", "https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/4321"),
    pypi("megatron-bridge", "0.6.2", "Megatron-Bridge 0.6.2 models/deepseek/deepseek_v4_bridge.py L428 "
                "(provider.apply_rope_fusion = True) and L412-417 (rotary_percent = 1.0: the partial_rotary_factor "
                "mapping had shrunk the rope table the fused kernel reads, #4271)"),
)
# The workaround's settings, in each syntax the doctor reads (Megatron-LM: `--no-rope-fusion`, a store_false flag).
OFF_LINES = ("verl: apply_rope_fusion=False under actor_rollout_ref.actor.megatron.override_transformer_config; "
             "Megatron-Bridge recipe: model.apply_rope_fusion=False; Megatron-LM: --no-rope-fusion")


def rope_skip(profile: Profile) -> str | None:
    """Why the rope sub-run does not apply to this job, or None when it runs (on, or not known)."""
    decided = rope_fusion(profile.job)
    return None if decided.runs else f"apply_rope_fusion=False: {decided.why}; the fused MLA RoPE is not used"


def rope_decided(profile: Profile) -> dict:
    decided = rope_fusion(profile.job)
    return {"apply_rope_fusion": decided.on, "decided_by": decided.why, "source": decided.source}


def _line(job: Job | None) -> str | None:
    if job is None or job.syntax not in ("hydra", "bridge", "megatron"):
        return None
    if job.syntax == "megatron":
        return "--no-rope-fusion"
    return line_to_add(job, job.checked_roles()[0] if job.checked_roles() else "actor", "apply_rope_fusion", False)


def rope_off_fix(job: Job | None) -> Fix:
    """The workaround Megatron-Bridge #4321 gives: run with the unfused RoPE (prose: a setting of the job)."""
    line = _line(job)
    why = ("the fused MLA RoPE (fused_mla_rope_inplace) disagrees with the unfused path on this GPU: run the job "
           "with the unfused RoPE, the workaround of Megatron-Bridge #4321")
    if line:
        return Fix(f"Turn the fused MLA RoPE off in the training command ({why}):\n  {line}",
                   key=f"job:{line}", phase=Phase.SETTING)
    return Fix(f"Turn the fused MLA RoPE off in the job ({why}): apply_rope_fusion=False ({OFF_LINES})",
               key="job:apply_rope_fusion=False", phase=Phase.SETTING)


ROPE_OFF_DOC = rope_off_fix(None)
HINT = ("A NaN, an inf or a mismatch from the fused MLA RoPE is what Megatron-Bridge #4321 reports for DSv4-Flash on "
        "H100 (NaN at iteration 1); Megatron-Bridge's DSv4 README attributes that report to a rotary_percent mapping "
        "fixed in #4271 (rotary_percent = 1.0), which this comparison uses unless the job states another.")
