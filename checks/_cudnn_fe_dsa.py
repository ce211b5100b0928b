"""cudnn-fe.dsa: the DSA wrappers the installed Megatron calls load from the installed frontend, with the arguments
Megatron passes (q_causal_offsets)."""

from __future__ import annotations

from dsv4_doctor.api import (Context, Result, Source, StaticFacts, UpstreamText, check, error_text, failed, outcome,
                             passed, warned)
from .fixes import catalogue as fixes, frontend as frontend_fixes
from .job.dsa import backend_none_fix
from ._cutedsl_stack import FE, stack_fixes, unmet_stack
from ._dsa_wrappers import (DSA_PROBE, KNOWN_WRAPPERS, OFFSETS_CP, OFFSETS_DENSE_LOSS, dense_indexer_loss, dsa_probe,
                            megatron_wrappers)
from ._upstream import EAV, MLM_VERL_TESTED, fe_at, mlm, mlm_at
from ._anchors import UNEXPECTED_KEYWORD, missing_prefix
from ._cudnn_fe_common import M8_FRONTEND, M11, STATIC, _not_needed, m8


DSA_TEXTS = (
    *missing_prefix("I-dsa", "cudnn.deepseek_sparse_attention"),
    UpstreamText("I-dsa-name", "cannot import name 'DSA' from 'cudnn' ({path})", Source(
        "Python's import system: ImportError for a name the installed package does not define (a frontend without "
        "the DSA namespace)", "https://docs.python.org/3/library/exceptions.html#ImportError"), "ImportError"),
    # What the smoke's tier 2 sees where the DSA wrappers lack Megatron's q_causal_offsets argument.
    UpstreamText("S1", "{wrapper}() got an unexpected keyword argument 'q_causal_offsets'", UNEXPECTED_KEYWORD,
                 "TypeError", match=("unexpected keyword argument 'q_causal_offsets'",)),
    UpstreamText("M8", "dsa_kernel_backend={backend} requires fused DSA kernels, but the following packages are not "
                 "available: {packages}. Install them or set dsa_kernel_backend=none to use the PyTorch fallback.",
                 mlm("megatron/core/utils.py", "509-548"), "RuntimeError"),
    UpstreamText("M11", M11, mlm("megatron/core/transformer/transformer_config.py", "1806-1818"), "ValueError"),
    UpstreamText("R8", "cudnn-frontend DSA namespace not available. Install with `pip install "
                 "nvidia-cudnn-frontend[cutedsl]`.", mlm(EAV + "csa_utils/fused_sparse_attention.py", "187-193"),
                 "ImportError"),
    UpstreamText("F4", "{name} requires optional dependencies. Install with 'pip install "
                 "nvidia-cudnn-frontend[cutedsl]': {error}", fe_at("1.32.0", "__init__.py", 772), "ImportError",
                 match=(" requires optional dependencies. ",
                        "Install with 'pip install nvidia-cudnn-frontend[cutedsl]'")),
)


@check(
    "cudnn-fe.dsa",
    "The DSA wrappers the installed Megatron calls load, with q_causal_offsets where Megatron requires it",
    texts=DSA_TEXTS,
    applies_when="dsa_backend=cudnn; q_causal_offsets when CP > 1",
    detects="every DSA wrapper the installed Megatron calls (ast) resolves, and its signature (probe)",
    sources=(
        mlm("megatron/core/transformer/transformer_config.py", "1795-1818",
            "Megatron-LM dev transformer_config.py L1795-1818: q_causal_offsets requirement"),
        mlm(EAV + "dsa_cudnn_kernels.py", "", "Megatron-LM dev dsa_cudnn_kernels.py (the DSA wrappers it calls)"),
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "182-194",
            "Megatron-LM dev fused_sparse_attention.py: cudnn-frontend DSA namespace not available"),
        Source("cudnn-frontend PRs #316/#353 (q_causal_offsets)", "https://github.com/NVIDIA/cudnn-frontend/pull/353"),
        mlm_at(MLM_VERL_TESTED, EAV + "dsa_kernels.py", "Megatron-LM fd1121b8 (verl's tested commit) dsa_kernels.py: "
               "the DSA wrappers it calls through _DSA, compactify_wrapper and sparse_indexer_score_recompute_wrapper "
               "among them"),
    ),
    fixes=(frontend_fixes.frontend_stack(StaticFacts({})), fixes.BACKEND_NONE),
    skip_if=_not_needed,
    needs=("cudnn-fe.version",),
    static=STATIC,
    probes=(DSA_PROBE,),
)
def cudnn_fe_dsa(ctx: Context) -> Result:
    """With dsa_kernel_backend=cudnn, DSv4 attention runs the frontend's CuTe-DSL DSA kernels. Megatron's own
    dependency check only does `from cudnn import DSA`, which is a lazy namespace and passes even when torch,
    cuda-python or nvidia-cutlass-dsl are missing. This check reads, with ast, every `DSA.<name>` /
    `_DSA.<name>` / `_cudnn_dsa.<name>` the installed Megatron calls (EAV/dsa_cudnn_kernels.py and
    csa_utils/fused_sparse_attention.py; d48bd6be's eight wrappers when those files cannot be read) and resolves
    each in a probe, reading its signature. With CP > 1 and ratio-4 layers, Megatron requires
    `indexer_forward_wrapper` to name `q_causal_offsets`, and the three dense wrappers too when the dense indexer
    loss is on (coefficient > 0 without dsa_indexer_use_sparse_loss); a `**kwargs` does not count, as Megatron
    tests `inspect.signature(...).parameters`. Without the job's settings the dense loss is not known; a frontend
    lacking the parameter there is then a warning.
    """
    static = ctx.static
    fe = static.readable_dist(FE)
    missing = unmet_stack(static)
    called, files = megatron_wrappers(static)
    dense_loss = dense_indexer_loss(ctx.profile)
    # Megatron's config check resolves these whatever its kernels call.
    wanted = sorted({*called, *OFFSETS_CP, *(OFFSETS_DENSE_LOSS if dense_loss is not False else ())})
    evidence: dict = {"frontend": fe.get("version") if fe else None, "unmet_cutedsl_requirements": missing,
                      "wrappers_from": files or "fallback list (no readable Megatron DSA caller)"}
    if fe is None and not static.module("cudnn").get("found"):
        return failed(m8(M8_FRONTEND),
                      fixes=[*stack_fixes(static, missing, ctx.profile.cc), backend_none_fix(ctx.profile)],
                      evidence=evidence)
    probe = DSA_PROBE if set(wanted) <= set(KNOWN_WRAPPERS) else dsa_probe(wanted)
    answer = ctx.require(probe)
    namespace = outcome(answer, "cudnn:DSA")
    rows = {w: outcome(answer, f"cudnn:DSA.{w}") for w in wanted}
    evidence["wrappers"] = {w: {"resolves": bool(r.get("ok")),
                                "q_causal_offsets": "q_causal_offsets" in (r.get("params") or []),
                                "error": error_text(r) if not r.get("ok") else None} for w, r in rows.items()}
    if not namespace.get("ok"):
        return failed(f"from cudnn import DSA failed ({error_text(namespace)}). {m8(M8_FRONTEND)}",
                      fixes=[*stack_fixes(static, missing, ctx.profile.cc), backend_none_fix(ctx.profile)],
                      evidence=evidence)
    broken = [w for w, r in rows.items() if not r.get("ok")]
    if broken:
        extra = f" Unmet CuTe-DSL stack requirements: {', '.join(missing)}." if missing else ""
        return failed(
            f"cudnn.DSA.{broken[0]} does not load ({error_text(rows[broken[0]])})"
            + (f"; {len(broken) - 1} more of the {len(wanted)} wrappers Megatron calls do not load either"
               if len(broken) > 1 else ""),
            "`from cudnn import DSA` is a lazy namespace, so Megatron's dependency check passes; the error then "
            "surfaces at config time (CP > 1: the q_causal_offsets signature check) or at the first fused DSA call "
            "(\"cudnn-frontend DSA namespace not available\" / \"Failed to import DSA kernel backend\")." + extra,
            fixes=[*stack_fixes(static, missing, ctx.profile.cc), backend_none_fix(ctx.profile)], evidence=evidence)
    # A parameter counts only when it is named: Megatron tests inspect.signature(w).parameters, not **kwargs.
    no_offsets = [w for w, r in rows.items() if "q_causal_offsets" not in (r.get("params") or [])]
    need = list(OFFSETS_CP) + (list(OFFSETS_DENSE_LOSS) if dense_loss else [])
    lacking = [w for w in need if w in no_offsets or w not in rows]
    if ctx.profile.cp > 1 and lacking:
        return failed(M11.format(missing=", ".join(lacking)),
                      "Megatron raises this ValueError at config time: with CP > 1 and a ratio-4 indexer it requires "
                      "the parameter by name on indexer_forward_wrapper, and on the three dense wrappers when the "
                      "dense indexer loss is on (frontend >= 1.26.0 has it).",
                      fixes=[frontend_fixes.frontend_stack(static, ctx.profile.cc), backend_none_fix(ctx.profile)],
                      evidence=evidence)
    dense_lacking = [w for w in OFFSETS_DENSE_LOSS if w in no_offsets]
    summary = f"the {len(wanted)} DSA wrappers Megatron uses load (nvidia-cudnn-frontend {evidence['frontend']})"
    if ctx.profile.cp > 1:
        summary += "; indexer_forward_wrapper takes q_causal_offsets"
    if ctx.profile.cp > 1 and dense_loss is None and dense_lacking:
        why = ("not stated: pass the job's arguments" if ctx.profile.job is None else
               "the job's command leaves it not known")
        return warned(summary + "; but " + ", ".join(dense_lacking) + " lack q_causal_offsets, which Megatron "
                      f"requires if the job turns the dense indexer loss on ({why})",
                      fixes=[frontend_fixes.frontend_stack(static, ctx.profile.cc)], evidence=evidence)
    return passed(summary, evidence=evidence)
