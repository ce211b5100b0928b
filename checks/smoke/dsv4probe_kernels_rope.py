"""Megatron's fused MLA RoPE (`fused_mla_rope_inplace`, a triton kernel, used with apply_rope_fusion=True) against
Megatron's own unfused path (apply_rotary_pos_emb, used with apply_rope_fusion=False), both called as the DSv4
layer calls them (Megatron-LM d48bd6be deepseek_v4_hybrid_attention.py L614-641 and L729-860):

- the rotary tables as the layer builds them: its sliding-window layers' RotaryEmbedding(qk_pos_emb_head_dim,
  rotary_percent, rotary_base) and its compressed layers' YarnRotaryEmbedding (DSv4-Flash's yarn settings, as
  Megatron-Bridge 0.6.2's provider maps them, deepseek_v4_bridge.py L409-447); the fused path reads
  get_cached_cos_sin(max_seqlen, packed_seq=True, mscale=1.0), the unfused one the table itself;
- a packed THD batch (cu_seqlens, max_seqlen of the longest sequence) of the query (T, heads, 512) and the single
  key/value head (T, 1, 512): 448 dims without position, 64 rotated;
- at CP 1 the layer's call `fused_mla_rope_inplace(x, cos, sin, qk_head_dim, qk_pos_emb_head_dim, cu_seqlens, 0, 1,
  remove_interleaving=True)` against split + `apply_rotary_pos_emb(..., mla_rotary_interleaved=True,
  mla_output_remove_interleaving=True, max_seqlen=...)` + cat; at CP > 1 (contiguous partition) each simulated
  rank's rows through cp_utils.apply_thd_cp_local_rope_fused / _unfused with the rank's global start;
- forward, and backward with one output gradient (the kernel's own backward against autograd of the unfused path).

Each comparison records max |diff|, max |diff| / max |unfused| and the relative L2 difference, against the tolerances
in dsv4probe_smoke_tolerances.py. A NaN or inf in the fused output or gradient, or a difference past tolerance, is a
fail. The negative control runs the same kernel on the same input with inverse=True (the opposite rotation): it must
fail the same comparison, else the comparison cannot discriminate and the sub-run is an error.

A part of the kernel smoke probe (dsv4probe_kernels.py), loaded by path (dsv4probe_common.load_module).
"""

import os

from dsv4probe_common import load_module  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_kernels_base", "dsv4probe_kernels_ran", "dsv4probe_smoke_tolerances"):
    load_module(_part, HERE)
# The modules just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_kernels_base import SEED, Skip, _version
from dsv4probe_kernels_ran import _named, _timed
from dsv4probe_smoke_tolerances import ROPE_MAX_ABS, ROPE_REL_L2

# DSv4-Flash's attention geometry (Megatron-Bridge 0.6.2 deepseek_v4_bridge.py L409-417): head dim 512 = 448 + 64.
HEAD_DIM, POS_DIM = 512, 64
NOPE_DIM = HEAD_DIM - POS_DIM  # the layer's config.qk_head_dim
HEADS = 64  # query heads of one TP rank (the kernel autotunes per head count: the query's and the key's single head)
MIN_ROWS = 1024  # packed rows at least: positions up to ~500 in one sequence
LENS = (23, 300, 517)  # then one sequence takes the rest; the 517-token one crosses the CP 2 rank boundary
# The two rotary tables of a DSv4 layer (deepseek_v4_hybrid_attention.py L119-150): the sliding-window-only layers'
# RotaryEmbedding (rope_theta 10000, rotary_percent) and the compressed layers' yarn (compress_rope_theta 160000,
# factor 16, original 65536, beta 32/1, mscale 1/1: DeepSeek-V4-Flash's config.json, as the bridge maps it).
WINDOW_BASE = 10000.0
YARN = {"rotary_base": 160000.0, "scaling_factor": 16.0, "original_max_position_embeddings": 65536,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
# Megatron-Bridge >= 0.5.1 sets rotary_percent = 1.0 for DSv4 (deepseek_v4_bridge.py L412-417, #4271): the generic
# partial_rotary_factor (0.125) mapping shrank the window layers' table to 8 of 64 dims, which the fused kernel then
# read past (the NaN of Megatron-Bridge #4321). The job's own value, where the request carries it, replaces it.
BRIDGE_ROTARY_PERCENT = 1.0


class CpGroup:
    """The rank and size the layer's calls read from its CP process group (`cp_group.rank()`, `.size()`): the
    ranks are simulated in one process, so no process group exists."""

    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


def unfused_config(types):
    """The fields Megatron's apply_rotary_pos_emb (rope_utils.py L640-760) and cp_utils read of the layer's config,
    as the unfused layer has them (apply_rope_fusion=False)."""
    return types.SimpleNamespace(apply_rope_fusion=False, rotary_interleaved=False, multi_latent_attention=True,
                                 mrope_section=None, mrope_interleaved=False)


def batch_layout(cp):
    """(lens, cu_seqlens as a list, total rows): the rows fill whole CP ranks exactly (no padding rows, whose
    positions the two paths clamp differently and the job masks out)."""
    total = -(-MIN_ROWS // cp) * cp
    lens = list(LENS)
    lens.append(total - sum(lens))
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return lens, cu, total


def difference(torch, got, want):
    """max |got - want|, max |got - want| / max |want|, relative L2, finiteness, and whether within tolerance."""
    a, b = got.detach().double().cpu(), want.detach().double().cpu()
    out = {"finite": bool(torch.isfinite(a).all().item()), "finite_unfused": bool(torch.isfinite(b).all().item()),
           "nan": int(torch.isnan(a).sum().item()), "inf": int(torch.isinf(a).sum().item())}
    if a.shape != b.shape:
        out.update(ok=False, why="shape %s, unfused %s" % (list(a.shape), list(b.shape)))
        return out
    if not (out["finite"] and out["finite_unfused"]):
        out.update(ok=False, why="non-finite values (NaN %d, inf %d)" % (out["nan"], out["inf"]))
        return out
    diff = (a - b).abs()
    scale = float(b.abs().max().item()) if b.numel() else 0.0
    norm = max(float(a.norm().item()), float(b.norm().item()))
    out["max_abs"] = float(diff.max().item()) if diff.numel() else 0.0
    out["max_rel"] = out["max_abs"] / scale if scale > 0 else 0.0
    out["rel_l2"] = float((a - b).norm().item()) / norm if norm > 0 else 0.0
    out["ok"] = out["max_abs"] <= ROPE_MAX_ABS and out["rel_l2"] <= ROPE_REL_L2
    if not out["ok"]:
        out["why"] = "max |diff| %.4g (tolerance %g), relative L2 %.4g (tolerance %g)" % (
            out["max_abs"], ROPE_MAX_ABS, out["rel_l2"], ROPE_REL_L2)
    return out


def _rotaries(emb_mod, rotary_percent):
    """The layer's two rotary tables, built as DSv4HybridSelfAttention.__init__ builds them (CP group: None, as a
    job without CP has; packed tables never slice per CP rank)."""
    window = emb_mod.RotaryEmbedding(POS_DIM, rotary_percent=rotary_percent, rotary_base=WINDOW_BASE)
    yarn = emb_mod.YarnRotaryEmbedding(POS_DIM, **YARN)
    return {"window": window, "compressed": yarn}


def _tables(torch, rotary, max_seqlen):
    """(cos, sin) for the fused path and the frequency table for the unfused one, as the layer reads them."""
    cos, sin = rotary.get_cached_cos_sin(max_seqlen, dtype=torch.bfloat16, packed_seq=True, mscale=1.0)
    table = rotary(max_seqlen, packed_seq=True)
    return cos, sin, (table[0] if isinstance(table, tuple) else table)


def _run_pair(torch, fused_fn, unfused_fn, x, dout):
    """Both paths on copies of x (the fused kernel works in place, on a non-leaf as in the layer), forward and
    backward with the same output gradient: ({forward, backward} differences, the unfused output)."""
    leaf_f = x.clone().requires_grad_(True)
    leaf_u = x.clone().requires_grad_(True)
    out_f, _took = _timed(torch, x.device, _named(fused_fn, "fused_mla_rope_inplace"), leaf_f.clone())
    out_u = unfused_fn(leaf_u)
    out_f.backward(dout)
    out_u.backward(dout)
    return {"forward": difference(torch, out_f, out_u), "backward": difference(torch, leaf_f.grad, leaf_u.grad)}, \
        out_u.detach()


def _calls(torch, fused, rope_utils, cp_utils, config, cu, cp, max_seqlen, tables):
    """The fused call, the unfused call and the control (the fused call with inverse=True), per CP rank (None at CP
    1), as the layer makes them: (rank, first row, fused, unfused, control)."""
    cos, sin, table = tables
    if cp == 1:
        group = CpGroup(0, 1)

        def unfused(t):
            nope, pe = torch.split(t, [NOPE_DIM, POS_DIM], dim=-1)
            pe = rope_utils.apply_rotary_pos_emb(pe, table, config=config, cu_seqlens=cu, mscale=1.0, cp_group=group,
                                                 mla_rotary_interleaved=True, mla_output_remove_interleaving=True,
                                                 max_seqlen=max_seqlen)
            return torch.cat([nope, pe], dim=-1)

        return [(None, 0, lambda t: fused(t, cos, sin, NOPE_DIM, POS_DIM, cu, 0, 1, remove_interleaving=True), unfused,
                 lambda t: fused(t, cos, sin, NOPE_DIM, POS_DIM, cu, 0, 1, inverse=True, remove_interleaving=True))]
    out = []
    rows = int(cu[-1].item()) // cp
    for rank in range(cp):
        start = rank * rows
        out.append((rank, start,
                    lambda t, s=start: cp_utils.apply_thd_cp_local_rope_fused(t, cos, sin, NOPE_DIM, POS_DIM, cu, s),
                    lambda t, s=start: cp_utils.apply_thd_cp_local_rope_unfused(t, table, NOPE_DIM, POS_DIM, cu, s,
                                                                                config),
                    lambda t, s=start: cp_utils.apply_thd_cp_local_rope_fused(t, cos, sin, NOPE_DIM, POS_DIM, cu, s,
                                                                              inverse=True)))
    return out


def run_rope(torch, device, request):
    import types

    try:
        from megatron.core.fusions import fused_mla_yarn_rope_apply as fused_mod
        from megatron.core.models.common import embeddings as emb_mod
        from megatron.core.models.common.embeddings import rope_utils
    except Exception as exc:
        raise Skip("Megatron's fused MLA RoPE does not import (%s: %s)" % (type(exc).__name__, exc), "mcore.dsv4", exc)
    fused = getattr(fused_mod, "fused_mla_rope_inplace", None)
    if fused is None or not getattr(fused_mod, "HAVE_TRITON", True):
        raise Skip("Megatron's fused_mla_rope_inplace has no triton behind it (HAVE_TRITON is false)", "kernels.triton")
    cp = max(1, int(request.get("cp") or 1))
    rotary_percent, percent_from = request.get("rotary_percent"), request.get("rotary_percent_from") or "the job"
    if not isinstance(rotary_percent, (int, float)) or isinstance(rotary_percent, bool) or not 0 < rotary_percent <= 1:
        rotary_percent, percent_from = BRIDGE_ROTARY_PERCENT, ("Megatron-Bridge >= 0.5.1's DeepSeek-V4 provider "
                                                               "(rotary_percent = 1.0, #4271)")
    cp_utils = None
    if cp > 1:
        try:
            from megatron.core.transformer.experimental_attention_variant.csa_utils import cp_utils
        except Exception as exc:
            raise Skip("Megatron's DSv4 CP helpers (csa_utils/cp_utils.py) do not import (%s: %s)"
                       % (type(exc).__name__, exc), "mcore.dsv4", exc)
    lens, cu_list, total = batch_layout(cp)
    max_seqlen = max(lens)
    cu = torch.tensor(cu_list, dtype=torch.int32, device=device)
    config = unfused_config(types)
    gen = torch.Generator().manual_seed(SEED)
    shapes = {"query": (total, HEADS, HEAD_DIM), "key": (total, 1, HEAD_DIM)}
    inputs = {k: torch.randn(v, generator=gen).to(torch.bfloat16).to(device) for k, v in shapes.items()}
    grads = {k: torch.randn(v, generator=gen).to(torch.bfloat16).to(device) for k, v in shapes.items()}
    rows = total // cp
    comparisons, control = [], None
    for kind, rotary in _rotaries(emb_mod, rotary_percent).items():
        tables = _tables(torch, rotary, max_seqlen)
        for rank, start, fused_fn, unfused_fn, control_fn in _calls(torch, fused, rope_utils, cp_utils, config, cu, cp,
                                                                    max_seqlen, tables):
            for tensor, x in inputs.items():
                xs, dout = x[start:start + rows], grads[tensor][start:start + rows]
                diffs, unfused_out = _run_pair(torch, fused_fn, unfused_fn, xs, dout)
                for direction, d in diffs.items():
                    comparisons.append(dict(d, rope=kind, tensor=tensor, direction=direction,
                                            **({"cp_rank": rank} if rank is not None else {})))
                if control is None:  # the first comparison's input, rotated the opposite way by the same kernel
                    with torch.no_grad():
                        wrong = control_fn(xs.clone())
                    control = dict(difference(torch, wrong, unfused_out), what=(
                        "the fused call with inverse=True (the opposite rotation) on the %s %s input%s, against the "
                        "unfused forward" % (kind, tensor, "" if rank is None else " of CP rank %d" % rank)))
    evidence = {"package": _version("megatron-core"), "triton": _version("triton"), "cp": cp,
                "call": "fused_mla_rope_inplace(..., cu_seqlens, 0, 1, remove_interleaving=True)" if cp == 1 else
                "cp_utils.apply_thd_cp_local_rope_fused / _unfused per contiguous CP rank",
                "shapes": {"query": [rows, HEADS, HEAD_DIM], "key": [rows, 1, HEAD_DIM], "nope_dim": NOPE_DIM,
                           "rope_dim": POS_DIM, "dtype": "bfloat16"},
                "sequence_lengths": lens, "max_seqlen": max_seqlen, "rotary_percent": rotary_percent,
                "rotary_percent_from": percent_from, "yarn": YARN, "window_rotary_base": WINDOW_BASE,
                "tolerances": {"max_abs": ROPE_MAX_ABS, "rel_l2": ROPE_REL_L2,
                               "set_from": "provisional until the GPU run (docs/gpu-runs/2026-12-07-gpu-v3)"},
                "comparisons": comparisons, "control": control}
    return verdict(comparisons, control or {"ok": True}, evidence)


def verdict(comparisons, control, evidence):
    """(status, summary, evidence) of the sub-run from its comparisons and its control."""
    evidence["control_failed_comparison"] = control_failed = not control.get("ok")
    worst = {}
    for c in comparisons:
        if c.get("max_abs") is not None:
            key = c["direction"]
            if key not in worst or c["max_abs"] > worst[key]["max_abs"]:
                worst[key] = {"max_abs": c["max_abs"], "max_rel": c["max_rel"], "rel_l2": c["rel_l2"]}
    evidence["worst"] = worst
    bad = [c for c in comparisons if not c.get("ok")]
    if bad:
        first = bad[0]
        where = "%s %s (%s rope%s)" % (first["tensor"], first["direction"], first["rope"],
                                      ", CP rank %d" % first["cp_rank"] if "cp_rank" in first else "")
        nonfinite = [c for c in bad if not c.get("finite", True)]
        what = "NaN/inf" if nonfinite and nonfinite[0] is first else "a mismatch"
        return "fail", ("the fused MLA RoPE gives %s against the unfused path: %s: %s (%d of %d comparisons failed)"
                        % (what, where, first.get("why"), len(bad), len(comparisons))), evidence
    if not control_failed:
        said = ("the negative control did not separate: the opposite rotation passed the comparison (max |diff| %s), "
                "so the comparison cannot tell a wrong RoPE" % control.get("max_abs"))
        return "error", said, evidence
    fwd, bwd = worst.get("forward", {}), worst.get("backward", {})
    return "pass", ("fused_mla_rope_inplace matches the unfused path on %d comparisons (forward max |diff| %.3g, "
                    "backward %.3g; the inverse-rotation control fails it)" % (
                        len(comparisons), fwd.get("max_abs", 0.0), bwd.get("max_abs", 0.0))), evidence
