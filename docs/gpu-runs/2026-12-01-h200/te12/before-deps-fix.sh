#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=1 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3

# Step 1 [deps.consistency]: Install importlib-metadata>=1.0, which transformer-engine-cu13 2.12.0 requires
"$PY" -I -m pip install 'importlib-metadata>=1.0'

# Step 2 [deps.consistency]: Install nvdlfw-inspect, which transformer-engine-torch 2.12.0 requires
"$PY" -I -m pip install nvdlfw-inspect
before: Verdict: FAIL (1 failed, 2 passed; exit 1)
