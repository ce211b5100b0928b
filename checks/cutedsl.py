"""The CuTe-DSL stack: Megatron's CP layout kernels (nvidia-cutlass-dsl, cuda.bindings) and apache-tvm-ffi."""

from __future__ import annotations

from packaging.version import Version

from dsv4_doctor.facts import StaticFacts, error_text, outcome, requirement_text, version
from dsv4_doctor.model import Check, Context, Profile, Result, Source, failed, passed, warned
from dsv4_doctor.probes import StaticRequest, import_probe

from . import fixes
from ._upstream import EAV, mlm, pypi

TVM_FFI = "apache-tvm-ffi"
FE = "nvidia-cudnn-frontend"
CUTLASS_DISTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "cuda-python", "cuda-bindings")
STATIC = StaticRequest(distributions=(TVM_FFI, FE, *CUTLASS_DISTS), modules=("tvm_ffi", "cutlass"))

# Megatron's cp_layout_kernels.py imports exactly these; it catches only ImportError.
CUTE_TARGETS = ("cuda.bindings.driver", "cutlass", "cutlass.cute", "cutlass.utils",
                "cutlass.cute.runtime:from_dlpack", "cutlass.cute.runtime:make_fake_stream")
CUTE_PROBE = import_probe(*CUTE_TARGETS)


def _tvm_irrelevant(profile: Profile) -> str | None:
    if profile.cp == 1 and profile.dsa_backend == "none":
        return ("CP = 1 with dsa_kernel_backend=none: neither the CP layout kernels nor the cuDNN frontend's "
                "CuTe-DSL kernels run")
    return None


def _tvm(ctx: Context) -> Result:
    static = ctx.static
    fe = static.version(FE)
    needed_by = []
    if ctx.profile.dsa_backend == "cudnn":
        needed_by.append("the cuDNN frontend's DSA kernels (they import tvm_ffi at their first call, any CP)")
    if ctx.profile.cp > 1:
        needed_by.append("the CP layout kernels (compiled with --enable-tvm-ffi)")
    installed = static.version(TVM_FFI)
    declared = fixes.frontend_requirement(static, TVM_FFI)
    evidence = {"version": installed, "frontend": fe, "frontend_declares": str(declared) if declared else None,
                "needed_by": needed_by, "module_found": static.module("tvm_ffi").get("found", False)}
    who = " and ".join(needed_by)
    fix = fixes.tvm_ffi(static)
    if installed is None:
        return failed(f"apache-tvm-ffi is not installed; needed by {who}",
                      "Measured on an H200 (frontend 1.27.0): without it the first DSA call raises "
                      "ModuleNotFoundError: No module named 'tvm_ffi'.", fixes=[fix], evidence=evidence)
    if not evidence["module_found"]:
        return failed(f"apache-tvm-ffi {installed} is installed but its module tvm_ffi is not on sys.path; needed "
                      f"by {who}", fixes=[fix], evidence=evidence)
    if declared is not None and declared.specifier and not declared.specifier.contains(installed, prereleases=True):
        return warned(
            f"apache-tvm-ffi {installed} does not meet what nvidia-cudnn-frontend {fe} declares "
            f"({requirement_text(declared)})",
            "A declared requirement is unmet. No upstream source or run shows an older tvm-ffi computing something "
            "wrong: on an H200, 0.1.9 ran the frontend 1.27.0 DSA indexer and matched the reference exactly.",
            fixes=[fix], evidence=evidence)
    meets = (f", meets the frontend's {requirement_text(declared)}" if declared is not None and str(declared.specifier)
             else "")
    return passed(f"apache-tvm-ffi {installed} (needed by {who}{meets})", evidence=evidence)


tvm_ffi_version = Check(
    id="tvm-ffi.version",
    title="apache-tvm-ffi is installed where the CuTe-DSL kernels need it",
    explanation="""
        The cuDNN frontend's CuTe-DSL DSA kernels convert tensors with `from_dlpack(..., enable_tvm_ffi=True)`
        (frontend 1.26/1.27 utils/tensor_conversion.py), which imports `tvm_ffi` at the first kernel call: with
        dsa_kernel_backend=cudnn, at any CP, a missing apache-tvm-ffi fails the first DSA step (measured on an H200:
        `ModuleNotFoundError: No module named 'tvm_ffi'`). Megatron's CP layout kernels compile with
        `--enable-tvm-ffi` too (CP > 1, any backend). A version below what the installed frontend declares (1.27.0
        and later: `apache-tvm-ffi>=0.1.11`; the Megatron and verl locks pin 0.1.9) is a warning: a declared
        requirement is unmet, but 0.1.9 ran the DSA indexer correctly on an H200 and no source records a failure.
    """,
    applies_when="dsa_backend=cudnn, or CP > 1",
    detects="apache-tvm-ffi distribution version and tvm_ffi module location; the frontend's declared requirement",
    sources=(
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 wheel, cudnn/deepseek_sparse_attention/utils/"
             "tensor_conversion.py: from_dlpack(..., enable_tvm_ffi=True)"),
        mlm(EAV + "csa_utils/cp_layout_kernels.py", "626-638",
            "Megatron-LM dev cp_layout_kernels.py L626-638 (--enable-tvm-ffi)"),
        pypi(FE, "1.27.0", "nvidia-cudnn-frontend 1.27.0 METADATA (apache-tvm-ffi>=0.1.11)"),
        Source("verl PR #7297 (the DSv4 CP example; no confirmed record in its thread ties a NaN to tvm-ffi)",
               "https://github.com/verl-project/verl/pull/7297"),
    ),
    fixes=(fixes.tvm_ffi(StaticFacts({})),),
    skip_if=_tvm_irrelevant,
    static=STATIC,
    run=_tvm,
)


def _cutlass(ctx: Context) -> Result:
    static = ctx.static
    answer = ctx.require(CUTE_PROBE)
    results = [outcome(answer, t) for t in CUTE_TARGETS]
    dists = {d: static.version(d) for d in CUTLASS_DISTS}
    evidence = {"distributions": dists, "imports": {r["target"]: r.get("ok") for r in results}}
    bad = [r for r in results if not r.get("ok")]
    if not bad:
        return passed(f"cutlass, cutlass.cute and cuda.bindings.driver import (nvidia-cutlass-dsl "
                      f"{dists['nvidia-cutlass-dsl'] or '?'}): the CP layout kernels can compile", evidence=evidence)
    first = bad[0]
    evidence["errors"] = {r["target"]: error_text(r) for r in bad}
    details = [
        "Megatron imports these at module load and only records _CUTE_AVAILABLE=False; the first CP forward then "
        "fails with \"DSv4 CP compressor compaction requires CUDA tensors and CuTeDSL.\" There is no torch fallback: "
        "every CP > 1 DSv4 layer, window-only ones included, runs these kernels.",
        "Failed: " + "; ".join(f"{t}: {e}" for t, e in evidence["errors"].items()),
    ]
    non_import = [r for r in bad if (r.get("error") or {}).get("type") not in ("ImportError", "ModuleNotFoundError")]
    if non_import:
        details.append("A non-ImportError escapes Megatron's `except ImportError`, so importing the DSv4 attention "
                       "module itself will raise.")
    if dists["nvidia-cutlass-dsl"] and (first.get("error") or {}).get("missing_module") == "cutlass":
        cutlass_v = version(static.version("nvidia-cutlass-dsl"))
        if cutlass_v is not None and cutlass_v >= Version("4.8"):
            details.append(
                f"nvidia-cutlass-dsl {cutlass_v} is installed but `cutlass` is not importable. From 4.8 the package "
                "is repackaged: the .pth file that puts it on sys.path is in the nvidia-cutlass-dsl meta wheel "
                "(`pip install --target` and `python -S` skip .pth files), the `cutlass` package itself is in "
                "nvidia-cutlass-dsl-libs-core, and nvidia-cutlass-dsl-libs-base requires cuda-bindings>=12.8: "
                "install the meta wheel with its dependencies (`pip install 'nvidia-cutlass-dsl[cu13]'`).")
        else:
            details.append("nvidia-cutlass-dsl is installed but `cutlass` is not importable: its libs-base wheel puts "
                           "the package on sys.path with a .pth file, which `pip install --target` and `python -S` "
                           "skip.")
    return failed(f"the CuTe-DSL CP layout kernels cannot load ({first['target']}: {error_text(first)})",
                  "\n".join(details), fixes=[fixes.cutlass(static)], evidence=evidence)


cutlass_dsl_import = Check(
    id="cutlass-dsl.import",
    title="The CuTe-DSL stack for the CP layout kernels imports",
    explanation="""
        Every DSv4 layer with CP > 1, on any DSA backend, runs Megatron's CuTe-DSL CP layout kernels. Megatron
        imports `cuda.bindings.driver`, `cutlass`, `cutlass.cute`, `cutlass.utils` and `cutlass.cute.runtime`
        (`from_dlpack`, `make_fake_stream`) inside `try/except ImportError` and sets `_CUTE_AVAILABLE=False`; the
        first CP forward then raises "DSv4 CP compressor compaction requires CUDA tensors and CuTeDSL." There is no
        torch fallback. This check imports exactly that list in a probe.
    """,
    applies_when="CP > 1",
    detects="import cuda.bindings.driver, cutlass, cutlass.cute, cutlass.utils, cutlass.cute.runtime (subprocess)",
    sources=(
        mlm(EAV + "csa_utils/cp_layout_kernels.py", "15-29",
            "Megatron-LM dev cp_layout_kernels.py L15-29 (_CUTE_AVAILABLE)"),
        mlm(EAV + "csa_utils/cp_layout_kernels.py", "678",
            "Megatron-LM dev cp_layout_kernels.py L678: requires CUDA tensors and CuTeDSL"),
        pypi("nvidia-cutlass-dsl", "4.5.2", "nvidia-cutlass-dsl on PyPI"),
        pypi("nvidia-cutlass-dsl", "4.8.0", "nvidia-cutlass-dsl 4.8.x: the .pth file in the meta wheel, `cutlass` in "
             "nvidia-cutlass-dsl-libs-core, libs-base requiring cuda-bindings>=12.8"),
    ),
    fixes=(fixes.cutlass(StaticFacts({})),),
    skip_if=lambda p: None if p.cp > 1 else ("CP = 1: the CuTe-DSL CP layout kernels run only with CP > 1 (the "
                                             "frontend's own CuTe kernels are checked by cudnn-fe.dsa/csa)"),
    static=STATIC,
    probes=(CUTE_PROBE,),
    run=_cutlass,
)

CHECKS = [tvm_ffi_version, cutlass_dsl_import]
