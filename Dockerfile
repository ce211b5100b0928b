# syntax=docker/dockerfile:1
# A DeepSeek-V4 training image for verl + Megatron-Core with context parallelism, gated by dsv4-doctor at build time.
#
#   docker build -t dsv4-train .
#   docker run --gpus all dsv4-train python3 -m verl.trainer.main_ppo ...   # preflight runs first, then the job
#
# Every version below is the rulebook's fix version: the build arguments' defaults equal checks/fixes.py PINS, and
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
ARG FLASH_MLA_REF=nv_dev
ARG FAST_HADAMARD_COMMIT=f134af63deb2df17e1171a9ec1ea4a7d8604d5ca
ARG VERL_VERSION=0.9.0
ARG TE_MIN_VERSION=2.9.0
# The GPUs the compiled kernels are built for (H100/H200 and B200/GB200), and the arch the build gate checks for.
ARG TORCH_CUDA_ARCH_LIST="9.0;10.0"
ARG GATE_GPU_ARCH=10.0

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

# Kernels compiled against the image's torch: FlashMLA's nv_dev branch (flash_mla_sparse_fwd with indexer_topk) and
# fast-hadamard-transform at the commit Megatron pins.
RUN pip install --no-cache-dir --no-build-isolation \
        "flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@${FLASH_MLA_REF}" \
 && FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE pip install --no-cache-dir --no-build-isolation \
        "fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@${FAST_HADAMARD_COMMIT}"

# verl (it has the contiguous CP layout, #7221/#7297, and sets the DSv4 CP settings itself, #6555).
RUN pip install --no-cache-dir "verl==${VERL_VERSION}"

# dsv4-doctor itself, then the gate: no GPU at build time, so the rules are judged for the arch the image is for.
COPY . /opt/dsv4-doctor
RUN pip install --no-cache-dir /opt/dsv4-doctor \
 && dsv4-doctor check --no-smoke --gpu-arch "${GATE_GPU_ARCH}" --cp 2 --strict

# Every container start checks the node and the job's command line, then becomes the job (same pid, same exit code).
ENTRYPOINT ["dsv4-doctor", "preflight", "--"]
CMD ["bash"]
