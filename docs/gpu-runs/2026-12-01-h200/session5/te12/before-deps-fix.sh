#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=1 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3
# nothing to fix
before: Verdict: PASS (3 passed; exit 0)
