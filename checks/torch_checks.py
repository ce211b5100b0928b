"""PyTorch: importable, a CUDA build, new enough for Megatron-core."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from dsv4_doctor.api import TORCH, Context, Result, Source, StaticRequest, check, failed, passed, warned

from .fixes import catalogue as fixes
from ._anchors import missing_module

MIN_TORCH = "2.6.0"  # megatron-core 0.19.2 Requires-Dist torch>=2.6.0
STATIC = StaticRequest(distributions=("torch", *fixes.TORCH_EXTENSIONS))


@check(
    "torch.install",
    "PyTorch imports as a CUDA build",
    texts=missing_module("I-torch", "torch"),
    applies_when="always",
    detects="import torch: torch.version.cuda, cudnn/nccl versions, CUDA devices",
    sources=(
        Source("megatron-core 0.19.2 METADATA (torch>=2.6.0)", "https://pypi.org/project/megatron-core/0.19.2/"),
        Source("pytorch #78489: collect_env reports ldconfig's cuDNN, not the loaded one",
               "https://github.com/pytorch/pytorch/issues/78489"),
        Source("PyTorch's CUDA 13.0 wheel index (the torch fix installs from it, matched to the CUDA major)",
               "https://download.pytorch.org/whl/cu130"),
    ),
    fixes=(fixes.TORCH,),
    static=STATIC,
    probes=(TORCH,),
)
def torch_install(ctx: Context) -> Result:
    """Imports torch in an isolated probe (a segfault or hang there becomes an `error` row, not a dead doctor)
    and reports its version, the CUDA it was built for, the cuDNN and NCCL it loaded, and the devices it sees.
    DSv4 training needs a CUDA build of torch >= 2.6.0 (megatron-core's requirement); Transformer Engine's
    torch extension must match that torch's ABI and CUDA major version. Note that the loaded cuDNN is
    reported, not whichever libcudnn `ldconfig` lists. A torch fix is always a manual step: reinstalling torch
    invalidates every compiled extension built against it.
    """
    data = ctx.require(TORCH)
    fix = fixes.torch(ctx.static)
    if not data.get("imported"):
        err = data.get("error") if isinstance(data.get("error"), dict) else {}
        if err.get("type") == "ModuleNotFoundError" and err.get("missing_module") == "torch":
            return failed("torch is not installed", fixes=[fix], evidence={"error": err})
        return failed(f"import torch raised {err.get('type')}: {err.get('message')}",
                      "\n".join(map(str, err.get("where") or [])), fixes=[fix], evidence={"error": err})
    evidence = {k: data.get(k) for k in ("version", "cuda_build", "hip_build", "cudnn_version", "nccl_version",
                                         "cuda_available", "device_count", "origin", "import_s")}
    version = data.get("version") or "unknown"
    try:
        # Release numbers only: NGC's 2.6.0a0+...nv25.01 is the 2.6.0 series Megatron-core is built against.
        too_old = Version(str(version)).release < Version(MIN_TORCH).release
    except InvalidVersion:
        return warned(f"torch reports a version that is not a PEP 440 version ({version}): its age cannot be judged",
                      evidence=evidence)
    if data.get("hip_build"):
        return failed(f"torch {version} is a ROCm build; this doctor checks the CUDA DSv4 stack", evidence=evidence)
    if not data.get("cuda_build"):
        return failed(f"torch {version} is a CPU-only build: DSv4 training needs CUDA", fixes=[fix],
                      evidence=evidence)
    if too_old:
        return failed(f"torch {version} is older than {MIN_TORCH}, which megatron-core needs", fixes=[fix],
                      evidence=evidence)
    summary = (f"torch {version} (CUDA {data.get('cuda_build')}, cuDNN {data.get('cudnn_version') or 'unknown'}, "
               f"NCCL {data.get('nccl_version') or 'unknown'}); {data.get('device_count') or 0} CUDA device(s) "
               "visible")
    return passed(summary, evidence=evidence)

CHECKS = [torch_install]
