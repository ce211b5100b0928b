"""The tolerances of tier 2 and the fused-vs-unfused comparison of two builds' saved tensors, with the layer
settings the fused kernels accept.

A part of the smoke probe (dsv4probe_smoke.py), loaded by path (dsv4probe_common.load_module).
"""

TIER2_PARITY = 2e-2  # tier 2: CP N against CP 1, and packed against alone relative to the output's scale

# ------------------------------------------------------------------------- tier 2: fused DSA against unfused, fwd+bwd

# The smallest layer the fused kernels accept (Megatron d48bd6be): FlashMLA's sparse kernel takes d_v = 512 and only
# 64 or 128 query heads, on SM90 and SM100 alike (FlashMLA b7643bd5 csrc/api/sparse_fwd.h L229-235 raise
# "Unsupported h_q" for any other count, and Megatron's training path passes the layer's heads unpadded); the SM90
# cuDNN indexer takes head dim 128 and 16/32/64 heads (frontend _interface_sm90.py). Segments are multiples of the
# window and the ratio (as Megatron's multi-segment parity test uses), and index_topk is at least every segment's
# compressed length, so both builds select every visible compressed block and near ties cannot flip the comparison.
FUSED_LENS = [256, 128, 384]
FUSED_HEADS = 64  # the smaller of FlashMLA's two sparse-forward head tiles
FUSED_RATIO = 4
FUSED_TOPK = 128
FUSED_HIDDEN = 512
FUSED_INIT_STD = 0.02  # Megatron's default init_method_std
BF16_UNIT = 2.0 ** -8  # bf16 keeps 8 significant bits: spacing 2^-7 in [1, 2), so one rounding errs by <= 2^-8
FUSED_FORWARD_ROUNDINGS = 8  # bf16 tensors on the layer's longest forward path (see fused_tolerances)
FUSED_CONTROL_FACTOR = 4.0  # the control scales the output projection by 1 + 4 * forward tolerance
FUSED_BUILD_TIMEOUT_S = 50.0  # each build, from its start; never past the smoke probe's own deadline


def fused_tolerances():
    """Norm-wise relative tolerances for the fused-vs-unfused comparison, derived from bf16 and the layer's depth."""
    forward = 2 * FUSED_FORWARD_ROUNDINGS * BF16_UNIT
    return {
        "metric": "relative L2 difference ||fused - unfused|| / max(||fused||, ||unfused||) per tensor",
        "bf16_unit_roundoff": BF16_UNIT,
        "forward_roundings": FUSED_FORWARD_ROUNDINGS,
        "forward": forward,
        "backward": 2 * forward,
        "derivation": (
            "one bf16 rounding moves a value by at most u = 2^-8 relative; the layer's longest forward path "
            "materialises %d bf16 tensors (q down-projection, q norm, q up-projection, kv projection, kv norm, "
            "compressor, sparse attention, grouped output projection); two builds that round independently differ "
            "by at most 2 * %d * u = %.4g (first order, well-conditioned random weights); the backward pass runs "
            "the path again in reverse, so gradients get twice that, %.4g"
            % (FUSED_FORWARD_ROUNDINGS, FUSED_FORWARD_ROUNDINGS, forward, 2 * forward)),
        "control": "the fused build rerun with the output projection scaled by 1 + %g * forward tolerance must "
                   "differ by more than the forward tolerance" % FUSED_CONTROL_FACTOR,
    }


def tensor_difference(torch, a, b):
    """Relative L2 difference, max |diff| and 1 - cosine of two tensors (float64), with their finiteness."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    out = {"finite": bool(torch.isfinite(a64).all().item()), "finite_reference": bool(torch.isfinite(b64).all().item()),
           "numel": int(a64.numel()), "shape": list(a64.shape), "shape_reference": list(b64.shape)}
    if a64.shape != b64.shape:
        out.update(rel_l2=float("inf"), max_abs=float("inf"))
        return out
    if not (out["finite"] and out["finite_reference"]):
        out.update(rel_l2=float("inf"), max_abs=float("inf"))
        return out
    diff = a64 - b64
    na, nb = float(a64.norm().item()), float(b64.norm().item())
    scale = max(na, nb)
    out["rel_l2"] = float(diff.norm().item()) / scale if scale > 0 else 0.0
    out["max_abs"] = float(diff.abs().max().item()) if diff.numel() else 0.0
    out["norm"], out["norm_reference"] = na, nb
    out["cosine_drift"] = 1.0 - float((a64 * b64).sum().item()) / (na * nb) if na > 0 and nb > 0 else 0.0
    return out


def compare_builds(torch, fused, unfused, tolerances=None):
    """Judge two builds' saved tensors: the same weights went in, every tensor is finite and within its tolerance,
    the same gradients exist, and the perturbed-weight control of the fused build fails the same comparison."""
    tol = tolerances or fused_tolerances()
    result = {"tolerances": tol, "tensors": {}, "problems": []}
    if fused.get("weights") != unfused.get("weights"):
        changed = sorted(set(fused.get("weights", {})) ^ set(unfused.get("weights", {}))) or sorted(
            n for n in fused.get("weights", {}) if fused["weights"][n] != unfused.get("weights", {}).get(n))
        result["problems"].append("the two builds did not start from the same weights (%s)" % ", ".join(changed[:5]))
    ft, ut = fused["tensors"], unfused["tensors"]
    for name in sorted(set(ft) | set(ut)):
        if name not in ft or name not in ut:
            result["problems"].append("%s exists only in the %s build" % (name, "fused" if name in ft else "unfused"))
            continue
        row = tensor_difference(torch, ft[name], ut[name])
        row["tolerance"] = tol["forward"] if name == "output" else tol["backward"]
        row["ok"] = row["finite"] and row["finite_reference"] and row["rel_l2"] <= row["tolerance"]
        result["tensors"][name] = row
    bad = [n for n, r in result["tensors"].items() if not r["ok"]]
    nonfinite = [n for n, r in result["tensors"].items() if not (r["finite"] and r["finite_reference"])]
    result["nonfinite"] = nonfinite
    result["over_tolerance"] = [n for n in bad if n not in nonfinite]
    worst = max(result["tensors"].items(), key=lambda kv: kv[1]["rel_l2"] / kv[1]["tolerance"], default=None)
    if worst:
        result["worst"] = {"tensor": worst[0], "rel_l2": worst[1]["rel_l2"], "tolerance": worst[1]["tolerance"]}
    control = (fused.get("control") or {}).get("output")
    if control is None or "output" not in ut:
        result["control"] = {"separates": False, "why": "the fused build returned no control output"}
    else:
        c = tensor_difference(torch, control, ut["output"])
        result["control"] = {"rel_l2": c["rel_l2"], "tolerance": tol["forward"],
                             "separates": c["rel_l2"] > tol["forward"], "perturbed": fused["control"].get("perturbed")}
    result["ok"] = not result["problems"] and not bad and result["control"]["separates"]
    return result


def fused_config(torch, MLATransformerConfig, backend, **extra):
    return MLATransformerConfig(
        num_layers=1, hidden_size=FUSED_HIDDEN, num_attention_heads=FUSED_HEADS, num_query_groups=FUSED_HEADS,
        kv_channels=512, use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16, add_bias_linear=False,
        q_lora_rank=128, kv_lora_rank=448, qk_head_dim=448, qk_pos_emb_head_dim=64, v_head_dim=512, o_groups=4,
        o_lora_rank=128, rope_type="rope", rotary_base=10000, rotary_percent=1.0, multi_latent_attention=True,
        experimental_attention_variant="dsv4_hybrid", csa_compress_ratios=[FUSED_RATIO], csa_window_size=128,
        dsa_indexer_n_heads=64, dsa_indexer_head_dim=128, dsa_indexer_topk=FUSED_TOPK,
        # SM90 rejects the fused dense indexer loss (transformer_config.py d48bd6be): the sparse loss trains the
        # indexer in both builds, so its backward runs too.
        dsa_indexer_loss_coeff=0.01, dsa_indexer_use_sparse_loss=True, dsa_kernel_backend=backend,
        apply_rope_fusion=False, normalization="RMSNorm", qk_layernorm=True, layernorm_epsilon=1e-6,
        gradient_accumulation_fusion=False, **extra)


FUSED_SETTINGS = {"csa_compress_ratios": [FUSED_RATIO], "csa_window_size": 128, "dsa_indexer_topk": FUSED_TOPK,
                  "max_compressed_length": max(FUSED_LENS) // FUSED_RATIO, "segments": FUSED_LENS,
                  "dsa_indexer_loss_coeff": 0.01, "dsa_indexer_use_sparse_loss": True, "apply_rope_fusion": False,
                  "rope_type": "rope", "v_head_dim": 512, "num_attention_heads": FUSED_HEADS,
                  "hidden_size": FUSED_HIDDEN,
                  "cp": 1}

# ------------------------------------------------------------------ the kernel smoke's fused MLA RoPE (sub-run rope)

# Megatron's fused MLA RoPE (triton, fused_mla_rope_inplace) against its own unfused apply_rotary_pos_emb path, both
# in bf16 on the same inputs (N(0, 1) values, so rotated values stay below about 8). PROVISIONAL: not yet measured on a
# GPU (docs/gpu-runs/2026-12-07-gpu-v3, cases-rope.sh, is the run that will set them with their margin). Derived
# from rounding: the unfused path rounds three times to bf16 (t*cos, rotate_half(t)*sin, their sum), the kernel at its
# store, so the two may differ by a few bf16 units in the last place: 2^-5 is one unit at magnitudes in [4, 8).
ROPE_MAX_ABS = 0.125  # max |fused - unfused| over a tensor: 4 units of 2^-5
ROPE_REL_L2 = 1e-2  # ||fused - unfused|| / max(||fused||, ||unfused||): about 2.5 bf16 roundings (2^-8 each)
