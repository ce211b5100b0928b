"""The settings probe's direct mode, where verl's engine module or Megatron-Bridge does not import in the target:
Megatron-Core's MLATransformerConfig from the model's config.json, the overrides verl 0.9.1's _build_tf_config adds
and the command's, with the bridge's fused-DSA decision supplied (its provider does not run; the row says so and
passes nothing on it). A part of dsv4probe_settings, loaded by path."""


def dsv4_model_fields(hf, decision):
    """Direct mode: the DeepSeek-V4 provider's model fields Megatron's validation reads, from the config.json, with
    the bridge's fused-DSA decision supplied (the bridge's provider does not run here)."""
    layers = int(hf.get("num_hidden_layers") or 1)
    mtp = int(hf.get("num_nextn_predict_layers") or 0)
    ratios = hf.get("compress_ratios")
    ratios = [int(r) for r in ratios] if isinstance(ratios, list) else [0] * layers
    if len(ratios) == layers and mtp:
        ratios += [0] * mtp
    fields = {"num_layers": layers, "hidden_size": int(hf.get("hidden_size") or 1024),
              "num_attention_heads": int(hf.get("num_attention_heads") or 8),
              "apply_dsa_kernel_fusion": decision, "mtp_num_layers": mtp or None,
              "csa_compress_ratios": ratios[:layers + mtp], "apply_rope_fusion": True}
    if hf.get("model_type") == "deepseek_v4":
        fields.update(experimental_attention_variant="dsv4_hybrid", multi_latent_attention=True)
    return fields


def verl_provider_overrides(hf, engine, mtp_enable):
    """Direct mode: what verl 0.9.1's _build_tf_config adds (transformer_impl.py L296-L372), where verl's engine
    module does not import here."""
    overrides = dict(engine.override_transformer_config or {})
    if engine.dynamic_context_parallel:
        overrides.update(calculate_per_token_loss=True, context_parallel_size=engine.context_parallel_size,
                         dynamic_context_parallel=False, max_seqlen_per_dp_cp_rank=engine.max_seqlen_per_dp_cp_rank)
    if hf.get("model_type") == "deepseek_v4" and (engine.context_parallel_size > 1 or engine.dynamic_context_parallel):
        overrides.update(cp_partition_mode="contiguous", sequence_packing_scheduler="default_dynamic_cp")
    vpp = engine.virtual_pipeline_model_parallel_size
    out = {"tensor_model_parallel_size": engine.tensor_model_parallel_size,
           "pipeline_model_parallel_size": engine.pipeline_model_parallel_size,
           "expert_model_parallel_size": engine.expert_model_parallel_size,
           "expert_tensor_parallel_size": engine.expert_tensor_parallel_size,
           "virtual_pipeline_model_parallel_size": vpp, "context_parallel_size": engine.context_parallel_size,
           "sequence_parallel": engine.sequence_parallel, "overlap_p2p_comm": vpp is not None and vpp > 1,
           "batch_p2p_comm": False, "variable_seq_lengths": True, "moe_token_dispatcher_type": "alltoall",
           "moe_router_load_balancing_type": "none"}
    out.update(overrides)
    if hf.get("model_type") == "deepseek_v4" and not mtp_enable and hf.get("num_nextn_predict_layers"):
        layers = int(hf.get("num_hidden_layers") or 1)
        out["mtp_num_layers"] = 0
        out["csa_compress_ratios"] = None  # set from the model fields below, cut to num_layers
        out["_cut_ratios_to"] = layers
    return out


def build_direct(cfg, role, engine, hf, facts, decision):
    """Megatron-Core's MLATransformerConfig from the model's fields, verl's overrides and the command's; its
    __post_init__ validates."""
    import dataclasses

    from omegaconf import OmegaConf
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    head = "critic" if role == "critic" else "actor_rollout_ref"
    mtp_enable = bool(OmegaConf.select(cfg, head + ".model.mtp.enable", default=False))
    fields = dsv4_model_fields(hf, decision)
    overrides = verl_provider_overrides(hf, engine, mtp_enable)
    cut = overrides.pop("_cut_ratios_to", None)
    if cut is not None:
        overrides["csa_compress_ratios"] = fields["csa_compress_ratios"][:cut]
    fields.update(overrides)
    fields["bf16"] = engine.dtype == "bfloat16"
    fields["params_dtype"] = __import__("torch").bfloat16 if fields["bf16"] else __import__("torch").float16
    known = set(f.name for f in dataclasses.fields(MLATransformerConfig))
    ignored = sorted(k for k in fields if k not in known)
    config = MLATransformerConfig(**dict((k, v) for k, v in fields.items() if k in known))
    return config, ignored
