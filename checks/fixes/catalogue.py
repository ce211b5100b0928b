"""The one catalogue of fixes the built-in checks print. Each fix is defined once, here (the cuDNN frontend and its
CuTe-DSL stack in frontend_fixes), and referenced by the checks that need it. A fix that depends on what is installed
is a function of the static facts: every part it takes from the environment is validated (a version must be a plain
version, else the command is withheld and the fix says why), and fixes that touch the same packages are derived from
the same facts, so a plan never pins two things that contradict each other (the CuTe DSL follows the installed cuDNN
frontend's declared requirement).

Phases order a plan (see dsv4_doctor.fix.plan): RUNTIME (torch, CUDA wheels: manual), BUILD (compiled against torch),
PIN (pure Python), SETTING (a job setting or a choice, no command).
"""

from __future__ import annotations

import re

from packaging.version import Version

from dsv4_doctor.api import (Command, Fix, Phase, StaticFacts, canonical, requirement_text, requirements,
                             safe_specifier, safe_version, version)

from .._upstream import MLM_DEV, MLM_VERL_TESTED

TE_VERSION = "2.16.1"  # the verl DSv4 image's TE
TE_CUBLAS_SAFE = "2.12.0"  # loads on torch 2.11's cuBLAS 13.1 (measured on an H200, docs/gpu-runs)
FE_VERSION = "1.27.0"  # the tested set: the Megatron DSv4 recipes' frontend, first with cudnn.csa
TVM_FFI_VERSION = "0.1.11"
CUTLASS_VERSION = "4.5.2"  # the Megatron DSv4 recipes' and Megatron-Lite's pin
TORCH_VERSION = "2.11.0"  # the verl DSv4 image's torch (CUDA 13.0)
VERL_VERSION = "0.9.0"
FAST_HADAMARD_COMMIT = "f134af63deb2df17e1171a9ec1ea4a7d8604d5ca"  # Megatron-LM dev's pin
MBRIDGE_COMMIT = "c7774d44d4b3101dc6bdf8c8d38a32e909e1ea11"  # the Megatron-Bridge commit verl's DSv4 script names
FLASH_MLA_COMMIT = "b7643bd54521f563b839b98289b5cd048c062ba2"  # nv_dev's head, 2026-04-30 (built on an H200)
MBRIDGE_PYPI_VERSION = "0.6.2"  # the newest megatron-bridge on PyPI; 0.5.0+ ship the DSv4 bridge
TE_MIN_VERSION = "2.9.0"  # Megatron's sequence-packing gate (te.version)

# The rulebook's fix versions under the build-argument names the top-level Dockerfile gives them: the one place they
# are written (tests/test_dockerfile.py fails when the Dockerfile's ARG defaults disagree).
PINS = {
    "MEGATRON_LM_COMMIT": MLM_DEV, "MEGATRON_BRIDGE_COMMIT": MBRIDGE_COMMIT, "CUDNN_FRONTEND_VERSION": FE_VERSION,
    "TVM_FFI_VERSION": TVM_FFI_VERSION, "CUTLASS_DSL_VERSION": CUTLASS_VERSION, "FLASH_MLA_COMMIT": FLASH_MLA_COMMIT,
    "FAST_HADAMARD_COMMIT": FAST_HADAMARD_COMMIT, "VERL_VERSION": VERL_VERSION, "TE_MIN_VERSION": TE_MIN_VERSION,
    "CUDA_PYTHON_VERSION": "13.4.4", "TORCH_C_DLPACK_EXT_VERSION": "0.1.5",  # the frontend's cutedsl extra's
}
# The rest of the frontend's cutedsl extra, for an install without its dependencies (the Dockerfile's --no-deps
# frontend): the pip-consistent set measured on an H200 (docs/gpu-runs/2026-12-01-h200). cuda-python 13.4.4 requires
# cuda-bindings~=13.4.4 and cuda-core~=1.2.0, which pip brings; torch-c-dlpack-ext requires only torch (--no-deps).
CUDA_PYTHON_VERSION = PINS["CUDA_PYTHON_VERSION"]
TORCH_C_DLPACK_EXT_VERSION = PINS["TORCH_C_DLPACK_EXT_VERSION"]

# Compiled against torch: what a torch change invalidates (distribution names, as pip lists them).
TORCH_EXTENSIONS = ("transformer-engine-torch", "transformer-engine", "flash-mla", "fast-hadamard-transform",
                    "deep-ep", "apex", "vllm")


def withheld(description: str, why: str, phase: Phase = Phase.SETTING, key: str = "") -> Fix:
    """A fix whose command would need a value that did not validate: prose only, saying why."""
    return Fix(f"{description} (command withheld: {why})", [], key=key or f"withheld:{description}", phase=phase)


# --- torch and the CUDA runtime -------------------------------------------------------------------------------------

def _cuda_major(text: str | None) -> str | None:
    return text if isinstance(text, str) and re.fullmatch(r"1[0-9]", text) else None


TORCH_CUDA_MAJOR = "13"  # torch 2.11.0's default CUDA (the verl DSv4 image's CUDA 13.0)
TORCH_CUDA_TAG = {"12": "cu128", "13": "cu130"}  # the PyTorch wheel index torch 2.11.0 publishes, per CUDA major


def torch(static: StaticFacts | None = None, cuda_major: str | None = None) -> Fix:
    """A manual step: torch from PyTorch's wheel index for the CUDA major in use (PyPI's default build may carry
    another CUDA), naming the compiled extensions to rebuild after it, and saying when it would downgrade torch."""
    found = [n for n in TORCH_EXTENSIONS if static is not None and static.version(n)] if static else []
    if static is None:
        rebuild = ("TE's torch extension, FlashMLA, fast-hadamard-transform, DeepEP, apex and vLLM where installed")
    elif found:
        rebuild = ", ".join(f"{n} {static.version(n)}" for n in found)
    else:
        rebuild = "nothing found here (no TE torch extension, FlashMLA, fast-hadamard-transform, DeepEP, apex, vLLM)"
    notes = [f"Reinstalling torch invalidates every compiled extension built against it; rebuild after it: {rebuild}."]
    cu = _cuda_major(cuda_major) or TORCH_CUDA_MAJOR
    tag = TORCH_CUDA_TAG.get(cu, TORCH_CUDA_TAG[TORCH_CUDA_MAJOR])
    installed = version(static.version("torch")) if static is not None else None
    if installed is not None and installed.release > Version(TORCH_VERSION).release:  # a patch release counts too
        notes.append(f"This DOWNGRADES the installed torch {installed} to {TORCH_VERSION}: keep the newer torch if its "
                     "CUDA build loads here (torch.cuda), and fix only what the other checks name.")
    return Fix(f"Install a CUDA {cu} build of PyTorch {TORCH_VERSION} from PyTorch's wheel index (the verl DSv4 image "
               f"uses torch {TORCH_VERSION} with CUDA 13.0)",
               [["pip", "install", f"torch=={TORCH_VERSION}", "--index-url",
                 f"https://download.pytorch.org/whl/{tag}"]], key="torch", phase=Phase.RUNTIME, notes=notes)


TORCH = torch()


TRITON_DOC = Fix("Install the triton release the installed torch requires, read from torch's METADATA (torch 2.11.0: "
                 "triton==3.6.0)", key="triton", phase=Phase.PIN)


def torch_triton_requirement(static: StaticFacts):
    """What the installed torch declares for triton (`==` up to 2.13, `~=` from 2.14 on), or None."""
    return next((r for r in requirements(static.readable_dist("torch")) if r.name.lower() == "triton"
                 and str(r.specifier)), None)


def triton(static: StaticFacts) -> Fix:
    """The triton the installed torch declares, whatever the specifier (torch 2.11.0: triton==3.6.0; torch 2.14:
    triton~=3.8.0; torch 2.15.0: triton~=3.9.0)."""
    desc = "Install the triton release the installed torch requires"
    req = torch_triton_requirement(static)
    spec = safe_specifier(str(req.specifier)) if req is not None else None
    if spec:
        return Fix(f"{desc} (torch's METADATA: triton{spec})", [["pip", "install", f"triton{spec}"]],
                   key=f"triton:{spec}")
    if req is not None:
        return withheld(desc, f"torch declares triton{str(req.specifier)[:100]!r}, not a plain version specifier",
                        key="triton")
    if static.version("torch") is None:
        return withheld(desc, "torch is not installed, so its triton requirement is unknown (see torch.install)",
                        key="triton")
    return withheld(desc, f"torch {static.version('torch')} declares no triton pin (an NGC or source build: use the "
                    "triton that came with it)", key="triton")


def cudnn_wheel(cuda_major: str | None) -> Fix:
    desc = "Make exactly one cuDNN 9 visible (the pip wheel nvidia-cudnn-cu12/-cu13 or the container's)"
    cu = _cuda_major(cuda_major)
    if cu is None:
        return withheld(desc, f"torch's CUDA major {cuda_major!r} is not a plain value", key="cudnn-wheel")
    return Fix(desc, [["pip", "install", "--force-reinstall", f"nvidia-cudnn-cu{cu}"]], key=f"cudnn-wheel:{cu}",
               phase=Phase.RUNTIME)


# --- settings --------------------------------------------------------------------------------------------------------

BACKEND_NONE = Fix("Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend none)",
                   key="setting:dsa-backend-none", phase=Phase.SETTING)
PYTHON_312 = Fix("Use a Python 3.12 image (the verl image and the NGC PyTorch containers the DSv4 recipes use ship "
                 "3.12)", key="setting:python-312", phase=Phase.SETTING)
SUPPORTED_GPU = Fix("Run DSv4 CP on H100/H200 (9.0), B200/GB200 (10.0) or B300/GB300 (10.3) GPUs, or with CP = 1",
                    key="setting:gpu", phase=Phase.SETTING)
DRIVER = Fix("Run on a host with an R580 or newer NVIDIA driver (CUDA 13 needs driver API 13000), or add the CUDA "
             "forward-compatibility libraries (cuda-compat) to the image", key="setting:driver", phase=Phase.SETTING)


# --- Transformer Engine ---------------------------------------------------------------------------------------------

def te_install(version_: str = TE_VERSION, cuda_major: str = "13", force: bool = False, why: str = "") -> Fix:
    """Install TE with its PyTorch extension; `force`: rebuild only the torch extension of the installed release.

    A forced reinstall re-picks every dependency (torch included), so the rebuild reinstalls
    transformer-engine-torch alone, --no-deps; --no-cache-dir, because pip would otherwise reuse the wheel it built
    and cached against the previous torch."""
    desc = why or (f"Install Transformer Engine with its PyTorch extension (the verl DSv4 image uses {TE_VERSION}; "
                   "any >= 2.9.0 passes Megatron's packing gate), built against the installed torch")
    v, cu = safe_version(version_), _cuda_major(cuda_major)
    if v is None or cu is None:
        bad = f"version {version_!r}" if v is None else f"CUDA major {cuda_major!r}"
        return withheld(desc, f"the installed {bad} is not a plain value", Phase.BUILD, key="te")
    if force:
        return Fix(why or f"Rebuild TE's torch extension (transformer-engine-torch {v}) against the installed torch, "
                   "reinstalling only it: --no-deps keeps torch and TE's core as they are (a forced reinstall would "
                   "re-pick every dependency, torch included), --no-cache-dir keeps pip from reusing the wheel it "
                   "built against the previous torch",
                   [["pip", "install", "--no-build-isolation", "--no-cache-dir", "--force-reinstall", "--no-deps",
                     f"transformer-engine-torch=={v}"]], key=f"te-torch-rebuild:{v}", phase=Phase.BUILD)
    return Fix(desc, [["pip", "install", "--no-build-isolation", f"transformer-engine[pytorch,core_cu{cu}]=={v}"]],
               key=f"te:{v}:{cu}", phase=Phase.BUILD)


CUBLAS_FOR_NEW_TE = "13.2"  # TE >= 2.13's core needs cublasLtGroupedMatrixLayoutInit_internal (nvidia-cublas >= 13.2)
TE_NEEDS_NEW_CUBLAS = "2.13.0"  # the first TE release whose cu13 core needs it (2.10.0 and 2.12.0 do not; §9.4)


def te_choice(static: StaticFacts | None, cuda_major: str = "13") -> tuple[str, str]:
    """The TE release a fix installs, by the installed cuBLAS, and why (empty when it is the image's TE_VERSION):
    TE 2.13 and later need a cuBLASLt symbol that nvidia-cublas exports only from 13.2 on, while torch 2.11.0's
    cuda-toolkit==13.0.2 pin installs 13.1.0.3 (nm -D on the published wheels; TE 2.12.0 measured on an H200)."""
    # By normalised name: a check that lists the nvidia-* wheels by prefix gets them under the probe's index key.
    cublas = static.installed().get("nvidia-cublas") if static is not None and cuda_major == "13" else None
    have = version(cublas.get("version")) if isinstance(cublas, dict) else None
    if have is None and static is not None and cuda_major == "13" and "torch" not in static.installed():
        # No torch yet: the plan's manual step installs torch TORCH_VERSION, whose cuda-toolkit pin brings
        # nvidia-cublas 13.1.0.3, and TE_VERSION would not load on it.
        return TE_CUBLAS_SAFE, (
            f"torch {TORCH_VERSION}, which the plan's first step installs, brings nvidia-cublas 13.1.0.3 (its "
            f"cuda-toolkit==13.0.2 pin), which lacks cublasLtGroupedMatrixLayoutInit_internal that TE 2.13 and later "
            f"need, so TE {TE_CUBLAS_SAFE}, the newest that needs no missing symbol, loads on it (measured on an H200)")
    if have is None or have >= Version(CUBLAS_FOR_NEW_TE):
        return TE_VERSION, ""
    return TE_CUBLAS_SAFE, (
        f"the installed nvidia-cublas {have} lacks cublasLtGroupedMatrixLayoutInit_internal, which TE 2.13 and later "
        f"need (TE {TE_VERSION} would fail at import with an undefined symbol; cuBLAS exports it from 13.2 on), so "
        f"TE {TE_CUBLAS_SAFE}, the newest that needs no missing symbol, loads on it (measured on an H200)")


def te_for(static: StaticFacts | None, cuda_major: str = "13") -> Fix:
    """The TE install fix for this environment: TE_VERSION, or TE_CUBLAS_SAFE below cuBLAS 13.2 (saying why)."""
    v, why = te_choice(static, cuda_major)
    if not why:
        return te_install(v, cuda_major)
    return te_install(v, cuda_major, why=f"Install Transformer Engine {v} with its PyTorch extension, built against "
                      f"the installed torch: {why}")


def te_reinstall(static: StaticFacts | None, cuda_major: str = "13") -> Fix:
    """Remove every TE distribution, then install one consistent set (the release te_for chooses)."""
    install = te_for(static, cuda_major)
    if not install.commands:
        return install
    v, why = te_choice(static, cuda_major)
    return Fix("Remove every Transformer Engine distribution, then install one consistent set"
               + (f" (TE {v}: {why})" if why else ""),
               [TE_UNINSTALL, install.commands[0].argv], key=f"te-reinstall:{v}", phase=Phase.BUILD)


TE_UNINSTALL = ["pip", "uninstall", "-y", "transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13",
                "transformer-engine-torch"]
TE = te_install()
TE_REINSTALL = te_reinstall(None)
TE_FOR_INSTALLED_CUBLAS = te_install(TE_CUBLAS_SAFE, why=(
    f"Install Transformer Engine {TE_CUBLAS_SAFE}, whose core needs no symbol the installed cuBLAS lacks (verified: "
    "it loads and passes on torch 2.11.0's cuBLAS 13.1 on an H200), built against the installed torch"))


# --- Megatron, verl, Megatron-Bridge, kernels -----------------------------------------------------------------------

MCORE = Fix(f"Install Megatron-core from the dev branch at {MLM_DEV[:8]} or later (no release has dsv4_hybrid; it "
            "has the indexer-loss fixes, the fused CSA compressor and dsa_kernel_backend, which verl's tested "
            f"{MLM_VERL_TESTED[:8]} predates)",
            [["pip", "install", "--no-deps", f"megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@{MLM_DEV}"]],
            key="mcore")


def mcore(shadowed_by: str | None = None, git_root: str | None = None, why: str | None = None) -> Fix:
    """The Megatron fix. When megatron.core imports from a checkout (PYTHONPATH, the job's folder, an editable
    install), pip cannot help: a git checkout is moved to the dev commit in place (a typed update-checkout action),
    any other copy is named, with what to do."""
    if not shadowed_by:
        return MCORE
    where = f"{shadowed_by} ({why})" if why else shadowed_by
    if git_root:
        return Fix(f"megatron.core imports from {where}, a git checkout that `pip install` would not change: check it "
                   f"out at Megatron-LM dev {MLM_DEV[:8]} (or later) in place"
                   + (", then reinstall the editable checkout (pip install --no-deps -e) so that its metadata "
                      "follows" if why and why.startswith("editable") else ""),
                   [["git", "-C", git_root, "fetch", "origin"], ["git", "-C", git_root, "checkout", MLM_DEV]],
                   key=f"mcore-checkout:{git_root}", phase=Phase.PATH,
                   action={"kind": "update-checkout", "module": "megatron.core", "checkout": git_root,
                           "commit": MLM_DEV})
    return Fix(f"megatron.core imports from {where}, which `pip install` would not change (e.g. Megatron-Bridge's "
               f"3rdparty/Megatron-LM on PYTHONPATH in verl's image): replace that copy with Megatron-LM dev "
               f"{MLM_DEV[:8]} or later, or take it off the job's path and install the dev commit",
               key=f"mcore-shadowed:{shadowed_by}", phase=Phase.PATH, manual=True,
               action={"kind": "replace-copy", "module": "megatron.core", "path": shadowed_by, "commit": MLM_DEV})


VERL = Fix(f"Install verl {VERL_VERSION} or newer (it has PRs #7221, #7297 and #6555)",
           [["pip", "install", "--no-deps", f"verl=={VERL_VERSION}"]], key="verl")
MBRIDGE = Fix(f"Install Megatron-Bridge at {MBRIDGE_COMMIT[:8]}, the commit verl's DSv4 example names (it has "
              "models/deepseek/deepseek_v4_bridge.py)",
              [["pip", "install", "--no-deps",
                f"megatron-bridge @ git+https://github.com/NVIDIA-NeMo/Megatron-Bridge.git@{MBRIDGE_COMMIT}"]],
              key="mbridge",
              notes=[f"Or its PyPI release: pip install --no-deps megatron-bridge=={MBRIDGE_PYPI_VERSION} (0.5.0 and "
                     "later ship the DSv4 bridge; c7774d44 is an ancestor of v0.6.0; Python >= 3.12). --no-deps, "
                     "because its megatron-core[dev,mlm] requirement would pull a Megatron release without "
                     "dsv4_hybrid over the dev checkout."])
FLASH_MLA_ENV_CUDA13 = ("CPLUS_INCLUDE_PATH", "${CUDA_HOME}/include/cccl")


def flash_mla(cc: tuple[int, int] | None = None) -> Fix:
    """FlashMLA nv_dev at a pinned commit, built for the target arch, with CUDA 13's CCCL headers on the host
    compiler's include path (measured on an H200: without it g++ stops at `cuda/std/utility: No such file`)."""
    env = [FLASH_MLA_ENV_CUDA13]
    if cc is not None and cc[0] == 9:
        env.append(("FLASH_MLA_DISABLE_SM100", "1"))
        arch = "sm_90a only (FLASH_MLA_DISABLE_SM100=1)"
    elif cc is not None and cc[0] >= 10:
        env.append(("FLASH_MLA_DISABLE_SM90", "1"))
        arch = "sm_100f only, the CC 10.x family (FLASH_MLA_DISABLE_SM90=1, as the Megatron recipes set for Blackwell)"
    else:
        arch = ("both sm_90a and sm_100f (the GPU arch is not known: state it with --gpu-arch to build one, "
                "FLASH_MLA_DISABLE_SM100=1 for 9.0 or FLASH_MLA_DISABLE_SM90=1 for 10.x)")
    return Fix(f"Build FlashMLA nv_dev at {FLASH_MLA_COMMIT[:8]} against the installed torch (its flash_mla_sparse_fwd "
               f"takes the indexer_topk Megatron passes), for {arch}",
               [Command(("pip", "install", "--no-build-isolation", "--no-deps",
                         f"flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@{FLASH_MLA_COMMIT}"),
                        tuple(env))],
               key=f"flash-mla:{'+'.join(n for n, _ in env[1:]) or 'all'}", phase=Phase.BUILD,
               notes=["CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl: CUDA 13 moved the CCCL headers there; nvcc finds "
                      "them, the host compiler does not (harmless on CUDA 12). Set MAX_JOBS and NVCC_THREADS to bound "
                      "the build's parallelism (MAX_JOBS=16 NVCC_THREADS=2 built sm_90a in 119 s on 16 cores)."])


FLASH_MLA = flash_mla()
FAST_HADAMARD_V110_COMMIT = "1cc807efbd6cc001df359822d60bf6052dd66859"  # tag v1.1.0 (contains f134af63)
FAST_HADAMARD_DEV_VERSION = "1.0.4.post1"  # what f134af63 builds


def fast_hadamard(static: StaticFacts | None = None) -> Fix:
    """fast-hadamard-transform at what the installed Megatron-Bridge declares: 0.6.x requires >=1.1.0 (git tag
    v1.1.0; the PyPI 1.1.0 sdist is incomplete), else Megatron-LM dev's f134af63 (1.0.4.post1)."""
    req = None
    if static is not None:
        req = next((r for r in requirements(static.readable_dist("megatron-bridge"))
                    if canonical(r.name) == "fast-hadamard-transform" and str(r.specifier)), None)
    if req is not None and not req.specifier.contains(FAST_HADAMARD_DEV_VERSION, prereleases=True):
        commit, why = FAST_HADAMARD_V110_COMMIT, (
            f"tag v1.1.0, because the installed megatron-bridge {static.version('megatron-bridge') if static else ''} "
            f"declares {requirement_text(req)}, which Megatron-LM dev's {FAST_HADAMARD_COMMIT[:8]} "
            f"({FAST_HADAMARD_DEV_VERSION}) does not meet")
    else:
        commit, why = FAST_HADAMARD_COMMIT, "the commit Megatron-LM dev pins"
    return Fix(f"Build fast-hadamard-transform at {commit[:8]} ({why})",
               [["pip", "install", "--no-build-isolation", "--no-deps", "fast-hadamard-transform @ "
                 f"git+https://github.com/Dao-AILab/fast-hadamard-transform.git@{commit}"]],
               key=f"fast-hadamard:{commit[:8]}", phase=Phase.BUILD)


FAST_HADAMARD = fast_hadamard()
