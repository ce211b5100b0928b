"""PyTorch: importable, a CUDA build, new enough for Megatron-core."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from dsv4_doctor.model import Check, Fix, Source, failed, passed
from dsv4_doctor.probes import TORCH

MIN_TORCH = "2.6.0"  # megatron-core 0.19.2 Requires-Dist torch>=2.6.0
INSTALL_TORCH = Fix(
    "Install a CUDA build of PyTorch (the verl DSv4 image uses torch 2.11.0 with CUDA 13.0)",
    ["pip install torch==2.11.0"],
)


def _torch_install(ctx):
    data = ctx.require(TORCH)
    if not data.get("imported"):
        err = data.get("error", {})
        if err.get("type") == "ModuleNotFoundError" and err.get("missing_module") == "torch":
            return failed("torch is not installed", fixes=[INSTALL_TORCH], error=err)
        return failed(f"import torch raised {err.get('type')}: {err.get('message')}",
                      "\n".join(err.get("where", [])), fixes=[INSTALL_TORCH], error=err)
    evidence = {k: data.get(k) for k in ("version", "cuda_build", "hip_build", "cudnn_version", "nccl_version",
                                         "cuda_available", "device_count", "origin", "import_s")}
    version = data.get("version") or "?"
    try:
        # Release numbers only: NGC's 2.6.0a0+...nv25.01 is the 2.6.0 series Megatron-core is built against.
        too_old = Version(version).release < Version(MIN_TORCH).release
    except InvalidVersion:
        too_old = False
    if data.get("hip_build"):
        return failed(f"torch {version} is a ROCm build; this doctor checks the CUDA DSv4 stack", **evidence)
    if not data.get("cuda_build"):
        return failed(f"torch {version} is a CPU-only build: DSv4 training needs CUDA", fixes=[INSTALL_TORCH],
                      **evidence)
    if too_old:
        return failed(f"torch {version} is older than {MIN_TORCH}, which megatron-core needs", fixes=[INSTALL_TORCH],
                      **evidence)
    summary = (f"torch {version} (CUDA {data.get('cuda_build')}, cuDNN {data.get('cudnn_version')}, "
               f"NCCL {data.get('nccl_version')}); {data.get('device_count', 0)} CUDA device(s) visible")
    return passed(summary, **evidence)


torch_install = Check(
    id="torch.install",
    title="PyTorch imports as a CUDA build",
    explanation="""
        Imports torch in an isolated probe (a segfault or hang there becomes an `error` row, not a dead doctor)
        and reports its version, the CUDA it was built for, the cuDNN and NCCL it loaded, and the devices it sees.
        DSv4 training needs a CUDA build of torch >= 2.6.0 (megatron-core's requirement); Transformer Engine's
        torch extension must match that torch's ABI and CUDA major version. Note that the loaded cuDNN is
        reported, not whichever libcudnn `ldconfig` lists.
    """,
    applies_when="always",
    detects="import torch: torch.version.cuda, cudnn/nccl versions, CUDA devices",
    sources=(
        Source("megatron-core 0.19.2 METADATA (torch>=2.6.0)", "https://pypi.org/project/megatron-core/0.19.2/"),
        Source("pytorch #78489: collect_env reports ldconfig's cuDNN, not the loaded one",
               "https://github.com/pytorch/pytorch/issues/78489"),
    ),
    fixes=(INSTALL_TORCH,),
    probes=(TORCH,),
    run=_torch_install,
)
