"""Independent references for the DSv4 stack's own CP kernels, written from their documented semantics (the cuDNN
frontend's indexer docstring and mask code, Megatron's cp_utils/cp_layout_kernels docstrings and unit-test
semantics), never by calling the kernel under test. Used by the kernel smoke probe; torch only, Python 3.8+.

Contiguous CP: the padded packed THD buffer of T rows is split into P ranks of L = T / P rows; rank r owns global
rows [r*L, (r+1)*L).
"""

import math


def cumsum(values):
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


# --------------------------------------------------------------------------------------------- the DSA indexer

def indexer_layout(cu, global_start, local_rows, cu_comp):
    """Megatron's per-rank arguments for the frontend's indexer (cp_utils._build_cp_indexer_layout):
    one query segment per sequence (this rank's slice of it, possibly empty), each with the sequence's full
    compressed keys, plus a trailing padding segment with no keys; q_causal_offsets[b] is the position inside its
    sequence of the segment's first local query (0 for an empty segment and for the padding segment)."""
    ge = global_start + local_rows
    q_lens, offsets = [], []
    for b in range(len(cu) - 1):
        start, end = max(cu[b], global_start), min(cu[b + 1], ge)
        n = max(0, end - start)
        q_lens.append(n)
        offsets.append(start - cu[b] if n > 0 else 0)
    padding = max(0, ge - max(cu[-1], global_start))
    cu_q = cumsum(q_lens)
    cu_q.append(cu_q[-1] + padding)
    cu_k = list(cu_comp) + [cu_comp[-1]]
    return cu_q, cu_k, offsets + [0]


def indexer_scores(torch, q, k, w, cu_q, cu_k, offsets, ratio, max_k, sm_scale=1.0):
    """scores[t, j] = sm_scale * sum_h relu(q[t,h] . k[cu_k[b]+j]) * w[t,h] in float32, for key j of the query's
    segment b when j < min(S_k[b], (offsets[b] + i + 1) // ratio) with i the query's index in its segment; -inf
    elsewhere (columns up to max_k)."""
    qf, kf, wf = q.float().cpu(), k.float().cpu()[:, 0, :], w.float().cpu()
    out = torch.full((q.shape[0], max_k), float("-inf"))
    for b in range(len(cu_q) - 1):
        k0, k1 = cu_k[b], cu_k[b + 1]
        for t in range(cu_q[b], cu_q[b + 1]):
            limit = min(k1 - k0, (offsets[b] + (t - cu_q[b]) + 1) // ratio, max_k)
            if limit <= 0:
                continue
            dots = torch.relu(torch.einsum("hd,jd->hj", qf[t], kf[k0:k0 + limit]))
            out[t, :limit] = sm_scale * (dots * wf[t][:, None]).sum(0)
    return out


# ------------------------------------------------------------------------------------- the CP layout kernels

def compressed_groups(cu, global_start, local_rows, ratio, d_comp):
    """The compressed groups a rank's compressor sees, in order (sequence ascending, then group ascending): a
    sequence counts when it overlaps the rank's rows; its groups start at the first whose first token is at or after
    global_start - d_comp and end at the last complete group within min(sequence end, rank end)."""
    ge = global_start + local_rows
    groups = []
    for s in range(len(cu) - 1):
        a, b = cu[s], cu[s + 1]
        if max(a, global_start) >= min(b, ge):
            continue
        first = -(-max(0, global_start - d_comp - a) // ratio)
        stop = min((min(b, ge) - a) // ratio, (b - a) // ratio)
        groups += [(s, g) for g in range(first, max(first, stop))]
    return groups


def compact_capacity(local_rows, ratio, d_comp):
    """Megatron's slot count: (L + d_comp) // ratio, rounded up to a multiple of 32 // gcd(32, ratio)."""
    cap = max(1, (local_rows + d_comp) // ratio)
    align = 32 // math.gcd(32, ratio)
    return -(-cap // align) * align


def compressor_input_compact(torch, hidden, boundary, cu, global_start, ratio, d_comp, c_cap):
    """(hidden_compact, comp_ids): each visible group's `ratio` source rows (from boundary for rows before
    global_start, where boundary row j is global row global_start - d_window + j), then zero rows; comp_ids holds each
    slot's per-sequence group id, -1 for unused slots."""
    d_window = boundary.shape[0]
    groups = compressed_groups(cu, global_start, hidden.shape[0], ratio, d_comp)[:c_cap]
    rows = []
    for s, g in groups:
        for t in range(ratio):
            tok = cu[s] + g * ratio + t
            rows.append(boundary[tok - (global_start - d_window)] if tok < global_start else hidden[tok - global_start])
    compact = torch.zeros((c_cap * ratio,) + tuple(hidden.shape[1:]), dtype=hidden.dtype)
    if rows:
        compact[:len(rows)] = torch.stack([r.cpu() for r in rows])
    ids = torch.full((c_cap,), -1, dtype=torch.int32)
    for k, (_, g) in enumerate(groups):
        ids[k] = g
    return compact, ids


def compressor_input_compact_grad(torch, grad_compact, local_rows, d_window, cu, global_start, ratio, d_comp, c_cap):
    """The adjoint of the gather: every source row gets its compact row's gradient, or zeros."""
    groups = compressed_groups(cu, global_start, local_rows, ratio, d_comp)[:c_cap]
    g_local = torch.zeros((local_rows,) + tuple(grad_compact.shape[1:]), dtype=grad_compact.dtype)
    g_boundary = torch.zeros((d_window,) + tuple(grad_compact.shape[1:]), dtype=grad_compact.dtype)
    grad = grad_compact.cpu()
    for k, (s, g) in enumerate(groups):
        for t in range(ratio):
            tok = cu[s] + g * ratio + t
            if tok < global_start:
                g_boundary[tok - (global_start - d_window)] = grad[k * ratio + t]
            else:
                g_local[tok - global_start] = grad[k * ratio + t]
    return g_local, g_boundary


def seq_to_rank_row(cu, cu_comp, local_rows, cp, ratio, d_comp, c_cap):
    """Where sequence-major compressed row `logical` lives in the all-gathered rank-major buffer: the rank that holds
    the group's last token, at its slot (counted from the first group that rank sees); -1 past the last group."""
    n_rows = local_rows * cp // ratio
    first_logical = []
    for r in range(cp):
        start = r * local_rows
        s = max(0, min(len(cu) - 2, max(i for i in range(len(cu) - 1) if cu[i] <= start)))
        first_logical.append(cu_comp[s] + -(-max(0, start - d_comp - cu[s]) // ratio))
    out = [-1] * n_rows
    for s in range(len(cu) - 1):
        for g in range(cu_comp[s + 1] - cu_comp[s]):
            logical = cu_comp[s] + g
            if logical >= n_rows:
                continue
            owner = min(max((cu[s] + (g + 1) * ratio - 1) // local_rows, 0), cp - 1)
            out[logical] = owner * c_cap + (logical - first_logical[owner])
    return out


def attention_indices(cu, cu_comp, global_start, local_rows, d_window, window, ratio, width, row_map, base,
                      topk=None):
    """build_attention_indices, modes 0 (topk given: compacted valid ids) and 1 (topk None: every visible compressed
    row, an invalid one kept as -1 in place): per local row the window (positions q-window+1..q within the sequence,
    as index pos - global_start + d_window), then compressed rows as base + row_map[cu_comp[s] + id]. A padding row
    (past the last sequence) is [0, -1, ...] with length 1."""
    rows, lengths = [], []
    total = window + width
    for r in range(local_rows):
        q = global_start + r
        seq = next((s for s in range(len(cu) - 1) if cu[s] <= q < cu[s + 1]), None)
        if seq is None:
            rows.append([0] + [-1] * (total - 1))
            lengths.append(1)
            continue
        cs, clen = cu_comp[seq], cu_comp[seq + 1] - cu_comp[seq]
        ws = max(q - window + 1, cu[seq])
        row = [pos - global_start + d_window for pos in range(ws, q + 1)]
        if topk is None:
            count = min((q - cu[seq] + 1) // ratio, width, clen) if ratio > 1 and width > 0 else 0
            for j in range(count):
                m = _mapped(j, cs, clen, row_map, base)
                row.append(-1 if m is None else m)
        else:
            for comp_id in topk[r]:
                m = _mapped(comp_id, cs, clen, row_map, base)
                if m is not None:
                    row.append(m)
        lengths.append(len(row))
        rows.append(row + [-1] * (total - len(row)))
    return rows, lengths


def _mapped(comp_id, cs, clen, row_map, base):
    """A sequence-local compressed id's index in the attention's KV space, or None when it maps nowhere."""
    if 0 <= comp_id < clen and cs + comp_id < len(row_map) and row_map[cs + comp_id] >= 0:
        return base + row_map[cs + comp_id]
    return None


# ------------------------------------------------------------------------------------ the CSA compressor (CC 10.0)

def csa_compress(torch, kv, score, ape, cu, ratio, head_dim, coff):
    """Megatron's eager CSA compressor (csa.py _forward_thd): per complete group of `ratio` rows, add the absolute
    position embedding to the score; with coff == 2 prepend the previous group's first head_dim channels (zeros for
    kv and -inf for the score at a sequence's first group) to this group's second head_dim channels; softmax over the
    window in float32, weighted sum of kv. Returns (total_comp, head_dim) float32."""
    kvf, sf, apef = kv.float().cpu(), score.float().cpu(), ape.float().cpu()
    outs = []
    for s in range(len(cu) - 1):
        n_groups = (cu[s + 1] - cu[s]) // ratio
        prev = None
        for g in range(n_groups):
            rows = slice(cu[s] + g * ratio, cu[s] + (g + 1) * ratio)
            kv_g, sc_g = kvf[rows], sf[rows] + apef
            if coff == 2:
                if prev is None:
                    prev_kv = torch.zeros(ratio, head_dim)
                    prev_sc = torch.full((ratio, head_dim), float("-inf"))
                else:
                    prev_kv, prev_sc = prev[0][:, :head_dim], prev[1][:, :head_dim]
                window_kv = torch.cat([prev_kv, kv_g[:, head_dim:]])
                window_sc = torch.cat([prev_sc, sc_g[:, head_dim:]])
                prev = (kv_g, sc_g)
            else:
                window_kv, window_sc = kv_g, sc_g
            outs.append((torch.softmax(window_sc, 0) * window_kv).sum(0))
    return torch.stack(outs) if outs else torch.zeros(0, head_dim)
