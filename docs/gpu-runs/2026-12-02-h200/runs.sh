# The runs, one function per device call (sourced by gpu.sh; cwd is ~/results/NAME, PYTHONPATH=~/mcore).
# Each command's exit code is printed after it; the reports are kept as the doctor wrote them.
D="$PY -m dsv4_doctor"
J=$A/extra/jobs
G=~/go   # the doctor's source tree at the GO commit (benchmarks/, probe scripts)
VERL_CP2=$(cat $J/verl-cp2.cmd 2>/dev/null)
VERL_CP2_NOCP=$(cat $J/verl-cp2-nocp.cmd 2>/dev/null)
JOBENV=(env NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1)
left() { echo $(( $1 - ($(date +%s) - t0) )); }

run_k19() {  # issue 19 on the kernel stack + Megatron + FlashMLA + fast-hadamard, both built here (no TE yet)
  wait_builds 300 flashmla fht
  give_back_built 5
  $PY -m pip list 2>/dev/null > pip-list.txt
  grep -i -E "^(torch|triton|transformer.engine|nvidia-cudnn-frontend|nvidia-cutlass-dsl|apache-tvm-ffi|cuda-|flash.mla|fast.hadamard|megatron|verl|dsv4|pydantic|omegaconf) " pip-list.txt
  ts "check --cp 2"; $D check --cp 2 -f json -o check-cp2.json; echo "check --cp 2: exit $?"; text_of check-cp2.json
  ts "check --cp 1"; $D check --cp 1 -f json -o check-cp1.json; echo "check --cp 1: exit $?"; text_of check-cp1.json
  ts "check --job-args verl (CP 2, CP_ARGS)"
  "${JOBENV[@]}" $D check --job-args "$VERL_CP2" -f json -o check-job-verl-cp2.json; echo "check --job-args verl cp2: exit $?"
  text_of check-job-verl-cp2.json
  ts "check --gpu-arch 10.0 --cp 2 --no-smoke"
  $D check --gpu-arch 10.0 --cp 2 --no-smoke > check-cp2-arch10.txt; echo "check --gpu-arch 10.0 --cp 2 --no-smoke: exit $?"
  ts "preflight --dry-run -- bash verl script"
  $D preflight --dry-run --report preflight-dry-bash.json -- bash $J/run_deepseek_v4_flash_megatron.sh \
    > preflight-dry-bash.out 2> preflight-dry-bash.txt; echo "preflight --dry-run -- bash: exit $?"
  tail -25 preflight-dry-bash.txt
}

run_complete() {  # issue 24 item 1: + TE 2.12.0, Megatron-Bridge 0.6.2, verl 0.9.1: the exit-0 report, the job, exec
  wait_builds 90 te-torch fht
  install_te || return
  give_back_built 5
  $PY -m pip list 2>/dev/null > pip-list.txt; $PY -m pip check > pip-check.txt 2>&1; echo "pip check: exit $?"
  ts "check --cp 2"; $D check --cp 2 -f json -o check-cp2.json; echo "check --cp 2: exit $?"; text_of check-cp2.json
  ts "env NCCL_NVLS_ENABLE=0 CUDA_DEVICE_MAX_CONNECTIONS=1 check --job-args verl (CP 2, CP_ARGS)"
  "${JOBENV[@]}" $D check --job-args "$VERL_CP2" -f json -o check-job-verl-cp2.json; echo "check --job-args verl cp2: exit $?"
  text_of check-job-verl-cp2.json
  ts "preflight stand-in"
  "${JOBENV[@]}" $D preflight --cp 2 --report preflight-standin.json -- $PY $J/standin.py --stand-in \
    > preflight-standin.out 2> preflight-standin.txt; echo "preflight -- stand-in: exit $?"; cat preflight-standin.out
  ts "fix --job-args verl without CP_ARGS"
  $D fix --cp 2 --job-args "$VERL_CP2_NOCP" > fix-job-nocp.sh 2> fix-job-nocp.err; echo "fix --job-args (no CP_ARGS): exit $?"
  grep -n -i -E "max_seqlen|cp_partition|packing_scheduler|NCCL|CUDA_DEVICE" fix-job-nocp.sh
  ts "hard2: secrets in a job command, and a report that cannot be written"
  $D preflight --dry-run --no-smoke -- python3 train.py --hf-token hf_abcdefghijklmnopqrstuvwx actor.password=x \
    > preflight-secrets.out 2> preflight-secrets.txt; echo "preflight --dry-run --no-smoke (secrets): exit $?"
  grep -n -E "REDACTED|hf_abc|password" preflight-secrets.txt | head -5
  $D fix > /dev/full 2> fix-devfull.err; echo "fix > /dev/full: exit $?"
}

run_bench() {  # issue 24 3a on the complete stack (after the other runs: the cold row is not the container's first)
  cd $G || return
  ts "bench --full --cp 2 --repeat 2 (complete stack)"
  timeout "$(left 585)" $PY benchmarks/bench_check.py --full --cp 2 --repeat ${BENCH_REPEAT:-2} --torch-python $PY \
    --report-dir $R/bench/full > $R/bench/bench-full.txt 2>&1; echo "bench: exit $?"
  cd $R/bench || return
  tail -c 2500 bench-full.txt
}

run_fleet() {  # issue 20 (fleet2's docs/gpu-runs/fleet-h200-command.txt): two torchrun ranks sharing cuda:0, rank 1
  # with frontend 1.26.0 first on its PYTHONPATH (fleet-rank.sh puts FLEET_PYTHONPATH_<LOCAL_RANK> first)
  give_back_built 4
  local fr=$G/docs/gpu-runs/fleet-rank.sh
  [ -f $fr ] || fr=$J/fleet-rank.sh
  for pp in ~/mcore ~/fe126:~/mcore; do PYTHONPATH=$pp $PY -c 'import cudnn; print(cudnn.__version__, cudnn.__file__)'; done
  ts "fleet: rank 1 with frontend 1.26.0 (json)"
  FLEET_PYTHONPATH_1=~/fe126 timeout 300 $PY -m torch.distributed.run --nproc-per-node 2 --master-port 29650 \
    --no-python sh $fr check --cp 2 -f json > fleet2-rank1-fe126.json 2> fleet2-rank1-fe126.stderr; echo "torchrun exit $?"
  ts "fleet: rank 1 with frontend 1.26.0 (text, --no-smoke)"
  FLEET_PYTHONPATH_1=~/fe126 timeout 200 $PY -m torch.distributed.run --nproc-per-node 2 --master-port 29660 \
    --no-python sh $fr check --cp 2 --no-smoke > fleet2-rank1-fe126.txt 2> fleet2-rank1-fe126-text.stderr; echo "torchrun exit $?"
  ts "fleet: the same stack on both ranks (json, --no-smoke)"
  timeout 200 $PY -m torch.distributed.run --nproc-per-node 2 --master-port 29670 \
    --no-python sh $fr check --cp 2 --no-smoke -f json > fleet2-same-stack.json 2> fleet2-same-stack.stderr; echo "torchrun exit $?"
  echo "not checked markers: $(grep -c '"not checked' fleet2-rank1-fe126.json)"
  $PY - fleet2-rank1-fe126.json <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("exit_code", r["summary"]["exit_code"], "fleet", r.get("fleet"))
for c in r["checks"]:
    if c["id"].startswith(("fleet.", "cudnn-fe.", "deps.", "smoke.")) or c["status"] == "error":
        print(f"  {c['id']:22} {c['status']:6} {c['summary'][:400]}")
        for g in (c.get("evidence") or {}).get("groups", [])[:4]:
            print(f"      {g['status']:5} ranks {g['ranks']}: {g['summary'][:200]}")
PYEOF
}

run_cache() {  # issue 24 2b: where the first calls' JIT time goes, and whether a second run hits the CuTe DSL cache
  # (first, issue 19's bridge rule on this GPU: Megatron-Bridge's DSv4 module imports, and its two gates' answers)
  give_back_built 4
  ts "import megatron.bridge.models.deepseek.deepseek_v4_bridge"
  $PY -c 'import time; t = time.time()
import megatron.bridge.models.deepseek.deepseek_v4_bridge as b
print("imported in %.1f s; blackwell fused kernels: %s; fused DSA kernels importable: %s" % (time.time() - t,
      b.deepseek_v4_supports_blackwell_fused_kernels(), b.deepseek_v4_supports_fused_dsa_kernels()))' > bridge-import.txt 2>&1
  echo "bridge import: exit $?"; tail -3 bridge-import.txt
  export DSV4_DOCTOR_PROBE_LIB=$G/doctor/probes
  local sub i
  for sub in layout dsa; do
    rm -rf /tmp/kcp-$sub
    for i in 1 2; do
      CUTE_DSL_CACHE_DIR=/tmp/kcp-$sub CUTE_DSL_DUMP_DIR=/tmp/kcp-$sub CUTE_DSL_JIT_TIME_PROFILING=1 \
        CUTE_DSL_LOG_TO_CONSOLE=1 CUTE_DSL_LOG_LEVEL=20 timeout 120 $PY $G/checks/smoke/dsv4probe_kernels.py \
        $R/cache/$sub$i.json "{\"subrun\": \"$sub\", \"cp\": 2, \"device\": \"cuda\"}" > $sub$i.log 2>&1
      echo "$sub run $i: exit $?"
    done
    ls /tmp/kcp-$sub | head -5 > $sub-cache-files.txt
  done
}

run_broken() {  # issue 19: frontend 1.26.0 and no tvm-ffi (and FlashMLA, fast-hadamard absent: source steps)
  give_back_built 4
  $PY -m pip uninstall -y -q nvidia-cudnn-frontend apache-tvm-ffi flash-mla fast-hadamard-transform; echo "uninstall: $?"
  pipi $A/extra/nvidia_cudnn_frontend-1.26.0-*.whl; echo "frontend 1.26.0: $?"
  ts "fix --cp 2"; $D fix --cp 2 > broken-fix.sh 2> broken-fix.err; echo "fix --cp 2: exit $?"; cat broken-fix.err
  ts "fix --cp 2 --apply --yes (offline)"
  PIP_NO_INDEX=1 PIP_FIND_LINKS=~/links $D fix --cp 2 --apply --yes > broken-apply.sh 2> broken-apply.err
  echo "fix --cp 2 --apply --yes: exit $?"; tail -40 broken-apply.err
  $PY -m pip list 2>/dev/null | grep -i -E "^(nvidia-cudnn-frontend|apache-tvm-ffi|flash.mla|fast.hadamard) " > after-apply-pip.txt
  cat after-apply-pip.txt
  # back to the complete stack for what follows (the bench)
  pipi $B/flashmla/*.whl $B/fht/*.whl; echo "FlashMLA, fast-hadamard reinstalled: $?"
  $D check --cp 2 --no-smoke --only 'cudnn-fe.*,tvm-ffi.*,kernels.*,deps.*' > restored.txt; echo "restored stack: exit $?"; tail -3 restored.txt
}

run_partial() {  # issue 24 3b: the partial stack (no TE) -- the goal "check --cp 2 <= 2x the torch floor, warm"
  $PY -m pip uninstall -y -q transformer-engine transformer-engine-cu13 transformer-engine-torch; echo "TE uninstalled: $?"
  cd $G || return
  timeout "$(left 580)" $PY benchmarks/bench_check.py --full --cp 2 --repeat ${BENCH_REPEAT:-3} --torch-python $PY \
    --report-dir $R/partial/full > $R/partial/bench-partial.txt 2>&1; echo "bench partial: exit $?"
  tail -c 2500 $R/partial/bench-partial.txt
}

tier2_ok() {  # the exit-0 run's report: smoke.thd-cp passed and tier 2's fused-vs-unfused comparison came out ok
  $PY - $R/complete/check-cp2.json <<'PYEOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    row = [c for c in r["checks"] if c["id"] == "smoke.thd-cp"][0]
    fused = (row.get("evidence") or {}).get("tier2", {}).get("fused") or {}
    ok = row["status"] == "pass" and fused.get("ok") is True
except Exception as exc:
    print("no cold report:", exc); sys.exit(1)
print("cold report: smoke.thd-cp", row["status"], "tier 2 fused ok:", fused.get("ok")); sys.exit(0 if ok else 1)
PYEOF
}

run_tier2() {  # issue 24 item 2 (rev1's addendum): the smoke at CP 1 with --timeout 120 and with the default timeout
  ts "smoke --cp 1 --timeout 120"
  $D smoke --cp 1 -f json --timeout 120 -o t2-smoke-timeout120.json; echo "smoke --cp 1 --timeout 120: exit $?"
  ts "smoke --cp 1 (default timeout)"
  $D smoke --cp 1 -f json -o t2-smoke-default.json; echo "smoke --cp 1: exit $?"
  for f in t2-smoke-timeout120.json t2-smoke-default.json; do
    $PY - $f <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
row = [c for c in r["checks"] if c["id"] == "smoke.thd-cp"][0]
print("==", sys.argv[1], row["status"], row["summary"][:600])
f = ((row.get("evidence") or {}).get("tier2") or {}).get("fused") or {}
for name, b in (f.get("builds") or {}).items():
    print(" ", name, {k: b.get(k) for k in ("ok", "stage", "hang", "timed_out", "wall_s", "import_s", "first_forward_s",
          "first_backward_s")}, (b.get("error") or {}).get("message"))
c = f.get("comparison") or {}
print("  ok", c.get("ok"), "worst", c.get("worst"), "control", c.get("control"))
for n, t in sorted((c.get("tensors") or {}).items()):
    print("  %-66s rel_l2 %.3g tol %.3g 1-cos %.3g finite %s/%s" % (n, t.get("rel_l2", float("nan")),
          t.get("tolerance", float("nan")), t.get("cosine_drift", 0) or 0, t.get("finite"), t.get("finite_reference")))
PYEOF
  done
}
