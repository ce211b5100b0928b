"""Transformer Engine: installed, consistent, new enough for sequence packing, and its torch extension imports."""

from __future__ import annotations


from dsv4_doctor.api import (TORCH, Context, Result, Source, StaticRequest, UpstreamText, at_least, check, error_text,
                             errored, failed, import_probe, outcome, passed, skipped, version, warned)

from .fixes import catalogue as fixes
from ._archs import RULES_SOURCE
from ._anchors import missing_prefix, undefined_symbols
from ._upstream import measured, mlm, pypi, te_at
from ._te_build import TE_DISTS, _te_archs, _classify

# PyPI splits TE into a metapackage, a CUDA-specific core and an sdist-only torch extension; an NGC or source build is
# one distribution, `transformer_engine` (importlib.metadata normalises it to the same name as transformer-engine).
# nvidia-cublas: which TE release a fix installs (TE >= 2.13 needs cuBLAS >= 13.2, fixes.te_choice).
STATIC = StaticRequest(distributions=(*TE_DISTS, "nvidia-cublas", "torch"), modules=("transformer_engine",),
                       device_code=("transformer_engine", "transformer_engine_torch"))
TE_IMPORT = import_probe("transformer_engine.pytorch")
PACKING_MIN = fixes.TE_MIN_VERSION
PACKING_EXCEPTION = "2.9.0.dev0+5b3092a"  # the one pre-release Megatron's gate accepts by name

INSTALL = fixes.TE
REINSTALL_CONSISTENT = fixes.TE_REINSTALL

TE_SOURCES = (
    mlm("megatron/core/transformer/transformer_config.py", "3672-3704",
        "Megatron-LM dev transformer_config.py L3672-3704: SFT sequence packing requires TE >= 2.9.0"),
    mlm("megatron/core/utils.py", "295-323", "Megatron-LM dev utils.py get_te_version / is_te_min_version"),
    Source("TransformerEngine transformer_engine/common/__init__.py (version-consistency assert)",
           "https://github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/common/__init__.py"),
    Source("TransformerEngine #1541 (mixed TE packages)", "https://github.com/NVIDIA/TransformerEngine/issues/1541"),
)


def _installed(static) -> dict:
    return {name: static.dist_copies(name) for name in TE_DISTS if static.dist_copies(name)}


VERSION_TEXTS = (
    UpstreamText("M7-any", "SFT sequence packing requires Transformer Engine >= {minimum} but got {version}",
                 mlm("megatron/core/transformer/transformer_config.py", "3680-3685"), "ValueError",
                 match=("SFT sequence packing requires Transformer Engine",)),
    UpstreamText("M7", "SFT sequence packing requires Transformer Engine >= 2.9.0 but got {version} (TE < 2.9.0 may "
                 "have convergence issues).", mlm("megatron/core/transformer/transformer_config.py", "3680-3685"),
                 "ValueError"),
    UpstreamText("T1", "Transformer Engine package version mismatch. Found {packages}.",
                 te_at("common/__init__.py", "common/__init__.py (version consistency)"),
                 "AssertionError"),
    UpstreamText("T2", "Transformer Engine package version mismatch. Found transformer_engine_torch v{torch_ext}, "
                 "{others}. Install transformer-engine using 'pip3 install --no-build-isolation "
                 "transformer-engine[pytorch]==VERSION'",
                 te_at("pytorch/__init__.py", "pytorch/__init__.py (torch extension version)"), "AssertionError",
                 match=("Transformer Engine package version mismatch. Found transformer_engine_torch v",
                        "Install transformer-engine using 'pip3 install --no-build-isolation "
                        "transformer-engine[pytorch]==")),
    UpstreamText("T3", "Found empty `transformer-engine` meta package installed{rest}",
                 te_at("common/__init__.py", "common/__init__.py (meta package without a core)"),
                 "RuntimeError", match=("Found empty ", "transformer-engine", " meta package installed")),
    UpstreamText("T9", "No dot product attention backend is available for the provided inputs. Please run with "
                 "NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2{rest}",
                 te_at("pytorch/attention/dot_product_attention/dot_product_attention.py",
                       "dot_product_attention.py (no backend fits)"), "ValueError", cause=False),
    UpstreamText("T11", "thd format is not supported with hierarchical CP implementation yet",
                 te_at("pytorch/attention/dot_product_attention/context_parallel.py",
                       "context_parallel.py L5021-5023 (THD with a2a+p2p; gone from 2.19)", "release_v2.18"),
                 "AssertionError"),
)


@check(
    "te.version",
    "Transformer Engine installed, consistent and >= 2.9 for sequence packing",
    texts=VERSION_TEXTS,
    applies_when="always; >= 2.9.0 when CP > 1",
    detects="TE distribution versions (metadata), their agreement and duplicate copies",
    sources=TE_SOURCES,
    fixes=(INSTALL, REINSTALL_CONSISTENT),
    static=STATIC,
)
def te_version(ctx: Context) -> Result:
    """DSv4 layers are built with Megatron's TESpecProvider, so Transformer Engine must be installed. Every DSv4
    run with CP > 1 uses a sequence_packing_scheduler, and Megatron then requires TE >= 2.9.0 (it raises
    "SFT sequence packing requires Transformer Engine >= 2.9.0 but got ..." at config time; it compares plain
    versions, so 2.9.0+abc passes and 2.9.0.dev0 fails, except the one build 2.9.0.dev0+5b3092a). PyPI splits TE
    into transformer-engine, transformer-engine-cu12/-cu13 and transformer-engine-torch; their versions must
    agree or TE asserts at import. NGC and source builds are a single `transformer_engine` distribution with a
    `+git` local version, which is understood. The release a fix installs follows the installed cuBLAS: TE 2.13
    and later need cublasLtGroupedMatrixLayoutInit_internal, which nvidia-cublas exports only from 13.2 on,
    while torch 2.11.0's cuda-toolkit==13.0.2 pin installs 13.1.0.3; below 13.2 the fix pins TE 2.12.0 (it loads
    and passes there, measured on an H200) and says why, else 2.16.1 (the verl DSv4 image's).
    """
    static = ctx.static
    copies = _installed(static)
    module = static.module("transformer_engine")
    # Broken METADATA is deps.metadata's finding; the verdict here comes from the copies that read.
    readable = {name: [c for c in cs if not c.get("error") and c.get("version")] for name, cs in copies.items()}
    readable = {name: cs for name, cs in readable.items() if cs}
    unreadable = sorted(name for name, cs in copies.items() if any(c.get("error") for c in cs))
    first = {name: cs[0] for name, cs in readable.items()}
    evidence = {
        "distributions": {name: [c.get("version") for c in cs] for name, cs in copies.items()},
        "unreadable_metadata": unreadable,
        "module": module.get("origin") or module.get("locations"),
        "imported_copy": static.copy("transformer_engine")["why"],  # which copy the job imports, and why
        "cp": ctx.profile.cp,
    }
    note = f" (unreadable METADATA of {', '.join(unreadable)}: see deps.metadata)" if unreadable else ""
    if not copies:
        if module.get("found"):
            return warned("transformer_engine is importable but has no distribution metadata: its version is unknown",
                          "Megatron reads te.__version__ first; te.import reports whether it imports.",
                          fixes=[fixes.te_for(static)], evidence=evidence)
        return failed(
            "Transformer Engine is not installed",
            "Megatron's DSv4 layer spec is built with TESpecProvider; without TE, Megatron sets HAVE_TE=False "
            "silently and the model build fails.",
            fixes=[fixes.te_for(static)], evidence=evidence,
        )
    if not first:
        why = f"every Transformer Engine distribution's METADATA is unreadable ({', '.join(unreadable)})"
        if ctx.profile.cp > 1:
            return errored(f"cannot judge Megatron's TE >= 2.9.0 packing gate: {why}",
                           "Megatron reads the version with importlib.metadata too; see deps.metadata.",
                           evidence=evidence)
        return warned(f"Transformer Engine version unknown: {why}", fixes=[fixes.te_reinstall(static)],
                      evidence=evidence)
    doubled = {name: [c.get("path") for c in cs] for name, cs in copies.items() if len(cs) > 1}
    versions = {name: c.get("version") for name, c in first.items()}
    distinct = {str(version(v) or v) for v in versions.values()}
    if len(distinct) > 1:
        found = " and ".join(f"{n} v{v}" for n, v in versions.items())
        return failed(
            f"Transformer Engine package version mismatch. Found {found}.",
            "TE asserts this at import (AssertionError: Transformer Engine package version mismatch ...), or loads a "
            "torch extension built for another release." + note,
            fixes=[fixes.te_reinstall(static)], evidence=evidence,
        )
    te = next(iter(versions.values()))
    evidence["version"] = te
    packing_ok = at_least(te, PACKING_MIN) or te == PACKING_EXCEPTION
    if ctx.profile.cp > 1 and not packing_ok:
        return failed(
            f"SFT sequence packing requires Transformer Engine >= 2.9.0 but got {te} "
            "(TE < 2.9.0 may have convergence issues).",
            "CP > 1 DSv4 needs a sequence_packing_scheduler, and Megatron's TransformerConfig raises this ValueError "
            "at config time when TE is older than 2.9.0 (or does not import: then it says 'got 0.0.0')."
            + (" More than one copy of TE is installed, too." if doubled else "") + note,
            fixes=[fixes.te_reinstall(static) if doubled else fixes.te_for(static)], evidence=evidence,
        )
    if doubled:
        return warned(f"Transformer Engine {te}: more than one copy of "
                      + ", ".join(f"{n} ({', '.join(map(str, p))})" for n, p in doubled.items())
                      + "; the first on sys.path wins" + note,
                      fixes=[fixes.te_reinstall(static)], evidence=evidence)
    packing = "" if packing_ok else "; CP > 1 (sequence packing) will need >= 2.9.0"
    return passed(f"Transformer Engine {te} ({', '.join(first)}){packing}{note}", evidence=evidence)


IMPORT_TEXTS = (
    *missing_prefix("I-te", "transformer_engine"),
    # TE's undefined-symbol reader (_undefined): one of TE's own libraries needs a torch symbol (built against
    # another torch) or a versioned symbol of a library (built against a newer one, cuBLAS). A symbol of TE's own
    # names no cause the reader knows.
    *undefined_symbols("T6-lib", "transformer_engine", "TransformerEngine #1192 / #1684 (undefined symbol)",
                       "https://github.com/NVIDIA/TransformerEngine/issues/1192"),
    UpstreamText("T4", "Could not find shared object file for Transformer Engine torch lib.",
                 Source("TransformerEngine #1981 (no [pytorch] extra) / #2505 (NVTE_RELEASE_BUILD=1)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1981"), "FileNotFoundError"),
    UpstreamText("T5", "module 'transformer_engine' has no attribute 'pytorch'",
                 Source("TransformerEngine #1379 (the extension's ImportError swallowed)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1379"), "AttributeError"),
    UpstreamText("T6", "undefined symbol: _ZN3c10", Source("TransformerEngine #1192 / #1684 (torch ABI mismatch)",
                 "https://github.com/NVIDIA/TransformerEngine/issues/1192"), "ImportError"),
    UpstreamText("T7", "Multiple files found: {files}",
                 te_at("common/__init__.py", "common/__init__.py (duplicate shared objects)"), "RuntimeError"),
    UpstreamText("T8", "{library} shared object not found.",
                 te_at("common/__init__.py", "common/__init__.py (library loader, >= 2.11)"), "RuntimeError"),
    UpstreamText("T8-adv", "libcudnn_adv.so.9: cannot open shared object file",
                 Source("TransformerEngine #1853 (a missing cuDNN sub-library)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1853"), "OSError"),
    UpstreamText("T8-status", "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
                 Source("TransformerEngine #1853 (a missing cuDNN sub-library)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1853"), "RuntimeError"),
    UpstreamText("T10", "Precompiled wheel not found. Building from source...",
                 Source("TransformerEngine #2383 (no prebuilt torch extension wheel)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/2383"), "log"),
)


@check(
    "te.import",
    "Transformer Engine's PyTorch extension imports",
    texts=IMPORT_TEXTS,
    applies_when="Transformer Engine installed",
    detects="import transformer_engine.pytorch in a subprocess",
    sources=(
        Source("TransformerEngine transformer_engine/pytorch/__init__.py",
               "https://github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/pytorch/__init__.py"),
        mlm("megatron/core/extensions/transformer_engine.py", "71-87",
            "Megatron-LM dev extensions/transformer_engine.py L71-87 (HAVE_TE=False on ImportError)"),
        Source("TransformerEngine #1192 / #1684 (undefined symbol: torch ABI mismatch)",
               "https://github.com/NVIDIA/TransformerEngine/issues/1192"),
        Source("TransformerEngine #1853 (libcudnn_adv.so.9 cannot be opened)",
               "https://github.com/NVIDIA/TransformerEngine/issues/1853"),
        measured("docs/gpu-runs/2026-12-01-h200/README.md", "Measured on an H200, 2026-12-01: TE "
                 "2.16.1 fails on torch 2.11.0 with undefined symbol cublasLtGroupedMatrixLayoutInit_internal, version "
                 "libcublasLt.so.13; TE 2.12.0 imports and passes there"),
        pypi("nvidia-cublas", "13.2.0.9", "nvidia-cublas 13.2.0.9: libcublasLt.so.13 exports "
             "cublasLtGroupedMatrixLayoutInit_internal (13.1.0.3 and 13.1.2.11 do not; nm -D on the wheels)"),
        pypi("torch", "2.11.0", "torch 2.11.0 METADATA: Requires-Dist cuda-toolkit[cublas,...]==13.0.2 (installs "
             "nvidia-cublas 13.1.0.3)"),
        pypi("torch", "2.15.0", "torch 2.15.0 METADATA: Requires-Dist cuda-toolkit==13.2.2 (nvidia-cublas 13.4.1.3 "
             "exports cublasLtGroupedMatrixLayoutInit_internal: a fourth way out)"),
        Source("TransformerEngine build_tools/utils.py cuda_archs() (NVTE_CUDA_ARCHS, default 70;80;89;90;100;120)",
               "https://github.com/NVIDIA/TransformerEngine/blob/main/build_tools/utils.py"),
        RULES_SOURCE,
    ),
    fixes=(INSTALL, REINSTALL_CONSISTENT),
    static=STATIC,
    probes=(TE_IMPORT, TORCH),
)
def te_import(ctx: Context) -> Result:
    """Imports `transformer_engine.pytorch` in an isolated probe and catches everything. TE's top-level package
    swallows extension import errors (the failure then shows up as "module 'transformer_engine' has no
    attribute 'pytorch'" on first use), and Megatron catches the ImportError and silently sets HAVE_TE=False,
    yet DSv4 needs TESpecProvider. The error is classified. An undefined torch symbol (in
    transformer_engine_torch) is an ABI mismatch: rebuild the extension alone against the installed torch
    (--no-deps: a forced reinstall of TE would re-pick torch too), or install 2.12.0 where the installed cuBLAS
    cannot load the installed release's core. An
    undefined symbol with a version tag names the library that should provide it (`undefined symbol:
    cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13`: TE 2.13 and later need cuBLAS 13.2,
    while torch 2.11.0 installs 13.1); a probe finds every copy of that library, the pip distribution that
    ships it and whether its ELF dynamic symbol table exports the symbol, and the fix is a TE built against the
    installed cuBLAS (2.12.0, verified on an H200), with the other ways out and their costs in the details. A
    missing libcudnn/libcublas is a library or CUDA major-version mismatch; a missing torch lib means the
    [pytorch] extra was not installed. A Python module TE's own code imports that is not installed (`No module
    named 'pydantic'` after a --no-deps install, seen on an H200 with TE 2.12.0) is the TE requirement that
    declares it, and the fix installs that requirement; a rebuild would not help. Most of TE's device code is
    in libtransformer_engine.so, beside its torch extension: the archs of both `.nv_fatbin` sections are compared
    with the target CC by CUDA's rules, and a build with nothing that runs there fails (its kernels cannot launch).
    """
    static = ctx.static
    if not _installed(static) and not static.module("transformer_engine").get("found"):
        return skipped("Transformer Engine is not installed (see te.version)")
    answer = ctx.require(TE_IMPORT)
    result = outcome(answer, "transformer_engine.pytorch")
    torch = ctx.probe(TORCH)
    cuda = (torch.data or {}).get("cuda_build") if torch.ok and isinstance(torch.data, dict) else None
    cuda_major = str(cuda).split(".")[0] if cuda else "13"
    evidence = {"origin": result.get("origin"), "torch_cuda": cuda, "import_s": result.get("duration_s"),
                "imported_copy": static.copy("transformer_engine")["why"]}  # the copy whose device code is read
    if result.get("ok"):
        return _te_archs(ctx, evidence) or passed(
            f"transformer_engine.pytorch imports ({float(result.get('duration_s') or 0):.1f} s)"
            + "".join(f"; {v['text']}, for {v['target_cc']}" for v in evidence["device_code"].values()
                      if v["state"] == "runs"), evidence=evidence)
    message = error_text(result)
    err = result.get("error") if isinstance(result.get("error"), dict) else {}
    evidence["error"] = err
    missing = err.get("missing_module") if err.get("type") == "ModuleNotFoundError" else ""
    from .smoke._causes import cause_of, crash_cause, crash_text

    if cause_of(message) in ("oom", "driver", "no-device", "illegal-access"):
        # A GPU state, not a broken install: no rebuild fixes it (TE touched CUDA while importing).
        cause = crash_cause(ctx, crash_text(message), what="import transformer_engine.pytorch", hint="te.import")
        if cause is not None:
            evidence["crash_text"] = crash_text(message)
            return errored(cause["summary"], evidence=evidence) if cause["cause"] == "oom" else failed(
                cause["summary"], fixes=cause["fixes"], evidence=evidence)
    hint, found, more = _classify(ctx, message, cuda_major, str(missing or ""))
    evidence.update(more)
    return failed(
        f"import transformer_engine.pytorch failed: {message}",
        f"{hint}\n`import transformer_engine` swallows this error and Megatron silently sets HAVE_TE=False, so the "
        "DSv4 model build (TESpecProvider) fails later with a less helpful message.\n"
        + "\n".join(map(str, err.get("where") or [])),
        fixes=found, evidence=evidence,
    )

CHECKS = [te_version, te_import]
