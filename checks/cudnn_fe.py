"""cuDNN frontend: installed and consistent, its fused CSA compressor really loads, and every DSA wrapper the installed
Megatron calls resolves, with q_causal_offsets exactly where Megatron requires it."""

from __future__ import annotations

from dsv4_doctor.facts import StaticFacts, canonical, error_text, outcome, requirements, version
from dsv4_doctor.model import Check, Context, Profile, Result, Source, failed, needs_failed, passed, skipped, warned
from dsv4_doctor.probes import StaticRequest, import_probe

from . import fixes
from ._upstream import EAV, MLM_VERL_TESTED, mlm, mlm_at, pypi

FE = "nvidia-cudnn-frontend"
# What the frontend's cutedsl extra (1.26-1.28) or its unconditional requirements (1.29+) name; read from metadata.
CUTEDSL_STACK = ("nvidia-cutlass-dsl", "cuda-python", "torch", "apache-tvm-ffi", "torch-c-dlpack-ext")
EAV_MOD = EAV.replace("/", ".").rstrip(".")
# The Megatron modules that call the frontend's DSA wrappers (d48bd6be; csa_kernels is the name before 1c44a570).
# Where Megatron calls the frontend's DSA wrappers: d48bd6be's files, and dsa_kernels.py of fd1121b8 (the commit verl's
# DSv4 example was tested with; it calls compactify_wrapper and sparse_indexer_score_recompute_wrapper as well).
MEGATRON_DSA_CALLERS = (f"{EAV_MOD}.dsa_cudnn_kernels", f"{EAV_MOD}.csa_utils.fused_sparse_attention",
                        f"{EAV_MOD}.csa_kernels", f"{EAV_MOD}.dsa_kernels")
DSA_OWNERS = ("DSA", "_DSA", "_cudnn_dsa")  # the names Megatron binds `cudnn.DSA` to
FUSED_COMPRESSOR = (f"{EAV_MOD}.csa_utils.fused_compressor", f"{EAV_MOD}.csa_fused_compressor")
STATIC = StaticRequest(distributions=(FE, *CUTEDSL_STACK), modules=("cudnn", "cudnn.csa", "megatron.core", "flash_mla",
                                                                    *FUSED_COMPRESSOR),
                       # The frontend's own entry files too: their hashes are part of a fleet rank's fingerprint
                       # (fleet.drift), which must see a frontend edited in place, whose RECORD still matches.
                       sources=(*MEGATRON_DSA_CALLERS, "cudnn", "cudnn.deepseek_sparse_attention",
                                "cudnn.deepseek_sparse_attention.utils.tensor_conversion"),
                       attributes_of=DSA_OWNERS)

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

FE_IMPORT = import_probe("cudnn")
CSA_FWD = "cudnn.csa.compressor:csa_compressor_forward_wrapper"
CSA_BWD = "cudnn.csa.compressor:csa_compressor_backward_wrapper"
CSA_PROBE = import_probe(CSA_FWD, CSA_BWD)  # what Megatron's _get_frontend() resolves


def dsa_probe(wrappers) -> object:
    targets = [f"cudnn:DSA.{w}" for w in wrappers]
    return import_probe("cudnn:DSA", *targets, signatures=targets)


DSA_PROBE = dsa_probe(KNOWN_WRAPPERS)

# Megatron's dependency check (utils.py L509-548) raises one ValueError naming every fused-DSA package it lacks.
M8_FLASH_MLA = "flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev)"
M8_FRONTEND = "cudnn-frontend DSA (nvidia-cudnn-frontend[cutedsl])"


def m8(*items: str) -> str:
    return ("dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: "
            f"{', '.join(items)}. Install them or set dsa_kernel_backend=none to use the PyTorch fallback.")


def frontend_absent(static: StaticFacts) -> bool:
    """No cuDNN frontend at all (no distribution, no `cudnn` module): then the frontend checks quote Megatron's
    dependency error, naming flash_mla too when it is missing, and kernels.flash-mla only points at it, so that the
    one long sentence is in a report once (found in review: four times in one text report)."""
    return not static.dist_copies(FE) and not static.module("cudnn").get("found")


def megatron_dependency_error(static: StaticFacts) -> str:
    """Megatron's ValueError when the frontend's DSA does not load: with flash_mla listed first when it is missing."""
    return m8(*([M8_FLASH_MLA] if not static.module("flash_mla").get("found") else []), M8_FRONTEND)
M11 = ("DSv4 CP with ratio-4 fused DSA requires cuDNN Frontend wrappers with q_causal_offsets support; missing from: "
       "{missing}. Install a compatible cuDNN Frontend build or set dsa_kernel_backend='none'.")
R11 = ("CSA fused compressor is enabled and this device is supported, but cudnn-frontend's CSA compressor API is "
       "unavailable ({detail}); keeping the eager compressor.")


def _not_needed(profile: Profile) -> str | None:
    if profile.dsa_backend == "none":
        return "dsa_kernel_backend=none: Megatron uses its PyTorch fallback and never loads the cuDNN frontend"
    return None


def unmet_stack(static: StaticFacts) -> list[str]:
    """Every unmet requirement of the frontend's CuTe-DSL stack at once (an import error names only the first).

    Requirements under the `cutedsl` extra (1.26-1.28) and unconditional ones (1.29+) both count; without a frontend
    installed, the stack's known members stand in for its declared requirements."""
    fe = static.readable_dist(FE)
    if fe is None:
        return [f"{name} (not installed)" for name in CUTEDSL_STACK if static.version(name) is None]
    missing = []
    for req in requirements(fe, ("cutedsl",)):
        if canonical(req.name) not in CUTEDSL_STACK:
            continue  # not asked of the static probe
        installed = static.version(canonical(req.name))
        if installed is None:
            missing.append(f"{req.name} (not installed)")
        elif req.specifier and not req.specifier.contains(installed, prereleases=True):
            missing.append(f"{req.name} {installed} (needs {req.specifier})")
    return missing


def stack_fixes(static: StaticFacts, missing: list[str]) -> list:
    found = [fixes.frontend_stack(static)]
    if any(m.startswith("torch ") for m in missing):
        found.append(fixes.torch(static))
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
    fix = fixes.frontend_stack(static)
    if not copies and not module.get("found"):
        return failed(f"nvidia-cudnn-frontend is not installed. {megatron_dependency_error(static)}",
                      fixes=[fix, fixes.BACKEND_NONE],
                      evidence=evidence)
    if not imported.get("ok"):
        err = imported.get("error") if isinstance(imported.get("error"), dict) else {}
        return failed(f"import cudnn failed: {error_text(imported)}", "\n".join(map(str, err.get("where") or [])),
                      fixes=[fix], evidence=evidence)
    meta = static.version(FE)
    if not copies or meta is None:
        why = "without distribution metadata (a source or git build)" if not copies else \
            "with unreadable METADATA (see deps.metadata)"
        return warned(f"cudnn {imported.get('version')} imports from {imported.get('origin')} {why}: its features "
                      "cannot be matched to a release (cudnn-fe.csa and cudnn-fe.dsa test what loads)",
                      fixes=[fix], evidence=evidence)
    if version(imported.get("version")) is None:
        return warned(f"nvidia-cudnn-frontend {meta} is installed, but import cudnn (from {imported.get('origin')}) "
                      f"reports no usable __version__ ({imported.get('version')!r}): which copy loads cannot be told "
                      "from versions", "cudnn-fe.csa and cudnn-fe.dsa test what actually loads.", fixes=[fix],
                      evidence=evidence)
    if version(meta) != version(imported.get("version")):
        return warned(
            f"nvidia-cudnn-frontend metadata says {meta} but import cudnn reports {imported.get('version')} "
            f"(from {imported.get('origin')}): another copy shadows the installed one",
            "Version strings are unreliable here (Megatron dev's pinned FE git build reports 1.25.0); the feature "
            "checks cudnn-fe.csa and cudnn-fe.dsa test what actually loads.",
            fixes=[fix], evidence=evidence)
    if len(copies) > 1:
        where = ", ".join(map(str, evidence["paths"]))
        return warned(f"nvidia-cudnn-frontend {meta} is installed {len(copies)} times ({where}); the first on "
                      "sys.path wins", fixes=[fix], evidence=evidence)
    return passed(f"nvidia-cudnn-frontend {meta} (import cudnn reports {imported.get('version')})", evidence=evidence)


cudnn_fe_version = Check(
    id="cudnn-fe.version",
    title="cuDNN frontend installed, and the imported copy is the installed one",
    explanation="""
        With dsa_kernel_backend=cudnn, Megatron's DSv4 attention calls the cuDNN frontend's CuTe-DSL DSA wrappers
        (and, on CC 10.0, its fused CSA compressor). The frontend must be installed, and the `cudnn` that imports
        must be the installed distribution: Megatron dev pins a frontend git build that reports 1.25.0, and the
        loaded-versus-installed confusion is, in the frontend's own words, the most common unreproducible-issue root
        cause. Version strings cannot prove features; cudnn-fe.csa and cudnn-fe.dsa test what loads. The fix keeps a
        frontend >= 1.27.0 and installs what it declares, or pins the tested set (frontend 1.27.0, apache-tvm-ffi
        0.1.11, nvidia-cutlass-dsl 4.5.2) together.
    """,
    applies_when="dsa_backend=cudnn",
    detects="nvidia-cudnn-frontend metadata vs `import cudnn`'s __version__ and origin",
    sources=(
        mlm("megatron/core/utils.py", "509-548", "Megatron-LM dev utils.py L509-548: cudnn backend dependency check"),
        Source("cudnn-frontend python/cudnn/collect_env.py (loaded vs installed)",
               "https://github.com/NVIDIA/cudnn-frontend/blob/main/python/cudnn/collect_env.py"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 on PyPI"),
    ),
    fixes=(fixes.frontend_stack(StaticFacts({})), fixes.BACKEND_NONE),
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
    if static.module("megatron.core").get("found") and \
            not any(static.module(m).get("found") for m in FUSED_COMPRESSOR):
        return skipped("the installed Megatron has no fused CSA compressor (csa_utils/fused_compressor.py, dev "
                       ">= 108cb6bc): it always uses the eager compressor, so cudnn.csa is never loaded")
    fe = static.readable_dist(FE)
    missing = unmet_stack(static)
    evidence = {"frontend": fe.get("version") if fe else None, "cudnn.csa_found": static.module("cudnn.csa")
                .get("found", False), "unmet_cutedsl_requirements": missing}
    if fe is None and not static.module("cudnn").get("found"):
        return failed("nvidia-cudnn-frontend is not installed: Megatron silently keeps the eager CSA compressor",
                      fixes=stack_fixes(static, missing), evidence=evidence)
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
        lines.append("Unmet requirements of the frontend's CuTe-DSL stack (all of them, not just the first failing "
                     "import): " + ", ".join(missing))
    return failed(f"{why}cudnn.csa compressor does not load ({detail}): Megatron silently falls back to the eager CSA "
                  "compressor", "\n".join(lines), fixes=stack_fixes(static, missing), evidence=evidence)


cudnn_fe_csa = Check(
    id="cudnn-fe.csa",
    title="The fused CSA compressor (cudnn.csa) really loads",
    explanation="""
        On compute capability 10.0 with a fused DSA backend and CP = 1, Megatron (dev >= 108cb6bc, which added the
        fused compressor as csa_fused_compressor.py; csa_utils/fused_compressor.py from 1c44a570) compresses CSA keys
        with the cuDNN frontend's fused compressor. It probes `from cudnn.csa import compressor` and reads
        `csa_compressor_forward_wrapper` / `csa_compressor_backward_wrapper`, catches any exception, logs one
        warning and silently keeps the eager compressor: the state behind the GB200 NaN reports of verl PR #7297.
        Module presence is not enough: frontend 1.27.0 without nvidia-cutlass-dsl (or torch, or cuda-python) has
        `cudnn.csa` but the symbols fail to resolve, so this check resolves them in a probe, as Megatron does, and
        lists every unmet requirement of the frontend's CuTe-DSL stack. Frontend 1.26.0 and older have no
        `cudnn.csa`. Elsewhere it is a skip with the reason: Megatron gates the fused compressor on CC == (10, 0)
        exactly, the THD CP path (CP > 1) pre-groups its input, which the fused compressor never takes, and a
        Megatron older than 108cb6bc (verl's tested fd1121b8 included) has no fused compressor at all.
    """,
    applies_when="CC 10.0, dsa_backend=cudnn, CP = 1, Megatron dev >= 108cb6bc",
    detects="from cudnn.csa import compressor; its forward/backward wrappers resolve (subprocess)",
    sources=(
        mlm(EAV + "csa_utils/fused_compressor.py", "74-161",
            "Megatron-LM dev csa_utils/fused_compressor.py L74-161: CC (10,0) gate, FE probe, eager fallback"),
        mlm(EAV + "csa.py", "2632-2661", "Megatron-LM dev csa.py: the THD CP path pre-groups (no fused compressor)"),
        Source("Megatron-LM 108cb6bc (#5984): the fused compressor, as csa_fused_compressor.py",
               "https://github.com/NVIDIA/Megatron-LM/commit/108cb6bcb67415a3577909595064804300bd54f9"),
        Source("verl PR #7297 (GB200 NaN with DSA fusion; fix commands)", "https://github.com/verl-project/verl/pull/7297"),
        Source("cudnn-frontend PR #427 (adds cudnn.csa.compressor)", "https://github.com/NVIDIA/cudnn-frontend/pull/427"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 METADATA (cutedsl extra: apache-tvm-ffi>=0.1.11)"),
    ),
    fixes=(fixes.frontend_stack(StaticFacts({})),),
    skip_if=_csa_irrelevant,
    needs=("cudnn-fe.version",),
    static=STATIC,
    probes=lambda profile: [] if _csa_irrelevant(profile) else [CSA_PROBE],
    run=_csa,
)


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


def _dense_loss(profile: Profile) -> bool | None:
    """Whether the job's dense indexer loss is on (coeff > 0 without dsa_indexer_use_sparse_loss); None: not stated."""
    job = profile.job or {}
    value = job.get("dense_indexer_loss")
    return value if isinstance(value, bool) else None


def _dsa(ctx: Context) -> Result:
    blocked = needs_failed(ctx, "cudnn-fe.version")
    if blocked:
        return blocked
    static = ctx.static
    fe = static.readable_dist(FE)
    missing = unmet_stack(static)
    called, files = megatron_wrappers(static)
    dense_loss = _dense_loss(ctx.profile)
    # Megatron's config check resolves these whatever its kernels call.
    wanted = sorted({*called, *OFFSETS_CP, *(OFFSETS_DENSE_LOSS if dense_loss is not False else ())})
    evidence: dict = {"frontend": fe.get("version") if fe else None, "unmet_cutedsl_requirements": missing,
                      "wrappers_from": files or "fallback list (no readable Megatron DSA caller)"}
    if fe is None and not static.module("cudnn").get("found"):
        return failed(megatron_dependency_error(static), fixes=[*stack_fixes(static, missing), fixes.BACKEND_NONE],
                      evidence=evidence)
    probe = DSA_PROBE if set(wanted) <= set(KNOWN_WRAPPERS) else dsa_probe(wanted)
    answer = ctx.require(probe)
    namespace = outcome(answer, "cudnn:DSA")
    rows = {w: outcome(answer, f"cudnn:DSA.{w}") for w in wanted}
    evidence["wrappers"] = {w: {"resolves": bool(r.get("ok")),
                                "q_causal_offsets": "q_causal_offsets" in (r.get("params") or []),
                                "error": error_text(r) if not r.get("ok") else None} for w, r in rows.items()}
    if not namespace.get("ok"):
        return failed(f"from cudnn import DSA failed ({error_text(namespace)}). {megatron_dependency_error(static)}",
                      fixes=[*stack_fixes(static, missing), fixes.BACKEND_NONE], evidence=evidence)
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
            fixes=[*stack_fixes(static, missing), fixes.BACKEND_NONE], evidence=evidence)
    # A parameter counts only when it is named: Megatron tests inspect.signature(w).parameters, not **kwargs.
    no_offsets = [w for w, r in rows.items() if "q_causal_offsets" not in (r.get("params") or [])]
    need = list(OFFSETS_CP) + (list(OFFSETS_DENSE_LOSS) if dense_loss else [])
    lacking = [w for w in need if w in no_offsets or w not in rows]
    if ctx.profile.cp > 1 and lacking:
        return failed(M11.format(missing=", ".join(lacking)),
                      "Megatron raises this ValueError at config time: with CP > 1 and a ratio-4 indexer it requires "
                      "the parameter by name on indexer_forward_wrapper, and on the three dense wrappers when the "
                      "dense indexer loss is on (frontend >= 1.26.0 has it).",
                      fixes=[fixes.frontend_stack(static), fixes.BACKEND_NONE], evidence=evidence)
    dense_lacking = [w for w in OFFSETS_DENSE_LOSS if w in no_offsets]
    summary = f"the {len(wanted)} DSA wrappers Megatron uses load (nvidia-cudnn-frontend {evidence['frontend']})"
    if ctx.profile.cp > 1:
        summary += "; indexer_forward_wrapper takes q_causal_offsets"
    if ctx.profile.cp > 1 and dense_loss is None and dense_lacking:
        return warned(summary + "; but " + ", ".join(dense_lacking) + " lack q_causal_offsets, which Megatron "
                      "requires if the job turns the dense indexer loss on (not stated: pass the job's arguments)",
                      fixes=[fixes.frontend_stack(static)], evidence=evidence)
    return passed(summary, evidence=evidence)


cudnn_fe_dsa = Check(
    id="cudnn-fe.dsa",
    title="The DSA wrappers the installed Megatron calls load, with q_causal_offsets where Megatron requires it",
    explanation="""
        With dsa_kernel_backend=cudnn, DSv4 attention runs the frontend's CuTe-DSL DSA kernels. Megatron's own
        dependency check only does `from cudnn import DSA`, which is a lazy namespace and passes even when torch,
        cuda-python or nvidia-cutlass-dsl are missing. This check reads, with ast, every `DSA.<name>` /
        `_DSA.<name>` / `_cudnn_dsa.<name>` the installed Megatron calls (EAV/dsa_cudnn_kernels.py and
        csa_utils/fused_sparse_attention.py; d48bd6be's eight wrappers when those files cannot be read) and resolves
        each in a probe, reading its signature. With CP > 1 and ratio-4 layers, Megatron requires
        `indexer_forward_wrapper` to name `q_causal_offsets`, and the three dense wrappers too when the dense indexer
        loss is on (coefficient > 0 without dsa_indexer_use_sparse_loss); a `**kwargs` does not count, as Megatron
        tests `inspect.signature(...).parameters`. Without the job's settings the dense loss is not known; a frontend
        lacking the parameter there is then a warning.
    """,
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
    fixes=(fixes.frontend_stack(StaticFacts({})), fixes.BACKEND_NONE),
    skip_if=_not_needed,
    needs=("cudnn-fe.version",),
    static=STATIC,
    probes=(DSA_PROBE,),
    run=_dsa,
)

CHECKS = [cudnn_fe_version, cudnn_fe_csa, cudnn_fe_dsa]
