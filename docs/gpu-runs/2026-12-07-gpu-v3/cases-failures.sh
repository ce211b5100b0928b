# Real failure logs for triage (issue 50 item 4), sourced by runs.sh. Each case runs one small job (jobs/*.py) under
# torchrun as a user's launcher does, `--log-dir DIR --redirects 3 --tee 3`, and keeps what it wrote: the per-rank
# tree $R/faillogs/NAME/logs/<run id>/attempt_0/<rank>/{stdout,stderr}.log, the launcher's own stdout+stderr
# ($R/faillogs/NAME/console.txt: the ranks' lines tee'd with [defaultN]: prefixes, then torchrun's ChildFailedError),
# and run.txt (the command, its exit code and seconds). collect-faillogs.sh copies them into tests/triage/gpu/NAME/.
#   fail-wrong-arch  FlashMLA built for SM100 only (FLASH_MLA_DISABLE_SM90=1), first on PYTHONPATH, on this SM90 GPU
#   fail-oom         another process (filler.py of 2026-12-04) holds 93 % of the GPU; the step asks for 16 GiB more
#   fail-nan         a DSv4 layer (fused DSA) in Megatron DDP with check_for_nan_in_grad; a NaN in the layer's input
#   fail-no-dsa      Megatron's DSv4 config with dsa_kernel_backend=cudnn and the cuDNN frontend hidden
#   fail-rank-dies   3 ranks (gloo) on the one GPU; rank 1's data shard is missing, the others time out waiting
#   faillogs         all five, ~2.5 min (at most ~4.5 min)
# The wrong-arch case needs its own FlashMLA build (~300 s on 16 cores at nice 10): start it in the first call that
# stages the sources (the FlashMLA tarball $A/src/flashmla-b7643bd5.tar.gz must be there), e.g.
#   bash docs/gpu-runs/2026-12-07-gpu-v3/gpu.sh stage 1 && bash docs/gpu-runs/2026-12-07-gpu-v3/cases-failures.sh start-wrong-arch-build
FAILLOGS_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAILLOGS_JOBS=$FAILLOGS_HERE/jobs
FAILLOGS_FILLER=$FAILLOGS_HERE/../2026-12-04-h200-truth/filler.py
FAILLOGS_CASES="fail-wrong-arch fail-oom fail-nan fail-no-dsa fail-rank-dies"

start_wrong_arch_build() {  # FlashMLA b7643bd5 for SM100 only, installed with pip --target into ~/flashmla-sm100
  # (never into site-packages: only fail-wrong-arch puts it first on PYTHONPATH). Needs the staged source tarball.
  [ -f "$B/flashmla100.sh" ] && { ts "wrong-arch build: already started"; return 0; }
  [ -f "$A/src/flashmla-b7643bd5.tar.gz" ] || { ts "wrong-arch build: NOT STARTED ($A/src/flashmla-b7643bd5.tar.gz not staged yet)"; return 1; }
  mkdir -p ~/fm100 && tar -xzf "$A/src/flashmla-b7643bd5.tar.gz" -C ~/fm100 || { ts "wrong-arch build: unpack FAILED"; return 1; }
  # nice 10: it takes the cores the three main builds leave (as 2026-12-04's flashmla100 did: 308 s)
  start_build flashmla100 ~/fm100/flashmla ~/flashmla-sm100 10 CPLUS_INCLUDE_PATH="$CUDA_HOME/include/cccl" \
    FLASH_MLA_DISABLE_SM90=1 MAX_JOBS=6 NVCC_THREADS=2
}
# builds_status and record show it once it was started
if [ -f "${B:-/nonexistent}/flashmla100.sh" ]; then
  case " $BUILDS " in *" flashmla100 "*) ;; *) BUILDS="$BUILDS flashmla100" ;; esac
fi

needs_fail-wrong-arch() { [ -f "$B/flashmla100.sh" ] && echo flashmla100; }  # never waits for a build not started
needs_fail-oom() { :; }
needs_fail-nan() { echo "flashmla fht te-torch"; }
needs_fail-no-dsa() { echo "te-torch"; }
needs_fail-rank-dies() { :; }
needs_faillogs() { echo "flashmla fht te-torch $(needs_fail-wrong-arch)"; }
est_fail-wrong-arch() { echo 45; }
est_fail-oom() { echo 60; }
est_fail-nan() { echo 100; }
est_fail-no-dsa() { echo 55; }
est_fail-rank-dies() { echo 45; }
est_faillogs() { echo 240; }  # typically ~150 s; each case is skipped when the time left is short

faillog_torchrun() {  # NAME NPROC LIMIT_S [VAR=VALUE ...] -- [TORCHRUN-OPTION ...] SCRIPT: the job as a user launches
  # it; the exit code and seconds in run.txt. Run from a folder of its own under $WORK.
  local name=$1 nproc=$2 lim=$3 envs=() d t rc; shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  d=$R/faillogs/$name; rm -rf "$d" "$WORK/faillogs-$name"; mkdir -p "$d" "$WORK/faillogs-$name"
  local cmd=(timeout -k 5 "$lim" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$nproc"
             --log-dir "$d/logs" --redirects 3 --tee 3 "$@")
  { echo "case: $name"; echo "PYTHONPATH in the call: ${PYTHONPATH:-}"; echo "set for this job: ${envs[*]:-}"
    echo "command: ${cmd[*]}"
    echo "(python3 -m torch.distributed.run is torchrun: the console script runs that module's main)"
    echo "started: $(date -u +%FT%TZ)"; } > "$d/run.txt"
  t=$(date +%s)
  (cd "$WORK/faillogs-$name" && env "${envs[@]}" "${cmd[@]}") > "$d/console.txt" 2>&1
  rc=$?
  { echo "exit: $rc"; echo "seconds: $(( $(date +%s) - t ))"; } >> "$d/run.txt"
  ts "$name: exit $rc in $(( $(date +%s) - t )) s; $(find "$d/logs" -type f 2> /dev/null | wc -l) log files; last line: $(tail -1 "$d/console.txt" | cut -c 1-160)"
}

faillog_gpu_state() {  # NAME LABEL: the GPU's memory and its processes, beside the case's logs
  { echo "== $2 ($(date -u +%H:%M:%S))"; nvidia-smi --query-gpu=index,memory.total,memory.used,memory.free --format=csv
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; } >> "$R/faillogs/$1/gpu.txt" 2>&1
}

case_fail-wrong-arch() {
  [ "$(cut -d' ' -f1 "$B/flashmla100.done" 2> /dev/null)" = 0 ] \
    || { ts "fail-wrong-arch: NOT RUN (the SM100-only FlashMLA build is not done: start_wrong_arch_build)"; return; }
  faillog_torchrun fail-wrong-arch 1 40 PYTHONPATH="$HOME/flashmla-sm100:$MC" -- "$FAILLOGS_JOBS/wrong_arch_step.py"
}

case_fail-oom() {
  local ready=$WORK/fail-oom.filler-ready.json pid
  rm -f "$ready"
  (cd /tmp && exec "$PY" "$FAILLOGS_FILLER" "$ready" 93%) > "$WORK/fail-oom.filler.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 40); do [ -f "$ready" ] && break; kill -0 "$pid" 2> /dev/null || break; sleep 1; done
  if [ ! -f "$ready" ]; then
    ts "fail-oom: NOT RUN (the filler did not get ready)"; tail -5 "$WORK/fail-oom.filler.txt"; kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; return
  fi
  faillog_torchrun fail-oom 1 40 ACT_GIB=16 -- "$FAILLOGS_JOBS/oom_step.py"  # (clears the case folder first)
  cp "$ready" "$R/faillogs/fail-oom/filler-ready.json"; cp "$WORK/fail-oom.filler.txt" "$R/faillogs/fail-oom/filler.txt"
  faillog_gpu_state fail-oom "filler still holding, after the job"
  kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
  ts "fail-oom: filler $pid stopped"
}

case_fail-nan() {
  faillog_torchrun fail-nan 1 90 INJECT_TOKEN=100 -- "$FAILLOGS_JOBS/dsv4_nan_step.py"
}

case_fail-no-dsa() {
  faillog_torchrun fail-no-dsa 1 50 HIDE_MODULES=cudnn -- "$FAILLOGS_JOBS/no_dsa_config.py"
}

case_fail-rank-dies() {  # rank 1's shard is missing. torchrun's monitor interval of 20 s stands in for a dead rank on
  # another node, whose death this node's agent does not see: the other ranks reach their 10 s process-group timeout
  local data=$WORK/faillogs-data
  rm -rf "$data" && mkdir -p "$data"
  "$PY" -c 'import sys, torch; [torch.save(torch.arange(1000 + r, dtype=torch.float32), f"{sys.argv[1]}/shard-{r}.pt") for r in (0, 2)]' "$data"
  faillog_torchrun fail-rank-dies 3 45 DATA_DIR="$data" PG_TIMEOUT_S=10 -- --monitor-interval 20 \
    "$FAILLOGS_JOBS/rank_dies_step.py"
}

case_faillogs() {  # all five, each if it fits in the call's time left
  local c
  for c in $FAILLOGS_CASES; do
    if [ "$(left)" -lt "$("est_$c")" ]; then ts "$c: NOT RUN (no time: $(left) s left, it may take $("est_$c") s)"; continue; fi
    "case_$c"
  done
  ls -R "$R/faillogs" | head -80
}

# Run directly, it starts the wrong-arch build: `bash cases-failures.sh start-wrong-arch-build` (gpu.sh's functions and
# variables, sourced without running a step; this file is sourced again by runs.sh then, which only defines functions)
if [ "${#BASH_SOURCE[@]}" = 1 ] && [ "${BASH_SOURCE[0]}" = "$0" ]; then
  [ "${1:-}" = start-wrong-arch-build ] || { echo "usage: $0 start-wrong-arch-build" >&2; exit 2; }
  GPU_SH_SOURCE_ONLY=1 . "$FAILLOGS_HERE/gpu.sh"
  start_wrong_arch_build
fi
