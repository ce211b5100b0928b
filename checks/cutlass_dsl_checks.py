"""The CuTe-DSL stack of Megatron's CP layout kernels: nvidia-cutlass-dsl and cuda.bindings."""

from __future__ import annotations

from packaging.version import Version

from dsv4_doctor.api import (Context, Result, Source, StaticFacts, StaticRequest, UpstreamText, check, error_text,
                             failed, import_probe, outcome, passed, version)

from .fixes import frontend as frontend_fixes
from ._anchors import missing_module
from ._upstream import EAV, mlm, pypi

TVM_FFI = "apache-tvm-ffi"
FE = "nvidia-cudnn-frontend"
CUTLASS_DISTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "cuda-python", "cuda-bindings")
STATIC = StaticRequest(distributions=(TVM_FFI, FE, *CUTLASS_DISTS), modules=("tvm_ffi", "cutlass"))

# Megatron's cp_layout_kernels.py imports exactly these; it catches only ImportError.
CUTE_TARGETS = ("cuda.bindings.driver", "cutlass", "cutlass.cute", "cutlass.utils",
                "cutlass.cute.runtime:from_dlpack", "cutlass.cute.runtime:make_fake_stream")
CUTE_PROBE = import_probe(*CUTE_TARGETS)


CUTLASS_TEXTS = (
    *missing_module("I-cutlass", "cutlass")[1:],  # F3 below is the module itself
    *missing_module("I-cuda", "cuda"),
    UpstreamText("S1", "{what} requires CUDA tensors and CuTeDSL.", mlm(EAV + "csa_utils/"), "RuntimeError",
                 match=("requires CUDA tensors and CuTeDSL",)),
    UpstreamText("R5", "DSv4 CP compressor compaction requires CUDA tensors and CuTeDSL.",
                 mlm(EAV + "csa_utils/cp_layout_kernels.py", "678"), "RuntimeError"),
    UpstreamText("R5-indices", "DSv4 CP final indices require CUDA tensors and CuTeDSL.",
                 mlm(EAV + "csa_utils/cp_layout_kernels.py", "786"), "RuntimeError"),
    UpstreamText("F3", "No module named 'cutlass'", Source("nvidia-cudnn-frontend 1.27.0 cudnn.csa without "
                 "nvidia-cutlass-dsl (measured; knowledge base section 4.3)",
                 "https://pypi.org/project/nvidia-cudnn-frontend/1.27.0/"), "ModuleNotFoundError"),
)


@check(
    "cutlass-dsl.import",
    "The CuTe-DSL stack for the CP layout kernels imports",
    texts=CUTLASS_TEXTS,
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
    fixes=(frontend_fixes.cutlass(StaticFacts({})),),
    skip_if=lambda p: None if p.cp > 1 else ("CP = 1: the CuTe-DSL CP layout kernels run only with CP > 1 (the "
                                             "frontend's own CuTe kernels are checked by cudnn-fe.dsa/csa)"),
    static=STATIC,
    probes=(CUTE_PROBE,),
)
def cutlass_dsl_import(ctx: Context) -> Result:
    """Every DSv4 layer with CP > 1, on any DSA backend, runs Megatron's CuTe-DSL CP layout kernels. Megatron
    imports `cuda.bindings.driver`, `cutlass`, `cutlass.cute`, `cutlass.utils` and `cutlass.cute.runtime`
    (`from_dlpack`, `make_fake_stream`) inside `try/except ImportError` and sets `_CUTE_AVAILABLE=False`; the
    first CP forward then raises "DSv4 CP compressor compaction requires CUDA tensors and CuTeDSL." There is no
    torch fallback. This check imports exactly that list in a probe.
    """
    static = ctx.static
    answer = ctx.require(CUTE_PROBE)
    results = [outcome(answer, t) for t in CUTE_TARGETS]
    dists = {d: static.version(d) for d in CUTLASS_DISTS}
    module = static.module("cutlass")
    evidence = {"distributions": dists, "imports": {r["target"]: r.get("ok") for r in results},
                "module": module.get("origin") or module.get("locations"),
                "imported_copy": static.copy("cutlass")["why"]}  # which copy the job imports, and why
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
                  "\n".join(details), fixes=[frontend_fixes.cutlass(static)], evidence=evidence)


CHECKS = [cutlass_dsl_import]
