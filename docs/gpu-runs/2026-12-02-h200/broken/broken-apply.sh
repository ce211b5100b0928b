#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=2 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3

# Step 1 [kernels.fast-hadamard]: Build fast-hadamard-transform at 1cc807ef (tag v1.1.0, because the installed
#   megatron-bridge 0.6.2 declares fast-hadamard-transform>=1.1.0, which Megatron-LM dev's f134af63 (1.0.4.post1) does
#   not meet)
"$PY" -I -m pip install --no-build-isolation --no-deps 'fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@1cc807efbd6cc001df359822d60bf6052dd66859'

# Step 2 [kernels.flash-mla]: Build FlashMLA nv_dev at b7643bd5 against the installed torch (its
#   flash_mla_sparse_fwd takes the indexer_topk Megatron passes), for sm_90a only (FLASH_MLA_DISABLE_SM100=1)
CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl" FLASH_MLA_DISABLE_SM100=1 "$PY" -I -m pip install --no-build-isolation --no-deps 'flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@b7643bd54521f563b839b98289b5cd048c062ba2'
#   CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl: CUDA 13 moved the CCCL headers there; nvcc finds them, the host
#   compiler does not (harmless on CUDA 12). Set MAX_JOBS and NVCC_THREADS to bound the build's parallelism
#   (MAX_JOBS=16 NVCC_THREADS=2 built sm_90a in 119 s on 16 cores).

# Step 3 [deps.consistency, tvm-ffi.version]: Install the tested set: cuDNN frontend 1.27.0 (first with the fused
#   CSA compressor cudnn.csa), apache-tvm-ffi 0.1.11 and nvidia-cutlass-dsl 4.5.2 (the Megatron DSv4 recipes' pins;
#   the CuTe DSL 4.5.2 brings cuda-python)
"$PY" -I -m pip install --no-deps apache-tvm-ffi==0.1.11
"$PY" -I -m pip install --force-reinstall --no-deps nvidia-cudnn-frontend==1.27.0
"$PY" -I -m pip install 'nvidia-cutlass-dsl[cu13]==4.5.2'

# Step 4 (a job setting or choice; nothing to run) [kernels.flash-mla]:
#   Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend none)
