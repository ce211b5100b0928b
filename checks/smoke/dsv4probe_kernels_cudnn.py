"""The cuDNN frontend's kernels: the DSA indexer forward per contiguous CP rank, and the fused CSA compressor.

A part of the kernel smoke probe (dsv4probe_kernels.py), loaded by path (dsv4probe_common.load_module).
"""

import os

from dsv4probe_common import load_module  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4ref", "dsv4probe_kernels_base", "dsv4probe_kernels_ran"):
    load_module(_part, HERE)
# The modules just loaded by path, read from sys.modules (never looked up on sys.path):
import dsv4ref as ref
from dsv4probe_kernels_base import (HEAD_DIM, HEADS, RATIO, ROWS_PER_RANK, SCORE_TOLERANCE, SEED, Skip, _stack_versions,
                                    _version, layout)
from dsv4probe_kernels_ran import _timed


# ------------------------------------------------------------------------------------------------- the DSA indexer

def run_dsa(torch, device, request):
    try:
        import cudnn
    except ImportError as exc:
        raise Skip("the cuDNN frontend does not import (%s)" % exc, "cudnn-fe.version", exc)
    try:
        wrapper = cudnn.DSA.indexer_forward_wrapper
    except Exception as exc:
        raise Skip("cudnn.DSA.indexer_forward_wrapper does not resolve (%s: %s)" % (type(exc).__name__, exc),
                   "cudnn-fe.dsa", exc)
    n_ranks = max(2, int(request.get("cp", 1)))  # a crossing sequence with a nonzero offset exists even at CP 1
    lens, cu, total = layout(n_ranks)
    cu_comp = ref.cumsum([n // RATIO for n in lens])
    max_q = max(lens)
    max_k = max_q // RATIO
    gen = torch.Generator().manual_seed(SEED)
    q_all = torch.randn(total, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    k_all = torch.randn(cu_comp[-1], 1, HEAD_DIM, generator=gen).to(torch.bfloat16)
    w_all = (torch.rand(total, HEADS, generator=gen) * HEADS ** -0.5).to(torch.bfloat16)
    k_dev = k_all.to(device)
    ev = {"frontend": getattr(cudnn, "__version__", None) or _version("nvidia-cudnn-frontend"),
          "packages": _stack_versions(),
          "kernel": "cudnn.DSA.indexer_forward_wrapper", "shapes": {"q": [ROWS_PER_RANK, HEADS, HEAD_DIM],
          "k": list(k_all.shape), "w": [ROWS_PER_RANK, HEADS]}, "ratio": RATIO, "sequence_lengths": lens,
          "ranks_simulated": n_ranks, "rows_per_rank": ROWS_PER_RANK, "max_seqlen_q": max_q, "max_seqlen_k": max_k,
          "ranks": []}
    worst, mismatches, control = 0.0, [], None
    for r in range(n_ranks):
        gs = r * ROWS_PER_RANK
        cu_q, cu_k, offsets = ref.indexer_layout(cu, gs, ROWS_PER_RANK, cu_comp)
        q, w = q_all[gs:gs + ROWS_PER_RANK], w_all[gs:gs + ROWS_PER_RANK]
        args = dict(ratio=RATIO, cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32, device=device),
                    cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32, device=device), max_seqlen_q=max_q,
                    max_seqlen_k=max_k)
        offs = torch.tensor(offsets, dtype=torch.int32, device=device)
        qd, wd = q.to(device), w.to(device)
        out, first = _timed(torch, device, wrapper, qd, k_dev, wd, q_causal_offsets=offs, **args)
        out, steady = _timed(torch, device, wrapper, qd, k_dev, wd, q_causal_offsets=offs, **args)
        got = out["scores"].float().cpu()[:, :max_k]
        want = ref.indexer_scores(torch, q, k_all, w, cu_q, cu_k, offsets, RATIO, max_k)
        nan = bool(torch.isnan(got).any().item())
        same_mask = bool(torch.equal(torch.isinf(got), torch.isinf(want)))
        finite = torch.isfinite(want) & torch.isfinite(got)
        err = float((got[finite] - want[finite]).abs().max().item()) if finite.any() else 0.0
        worst = max(worst, err)
        row = {"rank": r, "global_rows": [gs, gs + ROWS_PER_RANK], "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k,
               "q_causal_offsets": offsets, "first_call_s": round(first, 4), "steady_s": round(steady, 5),
               "max_abs_error": err, "masks_identical": same_mask, "nan": nan,
               "finite_scores": int(torch.isfinite(want).sum().item())}
        if nan or not same_mask or err > SCORE_TOLERANCE:
            mismatches.append(row)
        if control is None and any(o > 0 for o in offsets):
            # Zeros, not None: the frontend's compile key includes whether offsets are given.
            zero = torch.zeros_like(offs)
            ctl = wrapper(qd, k_dev, wd, q_causal_offsets=zero, **args)["scores"].float().cpu()[:, :max_k]
            control = {"rank": r, "offsets": offsets, "finite_with_offsets": row["finite_scores"],
                       "finite_with_zero_offsets": int(torch.isfinite(ctl).sum().item()),
                       "masks_differ": not bool(torch.equal(torch.isinf(ctl), torch.isinf(got)))}
            row["control"] = control
        ev["ranks"].append(row)
    ev.update(max_abs_error=worst, tolerance=SCORE_TOLERANCE, control=control,
              jit_s=ev["ranks"][0]["first_call_s"], steady_s=ev["ranks"][0]["steady_s"])
    if mismatches:
        bad = mismatches[0]
        what = "NaN scores" if bad["nan"] else ("a different -inf mask" if not bad["masks_identical"] else
                                                "scores off by %.3g (> %g)" % (bad["max_abs_error"], SCORE_TOLERANCE))
        return "fail", ("the DSA indexer forward gives %s on CP rank %d of %d (q_causal_offsets %s)"
                        % (what, bad["rank"], n_ranks, bad["q_causal_offsets"])), ev
    if control is None or not control["masks_differ"]:
        return "error", ("the negative control did not separate: with zero q_causal_offsets the indexer gives the "
                         "same mask, so this comparison cannot tell right from wrong"), ev
    return "pass", ("DSA indexer forward matches the float32 reference on %d contiguous CP ranks (max |err| %.1e, "
                    "identical -inf masks, no NaN; zero offsets change %d -> %d finite scores)"
                    % (n_ranks, worst, control["finite_with_offsets"], control["finite_with_zero_offsets"])), ev


# ------------------------------------------------------------------------------------- the fused CSA compressor

def run_csa(torch, device, request):
    if device.type == "cuda" and tuple(torch.cuda.get_device_capability(device)) != (10, 0):
        # The profile may be for a B200 (--gpu-arch 10.0) while this host has another GPU: run what it supports.
        raise Skip("the fused CSA compressor runs only on CC 10.0; this GPU is %d.%d, so this sub-run follows the "
                   "visible GPU, not the profile" % tuple(torch.cuda.get_device_capability(device)))
    try:
        from cudnn.csa import compressor
        fwd = compressor.csa_compressor_forward_wrapper
    except Exception as exc:
        raise Skip("cudnn.csa does not load (%s: %s)" % (type(exc).__name__, exc), "cudnn-fe.csa", exc)
    ratio, head_dim, coff = 4, 128, 2
    lens = [12, 37, 64, 9]
    cu = ref.cumsum(lens)
    cu_comp = ref.cumsum([n // ratio for n in lens])
    gen = torch.Generator().manual_seed(SEED)
    kv = torch.randn(cu[-1], coff * head_dim, generator=gen).to(torch.bfloat16)
    score = torch.randn(cu[-1], coff * head_dim, generator=gen).to(torch.bfloat16)
    ape = torch.randn(ratio, coff * head_dim, generator=gen)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
    cu_comp_t = torch.tensor(cu_comp, dtype=torch.int32, device=device)
    kw = dict(ratio=ratio, head_dim=head_dim, coff=coff, total_comp=cu_comp[-1])  # as Megatron's fused_compressor.py
    args = (kv.to(device), score.to(device), ape.to(device), cu_t, cu_comp_t)
    out, first = _timed(torch, device, fwd, *args, **kw)
    _, steady = _timed(torch, device, fwd, *args, **kw)
    got = out["out"].float().cpu().reshape(cu_comp[-1], head_dim)
    want = ref.csa_compress(torch, kv, score, ape, cu, ratio, head_dim, coff)
    err = float((got - want).abs().max().item()) if got.numel() else 0.0
    # The negative control, on the kernel: without the position embedding its output must change (a kernel that keeps
    # a cached result, or ignores an input, cannot be told apart from a right one otherwise).
    zero = fwd(args[0], args[1], torch.zeros_like(args[2]), cu_t, cu_comp_t, **kw)["out"].float().cpu()
    zero = zero.reshape(cu_comp[-1], head_dim)
    ev = {"frontend": _version("nvidia-cudnn-frontend"),
          "kernel": "cudnn.csa.compressor.csa_compressor_forward_wrapper",
          "ratio": ratio, "head_dim": head_dim, "coff": coff, "sequence_lengths": lens, "max_abs_error": err,
          "tolerance": 2e-2, "jit_s": round(first, 4), "steady_s": round(steady, 5),
          "control_error": float((got - zero).abs().max().item()) if got.numel() else 0.0}
    if not bool(torch.isfinite(got).all().item()):
        return "fail", "the fused CSA compressor gives non-finite output", ev
    if err > 2e-2:
        return "fail", "the fused CSA compressor differs from the eager reference by %.3g (> 0.02)" % err, ev
    if ev["control_error"] <= 2e-2:
        return "error", ("the negative control did not separate: without the position embedding the fused CSA "
                         "compressor gives the same output, so this comparison cannot tell right from wrong"), ev
    return "pass", ("the fused CSA compressor matches the eager reference (max |err| %.1e; zeroing the position "
                    "embedding changes it by %.2f)" % (err, ev["control_error"])), ev
