#!/usr/bin/env bash
# The example reports of the documentation, as the doctor prints them. Run from the repository root with the project
# installed:
#   bash docs/readme-examples.sh > docs/examples.md   the CPU-machine examples (published wheels from tests/wheels.py
#                                                     on PYTHONPATH, a fresh empty virtual environment as the target)
#   bash docs/readme-examples.sh readme               the README's example report: the terminal rendering of a
#                                                     committed H200 report (tests/test_readme.py compares the two)
# Paths of the machine that ran it are shown relative to the repository root, the target environment as ENV.
set -euo pipefail

H200_REPORT=docs/gpu-runs/2026-12-03-h200/complete/check-cp2.json
if [ "${1:-}" = readme ]; then
    python -c 'import json, sys
from dsv4_doctor.report.terminal import render_terminal
from dsv4_doctor.model.report import Report
print(render_terminal(Report.from_wire(json.load(open(sys.argv[1]))), 0, width=100, color=False, encoding="utf-8"),
      end="")' \
        "$H200_REPORT"
    exit
fi

python tests/wheels.py >/dev/null
cache=.cache/wheels/envs
target=$(mktemp -d)/v
python -m venv --without-pip "$target"
export PYTHONPATH=$cache/nvidia-cudnn-frontend-1.26.0:$cache/megatron-core-0.19.2:$cache/verl-0.9.0:$cache/apache-tvm-ffi-0.1.9
export COLUMNS=120
here=$PWD/
shown() { sed -e "s#$target#ENV#g" -e "s#$here##g"; }
only='cudnn-fe.*,tvm-ffi.version,mcore.*,verl.cp-layout,python.version'
echo '# Example reports'
echo
echo 'Real output of the doctor on the CI-class machine (no GPU), produced by `bash docs/readme-examples.sh >'
echo 'docs/examples.md`. The README shows a report of a healthy GPU stack; these show what a broken one looks like, in'
echo 'the plain text format (piped output), as a fix plan, as JSON, and for a training command.'
echo
echo '## A broken stack, as text'
echo
echo 'The published nvidia-cudnn-frontend 1.26.0, megatron-core 0.19.2, verl 0.9.0 and apache-tvm-ffi 0.1.9 wheels on'
echo '`PYTHONPATH`, checked for a GB200 job with CP 2'
echo "(\`dsv4-doctor check --cp 2 --gpu-arch 10.0 --only '$only' --python ENV/bin/python\`, ENV a virtual environment"
echo 'with nothing installed):'
echo
echo '```text'
dsv4-doctor check --cp 2 --gpu-arch 10.0 --only "$only" --python "$target/bin/python" | shown || true
echo '```'
echo
echo '## Its fix plan'
echo
echo '`dsv4-doctor fix`, same options ([fix-plans.md](fix-plans.md)):'
echo
echo '```sh'
dsv4-doctor fix --cp 2 --gpu-arch 10.0 --only "$only" --python "$target/bin/python" 2>/dev/null | shown || true
echo '```'
echo
echo '## One check as JSON'
echo
echo '`--only mcore.cp-partition-mode -f json` ([json.md](json.md)); the `PYTHONPATH` value and the plugin list are'
echo 'shortened:'
echo
echo '```json'
dsv4-doctor check --cp 2 --gpu-arch 10.0 --only mcore.cp-partition-mode -f json --python "$target/bin/python" \
  | shown | python -c 'import json,sys; r=json.load(sys.stdin); r["environment"]["variables"]={"PYTHONPATH": "(the wheels above)"}; r["plugins"]=r["plugins"][:2]+[{"...": "one entry per entry point"}]; print(json.dumps(r, indent=2))' || true
echo '```'
echo
echo '## A training command'
echo
echo 'A Megatron-LM command line that forgets the CP settings, read with `--job-args` (what `preflight` reads before it'
echo 'execs the command), for an H200 job ([job-scripts.md](job-scripts.md)):'
echo
job='torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --experimental-attention-variant dsv4_hybrid --context-parallel-size 2 --tensor-model-parallel-size 1 --seq-length 8192 --dsa-indexer-loss-coeff 0.1'
echo '```text'
echo "\$ dsv4-doctor check --only 'job.*' --gpu-arch 9.0 --job-args '$job'"
env -u PYTHONPATH NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1 dsv4-doctor check --only 'job.*' --gpu-arch 9.0 \
  --job-args "$job" --python "$target/bin/python" | shown || true
echo '```'
