#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=2 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3

# Step 1 [te.import]: Install Transformer Engine 2.12.0, whose core needs no symbol the installed cuBLAS lacks (verified: it loads and passes on torch 2.11.0's cuBLAS 13.1 on an H200), built against the installed torch
"$PY" -I -m pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'
