"""The cuDNN frontend's DSA wrappers as the installed Megatron calls them: the modules that call them (read with ast),
the list used when those cannot be read, the ones Megatron requires q_causal_offsets on (the dense-loss ones only when
the job trains the dense indexer loss), and the probe that resolves them."""

from __future__ import annotations

from dsv4_doctor.api import Profile, StaticFacts, import_probe

from ._upstream import EAV

EAV_MOD = EAV.replace("/", ".").rstrip(".")
# The Megatron modules that call the frontend's DSA wrappers (d48bd6be; csa_kernels is the name before 1c44a570).
# Where Megatron calls the frontend's DSA wrappers: d48bd6be's files, and dsa_kernels.py of fd1121b8 (the commit verl's
# DSv4 example was tested with; it calls compactify_wrapper and sparse_indexer_score_recompute_wrapper as well).
MEGATRON_DSA_CALLERS = (f"{EAV_MOD}.dsa_cudnn_kernels", f"{EAV_MOD}.csa_utils.fused_sparse_attention",
                        f"{EAV_MOD}.csa_kernels", f"{EAV_MOD}.dsa_kernels")
DSA_OWNERS = ("DSA", "_DSA", "_cudnn_dsa")  # the names Megatron binds `cudnn.DSA` to
# The wrappers Megatron d48bd6be calls (EAV/dsa_cudnn_kernels.py, csa_utils/fused_sparse_attention.py) plus the one
# its config check resolves: used when the installed Megatron's files cannot be read.
FALLBACK_WRAPPERS = ("indexer_top_k_wrapper", "indexer_forward_wrapper", "indexer_backward_wrapper",
                     "dense_attn_score_recompute_wrapper", "dense_indexer_backward_wrapper",
                     "sparse_attention_backward_wrapper", "sparse_attn_score_recompute_wrapper",
                     "dense_indexer_score_recompute_wrapper")
# Every DSA wrapper the frontend exports (1.27.0-1.32.0): resolved up front, so the probe starts with the run.
KNOWN_WRAPPERS = tuple(sorted({*FALLBACK_WRAPPERS, "indexer_forward_top_k_wrapper", "compactify_wrapper",
                               "local_to_global_wrapper", "sparse_indexer_score_recompute_wrapper"}))
# Megatron's config check (TC L1795-1818): these must name q_causal_offsets (a **kwargs does not count).
OFFSETS_CP = ("indexer_forward_wrapper",)
OFFSETS_DENSE_LOSS = ("dense_indexer_score_recompute_wrapper", "dense_attn_score_recompute_wrapper",
                      "dense_indexer_backward_wrapper")

def dsa_probe(wrappers) -> object:
    targets = [f"cudnn:DSA.{w}" for w in wrappers]
    return import_probe("cudnn:DSA", *targets, signatures=targets)


DSA_PROBE = dsa_probe(KNOWN_WRAPPERS)


def megatron_wrappers(static: StaticFacts) -> tuple[list[str], list[str]]:
    """(the DSA wrappers the installed Megatron calls, the files they were read from); the fallback list when its
    files cannot be read."""
    names: set[str] = set()
    files = []
    for module in MEGATRON_DSA_CALLERS:
        src = static.source(module)
        if not src.get("found") or src.get("error"):
            continue
        files.append(str(src.get("path")))
        for owner in DSA_OWNERS:
            names.update(n for n in (src.get("attributes") or {}).get(owner, []) if n.endswith("_wrapper"))
    return (sorted(names), files) if names else (list(FALLBACK_WRAPPERS), [])


def dense_indexer_loss(profile: Profile) -> bool | None:
    """Whether the job's dense indexer loss is on (coeff > 0 without dsa_indexer_use_sparse_loss); None: not stated."""
    decisions = profile.job.decisions if profile.job is not None else None
    return decisions.dense_indexer_loss if decisions is not None else None
