#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=2 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3

# Step 1 [kernels.fast-hadamard]: Build fast-hadamard-transform at the commit Megatron-LM dev pins
"$PY" -I -m pip install --no-build-isolation 'fast-hadamard-transform @ git+https://github.com/Dao-AILab/fast-hadamard-transform.git@f134af63deb2df17e1171a9ec1ea4a7d8604d5ca'

# Step 2 [kernels.flash-mla]: Build FlashMLA from its nv_dev branch against the installed torch (its flash_mla_sparse_fwd takes the indexer_topk Megatron passes; on SM90 do not set FLASH_MLA_DISABLE_SM90=1, which the Megatron recipes set for Blackwell)
"$PY" -I -m pip install --no-build-isolation 'flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@nv_dev'

# Step 3 [te.version]: Install Transformer Engine 2.12.0 with its PyTorch extension, built against the installed torch: the installed nvidia-cublas 13.1.0.3 lacks cublasLtGroupedMatrixLayoutInit_internal, which TE 2.13 and later need (TE 2.16.1 would fail at import with an undefined symbol; cuBLAS exports it from 13.2 on)…
"$PY" -I -m pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'

# Step 4 (a job setting or choice; nothing to run) [kernels.flash-mla]:
#   Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend none)
