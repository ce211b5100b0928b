#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=2 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/root/.pyenv/versions/3.12.1/bin/python3

# Step 1 (manual: not run by this script or by --apply) [cudnn-fe.dsa, torch.install]: Install a CUDA 13 build of
#   PyTorch 2.11.0 from PyTorch's wheel index (the verl DSv4 image uses torch 2.11.0 with CUDA 13.0)
#   "$PY" -I -m pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130
#   Reinstalling torch invalidates every compiled extension built against it; rebuild after it: transformer-engine
#   2.12.0.

# Step 2 (held back: run it after Step 1, because it builds against torch; not run by this script or by --apply)
#   [kernels.fast-hadamard]: Build fast-hadamard-transform at 1cc807ef (tag v1.1.0, because the installed
#   megatron-bridge 0.6.2 declares fast-hadamard-transform>=1.1.0, which Megatron-LM dev's f134af63 (1.0.4.post1) does
#   not meet)
#   "$PY" -I -m pip install --no-build-isolation --no-deps 'fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@1cc807efbd6cc001df359822d60bf6052dd66859'

# Step 3 (held back: run it after Step 1, because it builds against torch; not run by this script or by --apply)
#   [kernels.flash-mla]: Build FlashMLA nv_dev at b7643bd5 against the installed torch (its flash_mla_sparse_fwd takes
#   the indexer_topk Megatron passes), for sm_90a only (FLASH_MLA_DISABLE_SM100=1)
#   CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl" FLASH_MLA_DISABLE_SM100=1 "$PY" -I -m pip install --no-build-isolation --no-deps 'flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@b7643bd54521f563b839b98289b5cd048c062ba2'
#   CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl: CUDA 13 moved the CCCL headers there; nvcc finds them, the host
#   compiler does not (harmless on CUDA 12). Set MAX_JOBS and NVCC_THREADS to bound the build's parallelism
#   (MAX_JOBS=16 NVCC_THREADS=2 built sm_90a in 119 s on 16 cores).

# Step 4 (held back: run it after Step 1, because it builds against torch; not run by this script or by --apply)
#   [te.import]: Remove every Transformer Engine distribution, then install one consistent set (TE 2.12.0: torch
#   2.11.0, which the plan's first step installs, brings nvidia-cublas 13.1.0.3 (its cuda-toolkit==13.0.2 pin), which
#   lacks cublasLtGroupedMatrixLayoutInit_internal that TE 2.13 and later need, so TE 2.12.0, the newest that needs no
#   missing symbol, loads on it (measured on an H200))
#   "$PY" -I -m pip uninstall -y transformer-engine transformer-engine-cu12 transformer-engine-cu13 transformer-engine-torch
#   "$PY" -I -m pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'

# Step 5 [cudnn-fe.dsa]: Keep nvidia-cudnn-frontend 1.27.0 and install what it declares and lacks (it declares
#   nvidia-cutlass-dsl[cu13]>=4.5.0, cuda-python, apache-tvm-ffi>=0.1.11, torch-c-dlpack-ext), reinstalling the
#   frontend itself without touching its dependencies
"$PY" -I -m pip install --force-reinstall --no-deps nvidia-cudnn-frontend==1.27.0

# Step 6 [cutlass-dsl.import]: Install the CuTe DSL with its CUDA 13 libraries (nvidia-cudnn-frontend 1.27.0
#   declares nvidia-cutlass-dsl[cu13]>=4.5.0)
"$PY" -I -m pip install 'nvidia-cutlass-dsl[cu13]==4.5.2'

# Step 7 (a job setting or choice; nothing to run) [cudnn-fe.dsa, kernels.flash-mla]:
#   Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend none)

# Step 8 (a job setting or choice; nothing to run) [kernels.triton]:
#   Install the triton release the installed torch requires (command withheld: torch is not installed, so its triton
#   requirement is unknown (see torch.install))

# Job settings: for the training command and the job script; not run by this script or by --apply [job.cp-args, job.env]:
#   CP_ARGS for CP 2, in the training command's Hydra overrides (the full block; verl's DSv4 example):
#     ++actor_rollout_ref.actor.megatron.override_transformer_config.cp_partition_mode=contiguous
#     ++actor_rollout_ref.actor.megatron.override_transformer_config.sequence_packing_scheduler=dp_balanced
#     ++actor_rollout_ref.actor.megatron.override_transformer_config.max_seqlen_per_dp_cp_rank=6145
#   the command lacks 3 of them
#   max_seqlen_per_dp_cp_rank = ceil(12289 / 2) = 6145, from 2048 + 10241 (data.max_prompt_length + data.max_response_length)
#   verl's example script computes (max_prompt_length + max_response_length) / CP with shell division, which rounds down: when the sum is not a multiple of CP the longest sample does not fit; rounded up here
#   In the job script, before the training command:
#     export NCCL_NVLS_ENABLE=0
#     export CUDA_DEVICE_MAX_CONNECTIONS=1

# No fix is known for: deps.consistency (see the report).
