#!/usr/bin/env bash
# Regenerates the example reports in README (between <!-- examples:begin --> and <!-- examples:end -->) on the
# CI-class machine: published wheels from tests/wheels.py on PYTHONPATH, a fresh empty virtual environment as the
# target. Run from the repository root with the project installed: bash docs/readme-examples.sh > /tmp/examples.md
set -euo pipefail
python tests/wheels.py >/dev/null
cache=.cache/wheels/envs
target=$(mktemp -d)/v
python -m venv --without-pip "$target"
export PYTHONPATH=$cache/nvidia-cudnn-frontend-1.26.0:$cache/megatron-core-0.19.2:$cache/verl-0.9.0:$cache/apache-tvm-ffi-0.1.9
export COLUMNS=120
only='cudnn-fe.*,tvm-ffi.version,mcore.*,verl.cp-layout,python.version'
echo 'Real output on the CI-class machine (no GPU) with the published nvidia-cudnn-frontend 1.26.0, megatron-core'
echo '0.19.2, verl 0.9.0 and apache-tvm-ffi 0.1.9 wheels on `PYTHONPATH`, checked for a GB200 job with CP 2'
echo "(\`dsv4-doctor check --cp 2 --gpu-arch 10.0 --only '$only' --python ENV/bin/python\`, ENV a virtual environment"
echo 'with nothing installed; produced by `docs/readme-examples.sh`):'
echo
echo '```text'
dsv4-doctor check --cp 2 --gpu-arch 10.0 --only "$only" --python "$target/bin/python" | sed "s#$target#ENV#g" || true
echo '```'
echo
echo 'The fix plan for it (`dsv4-doctor fix`, same options):'
echo
echo '```sh'
dsv4-doctor fix --cp 2 --gpu-arch 10.0 --only "$only" --python "$target/bin/python" 2>/dev/null | sed "s#$target#ENV#g" || true
echo '```'
echo
echo 'One check of it as JSON (`--only mcore.cp-partition-mode -f json`):'
echo
echo '```json'
dsv4-doctor check --cp 2 --gpu-arch 10.0 --only mcore.cp-partition-mode -f json --python "$target/bin/python" \
  | sed "s#$target#ENV#g" | python -c 'import json,sys; r=json.load(sys.stdin); r["environment"]["variables"]={"PYTHONPATH": "(the wheels above)"}; r["plugins"]=r["plugins"][:2]+[{"...": "one entry per entry point"}]; print(json.dumps(r, indent=2))' || true
echo '```'
echo
echo 'A Megatron-LM command line that forgets the CP settings, read with `--job-args` (what `preflight` reads before it'
echo 'execs the command), for an H200 job:'
echo
job='torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --experimental-attention-variant dsv4_hybrid --context-parallel-size 2 --tensor-model-parallel-size 1 --seq-length 8192 --dsa-indexer-loss-coeff 0.1'
echo '```text'
echo "\$ dsv4-doctor check --only 'job.*' --gpu-arch 9.0 --job-args '$job'"
env -u PYTHONPATH NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1 dsv4-doctor check --only 'job.*' --gpu-arch 9.0 \
  --job-args "$job" --python "$target/bin/python" | sed "s#$target#ENV#g" || true
echo '```'
