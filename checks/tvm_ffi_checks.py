"""apache-tvm-ffi, which Megatron's CP layout kernels (--enable-tvm-ffi) and the cuDNN frontend's CuTe-DSL
kernels load."""

from __future__ import annotations


from dsv4_doctor.api import (Context, Profile, Result, Source, StaticFacts, StaticRequest, check, failed, passed,
                             requirement_text, warned)

from .fixes import frontend as frontend_fixes
from ._anchors import missing_prefix
from ._upstream import EAV, mlm, pypi

TVM_FFI = "apache-tvm-ffi"
FE = "nvidia-cudnn-frontend"
CUTLASS_DISTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "cuda-python", "cuda-bindings")
STATIC = StaticRequest(distributions=(TVM_FFI, FE, *CUTLASS_DISTS), modules=("tvm_ffi", "cutlass"))


def _tvm_irrelevant(profile: Profile) -> str | None:
    if profile.cp == 1 and profile.dsa_backend == "none":
        return ("CP = 1 with dsa_kernel_backend=none: neither the CP layout kernels nor the cuDNN frontend's "
                "CuTe-DSL kernels run")
    return None


@check(
    "tvm-ffi.version",
    "apache-tvm-ffi is installed where the CuTe-DSL kernels need it",
    texts=missing_prefix("I-tvm-ffi", "tvm_ffi"),
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
    fixes=(frontend_fixes.tvm_ffi(StaticFacts({})),),
    skip_if=_tvm_irrelevant,
    static=STATIC,
)
def tvm_ffi_version(ctx: Context) -> Result:
    """The cuDNN frontend's CuTe-DSL DSA kernels convert tensors with `from_dlpack(..., enable_tvm_ffi=True)`
    (frontend 1.26/1.27 utils/tensor_conversion.py), which imports `tvm_ffi` at the first kernel call: with
    dsa_kernel_backend=cudnn, at any CP, a missing apache-tvm-ffi fails the first DSA step (measured on an H200:
    `ModuleNotFoundError: No module named 'tvm_ffi'`). Megatron's CP layout kernels compile with
    `--enable-tvm-ffi` too (CP > 1, any backend). A version below what the installed frontend declares (1.27.0
    and later: `apache-tvm-ffi>=0.1.11`; the Megatron and verl locks pin 0.1.9) is a warning: a declared
    requirement is unmet, but 0.1.9 ran the DSA indexer correctly on an H200 and no source records a failure.
    """
    static = ctx.static
    fe = static.version(FE)
    needed_by = []
    if ctx.profile.dsa_backend == "cudnn":
        needed_by.append("the cuDNN frontend's DSA kernels (they import tvm_ffi at their first call, any CP)")
    if ctx.profile.cp > 1:
        needed_by.append("the CP layout kernels (compiled with --enable-tvm-ffi)")
    installed = static.version(TVM_FFI)
    declared = frontend_fixes.frontend_requirement(static, TVM_FFI)
    evidence = {"version": installed, "frontend": fe, "frontend_declares": str(declared) if declared else None,
                "needed_by": needed_by, "module_found": static.module("tvm_ffi").get("found", False),
                "module": static.module("tvm_ffi").get("origin") or static.module("tvm_ffi").get("locations"),
                "imported_copy": static.copy("tvm_ffi")["why"]}  # which copy the job imports, and why
    who = " and ".join(needed_by)
    fix = frontend_fixes.tvm_ffi(static)
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


CHECKS = [tvm_ffi_version]
