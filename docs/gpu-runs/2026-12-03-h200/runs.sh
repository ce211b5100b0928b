# The runs, one function per group (sourced by gpu.sh; cwd is ~/results/NAME, PYTHONPATH=~/mcore); every check at
# the default --timeout.
# Each command's exit code is printed after it; the reports are kept as the doctor wrote them.
D="$PY -m dsv4_doctor"
J=$A/extra/jobs
G=~/go   # the doctor's source tree at the GO commit (benchmarks/)
VERL_CP2=$(cat $J/verl-cp2.cmd 2>/dev/null)
VERL_CP2_NOCP=$(cat $J/verl-cp2-nocp.cmd 2>/dev/null)
JOBENV=(env NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1)
left() { echo $(( $1 - ($(date +%s) - t0) )); }

tier2_numbers() {  # REPORT.json: smoke.thd-cp's row, each tier-2 build's stage and times, every tensor's numbers
  $PY - "$1" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
row = [c for c in r["checks"] if c["id"] == "smoke.thd-cp"][0]
print("==", sys.argv[1], row["status"], row["summary"][:700])
t2 = (row.get("evidence") or {}).get("tier2") or {}
cp1 = t2.get("cp1") or {}
print("  cp1:", {k: cp1.get(k) for k in ("ok", "stage", "first_forward_s", "finite")}, (cp1.get("layouts") or {}).get("ok"),
      (cp1.get("error") or {}).get("message"))
f = t2.get("fused") or {}
for name, b in (f.get("builds") or {}).items():
    print(" ", name, {k: b.get(k) for k in ("ok", "stage", "hang", "timed_out", "wall_s", "import_s", "first_forward_s",
          "first_backward_s", "steady_forward_s", "steady_backward_s", "cute_dsl_cache")}, (b.get("error") or {}).get("message"))
c = f.get("comparison") or {}
print("  ok", c.get("ok"), "worst", c.get("worst"), "control", c.get("control"), "problems", c.get("problems"))
for n, t in sorted((c.get("tensors") or {}).items()):
    print("  %-66s rel_l2 %.3g tol %.3g 1-cos %.3g max_abs %.3g finite %s/%s" % (n, t.get("rel_l2", float("nan")),
          t.get("tolerance", float("nan")), t.get("cosine_drift", 0) or 0, t.get("max_abs", float("nan")),
          t.get("finite"), t.get("finite_reference")))
PYEOF
}

run_complete() {  # issue 24 item 1: the complete stack; the first check is the container's first (cold, timed)
  wait_builds 240 te-torch fht flashmla
  install_te || return
  give_back_built 5
  $PY -m pip list 2>/dev/null > pip-list.txt; $PY -m pip check > pip-check.txt 2>&1; echo "pip check: exit $?"
  grep -i -E "^(torch|triton|transformer.engine|nvidia-cudnn-frontend|nvidia-cutlass-dsl|apache-tvm-ffi|flash.mla|fast.hadamard|megatron|verl|dsv4)" pip-list.txt
  ts "check --cp 2 (the container's first check, a fresh kernel cache)"
  local s; s=$(date +%s%N)
  DSV4_DOCTOR_KERNEL_CACHE=$(mktemp -d) $D check --cp 2 -f json -o check-cp2.json; echo "check --cp 2: exit $? ($(( ($(date +%s%N) - s) / 1000000 )) ms wall, cold)"
  text_of check-cp2.json; tier2_numbers check-cp2.json
  ts "env NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1 check --job-args verl (CP 2, CP_ARGS)"
  "${JOBENV[@]}" $D check --job-args "$VERL_CP2" -f json -o check-job-verl-cp2.json; echo "check --job-args verl cp2: exit $?"
  text_of check-job-verl-cp2.json
  ts "preflight stand-in"
  "${JOBENV[@]}" $D preflight --cp 2 --report preflight-standin.json -- $PY $J/standin.py --stand-in \
    > preflight-standin.out 2> preflight-standin.txt; echo "preflight -- stand-in: exit $?"; cat preflight-standin.out
  ts "fix --job-args verl without CP_ARGS"
  $D fix --cp 2 --job-args "$VERL_CP2_NOCP" > fix-job-nocp.sh 2> fix-job-nocp.err; echo "fix --job-args (no CP_ARGS): exit $?"
  grep -n -i -E "max_seqlen|cp_partition|packing_scheduler|NCCL|CUDA_DEVICE" fix-job-nocp.sh
}

run_bench() {  # issue 24 item 3 on the complete stack: cold (fresh kernel cache) and warm checks, the two floors
  cd $G || return
  ts "bench --full --cp 2 --repeat ${BENCH_REPEAT:-2} (complete stack)"
  timeout "$(left ${BENCH_LEFT:-585})" $PY benchmarks/bench_check.py --full --cp 2 --repeat ${BENCH_REPEAT:-2} --torch-python $PY \
    --check-args "${BENCH_CHECK_ARGS:-}" --report-dir $R/bench/full > $R/bench/bench-full.txt 2>&1; echo "bench: exit $?"
  cd $R/bench || return
  tail -c 4000 bench-full.txt
}


run_partial() {  # issue 24 item 3 on the partial stack: the complete stack with Transformer Engine hidden (a
  # `transformer_engine` package that fails to import, first on PYTHONPATH), so that te.import fails and tier 2 is
  # skipped as without TE; run after the complete stack's runs, alternating warm rows against the torch floor
  wait_builds 420 flashmla fht te-torch
  mkdir -p $R/partial/hide-te/transformer_engine
  printf 'raise ImportError("transformer_engine hidden for the partial-stack bench")\n' \
    > $R/partial/hide-te/transformer_engine/__init__.py
  cd $G || return
  ts "bench --full --cp 2 --repeat ${PARTIAL_REPEAT:-3} (partial stack: TE hidden)"
  PYTHONPATH=$R/partial/hide-te:$PYTHONPATH timeout "$(left ${BENCH_LEFT:-585})" $PY benchmarks/bench_check.py --full \
    --cp 2 --repeat ${PARTIAL_REPEAT:-3} --torch-python $PY --report-dir $R/partial/full > $R/partial/bench-partial.txt 2>&1
  echo "bench (partial): exit $?"
  cd $R/partial || return
  tail -c 4000 bench-partial.txt
}


run_profile() {  # where a kernel sub-run's first call goes: the CuTe DSL's own JIT timer (tracing vs compiling), and
  # whether anything is read from a file cache; each sub-run twice (a second process: nothing cached for cute.compile)
  local P L; P=$($PY -c 'import os, dsv4_doctor.checks.smoke as s; print(os.path.dirname(s.__file__))')
  L=$($PY -c 'import dsv4_doctor.probes as p; print(p.PROBE_DIR)')
  for sub in layout dsa; do
    for n in 1 2; do
      env CUTE_DSL_JIT_TIME_PROFILING=1 CUTE_DSL_LOG_TO_CONSOLE=1 CUTE_DSL_LOG_LEVEL=20 DSV4_DOCTOR_PROBE_LIB=$L \
        $PY $P/dsv4probe_kernels.py $sub-$n.json "{\"subrun\": \"$sub\", \"cp\": 2, \"device\": \"cuda\", \"split_layout\": false}" \
        2> $sub-$n-jit-timer.txt
      echo "$sub run $n: exit $?"; grep -E 'build_ir_module|compile_and_jit|Function: compile|cache (hit|miss)' $sub-$n-jit-timer.txt | cut -c 1-220 | head -12
    done
  done
}

run_shim() {  # tier 2 without fast-hadamard: a module of that name that fails to import stands first on PYTHONPATH,
  # so the layer runs on verl's pure-torch shim as a verl job would (smoke.thd-cp's summary and evidence say so)
  mkdir -p noshim && printf 'raise ImportError("fast_hadamard_transform hidden for this run")\n' > noshim/fast_hadamard_transform.py
  PYTHONPATH=$PWD/noshim:$PYTHONPATH $D check --cp 2 --only 'smoke.thd-cp,kernels.fast-hadamard' -f json -o shim.json
  echo "check (fast-hadamard hidden): exit $?"; text_of shim.json; tier2_numbers shim.json
}
