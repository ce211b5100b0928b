"""Fixes for the build toolchain (build.toolchain): what pip can install (ninja; CUDA 13's nvcc and CCCL headers,
the nvidia-cuda-nvcc / nvidia-cuda-cccl wheels at torch's CUDA major.minor) and what a person does (a C++ compiler, a
CUDA 12 toolkit, CUDA_HOME, PATH). Phase TOOLCHAIN: first after PATH (dsv4_doctor.fix.plan ORDER).

The wheels' layout, read from the published wheels: nvidia-cuda-nvcc 13.x puts nvcc in `nvidia/cu13/bin` of
site-packages and brings nvidia-nvvm, nvidia-cuda-crt and nvidia-cuda-runtime (`nvidia/cu13/lib`, `include`);
nvidia-cuda-cccl 13.x puts CCCL in `nvidia/cu13/include/cccl`. So `site-packages/nvidia/cu13` is a CUDA_HOME, but
torch sets it only from CUDA_HOME, CUDA_PATH or an `nvcc` on PATH, and its `lib` holds libcudart.so.13 without the
`libcudart.so` that `-lcudart` links (`ld: cannot find -lcudart`, measured with nvidia-cuda-nvcc 13.0.88).
"""

from __future__ import annotations

import os
import re

from dsv4_doctor.api import Fix, Phase

WHEEL_HOME = os.path.join("nvidia", "cu13")  # CUDA_HOME of the CUDA 13 wheels, under site-packages


def cuda_release(text: object) -> str | None:
    """A plain CUDA `major.minor` (torch.version.cuda, nvcc's release), or None."""
    return text if isinstance(text, str) and re.fullmatch(r"1[0-9]\.[0-9]{1,2}", text) else None


def wheel_home(purelib: object) -> str | None:
    """Where the CUDA 13 wheels make a CUDA_HOME in the target's site-packages, when that path is plain text."""
    if not isinstance(purelib, str) or not re.fullmatch(r"/[A-Za-z0-9_./+-]{1,1000}", purelib):
        return None
    return os.path.join(purelib, WHEEL_HOME)


def _use_home(home: str | None) -> str:
    where = home or "site-packages/nvidia/cu13 of the target interpreter"
    return (f"Then set CUDA_HOME={where} for the build steps (torch finds it only through CUDA_HOME, CUDA_PATH or an "
            f"nvcc on PATH), and give -lcudart its name: ln -s libcudart.so.13 {where}/lib/libcudart.so (the wheel "
            "ships only libcudart.so.13)")


def nvcc_wheels(cuda: str, purelib: object = None, cccl_only: bool = False) -> Fix:
    """CUDA 13's nvcc (and CCCL) from PyPI at torch's CUDA major.minor; the CUDA 12 wheels split the toolkit over
    several folders (nvidia/cuda_nvcc, nvidia/cuda_runtime, ...), which no single CUDA_HOME covers: a toolkit then."""
    release = cuda_release(cuda)
    if release is None or not release.startswith("13."):
        return toolkit(release or "of torch's CUDA")
    spec = f"=={release}.*"
    names = ["nvidia-cuda-cccl"] if cccl_only else ["nvidia-cuda-nvcc", "nvidia-cuda-cccl"]
    home = wheel_home(purelib)
    what = "CUDA 13's CCCL headers" if cccl_only else f"nvcc {release} and CUDA 13's CCCL headers"
    return Fix(f"Install {what} from PyPI ({', '.join(n + spec for n in names)}), matching torch's CUDA {release}",
               [["pip", "install", *[n + spec for n in names]]], key=f"toolchain:{'cccl' if cccl_only else 'nvcc'}:"
               f"{release}", phase=Phase.TOOLCHAIN, notes=[_use_home(home)])


def toolkit(release: str) -> Fix:
    """A CUDA toolkit by the system's package manager (NVIDIA's repository), as prose: a manual step."""
    major_minor = release.replace(".", "-") if cuda_release(release) else "X-Y"
    return Fix(f"Install the CUDA {release} toolkit (nvcc, headers, libcudart.so) and set CUDA_HOME to it: from "
               f"NVIDIA's package repository, `apt-get install cuda-toolkit-{major_minor}` (Debian/Ubuntu) or `dnf "
               f"install cuda-toolkit-{major_minor}` (RHEL/Fedora), or use an image that has it (the NGC PyTorch "
               "containers)", key=f"toolchain:toolkit:{release}", phase=Phase.TOOLCHAIN, manual=True)


def cccl_package(release: str, home: str) -> Fix:
    major_minor = release.replace(".", "-") if cuda_release(release) else "13-X"
    return Fix(f"Install CUDA 13's CCCL headers into {home}/include/cccl: `apt-get install cuda-cccl-{major_minor}` "
               f"(Debian/Ubuntu) or `dnf install cuda-cccl-{major_minor}` (RHEL/Fedora) from NVIDIA's package "
               "repository, or point CUDA_HOME at a toolkit that has them", key=f"toolchain:cccl-package:{release}",
               phase=Phase.TOOLCHAIN, manual=True)


def set_cuda_home(why: str) -> Fix:
    """CUDA_HOME pointed at a whole toolkit (bin/nvcc, include/cccl on CUDA 13, lib64/libcudart.so), as prose."""
    return Fix(f"Set CUDA_HOME to a whole CUDA toolkit's folder (bin/nvcc, include/cccl on CUDA 13, lib64/libcudart.so;"
               f" e.g. /usr/local/cuda) for the build steps: {why}", key="toolchain:cuda-home", phase=Phase.TOOLCHAIN,
               manual=True)


def link_cudart(folder: str) -> Fix:
    return Fix(f"Give -lcudart its name in {folder}: ln -s libcudart.so.13 {folder}/libcudart.so (or the toolkit's "
               "libcudart.so.N; a CUDA toolkit ships the link, the nvidia-cuda-runtime wheel does not)",
               key=f"toolchain:cudart:{folder}", phase=Phase.TOOLCHAIN, manual=True)


COMPILER = Fix("Install a C++ compiler: `apt-get install g++` (Debian/Ubuntu) or `dnf install gcc-c++` (RHEL/Fedora), "
               "or set CXX to one (torch compiles its extensions with $CXX, else c++)", key="toolchain:compiler",
               phase=Phase.TOOLCHAIN, manual=True)
NINJA = Fix("Install ninja (torch's parallel build backend) from PyPI", [["pip", "install", "ninja"]],
            key="toolchain:ninja", phase=Phase.TOOLCHAIN)


def ninja(scripts: object, scripts_on_path: bool) -> Fix:
    """`pip install ninja`, saying where the program goes when that folder is not on PATH (torch runs `ninja` from
    PATH)."""
    if scripts_on_path or not isinstance(scripts, str):
        return NINJA
    return Fix(NINJA.description, [list(c.argv) for c in NINJA.commands], key=NINJA.key, phase=Phase.TOOLCHAIN,
               notes=[f"Its wheel puts the program in {scripts}, which is not on PATH: add it to PATH for the build "
                      "steps (torch runs `ninja --version` from PATH)"])


def ninja_on_path(scripts: str) -> Fix:
    return Fix(f"Put {scripts} on PATH for the build steps: ninja is installed there, and torch runs `ninja` from "
               "PATH", key=f"toolchain:ninja-path:{scripts}", phase=Phase.TOOLCHAIN, manual=True)
