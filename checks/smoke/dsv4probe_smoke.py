"""The smoke forward: a contiguous-CP THD attention run compared with an unsharded float32 reference.

Tier 1 (torch only). A packed bf16 THD batch of uneven sequences (one shorter than the window, one crossing a rank
boundary and spanning more than one rank), padded so the total divides by the CP size N. Rank r owns rows
[r*L, (r+1)*L). Each rank attends its local queries to the keys/values an all-gather gives it, for full causal and
causal sliding-window attention (the window needs the W-1 boundary rows of the previous rank), with torch's
variable-length kernel (`varlen_attn`) where it runs, else SDPA per segment with an explicit bottom-right mask.
The per-rank outputs, concatenated in rank order, must match the reference within the bf16 tolerance; re-assembled
as if the layout were zigzag they must not (the negative control proves the comparison can fail).
On one device the N ranks are simulated; with N processes (NCCL on N GPUs, gloo on the CPU) they are real, and in
fleet mode each of N consecutive fleet ranks' probes is one of them (fleet_run).

Tier 2 (--deep: the request's "tier2"; when Megatron-core with dsv4_hybrid imports). The smallest DSv4 hybrid
attention layer on THD input with PackedSeqParams(qkv_format="thd", cp_partition_mode="contiguous"): CP=1 in this
process; CP=N in the N processes, compared with the CP=1 output of the same weights and inputs; and the fused build
against the unfused one. At the default level (the request's "level") no tier 2 runs: the answer only says whether
the DSv4 attention file is there (dsv4_layer_found).

Its dispatch, dsv4probe_smoke_dispatch: the request says whether it is the smoke, one rank of its multi-process run
(`worker`: dsv4probe_smoke_ranks) or one of tier 2's builds (`tier2_build`: dsv4probe_smoke_fused). Its parts,
loaded by path: dsv4probe_smoke_batch (tier 1's batch and reference maths), _ranks (the multi-rank harness), _fleet
(CP groups across fleet ranks), _tier2, _tolerances and _fused (the fused-vs-unfused builds); dsv4probe_device and
dsv4probe_files are shared with the kernel smoke.
Stdlib besides torch (and Megatron for tier 2). Run as `python dsv4probe_smoke.py OUT REQUEST_FILE`.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_smoke_dispatch", HERE).answer)
