"""The CuTe-DSL stack of Megatron's CP layout kernels: nvidia-cutlass-dsl and cuda.bindings."""

from __future__ import annotations

from packaging.version import Version

from dsv4_doctor.api import (Context, Result, Source, StaticFacts, StaticRequest, UpstreamText, check, error_text,
                             failed, import_probe, outcome, passed, version, warned)

from .fixes import frontend as frontend_fixes
from ._anchors import missing_module
from ._upstream import EAV, mlm, pypi

TVM_FFI = "apache-tvm-ffi"
FE = "nvidia-cudnn-frontend"
CUTLASS_DISTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core", "cuda-python",
                 "cuda-bindings")
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
    imported = importing_copy(static, outcome(answer, "cutlass"))
    evidence = {"distributions": dists, "imports": {r["target"]: r.get("ok") for r in results},
                "module": module.get("origin") or module.get("locations"),
                "imported_copy": static.copy("cutlass")["why"],  # which copy the job imports, and why
                "imported": imported}
    bad = [r for r in results if not r.get("ok")]
    stated = imported["metadata_version"]
    if not bad and imported["version"] and stated and imported["version"] != stated:
        return warned(
            f"`cutlass` imports, but it is {imported['version']} ({imported['from'] or 'where from is not known'}), "
            f"not the nvidia-cutlass-dsl {stated} whose metadata comes first on the path ({imported['metadata_in']})",
            "\n".join([SHADOW_WHY, copies_text(static)]), evidence=evidence)
    if not bad:
        which = (f"cutlass {imported['version']}, {imported['from'] or 'where from is not known'}"
                 if imported["version"] else "the version of the copy that imports is not known: it states no "
                 "__version__ and no distribution's RECORD lists it")
        return passed(f"cutlass, cutlass.cute and cuda.bindings.driver import ({which}): the CP layout kernels can "
                      "compile", evidence=evidence)
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
    copies = static.dist_copies("nvidia-cutlass-dsl")
    if dists["nvidia-cutlass-dsl"] and (first.get("error") or {}).get("missing_module") == "cutlass":
        cutlass_v = version(static.version("nvidia-cutlass-dsl"))
        if len(copies) > 1:
            details.append(f"Several copies of nvidia-cutlass-dsl are installed; none puts its `cutlass` on sys.path "
                           f"here. {SHADOW_WHY}\n{copies_text(static)}")
        elif cutlass_v is not None and cutlass_v >= Version("4.8"):
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


SHADOW_WHY = (
    "Only the .pth files of site directories are read, never those of a folder on PYTHONPATH (`pip install "
    "--target`). nvidia-cutlass-dsl 4.5.x's .pth (in -libs-base) names nvidia_cutlass_dsl/python_packages; 4.8.x's "
    "(nvidia_cutlass_dsl_packages.pth, in the meta wheel; `cutlass` itself is in -libs-core) runs `sys.path.insert(0, "
    "os.path.join(nvidia_cutlass_dsl.__path__[0], 'dsl_packages'))`, and `nvidia_cutlass_dsl` is a namespace package: "
    "a copy of it earlier on the path (a --target folder of 4.5.x) takes its place, and `dsl_packages` is not there. "
    "So the `cutlass` that imports can be another copy than the one whose metadata comes first, or none. Install one "
    "nvidia-cutlass-dsl, into site-packages (`pip install`, not `--target`), and remove the other copies.")


def importing_copy(static: StaticFacts, imported: dict) -> dict:
    """The `cutlass` the job imports, as the import itself and the locator tell it: its version (cutlass.__version__
    at import, else its owner's metadata or its files), its file, where it comes from; and the nvidia-cutlass-dsl
    metadata first on the path, which may describe another copy (a --target folder whose .pth was never read)."""
    copy = static.copy("cutlass")
    stated = static.readable_dist("nvidia-cutlass-dsl")
    runtime = imported.get("version") if imported.get("ok") and isinstance(imported.get("version"), str) else None
    owner = copy["owner"] or {}
    return {"version": runtime or (copy["version"] if copy["found"] else None),
            "version_from": "import" if runtime else (copy["version_from"] if copy["found"] else None),
            "file": imported.get("origin") if isinstance(imported.get("origin"), str) else None,
            "owner": f"{owner.get('name')} {owner.get('version')}" if owner.get("name") else None,
            "from": copy["why"] if copy["found"] else None,
            "metadata_version": (stated or {}).get("version"),
            "metadata_in": where_on_path(static, (stated or {}).get("path"))}


def where_on_path(static: StaticFacts, dist_info: str | None) -> str | None:
    """The folder a dist-info lies in, with its sys.path position."""
    if not dist_info:
        return None
    folder = dist_info.rstrip("/").rsplit("/", 1)[0]
    path = static.python.get("path")
    index = path.index(folder) if isinstance(path, list) and folder in path else None
    return folder + (f", sys.path entry {index}" if index is not None else "")


def copies_text(static: StaticFacts) -> str:
    found = [f"{c.get('version') or '?'} in {where_on_path(static, c.get('path'))}"
             for c in static.dist_copies("nvidia-cutlass-dsl")]
    return "nvidia-cutlass-dsl metadata on the path, first wins: " + ("; ".join(found) if found else "none")


CHECKS = [cutlass_dsl_import]
