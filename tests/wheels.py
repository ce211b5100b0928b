"""Real published wheels as test environments, installed with `pip install --no-deps --target`.

Cached under .cache/wheels (ignored by git) and reused when present: `python tests/wheels.py` fetches them all
(.ci/run does this first); tests call `ensure(key)` and fetch on demand.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "wheels"
DOWNLOADS = CACHE / "dl"  # the .whl files, also an offline index for `fix --apply` tests

# key: (requirement, extra pip arguments)
PY312 = ["--python-version", "3.12", "--ignore-requires-python", "--platform", "manylinux_2_28_x86_64",
         "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "any"]
WHEELS = {
    "nvidia-cudnn-frontend-1.26.0": ("nvidia-cudnn-frontend==1.26.0", []),
    "nvidia-cudnn-frontend-1.27.0": ("nvidia-cudnn-frontend==1.27.0", []),
    # The first release whose CSA compressor accepts every CC major >= 10 (1.27.0 accepts (10, 0) only).
    "nvidia-cudnn-frontend-1.28.0": ("nvidia-cudnn-frontend==1.28.0", []),
    # 1.32.0 requires nvidia-cutlass-dsl[cu13]>=4.8.0 unconditionally; with the 4.5.2 meta wheel below it is the
    # published state the fix planner must resolve.
    "nvidia-cudnn-frontend-1.32.0": ("nvidia-cudnn-frontend==1.32.0", []),
    "nvidia-cutlass-dsl-4.5.2": ("nvidia-cutlass-dsl==4.5.2", []),  # the 10 kB meta wheel, without its libraries
    "megatron-bridge-0.3.1": ("megatron-bridge==0.3.1", []),  # the last release for Python 3.11: no DSv4 bridge
    # 0.5.x and 0.6.x ship models/deepseek/deepseek_v4_bridge.py (Requires-Python <3.13,>=3.12): 0.5.1 turns the
    # fused DSA kernels on for any CC >= 10, 0.6.2 only when `from cudnn import DSA` and FlashMLA import; 0.5.1
    # declares no fast-hadamard-transform floor, 0.6.2 >=1.1.0.
    "megatron-bridge-0.5.1": ("megatron-bridge==0.5.1", PY312),
    "megatron-bridge-0.6.2": ("megatron-bridge==0.6.2", PY312),
    "apache-tvm-ffi-0.1.9": ("apache-tvm-ffi==0.1.9", []),
    "apache-tvm-ffi-0.1.11": ("apache-tvm-ffi==0.1.11", []),
    # megatron-core >= 0.17 ships cp312 wheels only; the doctor reads it with ast, never imports it.
    "megatron-core-0.19.2": ("megatron-core==0.19.2", PY312),
    "verl-0.9.0": ("verl==0.9.0", []),
    # verl's config tree (verl/trainer/config) and entry modules, read and composed, never imported beyond them.
    "verl-0.9.1": ("verl==0.9.1", []),
    # What composing a verl config needs in the target: Hydra 1.3, OmegaConf 2.3 and the ANTLR runtime their grammar
    # was generated with (4.9.3 is published as an sdist only; pure Python, built once). PyYAML is OmegaConf's,
    # packaging Hydra's.
    "hydra-core-1.3.2": ("hydra-core==1.3.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 PyYAML==6.0.2 "
                         "packaging==24.2", []),
    "typing-extensions-4.16.0": ("typing-extensions==4.16.0", []),  # apache-tvm-ffi requires it
    # The cuDNN frontend's cutedsl extra, which the Dockerfile installs beside the --no-deps frontend (PINS).
    "cuda-python-13.4.4": ("cuda-python==13.4.4", []),  # the meta wheel, without cuda-bindings
    "torch-c-dlpack-ext-0.1.5": ("torch-c-dlpack-ext==0.1.5", []),
    # The CuTe DSL itself (75 MB) and what `import cutlass` needs: it imports, traces and compiles host-only
    # functions on a machine without a GPU, so its file cache and `cute.compile` can be tested for real.
    "nvidia-cutlass-dsl-libs-base-4.5.2": ("nvidia-cutlass-dsl-libs-base==4.5.2", []),
    # 4.8.1 as `pip install 'nvidia-cutlass-dsl[cu13]==4.8.1'` lays it out, less -libs-cu12 (92 MB, the CUDA 12
    # flavour the meta wheel requires unconditionally): the meta wheel (its .pth runs code), `cutlass` in -libs-core,
    # -libs-base, the CUDA 13 _cutlass_ir in -libs-cu13 (92 MB), and protobuf, which -libs-base requires from 4.8.
    "nvidia-cutlass-dsl-4.8.1-cu13": ("nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 "
                                      "nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 "
                                      "protobuf==7.36.2", []),
    "cuda-bindings-13.4.4": ("cuda-bindings==13.4.4", []),
    "cuda-pathfinder-1.9.1": ("cuda-pathfinder==1.9.1", []),
    "numpy-2.4.6": ("numpy==2.4.6", []),
    # Megatron-core d48bd6be imports triton unguarded (transformer/moe/ops/paged_stash.py) on the way to its config
    # classes (tests/fixtures/megatron-lm-d48bd6be), which the settings tests run on the CPU: the real wheel.
    "triton-3.7.0": ("triton==3.7.0", []),
    # NVIDIA's own device-code tools (47 MB and 0.3 MB): ptxas and fatbinary build cubins, PTX and fatbins of known
    # archs for the fatbin reader's tests, and cuobjdump lists them as the oracle.
    "nvidia-cuda-nvcc-13.5.37": ("nvidia-cuda-nvcc==13.5.37", []),
    "nvidia-cuda-cuobjdump-13.5.37": ("nvidia-cuda-cuobjdump==13.5.37", []),
    # CUDA 13's CCCL headers as PyPI ships them (3 MB: nvidia/cu13/include/cccl), beside the nvcc wheel above as a
    # CUDA_HOME for build.toolchain's tests.
    "nvidia-cuda-cccl-13.0.85": ("nvidia-cuda-cccl==13.0.85", []),
}


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True,
                   env=dict(os.environ, PIP_NO_INPUT="1"))


def ensure(key: str) -> Path:
    """The unpacked environment for `key`, fetched once. Parallel test workers may ask for the same key at once:
    one fetches under an exclusive lock, the others wait for it and reuse its result."""
    target = CACHE / "envs" / key
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            _fetch(key, target)
    return target


def pip_target_once(target: Path, *installs: list[str]) -> Path:
    """`pip install --target` of each argument list in `installs` into `target`, done once across parallel test
    workers (an exclusive lock; a partial folder renamed into place only when every install succeeded)."""
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            for args in installs:
                _pip("install", "--target", str(partial), *args)
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
            (target / ".complete").write_text("\n".join(" ".join(a) for a in installs))
    return target


# Published as an sdist only (pure Python): built, not downloaded as a wheel.
SDIST_ONLY = ("antlr4-python3-runtime",)


def _fetch(key: str, target: Path) -> None:
    requirement, extra = WHEELS[key]
    requirements = requirement.split()
    binary = ["--only-binary=:all:"] + [f"--no-binary={name}" for name in SDIST_ONLY if name in requirement]
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    _pip("download", "--no-deps", *binary, "-d", str(DOWNLOADS), *extra, *requirements)
    tmp = target.with_name(key + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _pip("install", "--no-deps", *binary, "--find-links", str(DOWNLOADS), *(["--no-index"] if binary == [
        "--only-binary=:all:"] else []), "--target", str(tmp), *extra, *requirements)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    (target / ".complete").write_text(requirement + "\n")


if __name__ == "__main__":
    for name in WHEELS:
        print(name, ensure(name))
