#!/usr/bin/env bash
# CPU side: the GO doctor's static view of the device's package set (python3.12 + /tmp/devsite + Megatron d48bd6be)
set -u
P=/tmp/preview; mkdir -p $P; J=/work/main/.gpu/extra/jobs
export PYTHONPATH=/tmp/mcore:/tmp/devsite NO_COLOR=1
D="/tmp/govenv/bin/dsv4-doctor"; PYA="--python /root/.pyenv/versions/3.12.1/bin/python3 --gpu-arch 9.0"
cd /tmp
$D list > $P/list.txt
$D check --static-only --cp 2 $PYA > $P/check-cp2.txt 2>&1; echo "check --cp 2: $?"
$D check --static-only --cp 1 $PYA > $P/check-cp1.txt 2>&1; echo "check --cp 1: $?"
env NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1 $D check --static-only $PYA --job-args "$(cat $J/verl-cp2.cmd)" > $P/job-verl-cp2.txt 2>&1; echo "job verl cp2: $?"
$D preflight --dry-run --no-smoke $PYA -- bash $J/run_deepseek_v4_flash_megatron.sh > $P/pf-dry-bash.out 2> $P/pf-dry-bash.txt; echo "preflight dry bash: $?"
$D fix --cp 2 $PYA --job-args "$(cat $J/verl-cp2-nocp.cmd)" > $P/fix-job-nocp.sh 2> $P/fix-job-nocp.err; echo "fix job nocp: $?"
