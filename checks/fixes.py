"""The one catalogue of fixes the built-in checks print. Each fix is defined once, here, and referenced by the checks
that need it; a fix that depends on what is installed is a function that validates every part it takes from the
environment (a version must be a plain version, else the command is withheld and the fix says why).

Phases order a plan (see dsv4_doctor.fixplan): RUNTIME (torch, CUDA wheels: manual), BUILD (compiled against torch),
PIN (pure Python), SETTING (a job setting or a choice, no command).
"""

from __future__ import annotations

import re

from dsv4_doctor.facts import safe_version
from dsv4_doctor.model import Fix, Phase

from ._upstream import MLM_VERL_TESTED

TE_VERSION = "2.16.1"  # the verl DSv4 image's TE
FE_VERSION = "1.27.0"
TVM_FFI_VERSION = "0.1.11"
CUTLASS_VERSION = "4.5.2"  # the Megatron DSv4 recipes' and Megatron-Lite's pin
TORCH_VERSION = "2.11.0"  # the verl DSv4 image's torch (CUDA 13.0)
VERL_VERSION = "0.9.0"
FAST_HADAMARD_COMMIT = "f134af63deb2df17e1171a9ec1ea4a7d8604d5ca"  # Megatron-LM dev's pin


def withheld(description: str, why: str, phase: Phase = Phase.SETTING, key: str = "") -> Fix:
    """A fix whose command would need a value that did not validate: prose only, saying why."""
    return Fix(f"{description} (command withheld: {why})", [], key=key or f"withheld:{description}", phase=phase)


def torch(extensions: list[str] | tuple[str, ...] = ()) -> Fix:
    notes = ["Reinstalling torch invalidates every compiled extension built against it; rebuild "
             + (", ".join(extensions) if extensions else "TE's torch extension, FlashMLA, fast-hadamard-transform, "
                "DeepEP, apex and vLLM where installed") + " after it."]
    return Fix(f"Install a CUDA build of PyTorch (the verl DSv4 image uses torch {TORCH_VERSION} with CUDA 13.0)",
               [["pip", "install", f"torch=={TORCH_VERSION}"]], key="torch", phase=Phase.RUNTIME, notes=notes)


TORCH = torch()

BACKEND_NONE = Fix("Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend none)",
                   key="setting:dsa-backend-none", phase=Phase.SETTING)
PYTHON_312 = Fix("Use a Python 3.12 image (the verl image and the NGC PyTorch containers the DSv4 recipes use ship "
                 "3.12)", key="setting:python-312", phase=Phase.SETTING)
SUPPORTED_GPU = Fix("Run DSv4 CP on H100/H200 (9.0), B200/GB200 (10.0) or B300/GB300 (10.3) GPUs, or with CP = 1",
                    key="setting:gpu", phase=Phase.SETTING)


def _cuda_major(text: str | None) -> str | None:
    return text if isinstance(text, str) and re.fullmatch(r"1[0-9]", text) else None


def te_install(version: str = TE_VERSION, cuda_major: str = "13", force: bool = False) -> Fix:
    desc = ("Install Transformer Engine with its PyTorch extension (the verl DSv4 image uses 2.16.1; any >= 2.9.0 "
            "passes Megatron's packing gate), built against the installed torch")
    v, cu = safe_version(version), _cuda_major(cuda_major)
    if v is None or cu is None:
        bad = f"version {version!r}" if v is None else f"CUDA major {cuda_major!r}"
        return withheld(desc, f"the installed {bad} is not a plain value", Phase.BUILD, key="te")
    argv = ["pip", "install", "--no-build-isolation"] + (["--force-reinstall"] if force else []) + \
        [f"transformer-engine[pytorch,core_cu{cu}]=={v}"]
    return Fix(desc if not force else f"Rebuild TE's torch extension against the installed torch (CUDA {cu})",
               [argv], key=f"te:{v}:{cu}:{force}", phase=Phase.BUILD)


TE = te_install()
TE_UNINSTALL = ["pip", "uninstall", "-y", "transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13",
                "transformer-engine-torch"]
TE_REINSTALL = Fix("Remove every Transformer Engine distribution, then install one consistent set",
                   [TE_UNINSTALL, TE.commands[0].argv], key="te-reinstall", phase=Phase.BUILD)

TVM_FFI = Fix(f"Install apache-tvm-ffi {TVM_FFI_VERSION} (cuDNN frontend 1.27.0 requires >= 0.1.11; the Megatron and "
              "verl lock files pin 0.1.9)", [["pip", "install", "--no-deps", f"apache-tvm-ffi=={TVM_FFI_VERSION}"]],
              key="tvm-ffi")
FE = Fix(f"Install the cuDNN frontend {FE_VERSION} (first with the fused CSA compressor cudnn.csa) and apache-tvm-ffi "
         f"{TVM_FFI_VERSION}, which it requires",
         [["pip", "install", "--no-deps", f"apache-tvm-ffi=={TVM_FFI_VERSION}"],
                                                 ["pip", "install", "--force-reinstall", "--no-deps",
                                                  f"nvidia-cudnn-frontend=={FE_VERSION}"]], key="fe")
CUTLASS = Fix("Install the CuTe DSL with its CUDA 13 libraries (the pin of the Megatron DSv4 recipes; it brings "
              "cuda-python)", [["pip", "install", f"nvidia-cutlass-dsl[cu13]=={CUTLASS_VERSION}"]], key="cutlass")
MCORE = Fix(f"Install Megatron-core from the dev branch (no release has dsv4_hybrid; {MLM_VERL_TESTED[:8]} is the "
            "commit verl's DSv4 example was tested with; any dev commit at or after bfa33263 has CP)",
            [["pip", "install", "--no-deps",
              f"megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@{MLM_VERL_TESTED}"]], key="mcore")
VERL = Fix(f"Install verl {VERL_VERSION} or newer (it has PRs #7221, #7297 and #6555)",
           [["pip", "install", "--no-deps", f"verl=={VERL_VERSION}"]], key="verl")
FLASH_MLA = Fix("Build FlashMLA from its nv_dev branch against the installed torch (on SM90 do not set "
                "FLASH_MLA_DISABLE_SM90=1, which the Megatron recipes set for Blackwell)",
                [["pip", "install", "--no-build-isolation",
                  "flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@nv_dev"]], key="flash-mla",
                phase=Phase.BUILD)
FAST_HADAMARD = Fix("Build fast-hadamard-transform at the commit Megatron-LM dev pins",
                    [["pip", "install", "--no-build-isolation", "fast-hadamard-transform @ "
                      f"git+https://github.com/Dao-AILab/fast-hadamard-transform.git@{FAST_HADAMARD_COMMIT}"]],
                    key="fast-hadamard", phase=Phase.BUILD)
TRITON = Fix("Install the triton release the installed torch was built with", [["pip", "install", "triton"]],
             key="triton")


def cudnn_wheel(cuda_major: str | None) -> Fix:
    desc = "Make exactly one cuDNN 9 visible (the pip wheel nvidia-cudnn-cu12/-cu13 or the container's)"
    cu = _cuda_major(cuda_major)
    if cu is None:
        return withheld(desc, f"torch's CUDA major {cuda_major!r} is not a plain value", key="cudnn-wheel")
    return Fix(desc, [["pip", "install", "--force-reinstall", f"nvidia-cudnn-cu{cu}"]], key=f"cudnn-wheel:{cu}",
               phase=Phase.RUNTIME)
