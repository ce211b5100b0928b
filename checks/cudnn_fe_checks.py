"""cuDNN frontend: installed and consistent, its fused CSA compressor really loads, and every DSA wrapper the installed
Megatron calls resolves, with q_causal_offsets exactly where Megatron requires it."""

from __future__ import annotations

from dsv4_doctor.api import (Context, Profile, Result, Source, StaticFacts, UpstreamText, check, cut, error_text,
                             failed, import_probe, outcome, passed, skipped, version, warned)

from .fixes import catalogue as fixes, frontend as frontend_fixes
from ._reach import copies_note
from .job.dsa import backend_none_fix
from ._cutedsl_stack import FE, unmet_stack
from ._gates import ANY_KNOWN_GATE, FE_COMPRESSOR, constant_values, gate_message, megatron_compressor, read_gate
from ._upstream import EAV, fe_at, mlm, mlm_at, pypi
from ._cudnn_fe_dsa import cudnn_fe_dsa
from ._cudnn_fe_common import STATIC, M8_FRONTEND, R11, m8, _not_needed
from ._anchors import missing_module, missing_prefix

FE_IMPORT = import_probe("cudnn")
CSA_FWD = "cudnn.csa.compressor:csa_compressor_forward_wrapper"
CSA_BWD = "cudnn.csa.compressor:csa_compressor_backward_wrapper"
CSA_PROBE = import_probe(CSA_FWD, CSA_BWD)  # what Megatron's _get_frontend() resolves

@check(
    "cudnn-fe.version",
    "cuDNN frontend installed, and the imported copy is the installed one",
    texts=missing_module("I-cudnn", "cudnn"),
    applies_when="dsa_backend=cudnn",
    detects="nvidia-cudnn-frontend metadata vs `import cudnn`'s __version__ and origin",
    sources=(
        mlm("megatron/core/utils.py", "509-548", "Megatron-LM dev utils.py L509-548: cudnn backend dependency check"),
        Source("cudnn-frontend python/cudnn/collect_env.py (loaded vs installed)",
               "https://github.com/NVIDIA/cudnn-frontend/blob/main/python/cudnn/collect_env.py"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 on PyPI"),
    ),
    fixes=(frontend_fixes.frontend_stack(StaticFacts({})), fixes.BACKEND_NONE),
    skip_if=_not_needed,
    static=STATIC,
    probes=(FE_IMPORT,),
)
def cudnn_fe_version(ctx: Context) -> Result:
    """With dsa_kernel_backend=cudnn, Megatron's DSv4 attention calls the cuDNN frontend's CuTe-DSL DSA wrappers
    (and, on the CCs the installed Megatron's gate admits, its fused CSA compressor: cudnn-fe.csa). The frontend
    must be installed, and the `cudnn` that imports
    must be the installed distribution: Megatron dev pins a frontend git build that reports 1.25.0, and the
    loaded-versus-installed confusion is, in the frontend's own words, the most common unreproducible-issue root
    cause. Version strings cannot prove features; cudnn-fe.csa and cudnn-fe.dsa test what loads. The fix keeps a
    frontend >= 1.27.0 and installs what it declares, or pins the tested set (frontend 1.27.0, apache-tvm-ffi
    0.1.11, nvidia-cutlass-dsl 4.5.2) together.
    """
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
        "imported_copy": static.copy("cudnn")["why"],  # which copy the job imports, and why
    }
    fix = frontend_fixes.frontend_stack(static, ctx.profile.cc)
    if not copies and not module.get("found"):
        # This check states the frontend's part of Megatron's one dependency error; kernels.flash-mla states FlashMLA's.
        also = (" Megatron's ValueError lists every missing package at once; flash_mla is missing too (see "
                "kernels.flash-mla), so its list starts with it." if not static.module("flash_mla").get("found")
                else "")
        return failed(f"nvidia-cudnn-frontend is not installed. {m8(M8_FRONTEND)}", also.strip(),
                      fixes=[fix, backend_none_fix(ctx.profile)], evidence=evidence)
    if not imported.get("ok"):
        err = imported.get("error") if isinstance(imported.get("error"), dict) else {}
        return failed(f"import cudnn failed: {error_text(imported)}", "\n".join(map(str, err.get("where") or [])),
                      fixes=[fix], evidence=evidence)
    first = static.readable_dist(FE)  # the metadata, to hold against what imports (static.version is the latter's)
    meta = first.get("version") if first else None
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
        return warned(copies_note(FE, copies, static.copy("cudnn")), fixes=[fix], evidence=evidence)
    no_csa = "" if static.module("cudnn.csa").get("found") else \
        "; it has no cudnn.csa, the fused CSA compressor (added in 1.27.0): see cudnn-fe.csa"
    return passed(f"nvidia-cudnn-frontend {meta} (import cudnn reports {imported.get('version')}){no_csa}",
                  evidence=evidence)


# d48bd6be's fused_compressor.py: the fused path is "for the THD packed, non-pre-grouped path" (L21), and the THD CP
# path pre-groups its input; 88a285f0's lets "CP pre-grouped buffers reuse the same API".
NON_PRE_GROUPED = "non-pre-grouped"


def _csa_irrelevant(profile: Profile) -> str | None:
    if profile.dsa_backend == "none":
        return "dsa_kernel_backend=none: Megatron never uses the fused CSA compressor"
    return None


def _csa_probe_needed(profile: Profile) -> bool:
    cc = profile.cc
    return _csa_irrelevant(profile) is None and not (cc is not None and not ANY_KNOWN_GATE.accepts(cc))


def _csa_missing(static: StaticFacts) -> str | None:
    """Why this frontend's cudnn.csa cannot load, read without a probe; None when nothing static says so."""
    fe = static.version(FE)
    if not static.module("cudnn.csa").get("found"):
        return f"nvidia-cudnn-frontend {fe or '(not installed)'} has no cudnn.csa (added in 1.27.0)"
    missing = unmet_stack(static)
    return f"cudnn.csa of nvidia-cudnn-frontend {fe} cannot load ({', '.join(missing)})" if missing else None


def _noted(result: Result, static: StaticFacts, where: str) -> Result:
    """A skip that still says, in one line, that cudnn.csa would not load (evidence `notice`: the text report shows
    it by default; a skip, so --strict gates are unchanged)."""
    missing = _csa_missing(static)
    if missing and isinstance(result.evidence, dict):
        result.evidence["notice"] = f"{missing}: unused {where}; at CP 1 on CC >= 10 Megatron silently runs the " \
            "eager compressor"
    return result


def _stack_note(static: StaticFacts) -> str:
    fe = static.version(FE)
    if not static.module("cudnn.csa").get("found"):
        return (f"; nvidia-cudnn-frontend {fe or '(not installed)'} has no cudnn.csa (added in 1.27.0), so on a GPU "
                "the gate admits Megatron would silently run the eager compressor")
    return ""


CSA_TEXTS = (
    *missing_prefix("I-csa", "cudnn.csa"),
    UpstreamText("R11", R11, mlm(EAV + "csa_utils/fused_compressor.py", "146-161"), "warning"),
    UpstreamText("F1", "CSA compressor requires compute capability {required} (the only validated architecture so "
                 "far), found SM{major}.{minor} on {device}", fe_at("1.27.0", "csa/compressor/api.py", 325),
                 "RuntimeError"),
    UpstreamText("F2", "CSA compressor requires compute capability major >= {major_min} (SM100+), found "
                 "SM{major}.{minor} on {device}", fe_at("1.32.0", "csa/compressor/api.py", 327), "RuntimeError"),
)


@check(
    "cudnn-fe.csa",
    "The fused CSA compressor (cudnn.csa) loads wherever the installed Megatron would use it",
    texts=CSA_TEXTS,
    applies_when="dsa_backend != none, on the CCs the installed gates admit",
    detects="the installed Megatron's and frontend's CC gates (ast); from cudnn.csa import compressor (subprocess)",
    sources=(
        mlm(EAV + "csa_utils/fused_compressor.py", "74-161",
            "Megatron-LM dev d48bd6be csa_utils/fused_compressor.py L74, L146: the CC == (10, 0) gate, FE probe, "
            "eager fallback"),
        mlm_at("88a285f056d0517039fe1dd5aa51675861463782", EAV + "csa_utils/fused_compressor.py",
               "Megatron-LM 88a285f0 csa_utils/fused_compressor.py: _MINIMUM_COMPUTE_CAPABILITY_MAJOR = 10 (>=)"),
        mlm(EAV + "csa.py", "2632-2661", "Megatron-LM dev csa.py: the THD CP path pre-groups (no fused compressor)"),
        Source("Megatron-LM 108cb6bc (#5984): the fused compressor, as csa_fused_compressor.py",
               "https://github.com/NVIDIA/Megatron-LM/commit/108cb6bcb67415a3577909595064804300bd54f9"),
        Source("verl PR #7297 (the seed incident: GB200 NaN with DSA fusion; fix commands)",
               "https://github.com/verl-project/verl/pull/7297"),
        Source("cudnn-frontend PR #427 (adds cudnn.csa.compressor)", "https://github.com/NVIDIA/cudnn-frontend/pull/427"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 wheel: cudnn/csa/compressor/api.py L322-326 check_support "
             "raises unless CC == (10, 0); cutedsl extra: apache-tvm-ffi>=0.1.11"),
        pypi(FE, "1.28.0", "nvidia-cudnn-frontend 1.28.0 wheel: cudnn/csa/compressor/compressor_sm100.py L98 "
             "MINIMUM_COMPUTE_CAPABILITY_MAJOR = 10"),
    ),
    fixes=(frontend_fixes.frontend_stack(StaticFacts({})),),
    skip_if=_csa_irrelevant,
    needs=("cudnn-fe.version",),
    static=STATIC,
    probes=lambda profile: [CSA_PROBE] if _csa_probe_needed(profile) else [],
)
def cudnn_fe_csa(ctx: Context) -> Result:
    """With a fused DSA backend, Megatron (dev >= 108cb6bc, which added the fused compressor as
    csa_fused_compressor.py; csa_utils/fused_compressor.py from 1c44a570) compresses CSA keys with the cuDNN
    frontend's fused compressor on the GPUs its gate admits, read from the installed file with ast: d48bd6be
    compares the device's capability with `== (10, 0)`, 88a285f0 admits any major >= 10. It probes
    `from cudnn.csa import compressor`, catches any exception, logs one warning and silently keeps the eager
    compressor: a fail here, whatever older advice called it. Module presence is not enough: frontend 1.27.0
    without nvidia-cutlass-dsl has `cudnn.csa` but its symbols fail to resolve, so this check resolves them in a
    probe and lists every unmet requirement of the CuTe-DSL stack; frontend 1.26.0 and older have no
    `cudnn.csa`. The frontend's own `check_support` is read from its installed cudnn/csa/compressor files:
    1.27.0 accepts (10, 0) only and raises RuntimeError on 10.3, 1.28.0 accepts any major >= 10; where Megatron
    admits a CC the frontend rejects, the first fused call raises, and the fix pins the first frontend that
    accepts it. With the CC not known (an image built for several GPU kinds) problems are warnings naming the
    GPUs that would use the fused path; on a known CC the gates reject, and under CP > 1 with d48bd6be's
    non-pre-grouped-only dispatch, it is a skip saying so (and whether this frontend has cudnn.csa at all); such a
    skip, and one for a Megatron without the fused compressor, carries a one-line notice when cudnn.csa would not
    load, which the text report shows by default (a skip all the same: --strict gates are unchanged).
    Context: the seed incident, a 40-GPU GB200 verl job that produced NaN with a frontend predating cudnn.csa,
    was cured on H100 by reinstalling the frontend 1.27.0 and apache-tvm-ffi 0.1.11; the eager compressor is
    not proven to be its cause.
    """
    static, profile = ctx.static, ctx.profile
    cc = profile.cc
    module, gate = megatron_compressor(static)
    if static.module("megatron.core").get("found") and module is None:
        return _noted(skipped("the installed Megatron has no fused CSA compressor (csa_utils/fused_compressor.py, "
                              "dev >= 108cb6bc): it always uses the eager compressor, so cudnn.csa is never loaded",
                              evidence={}), static, "by this Megatron (no fused compressor; dev has one)")
    fe = static.readable_dist(FE)
    missing = unmet_stack(static)
    fe_gate = read_gate(static, *FE_COMPRESSOR)
    evidence: dict = {
        "frontend": fe.get("version") if fe else None,
        "cudnn.csa_found": static.module("cudnn.csa").get("found", False), "unmet_cutedsl_requirements": missing,
        "megatron_gate": {"rule": gate.describe(), "where": gate.where} if gate else
        ("not known (Megatron not installed)" if module is None else "not known (its comparison could not be read)"),
        "frontend_gate": {"rule": fe_gate.describe(), "where": fe_gate.where} if fe_gate else None}
    admits = gate or ANY_KNOWN_GATE
    gate_words = (f"the installed Megatron's gate ({gate.describe()}, {gate.where})" if gate else
                  "Megatron's gate (not known here: every known one admits only compute capability major >= 10)")
    src = static.source(module) if module else {}
    pre_grouped = profile.cp > 1 and bool(src.get("contains", {}).get(NON_PRE_GROUPED))
    if pre_grouped:
        return _noted(skipped("CP > 1: the installed Megatron's THD CP path pre-groups its input, and its fused "
                              "compressor takes only the non-pre-grouped path (fused_compressor.py), so cudnn.csa is "
                              "never used" + _stack_note(static), evidence=evidence), static, "at CP > 1")
    if cc is not None and not admits.accepts(cc):
        return _noted(skipped(f"compute capability {profile.gpu_arch}: {gate_words} rejects it, so the eager "
                              "compressor is the normal path here" + _stack_note(static), evidence=evidence), static,
                      f"on compute capability {profile.gpu_arch}")
    fe_min = frontend_fixes.frontend_minimum(cc)
    stack = [frontend_fixes.frontend_stack(static, cc),
             *([fixes.torch(static)] if any(m.startswith("torch ") for m in missing) else [])]
    at_cp = " at CP 1" if src.get("contains", {}).get(NON_PRE_GROUPED) else ""
    jobs = f"a job with a fused DSA backend{at_cp} on {admits.gpus()}"
    # Whether Megatron uses the fused path here is not known: no CC, or a gate not read where the known ones differ
    # (d48bd6be admits 10.0 only and never under CP > 1; 88a285f0 admits any major >= 10, CP included).
    unknown = None
    if cc is None:
        unknown = "GPU arch not known (no GPU detected, no --gpu-arch)"
    elif gate is None and (cc != (10, 0) or profile.cp > 1):
        unknown = (f"whether Megatron uses the fused compressor at compute capability {profile.gpu_arch}"
                   f"{' with CP > 1' if profile.cp > 1 else ''} is not known (its gate could not be read)")
    elif profile.cp > 1 and src.get("error"):  # the pre-grouping test above found nothing, in a file not read whole
        unknown = (f"whether Megatron's THD CP path takes the fused compressor is not known ({module} could not be "
                   f"read whole: {cut(str(src['error']), 200)})")
    if fe is None and not static.module("cudnn").get("found"):
        text = "nvidia-cudnn-frontend is not installed: Megatron silently keeps the eager CSA compressor"
        if unknown:
            return warned(f"{unknown}: {text} on {jobs}", fixes=stack, evidence=evidence)
        return failed(text, fixes=stack, evidence=evidence)
    answer = ctx.require(CSA_PROBE)
    fwd, bwd = outcome(answer, CSA_FWD), outcome(answer, CSA_BWD)
    evidence["forward"] = {k: fwd.get(k) for k in ("ok", "error")}
    evidence["backward"] = {k: bwd.get(k) for k in ("ok", "error")}
    if not (fwd.get("ok") and bwd.get("ok")):
        bad = fwd if not fwd.get("ok") else bwd
        detail = error_text(bad)
        why = ""
        if not evidence["cudnn.csa_found"]:
            why = f"nvidia-cudnn-frontend {evidence['frontend']} has no cudnn.csa (added in 1.27.0). "
        lines = [
            "Megatron probes `from cudnn.csa import compressor` once, logs one WARNING and silently keeps the eager "
            "compressor:",
            "  " + R11.format(detail=detail),
            "The eager path runs but is numerically different and slower. The seed incident (a 40-GPU GB200 verl "
            "job that produced NaN with a frontend predating cudnn.csa; verl PR #7297) was cured, on H100, by `pip "
            "install --no-deps apache-tvm-ffi==0.1.11` and `pip install --force-reinstall --no-deps "
            "nvidia-cudnn-frontend==1.27.0`; that the eager compressor caused the NaN is not proven.",
        ]
        if missing:
            lines.append("Unmet requirements of the frontend's CuTe-DSL stack (all of them, not just the first "
                         "failing import): " + ", ".join(missing))
        summary = (f"{why}cudnn.csa compressor does not load ({detail}): Megatron silently falls back to the eager "
                   "CSA compressor")
        if unknown:
            return warned(f"{unknown}: {summary} on {jobs}", "\n".join(lines), fixes=stack, evidence=evidence)
        return failed(summary, "\n".join(lines), fixes=stack, evidence=evidence)
    loads = f"cudnn.csa compressor loads (nvidia-cudnn-frontend {evidence['frontend']})"
    if fe_gate is None:
        return warned(f"{loads}, but the compute capabilities its check_support accepts could not be read "
                      f"({', '.join(FE_COMPRESSOR)}): whether its first call raises here is not known",
                      evidence=evidence)
    constants = constant_values(static, *FE_COMPRESSOR)
    if cc is not None and not fe_gate.accepts(cc) and not unknown:
        message = gate_message(static, FE_COMPRESSOR[0], cc, constants) or \
            f"CSA compressor requires {fe_gate.describe()}, found SM{cc[0]}.{cc[1]}"
        return failed(f"{loads}, but its check_support rejects compute capability {profile.gpu_arch}, which "
                      f"{gate_words} admits: Megatron's first fused compress call raises RuntimeError: {message}",
                      f"The frontend's gate: {fe_gate.describe()} ({fe_gate.where}). nvidia-cudnn-frontend {fe_min} is "
                      "the first release whose CSA compressor accepts this compute capability.",
                      fixes=stack, evidence=evidence)
    if unknown:
        narrower = [c for c in ((10, 0), (10, 3)) if admits.accepts(c) and not fe_gate.accepts(c)
                    and c in ((cc,) if cc else ((10, 0), (10, 3)))]
        if narrower:
            c = narrower[0]
            message = gate_message(static, FE_COMPRESSOR[0], c, constants) or fe_gate.describe()
            return warned(f"{unknown}: {loads}, but on compute capability {c[0]}.{c[1]}, which {gate_words} "
                          f"admits, Megatron's first fused compress call would raise RuntimeError: {message}",
                          f"nvidia-cudnn-frontend {frontend_fixes.frontend_minimum(c)} is the first release whose CSA "
                          f"compressor accepts {c[0]}.{c[1]}; state the GPU with --gpu-arch to check one kind.",
                          fixes=[frontend_fixes.frontend_stack(static, c)], evidence=evidence)
        return passed(f"{loads}; its check_support accepts every compute capability {gate_words} admits "
                      f"({fe_gate.describe()}), so {jobs} uses it", evidence=evidence)
    return passed(f"{loads} and accepts compute capability {profile.gpu_arch}: Megatron uses the fused CSA "
                  "compressor on this job", evidence=evidence)


CHECKS = [cudnn_fe_version, cudnn_fe_csa, cudnn_fe_dsa]
