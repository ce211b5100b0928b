#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=2 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3

# Step 1 [kernels.fast-hadamard]: Build fast-hadamard-transform at f134af63 (the commit Megatron-LM dev pins)
"$PY" -I -m pip install --no-build-isolation --no-deps 'fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@f134af63deb2df17e1171a9ec1ea4a7d8604d5ca'

# Step 2 [kernels.flash-mla]: Build FlashMLA nv_dev at b7643bd5 against the installed torch (its
#   flash_mla_sparse_fwd takes the indexer_topk Megatron passes), for sm_90a only (FLASH_MLA_DISABLE_SM100=1)
CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl" FLASH_MLA_DISABLE_SM100=1 "$PY" -I -m pip install --no-build-isolation --no-deps 'flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@b7643bd54521f563b839b98289b5cd048c062ba2'
#   CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl: CUDA 13 moved the CCCL headers there; nvcc finds them, the host
#   compiler does not (harmless on CUDA 12). Set MAX_JOBS and NVCC_THREADS to bound the build's parallelism
#   (MAX_JOBS=16 NVCC_THREADS=2 built sm_90a in 119 s on 16 cores).

# Step 3 [te.version]: Install Transformer Engine 2.12.0 with its PyTorch extension, built against the installed
#   torch: the installed nvidia-cublas 13.1.0.3 lacks cublasLtGroupedMatrixLayoutInit_internal, which TE 2.13 and
#   later need (TE 2.16.1 would fail at import with an undefined symbol; cuBLAS exports it from 13.2 on), so TE
#   2.12.0, the newest that needs no missing symbol, loads on it (measured on an H200)
"$PY" -I -m pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'

# Step 4 [cudnn-fe.version, cutlass-dsl.import, tvm-ffi.version]: Install the tested set: cuDNN frontend 1.27.0
#   (first with the fused CSA compressor cudnn.csa), apache-tvm-ffi 0.1.11 and nvidia-cutlass-dsl 4.5.2 (the Megatron
#   DSv4 recipes' pins; the CuTe DSL 4.5.2 brings cuda-python), and torch-c-dlpack-ext 0.1.5, which the frontend's
#   cutedsl extra declares (--no-deps: it requires only torch, which stays the image's)
"$PY" -I -m pip install --no-deps apache-tvm-ffi==0.1.11
"$PY" -I -m pip install --force-reinstall --no-deps nvidia-cudnn-frontend==1.27.0
"$PY" -I -m pip install 'nvidia-cutlass-dsl[cu13]==4.5.2'
"$PY" -I -m pip install --no-deps torch-c-dlpack-ext==0.1.5

# Step 5 [mcore.dsv4]: Install Megatron-core from the dev branch at d48bd6be or later (no release has dsv4_hybrid;
#   it has the indexer-loss fixes, the fused CSA compressor and dsa_kernel_backend, which verl's tested fd1121b8
#   predates)
"$PY" -I -m pip install --no-deps 'megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1'

# Step 6 (a job setting or choice; nothing to run) [cudnn-fe.version, kernels.flash-mla]:
#   Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend none)
