"""The kernel smoke probe: one of the DSv4 stack's own CP kernels, called the way Megatron calls it, against an
independent float32/int reference (dsv4ref.py), with a negative control that proves the comparison can fail.

Sub-runs (the request's "subrun"; each runs in its own probe process, so a crash in one costs only that one):
  dsa       the cuDNN frontend's DSA indexer forward (cudnn.DSA.indexer_forward_wrapper), THD with q_causal_offsets,
            laid out per contiguous CP rank as Megatron's cp_utils._build_cp_indexer_layout does; at least 2 ranks.
  layout    Megatron's CuTe-DSL CP layout kernels (csa_utils/cp_layout_kernels.py, loaded by file path without
            importing megatron.core): CompressorInputCompact forward and backward, build_attention_indices.
  csa       the frontend's fused CSA compressor (cudnn.csa.compressor), forward.
  flashmla  FlashMLA's flash_mla_sparse_fwd called as Megatron d48bd6be calls it (indexer_topk=0), unpacked as
            (out, max_logits, lse): finite, right shapes; without indexer_topk (a build from main) a skip.
  rope      Megatron's fused MLA RoPE (fused_mla_rope_inplace, triton) against its unfused apply_rotary_pos_emb path,
            called as the DSv4 layer calls them (CP 1; per contiguous CP rank through cp_utils at CP > 1), forward
            and backward, with an inverse-rotation control (dsv4probe_kernels_rope.py).

Answer: {"status": pass|fail|error|skip, "summary": ..., "rule": ..., "package": ..., "evidence": {...},
"error": {...}}. A missing entry point is a skip; "rule" names the rule that reports it where this probe knows, and
"error" (with "missing_module" for an ImportError) lets the doctor pick the rule of a missing module (the mapping tier 2
uses, kept doctor-side). An entry point that raises is a fail naming the exception. On the CPU (--device cpu) the same
entry points get CPU tensors: the real kernels refuse them ("needs CUDA", a skip), CPU stand-ins with the upstream
signatures compute, which is how the whole path is tested without a GPU.
Its dispatch (dsv4probe_kernels_dispatch) and its parts, loaded by path: dsv4probe_kernels_base (the layout, the skip),
_ran (what ran, the CuTe DSL cache), _cudnn (dsa, csa), _layout, _flashmla, _rope; dsv4probe_device and
dsv4probe_files are shared with the smoke probe.
Stdlib besides torch (and the stack under test). Run as `python dsv4probe_kernels.py OUT REQUEST_FILE`.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_kernels_dispatch", HERE).answer)
