#!/usr/bin/env bash
# The GPU runs committed beside this file, made on the `device` tool's nvidia-h200-x2 machine (2x H200, its
# python3: 3.12 with torch 2.11 + CUDA 13; no TE, Megatron-core or cuDNN frontend). The doctor and its three
# dependencies travel as wheels in .whl (built here with `pip wheel` / `pip download`).
#   bash docs/gpu-runs/run_gpu.sh OUTDIR
set -u
out=${1:?outdir}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site NO_COLOR=1
doctor() { python3 -m dsv4_doctor "$@"; }
{
  echo "## host"; nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.device_count())'
  for cp in 1 2 4; do
    echo "## CUDA_VISIBLE_DEVICES=0 dsv4-doctor smoke --cp $cp --format json   (one GPU: ranks simulated)"
    CUDA_VISIBLE_DEVICES=0 doctor smoke --cp $cp --format json > "$out/smoke-cp$cp-1gpu.json"; echo "exit $?"
  done
  echo "## dsv4-doctor smoke --cp 2 --format json   (two GPUs: two NCCL processes)"
  doctor smoke --cp 2 --format json > "$out/smoke-cp2-2gpu-nccl.json"; echo "exit $?"
  echo "## dsv4-doctor check --cp 2 --format json   (the whole doctor on this host)"
  doctor check --cp 2 --format json > "$out/check-cp2.json"; echo "exit $?"
  echo "## dsv4-doctor check --cp 2 --deep --format json   (the deep level: tier 2 too, where the stack has it)"
  doctor check --cp 2 --deep --format json > "$out/check-cp2-deep.json"; echo "exit $?"
  echo "## dsv4-doctor check --cp 2"
  doctor check --cp 2 > "$out/check-cp2.txt"; echo "exit $?"
  echo "## CUDA_VISIBLE_DEVICES=0 python3 benchmarks/bench_smoke.py --repeat 5 --cp 1"
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/bench_smoke.py --repeat 5 --cp 1
} > "$out/log.txt" 2>&1
cat "$out/log.txt"
