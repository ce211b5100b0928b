"""The smoke's tier 1 maths: the packed THD batch, its unsharded float32 reference, the per-rank attention, the
comparison with its zigzag negative control, and the N ranks simulated in one process.

A part of the smoke probe (dsv4probe_smoke.py), loaded by path (dsv4probe_common.load_module).
"""

import os
import time

from dsv4probe_common import cut_text, load_module  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
load_module("dsv4probe_device", HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_device import sync


TOLERANCE = 2e-2  # max abs error for bf16 inputs and outputs of magnitude <= ~1 (bf16 has 8 significant bits)
NEGATIVE_MIN = 10 * TOLERANCE  # the zigzag re-assembly must be off by at least this much
ROWS_PER_RANK = 128
WINDOW = 16  # DSv4 csa_window_size semantics: W keys including the diagonal -> window_size=(W-1, 0)
HEADS, HEAD_DIM = 4, 64
SEED = 1234


# ----------------------------------------------------------------------------------------------------------- batch

def sequence_lengths(cp, rows_per_rank=ROWS_PER_RANK):
    total = cp * rows_per_rank
    lens = [7]  # shorter than the window
    if cp > 1:
        lens.append(rows_per_rank + 37)  # starts on rank 0, crosses its boundary, spans more than one rank
    cycle = [53, 29, 71, 41, 88, 33, 60]
    i = 0
    while sum(lens) + cycle[i % len(cycle)] <= total - 5:  # keep some tail padding
        lens.append(cycle[i % len(cycle)])
        i += 1
    return lens, total


def make_batch(torch, cp, device):
    lens, total = sequence_lengths(cp)
    gen = torch.Generator().manual_seed(SEED)
    real = sum(lens)
    qkv = []
    for _ in range(3):
        x = torch.randn(total, HEADS, HEAD_DIM, generator=gen)
        x[real:] = 0  # tail padding
        qkv.append(x.to(torch.bfloat16).to(device))
    bounds, s = [], 0
    for n in lens:
        bounds.append((s, s + n))
        s += n
    return {"lens": lens, "total": total, "real": real, "bounds": bounds, "q": qkv[0], "k": qkv[1], "v": qkv[2]}


def reference(torch, batch, kind):
    """Unsharded float32 attention, one sequence at a time, from the same bf16 inputs.

    On the CPU: independent of the GPU kernels under test, and it spares the GPU a cuBLAS initialisation."""
    q, k, v = (batch[n].float().cpu() for n in ("q", "k", "v"))
    out = torch.zeros_like(q)
    scale = HEAD_DIM ** -0.5
    for s, e in batch["bounds"]:
        n = e - s
        scores = torch.einsum("ihd,jhd->hij", q[s:e], k[s:e]) * scale
        i = torch.arange(n, device=q.device).view(-1, 1)
        j = torch.arange(n, device=q.device).view(1, -1)
        allowed = j <= i
        if kind == "window":
            allowed = allowed & (j > i - WINDOW)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[s:e] = torch.einsum("hij,jhd->ihd", scores.softmax(-1), v[s:e])
    return out


# --------------------------------------------------------------------------------------------------------- kernels

class Attention:
    """torch's variable-length kernel where it runs, else SDPA per segment with an explicit bottom-right mask."""

    def __init__(self, torch, device):
        self.torch = torch
        self.varlen = None
        self.fallback_reason = None
        self.backend = {}
        if device.type != "cuda":
            self.fallback_reason = "varlen_attn has no CPU kernel"
            return
        try:
            from torch.nn.attention.varlen import varlen_attn
            self.varlen = varlen_attn
        except ImportError as exc:
            self.fallback_reason = "torch.nn.attention.varlen unavailable (%s)" % exc

    def __call__(self, kind, q, k, v, cu_q, cu_k, max_q, max_k):
        window = (-1, 0) if kind == "causal" else (WINDOW - 1, 0)
        if self.varlen is not None:
            try:
                out = self.varlen(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window)
                self.backend[kind] = self._varlen_name()
                return out
            except (NotImplementedError, RuntimeError) as exc:  # NotImplementedError: no kernel for this device
                self.varlen = None
                self.fallback_reason = "varlen_attn failed: %s: %s" % (type(exc).__name__, cut_text(str(exc), 200))
        self.backend[kind] = "sdpa per segment, explicit bottom-right mask (%s)" % self.fallback_reason
        return self._sdpa(kind, q, k, v, cu_q.tolist(), cu_k.tolist())

    def _varlen_name(self):
        try:
            impl = self.torch.nn.attention.current_flash_attention_impl()
        except Exception:
            impl = None
        return "torch.nn.attention.varlen.varlen_attn (%s)" % (impl or "built-in FlashAttention-2")

    def _sdpa(self, kind, q, k, v, cu_q, cu_k):
        torch = self.torch
        outs = []
        for a in range(len(cu_q) - 1):
            qs, qe, ks, ke = cu_q[a], cu_q[a + 1], cu_k[a], cu_k[a + 1]
            nq, nk = qe - qs, ke - ks
            i = torch.arange(nq, device=q.device).view(-1, 1) + (nk - nq)  # bottom-right: last query sees last key
            j = torch.arange(nk, device=q.device).view(1, -1)
            mask = j <= i
            if kind == "window":
                mask = mask & (j > i - WINDOW)
            o = torch.nn.functional.scaled_dot_product_attention(
                q[qs:qe].transpose(0, 1), k[ks:ke].transpose(0, 1), v[ks:ke].transpose(0, 1), attn_mask=mask)
            outs.append(o.transpose(0, 1))
        return torch.cat(outs) if outs else q[:0]


def rank_segments(batch, rank, rows):
    lo, hi = rank * rows, (rank + 1) * rows
    return lo, hi, [(s, e, max(s, lo), min(e, hi)) for s, e in batch["bounds"] if s < hi and e > lo]


def rank_forward(torch, attention, batch, kind, rank, rows, keys, values, key_offset):
    """One rank's output rows [lo, hi) given the keys/values it holds (global rows from key_offset on)."""
    lo, hi, segs = rank_segments(batch, rank, rows)
    q = batch["q"]
    out = torch.zeros(rows, HEADS, HEAD_DIM, dtype=q.dtype, device=q.device)
    if not segs:
        return out
    k_parts, v_parts, cu_q, cu_k = [], [], [0], [0]
    for s, _e, qs, qe in segs:
        ks = s if kind == "causal" else max(s, qs - (WINDOW - 1))
        k_parts.append(keys[ks - key_offset:qe - key_offset])
        v_parts.append(values[ks - key_offset:qe - key_offset])
        cu_q.append(cu_q[-1] + qe - qs)
        cu_k.append(cu_k[-1] + qe - ks)
    q_local = q[segs[0][2]:segs[-1][3]]
    dev = q.device
    cu_q_t = torch.tensor(cu_q, dtype=torch.int32, device=dev)
    cu_k_t = torch.tensor(cu_k, dtype=torch.int32, device=dev)
    max_q = max(b - a for a, b in zip(cu_q, cu_q[1:], strict=False))
    max_k = max(b - a for a, b in zip(cu_k, cu_k[1:], strict=False))
    o = attention(kind, q_local.contiguous(), torch.cat(k_parts).contiguous(), torch.cat(v_parts).contiguous(),
                  cu_q_t, cu_k_t, max_q, max_k)
    out[segs[0][2] - lo:segs[-1][3] - lo] = o
    return out


def zigzag_reassembly(torch, out, cp):
    """Read the contiguous per-rank blocks as if each rank held zigzag chunks r and 2N-1-r."""
    n = max(cp, 2)
    chunk = out.shape[0] // (2 * n)
    placed = [None] * (2 * n)
    for r in range(n):
        block = out[r * 2 * chunk:(r + 1) * 2 * chunk]
        placed[r], placed[2 * n - 1 - r] = block[:chunk], block[chunk:]
    return torch.cat(placed)


def compare(torch, out, ref, real):
    got = out[:real].float().cpu()
    return {
        "finite": bool(torch.isfinite(got).all().item()),
        "max_abs_error": float((got - ref[:real]).abs().max().item()),
    }


def judge(torch, out, ref, real, cp):
    """Finite, within tolerance of the reference, and the zigzag re-assembly of the same outputs is far off."""
    result = compare(torch, out, ref, real)
    result["tolerance"] = TOLERANCE
    result["negative_control_zigzag_error"] = compare(torch, zigzag_reassembly(torch, out, cp), ref,
                                                      real)["max_abs_error"]
    result["ok"] = (result["finite"] and result["max_abs_error"] <= TOLERANCE
                    and result["negative_control_zigzag_error"] >= NEGATIVE_MIN)
    return result


# ------------------------------------------------------------------------------------------------------------ tier 1

def tier1_simulated(torch, device, cp):
    """All N ranks in this process; the keys/values each holds are what an all-gather would give it."""
    batch = make_batch(torch, cp, device)
    attention = Attention(torch, device)
    rows = batch["total"] // cp
    result = {"shape": {"total_rows": batch["total"], "real_rows": batch["real"], "rows_per_rank": rows,
                        "sequence_lengths": batch["lens"], "heads": HEADS, "head_dim": HEAD_DIM, "window": WINDOW,
                        "dtype": "bfloat16"},
              "comparisons": {}, "backend": attention.backend, "outputs": {}}
    t0 = time.monotonic()
    rank_forward(torch, attention, batch, "causal", 0, rows, batch["k"], batch["v"], 0)  # first kernel call
    sync(torch, device)
    result["first_call_s"] = round(time.monotonic() - t0, 4)
    t1 = time.monotonic()
    refs = {kind: reference(torch, batch, kind) for kind in ("causal", "window")}
    # The window must change the answer, or comparing it would prove nothing.
    window_effect = float((refs["window"] - refs["causal"])[:batch["real"]].abs().max().item())
    for kind in ("causal", "window"):
        ref = refs[kind]
        out = torch.cat([rank_forward(torch, attention, batch, kind, r, rows, batch["k"], batch["v"], 0)
                         for r in range(cp)])
        cmp_ = judge(torch, out, ref, batch["real"], cp)
        if kind == "window":
            cmp_["reference_window_vs_causal"] = window_effect
            cmp_["ok"] = cmp_["ok"] and window_effect >= NEGATIVE_MIN
        result["comparisons"][kind] = cmp_
        result["outputs"][kind] = out
    sync(torch, device)
    result["compute_s"] = round(time.monotonic() - t1, 4)
    return result, batch


def per_rank_errors(torch, out, ref, real, rows, cp):
    """Each CP rank's own rows [r*L, (r+1)*L) of the gathered output against the reference (padding left out)."""
    result = []
    for r in range(cp):
        lo, hi = r * rows, min((r + 1) * rows, real)
        if hi <= lo:
            result.append({"rows": [r * rows, (r + 1) * rows], "finite": True, "max_abs_error": 0.0})
            continue
        cmp_ = compare(torch, out[lo:hi], ref[lo:hi], hi - lo)
        result.append(dict(cmp_, rows=[r * rows, (r + 1) * rows]))
    return result
