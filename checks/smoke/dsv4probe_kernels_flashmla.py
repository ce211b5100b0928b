"""FlashMLA's flash_mla_sparse_fwd, called as Megatron d48bd6be calls it.

A part of the kernel smoke probe (dsv4probe_kernels.py), loaded by path (dsv4probe_common.load_module).
"""

import os

from dsv4probe_common import load_module  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_kernels_base", "dsv4probe_kernels_ran"):
    load_module(_part, HERE)
# The modules just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_kernels_base import SEED, Skip, _version
from dsv4probe_kernels_ran import _timed


# --------------------------------------------------------------------------------------------------------- FlashMLA

def _takes(fn, name):
    """Whether fn takes keyword `name` (True/False), or None when its signature cannot be read (a C builtin)."""
    try:
        import inspect
        params = inspect.signature(fn).parameters
    except Exception:
        return None
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def run_flashmla(torch, device, request):
    try:
        from flash_mla import flash_mla_sparse_fwd
    except Exception as exc:
        raise Skip("FlashMLA does not import (%s: %s)" % (type(exc).__name__, exc), "kernels.flash-mla", exc)
    no_topk = ("this FlashMLA's flash_mla_sparse_fwd takes no indexer_topk (a build from main, not nv_dev), which "
               "Megatron passes at every sparse attention call")
    if _takes(flash_mla_sparse_fwd, "indexer_topk") is False:
        raise Skip(no_topk, "kernels.flash-mla")
    # As Megatron d48bd6be calls it (csa_utils/fused_sparse_attention.py _csa_fwd_flash_mla, dsa_cudnn_kernels.py):
    # flat q (S_q, H, 576), kv (S_kv, 1, 576), indices (S_q, 1, TopK) int32 with TopK padded to the GPU's alignment
    # (128 on SM90, 64 on SM100), d_v 512, an f32 sink per head, topk_length None and indexer_topk=0 (the training
    # paths all pass 0; only >0 returns a fourth tensor), unpacked as (out, max_logits, lse).
    s_q, h_q, d_qk, d_v, s_kv = 4, 64, 576, 512, 128
    topk = 128 if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 10 else 64
    gen = torch.Generator().manual_seed(SEED)
    q = torch.randn(s_q, h_q, d_qk, generator=gen).to(torch.bfloat16).to(device)
    kv = torch.randn(s_kv, 1, d_qk, generator=gen).to(torch.bfloat16).to(device)
    idx = torch.randint(0, s_kv, (s_q, 1, topk), generator=gen, dtype=torch.int32).to(device)
    sink = torch.zeros(h_q, dtype=torch.float32, device=device)
    try:
        res, first = _timed(torch, device, flash_mla_sparse_fwd, q, kv, idx, d_qk ** -0.5, d_v=d_v, attn_sink=sink,
                            topk_length=None, indexer_topk=0)
    except TypeError as exc:
        if "indexer_topk" in str(exc):
            raise Skip(no_topk, "kernels.flash-mla", exc)
        raise
    ev = {"package": _version("flash-mla") or _version("flash_mla"), "indexer_topk": 0, "topk": topk,
          "expected_shape": [s_q, h_q, d_v], "jit_s": round(first, 4),
          "returned": len(res) if isinstance(res, (tuple, list)) else type(res).__name__}
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        return "fail", ("flash_mla_sparse_fwd(indexer_topk=0) returned %s, not the (out, max_logits, lse) Megatron "
                        "unpacks" % (("%d values" % len(res)) if isinstance(res, (tuple, list)) else
                                     type(res).__name__)), ev
    out, _max_logits, lse = res
    ev.update(shape=list(out.shape), lse_shape=list(lse.shape))
    if list(out.shape) != [s_q, h_q, d_v]:
        return "fail", "flash_mla_sparse_fwd returned shape %s, not %s" % (list(out.shape), [s_q, h_q, d_v]), ev
    if list(lse.shape) != [s_q, h_q]:  # Megatron slices lse[:, :heads]
        return "fail", "flash_mla_sparse_fwd returned an lse of shape %s, not %s" % (list(lse.shape), [s_q, h_q]), ev
    if not bool(torch.isfinite(out.float()).all().item()) or not bool(torch.isfinite(lse.float()).all().item()):
        return "fail", "flash_mla_sparse_fwd returned non-finite output", ev
    return "pass", ("flash_mla_sparse_fwd(indexer_topk=0), called as Megatron calls it, returns (out, max_logits, "
                    "lse), finite and of the right shapes"), ev
