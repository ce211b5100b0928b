# syntax=docker/dockerfile:1
# A DeepSeek-V4 training image for verl + Megatron-Core with context parallelism, gated by dsv4-doctor at build time.
#
#   docker build -t dsv4-train .                                             # a B200/GB200 image for CP 2
#   docker build --build-arg GATE_GPU_ARCH=9.0 --build-arg GATE_CP=1 -t dsv4-train-h200 .
#   docker run --gpus all dsv4-train python3 -m verl.trainer.main_ppo ...   # preflight runs first, then the job
#   docker run --gpus all dsv4-train dsv4-doctor --cp 2 --deep              # the deep check: GPU CI, a new node
#   docker run -it dsv4-train                                                # a shell (nothing to gate)
#
# Every version below is the rulebook's fix version: the build arguments' defaults equal checks/fixes/catalogue.py PINS, and
# tests/test_dockerfile.py fails when they disagree. Transformer Engine is the base image's own build (the NGC
# PyTorch container ships one built against its torch; te.version in the gate requires >= TE_MIN_VERSION), so that
# no second TE is compiled against a torch it was not built for.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:26.06-py3
FROM ${BASE_IMAGE}

ARG MEGATRON_LM_COMMIT=d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1
ARG MEGATRON_BRIDGE_COMMIT=c7774d44d4b3101dc6bdf8c8d38a32e909e1ea11
ARG CUDNN_FRONTEND_VERSION=1.27.0
ARG TVM_FFI_VERSION=0.1.11
ARG CUTLASS_DSL_VERSION=4.5.2
ARG CUDA_PYTHON_VERSION=13.4.4
ARG TORCH_C_DLPACK_EXT_VERSION=0.1.5
ARG FLASH_MLA_COMMIT=b7643bd54521f563b839b98289b5cd048c062ba2
ARG FAST_HADAMARD_COMMIT=f134af63deb2df17e1171a9ec1ea4a7d8604d5ca
ARG VERL_VERSION=0.9.0
ARG TE_MIN_VERSION=2.9.0
# The GPUs the compiled kernels are built for (H100/H200 and B200/GB200), and the profile the build gate checks:
# the arch and the context-parallel size the image is built for.
ARG TORCH_CUDA_ARCH_LIST="9.0;10.0"
ARG GATE_GPU_ARCH=10.0
ARG GATE_CP=2

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}

# Megatron-LM dev at the pinned commit: the only source of the dsv4_hybrid attention (every release lacks it and
# reports the same version), and Megatron-Bridge at the commit verl's DSv4 example names (its DeepSeek-V4 bridge).
RUN pip install --no-cache-dir --no-deps \
        "megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@${MEGATRON_LM_COMMIT}" \
        "megatron-bridge @ git+https://github.com/NVIDIA-NeMo/Megatron-Bridge.git@${MEGATRON_BRIDGE_COMMIT}"

# The cuDNN frontend's DSA stack: apache-tvm-ffi and the frontend without their dependencies (the frontend's
# extras would move the CuTe DSL), then the CuTe DSL version the frontend requires, with its CUDA 13 libraries, and
# the rest of the frontend's cutedsl extra, pinned: cuda-python (with cuda-bindings; the CuTe DSL alone would take
# any >= 12.8) and torch-c-dlpack-ext (--no-deps: its one requirement, torch, is the base image's). Without them
# deps.consistency reports the extra as unmet, and --strict stops the build.
RUN pip install --no-cache-dir --no-deps "apache-tvm-ffi==${TVM_FFI_VERSION}" \
 && pip install --no-cache-dir --force-reinstall --no-deps "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}" \
 && pip install --no-cache-dir "nvidia-cutlass-dsl[cu13]==${CUTLASS_DSL_VERSION}" \
        "cuda-python==${CUDA_PYTHON_VERSION}" \
 && pip install --no-cache-dir --no-deps "torch-c-dlpack-ext==${TORCH_C_DLPACK_EXT_VERSION}"

# Kernels compiled against the image's torch: FlashMLA nv_dev at a pinned commit (flash_mla_sparse_fwd with
# indexer_topk), with CUDA 13's CCCL headers on the host compiler's include path (without it g++ stops at
# `cuda/std/utility: No such file or directory`; nvcc finds them itself), for the archs in TORCH_CUDA_ARCH_LIST (its
# setup.py ignores that list and builds sm_90a and sm_100f unless FLASH_MLA_DISABLE_SM90/SM100 is set); and
# fast-hadamard-transform at the commit Megatron pins. --no-deps: neither may move the image's torch.
RUN archs=" $(echo "${TORCH_CUDA_ARCH_LIST}" | tr ';' ' ') " \
 && case "${archs}" in *" 9.0"*) ;; *) export FLASH_MLA_DISABLE_SM90=1 ;; esac \
 && case "${archs}" in *" 10."*) ;; *) export FLASH_MLA_DISABLE_SM100=1 ;; esac \
 && CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl" pip install --no-cache-dir --no-build-isolation \
        --no-deps "flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@${FLASH_MLA_COMMIT}" \
 && FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE pip install --no-cache-dir --no-build-isolation --no-deps \
        "fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@${FAST_HADAMARD_COMMIT}"

# verl (it has the contiguous CP layout, #7221/#7297, and sets the DSv4 CP settings itself, #6555), with its
# dependencies, under a constraint on the installed torch: the kernels above are compiled against it, and pip may not
# replace it.
RUN python3 -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" > /tmp/torch-constraint.txt \
 && pip install --no-cache-dir -c /tmp/torch-constraint.txt "verl==${VERL_VERSION}" \
 && rm /tmp/torch-constraint.txt

# dsv4-doctor itself, then the gate: no GPU at build time, so the rules are judged for the profile the image is built
# for (its arch and CP size), and the Megatron-Bridge DSv4 provider verl builds the model with must import. The two
# warnings this stack gives by design are accepted, with why (docs/accept.md); any other warning stops the build.
COPY . /opt/dsv4-doctor
COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/dsv4-entrypoint
RUN pip install --no-cache-dir /opt/dsv4-doctor \
 && python3 -c "from megatron.bridge.models.deepseek.deepseek_v4_bridge import DeepSeekV4Bridge" \
 && dsv4-doctor check --no-smoke --gpu-arch "${GATE_GPU_ARCH}" --cp "${GATE_CP}" --strict \
        --accept "deps.consistency:megatron-bridge requires megatron-core[dev,mlm]; Megatron is the pinned checkout" \
        --accept "libs.loaded:cuDNN and NCCL come from both the base image and the wheels"

# The doctor's own CuTe DSL kernels, compiled for each arch of TORCH_CUDA_ARCH_LIST without a GPU into the image-wide
# kernel store (/usr/local/share/dsv4-doctor/kernels: root's, read-only for every other user), so that the first
# check in a new container loads them instead of compiling. An arch the doctor ships no kernel recipes for is said
# and skipped; the first check on that GPU compiles its kernels into the user's own cache.
RUN for arch in $(echo "${TORCH_CUDA_ARCH_LIST}" | tr ';' ' '); do dsv4-doctor warm --gpu-arch "${arch}" || exit 1; done

# A training command (verl's trainer, torchrun, a *train*.sh, *deepseek_v4*.sh or *dsv4*.sh script) runs under
# `dsv4-doctor preflight --`, which checks the node and that command line, then becomes the job (same pid, same exit
# code); anything else, such as the default shell, runs as given. DSV4_PREFLIGHT=1 gates any command, DSV4_PREFLIGHT=0
# none. The preflight in front of every rank runs the default level (the smoke's tier 1, the kernel sub-runs, the
# imports); the deep level (`dsv4-doctor --deep`, the check's `--deep`: also Megatron's DSv4 layer, its fused build
# against the unfused one, forward and backward, about a minute more) is for a GPU CI job on the image and a new
# node's first check.
ENTRYPOINT ["/usr/local/bin/dsv4-entrypoint"]
CMD ["bash"]
