"""cuDNN frontend: installed and consistent, its fused CSA compressor really loads, its DSA wrappers fit CP."""

from __future__ import annotations

from dsv4_doctor.facts import canonical, error_text, extra_requirements, outcome, version
from dsv4_doctor.model import Check, Context, Profile, Result, Source, failed, needs_failed, passed, warned
from dsv4_doctor.probes import StaticRequest, import_probe

from . import fixes
from ._upstream import EAV, mlm, pypi

FE = "nvidia-cudnn-frontend"
# What FE's `cutedsl` extra declares (1.26.0-1.32.0); their presence is read from metadata, not imports.
CUTEDSL_EXTRA = ("nvidia-cutlass-dsl", "cuda-python", "torch", "apache-tvm-ffi", "torch-c-dlpack-ext")
DSA_API = "cudnn.deepseek_sparse_attention.indexer_forward.api"
STATIC = StaticRequest(distributions=(FE, *CUTEDSL_EXTRA), modules=("cudnn", "cudnn.csa"), sources=(DSA_API,))

FE_IMPORT = import_probe("cudnn")
CSA_FWD = "cudnn.csa.compressor:csa_compressor_forward_wrapper"
CSA_BWD = "cudnn.csa.compressor:csa_compressor_backward_wrapper"
CSA_PROBE = import_probe(CSA_FWD, CSA_BWD)  # what Megatron's _get_frontend() resolves
DSA_WRAPPER = "cudnn:DSA.indexer_forward_wrapper"
DSA_PROBE = import_probe("cudnn:DSA", DSA_WRAPPER, signatures=[DSA_WRAPPER])

FIX_FE = fixes.FE
FIX_CUTEDSL = fixes.CUTLASS
FIX_BACKEND_NONE = fixes.BACKEND_NONE

M8 = ("dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: "
      "cudnn-frontend DSA (nvidia-cudnn-frontend[cutedsl]). Install them or set dsa_kernel_backend=none to use the "
      "PyTorch fallback.")
R11 = ("CSA fused compressor is enabled and this device is supported, but cudnn-frontend's CSA compressor API is "
       "unavailable ({detail}); keeping the eager compressor.")


def _not_needed(profile: Profile) -> str | None:
    if profile.dsa_backend == "none":
        return "dsa_kernel_backend=none: Megatron uses its PyTorch fallback and never loads the cuDNN frontend"
    return None


def _missing_extras(static, fe: dict | None) -> list[str]:
    """Every unmet `cutedsl` requirement at once: an import error names only the first.

    Without a frontend installed, the extra's known members stand in for its declared requirements."""
    missing = []
    if fe is None:
        return [f"{name} (not installed)" for name in CUTEDSL_EXTRA if static.version(name) is None]
    reqs = extra_requirements(fe, "cutedsl") or []
    for req in reqs:
        if canonical(req.name) not in CUTEDSL_EXTRA:
            continue  # not asked of the static probe
        installed = static.version(canonical(req.name))
        if installed is None:
            missing.append(f"{req.name} (not installed)")
        elif req.specifier and not req.specifier.contains(installed, prereleases=True):
            missing.append(f"{req.name} {installed} (needs {req.specifier})")
    return missing


def _extra_fixes(missing: list[str]) -> list:
    found = []
    if any(m.startswith(("nvidia-cutlass-dsl", "cuda-python")) for m in missing):
        found.append(FIX_CUTEDSL)
    if any(m.startswith("torch ") for m in missing):
        found.append(fixes.TORCH)
    return found


def _fe_version(ctx: Context) -> Result:
    static = ctx.static
    copies = static.dist_copies(FE)
    module = static.module("cudnn")
    answer = ctx.require(FE_IMPORT)
    imported = outcome(answer, "cudnn")
    evidence = {
        "distribution": [c.get("version") for c in copies],
        "paths": [c.get("path") for c in copies],
        "import_version": imported.get("version"),
        "import_origin": imported.get("origin"),
    }
    if not copies and not module.get("found"):
        return failed(f"nvidia-cudnn-frontend is not installed. {M8}", fixes=[FIX_FE, FIX_CUTEDSL, FIX_BACKEND_NONE],
                      evidence=evidence)
    if not imported.get("ok"):
        err = imported.get("error") if isinstance(imported.get("error"), dict) else {}
        return failed(f"import cudnn failed: {error_text(imported)}", "\n".join(map(str, err.get("where") or [])),
                      fixes=[FIX_FE], evidence=evidence)
    if not copies:
        return warned(f"cudnn {imported.get('version')} imports from {imported.get('origin')} without distribution "
                      "metadata (a source or git build): its features cannot be matched to a release",
                      fixes=[FIX_FE], evidence=evidence)
    meta = copies[0].get("version")
    if copies[0].get("error"):
        return warned(f"unreadable METADATA for nvidia-cudnn-frontend: {copies[0]['error']}", fixes=[FIX_FE],
                      evidence=evidence)
    if version(meta) != version(imported.get("version")):
        return warned(
            f"nvidia-cudnn-frontend metadata says {meta} but import cudnn reports {imported.get('version')} "
            f"(from {imported.get('origin')}): another copy shadows the installed one",
            "Version strings are unreliable here (Megatron dev's pinned FE git build reports 1.25.0); the feature "
            "checks cudnn-fe.csa and cudnn-fe.dsa test what actually loads.",
            fixes=[FIX_FE], evidence=evidence)
    if len(copies) > 1:
        return warned(f"nvidia-cudnn-frontend {meta} is installed {len(copies)} times ({', '.join(evidence['paths'])});"
                      " the first on sys.path wins", fixes=[FIX_FE], evidence=evidence)
    return passed(f"nvidia-cudnn-frontend {meta} (import cudnn reports {imported.get('version')})", evidence=evidence)


cudnn_fe_version = Check(
    id="cudnn-fe.version",
    title="cuDNN frontend installed, and the imported copy is the installed one",
    explanation="""
        With dsa_kernel_backend=cudnn, Megatron's DSv4 attention calls the cuDNN frontend's CuTe-DSL DSA wrappers
        (and, on CC 10.0, its fused CSA compressor). The frontend must be installed, and the `cudnn` that imports
        must be the installed distribution: Megatron dev pins a frontend git build that reports 1.25.0, and the
        loaded-versus-installed confusion is, in the frontend's own words, the most common unreproducible-issue root
        cause. Version strings cannot prove features; cudnn-fe.csa and cudnn-fe.dsa test what loads.
    """,
    applies_when="dsa_backend=cudnn",
    detects="nvidia-cudnn-frontend metadata vs `import cudnn`'s __version__ and origin",
    sources=(
        mlm("megatron/core/utils.py", "509-548", "Megatron-LM dev utils.py L509-548: cudnn backend dependency check"),
        Source("cudnn-frontend python/cudnn/collect_env.py (loaded vs installed)",
               "https://github.com/NVIDIA/cudnn-frontend/blob/main/python/cudnn/collect_env.py"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 on PyPI"),
    ),
    fixes=(FIX_FE, FIX_CUTEDSL, FIX_BACKEND_NONE),
    skip_if=_not_needed,
    static=STATIC,
    probes=(FE_IMPORT,),
    run=_fe_version,
)


def _csa_irrelevant(profile: Profile) -> str | None:
    """Megatron uses the fused compressor only on CC (10, 0) exactly, with a fused backend, and never under CP > 1."""
    if profile.dsa_backend == "none":
        return "dsa_kernel_backend=none: Megatron never uses the fused CSA compressor"
    if profile.cc is None:
        return ("GPU arch unknown (no GPU detected, no --gpu-arch): the fused CSA compressor matters only on "
                "compute capability 10.0")
    if profile.cc != (10, 0):
        return (f"compute capability {profile.gpu_arch}: Megatron's fused CSA compressor runs only on 10.0 "
                "(B200/GB200), so the eager compressor is the normal path here")
    if profile.cp > 1:
        return "CP > 1: the THD CP path pre-groups its input, so the fused CSA compressor is never used"
    return None


def _csa(ctx: Context) -> Result:
    blocked = needs_failed(ctx, "cudnn-fe.version")
    if blocked:
        return blocked
    static = ctx.static
    fe = static.dist(FE)
    missing = _missing_extras(static, fe)
    evidence = {"frontend": fe.get("version") if fe else None, "cudnn.csa_found": static.module("cudnn.csa")
                .get("found", False), "unmet_cutedsl_requirements": missing}
    if fe is None and not static.module("cudnn").get("found"):
        return failed("nvidia-cudnn-frontend is not installed: Megatron silently keeps the eager CSA compressor",
                      fixes=[FIX_FE, *_extra_fixes(missing)], evidence=evidence)
    answer = ctx.require(CSA_PROBE)
    fwd, bwd = outcome(answer, CSA_FWD), outcome(answer, CSA_BWD)
    evidence["forward"] = {k: fwd.get(k) for k in ("ok", "error")}
    evidence["backward"] = {k: bwd.get(k) for k in ("ok", "error")}
    if fwd.get("ok") and bwd.get("ok"):
        return passed(f"cudnn.csa compressor loads (nvidia-cudnn-frontend {evidence['frontend']}): Megatron uses the "
                      "fused CSA compressor on this CC 10.0 job", evidence=evidence)
    bad = fwd if not fwd.get("ok") else bwd
    detail = error_text(bad)
    why = ""
    if not evidence["cudnn.csa_found"]:
        why = f"nvidia-cudnn-frontend {evidence['frontend']} has no cudnn.csa (added in 1.27.0). "
    lines = [
        "Megatron probes `from cudnn.csa import compressor` once, logs one WARNING and silently keeps the eager "
        "compressor:",
        "  " + R11.format(detail=detail),
        "The eager path runs but is numerically different and slower; the GB200 NaN reports in verl PR #7297 were "
        "traced to a frontend without cudnn.csa (the thread does not prove the eager compressor causes the NaN).",
    ]
    if missing:
        lines.append("Unmet requirements of the frontend's cutedsl extra (all of them, not just the first failing "
                     "import): " + ", ".join(missing))
    return failed(f"{why}cudnn.csa compressor does not load ({detail}): Megatron silently falls back to the eager CSA "
                  "compressor", "\n".join(lines), fixes=[FIX_FE, *_extra_fixes(missing)], evidence=evidence)


cudnn_fe_csa = Check(
    id="cudnn-fe.csa",
    title="The fused CSA compressor (cudnn.csa) really loads",
    explanation="""
        On compute capability 10.0 with a fused DSA backend and CP = 1, Megatron (dev >= 108cb6bc) compresses CSA
        keys with the cuDNN frontend's fused compressor. It probes `from cudnn.csa import compressor` and reads
        `csa_compressor_forward_wrapper` / `csa_compressor_backward_wrapper`, catches any exception, logs one
        warning and silently keeps the eager compressor: the state behind the GB200 NaN reports of verl PR #7297.
        Module presence is not enough: frontend 1.27.0 without nvidia-cutlass-dsl (or torch, or cuda-python) has
        `cudnn.csa` but the symbols fail to resolve, so this check resolves them in a probe, as Megatron does, and
        lists every unmet requirement of the frontend's `cutedsl` extra. Frontend 1.26.0 and older have no
        `cudnn.csa`. Elsewhere it is a skip with the reason: Megatron gates the fused compressor on CC == (10, 0)
        exactly, and the THD CP path (CP > 1) pre-groups its input, which the fused compressor never takes.
    """,
    applies_when="CC 10.0, dsa_backend=cudnn, CP = 1",
    detects="from cudnn.csa import compressor; its forward/backward wrappers resolve (subprocess)",
    sources=(
        mlm(EAV + "csa_utils/fused_compressor.py", "74-161",
            "Megatron-LM dev csa_utils/fused_compressor.py L74-161: CC (10,0) gate, FE probe, eager fallback"),
        mlm(EAV + "csa.py", "2632-2661", "Megatron-LM dev csa.py: the THD CP path pre-groups (no fused compressor)"),
        Source("verl PR #7297 (GB200 NaN with DSA fusion; fix commands)", "https://github.com/verl-project/verl/pull/7297"),
        Source("cudnn-frontend PR #427 (adds cudnn.csa.compressor)", "https://github.com/NVIDIA/cudnn-frontend/pull/427"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 METADATA (cutedsl extra: apache-tvm-ffi>=0.1.11)"),
    ),
    fixes=(FIX_FE, FIX_CUTEDSL),
    skip_if=_csa_irrelevant,
    needs=("cudnn-fe.version",),
    static=STATIC,
    probes=lambda profile: [] if _csa_irrelevant(profile) else [CSA_PROBE],
    run=_csa,
)


def _dsa(ctx: Context) -> Result:
    blocked = needs_failed(ctx, "cudnn-fe.version")
    if blocked:
        return blocked
    static = ctx.static
    fe = static.dist(FE)
    missing = _missing_extras(static, fe)
    src = static.source(DSA_API)
    wrapper_src = (src.get("functions") or {}).get("indexer_forward_wrapper")
    evidence = {"frontend": fe.get("version") if fe else None, "unmet_cutedsl_requirements": missing,
                "static_q_causal_offsets": None if wrapper_src is None else "q_causal_offsets" in wrapper_src["params"]}
    if fe is None and not static.module("cudnn").get("found"):
        return failed(M8, fixes=[FIX_FE, *_extra_fixes(missing), FIX_BACKEND_NONE], evidence=evidence)
    answer = ctx.require(DSA_PROBE)
    namespace, wrapper = outcome(answer, "cudnn:DSA"), outcome(answer, DSA_WRAPPER)
    evidence["wrapper"] = {k: wrapper.get(k) for k in ("ok", "error")}
    if not namespace.get("ok"):
        return failed(f"from cudnn import DSA failed ({error_text(namespace)}). {M8}",
                      fixes=[FIX_FE, FIX_CUTEDSL, FIX_BACKEND_NONE], evidence=evidence)
    if not wrapper.get("ok"):
        extra = f" Unmet cutedsl requirements: {', '.join(missing)}." if missing else ""
        return failed(
            f"cudnn.DSA.indexer_forward_wrapper does not load ({error_text(wrapper)})",
            "`from cudnn import DSA` is a lazy namespace, so Megatron's dependency check passes; the error then "
            "surfaces at config time (CP > 1: the q_causal_offsets signature check) or at the first fused DSA call "
            "(\"cudnn-frontend DSA namespace not available\" / \"Failed to import DSA kernel backend\")." + extra,
            fixes=[FIX_FE, *_extra_fixes(missing), FIX_BACKEND_NONE], evidence=evidence)
    params = wrapper.get("params") or (wrapper_src or {}).get("params") or []
    has_offsets = "q_causal_offsets" in params or bool(wrapper.get("varkw"))
    evidence["q_causal_offsets"] = has_offsets
    if ctx.profile.cp > 1 and not has_offsets:
        return failed(
            "DSv4 CP with ratio-4 fused DSA requires cuDNN Frontend wrappers with q_causal_offsets support; missing "
            "from: indexer_forward_wrapper. Install a compatible cuDNN Frontend build or set "
            "dsa_kernel_backend='none'.",
            "Megatron raises this ValueError at config time (frontend >= 1.26.0 has the argument; PyPI 1.25.0 "
            "lacks it).",
            fixes=[FIX_FE, FIX_BACKEND_NONE], evidence=evidence)
    note = "; indexer_forward_wrapper accepts q_causal_offsets" if has_offsets else ""
    return passed(f"cudnn.DSA loads (nvidia-cudnn-frontend {evidence['frontend']}){note}", evidence=evidence)


cudnn_fe_dsa = Check(
    id="cudnn-fe.dsa",
    title="The cuDNN frontend's DSA wrappers load (and take q_causal_offsets under CP)",
    explanation="""
        With dsa_kernel_backend=cudnn, DSv4 attention runs the frontend's CuTe-DSL DSA kernels. Megatron's own
        dependency check only does `from cudnn import DSA`, which is a lazy namespace and passes even when torch,
        cuda-python or nvidia-cutlass-dsl are missing; this check resolves `DSA.indexer_forward_wrapper` in a
        probe. With CP > 1 and ratio-4 layers, Megatron also requires the wrapper to accept `q_causal_offsets`
        (frontend >= 1.26.0) and raises a ValueError at config time otherwise.
    """,
    applies_when="dsa_backend=cudnn; q_causal_offsets when CP > 1",
    detects="cudnn.DSA.indexer_forward_wrapper resolves; its signature (probe, with an ast fallback)",
    sources=(
        mlm("megatron/core/transformer/transformer_config.py", "1773-1818",
            "Megatron-LM dev transformer_config.py L1773-1818: q_causal_offsets requirement"),
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "187-193",
            "Megatron-LM dev fused_sparse_attention.py: cudnn-frontend DSA namespace not available"),
        Source("cudnn-frontend PRs #316/#353 (q_causal_offsets)", "https://github.com/NVIDIA/cudnn-frontend/pull/353"),
    ),
    fixes=(FIX_FE, FIX_CUTEDSL, FIX_BACKEND_NONE),
    skip_if=_not_needed,
    needs=("cudnn-fe.version",),
    static=STATIC,
    probes=(DSA_PROBE,),
    run=_dsa,
)

CHECKS = [cudnn_fe_version, cudnn_fe_csa, cudnn_fe_dsa]
