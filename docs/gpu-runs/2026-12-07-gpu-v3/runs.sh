# The cases and what is recorded beside them (sourced by gpu.sh), with PYTHONPATH=~/mcore (Megatron d48bd6be):
#   speed-start  bench_check.py --full --cp 2 --repeat ${BENCH_REPEAT:-3} --warm-arch 9.0, in its own session (it outlives
#                the call; it is the first check this container runs): bench.console.txt, bench.json, bench-reports/
#   speed-wait   wait for it, as long as the call allows (bench.exit holds its exit code once it ended)
#   equality     benchmarks/bench_kernel_store.py --cp 2: a served kernel's outputs against a compiled one's, for the
#                layout and dsa sub-runs and tier 2's fused build (equality/, equality.console.txt)
MC=~/mcore
WORK=~/cases

case_needs() {  # the builds a case waits for: needs_NAME where a cases-*.sh file defines it
  if declare -F "needs_$1" > /dev/null; then "needs_$1"; else echo "flashmla fht te-torch"; fi
}

case_recipes() {  # one `check --cp 2 --deep` on an empty per-user store, no prewarm (every kernel compiled by the
  # check itself): the kernel recipes it records, as one JSON list
  local store=$WORK/recipe-store
  rm -rf "$store" && mkdir -p -m 700 "$store" "$WORK/recipes" && cd "$WORK/recipes" || return
  { echo "\$ DSV4_DOCTOR_PREWARM=off DSV4_DOCTOR_KERNEL_CACHE=$store DSV4_DOCTOR_KERNEL_IMAGE_CACHE=off python3 -m dsv4_doctor check --cp 2 --deep -f json -o recipes-check.json"
    DSV4_DOCTOR_PREWARM=off DSV4_DOCTOR_KERNEL_CACHE=$store DSV4_DOCTOR_KERNEL_IMAGE_CACHE=off timeout -k 10 200 "$PY" -m dsv4_doctor check --cp 2 --deep \
      -f json -o "$R/recipes-check.json"; echo "exit $?"; } > "$R/recipes.console.txt" 2>&1
  "$PY" - "$store" "$R/kernel_recipes.json" <<'PYEOF'
import glob, json, os, sys
found = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(sys.argv[1], "aot-*.recipe.json")))]
json.dump(found, open(sys.argv[2], "w"), indent=1, sort_keys=True)
print(len(found), "recipes:", sorted({(r.get("function") or r.get("object") or {}).get("qualname") for r in found}))
PYEOF
  ts "recipes: $(tail -1 "$R/recipes.console.txt")"
}
case_adopt() {  # the tree this call carries must ship the recipes the `recipes` case recorded: copy
  # $R/kernel_recipes.json (returned by that call) into checks/smoke/kernel_recipes.json before the bench call, so the
  # tree sent, the doctor installed from it and the bench all agree; this only verifies it (never writes the tree)
  [ -s "$R/kernel_recipes.json" ] || { ts "adopt: no recorded recipes"; return 1; }
  if cmp -s "$R/kernel_recipes.json" "$ROOT/checks/smoke/kernel_recipes.json"; then
    ts "adopt: the carried tree ships the $("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$R/kernel_recipes.json") recorded recipes"
  else
    ts "adopt: MISMATCH: the carried tree's checks/smoke/kernel_recipes.json is not the recorded one: copy it in first"; return 1
  fi
}
case_est() {  # seconds a case may take: est_NAME where a cases-*.sh file defines it
  declare -F "est_$1" > /dev/null && { "est_$1"; return; }
  case $1 in
    speed-start) echo 5 ;; speed-wait) echo 0 ;; equality) echo 300 ;; recipes) echo 100 ;; adopt) echo 1 ;; *) echo 0 ;;
  esac
}

case_speed-start() {
  [ -f "$R/bench.started" ] && { ts "speed-start: already started"; return; }
  date -u +%FT%TZ > "$R/bench.started"
  cp $S/doctor-hash "$R/bench.doctor-hash"  # the doctor the bench measures: install_doctor keeps it while it runs
  (cd "$ROOT" && setsid nohup bash -c "$PY benchmarks/bench_check.py --full --cp 2 --repeat ${BENCH_REPEAT:-3} --warm-arch 9.0 \
    --torch-python $(command -v "$PY") --report-dir $R/bench-reports --json-out $R/bench.json \
    > $R/bench.console.txt 2>&1; echo \$? > $R/bench.exit" > /dev/null 2>&1 &)
  ts "speed-start: bench_check --full started ($(cat "$R/bench.started"))"
}

case_speed-wait() {
  while [ ! -f "$R/bench.exit" ] && [ "$(left)" -gt 25 ]; do sleep 5; done
  if [ -f "$R/bench.exit" ]; then ts "bench: exit $(cat "$R/bench.exit")"; else ts "bench: still running"; fi
  tail -5 "$R/bench.console.txt" 2> /dev/null
}

case_equality() {
  if [ -f "$R/bench.started" ] && [ ! -f "$R/bench.exit" ]; then
    ts "equality: NOT RUN (the bench still runs: its times would be disturbed)"; return
  fi
  local lim; lim=$(( $(left) - 10 )); [ "$lim" -gt 560 ] && lim=560
  (cd "$ROOT" && timeout -k 10 "$lim" "$PY" benchmarks/bench_kernel_store.py --python "$(command -v "$PY")" --cp 2 \
    --out "$R/equality") > "$R/equality.console.txt" 2>&1
  ts "equality: exit $? ($(grep -c . "$R/equality.console.txt") lines)"
  tail -30 "$R/equality.console.txt"
}

run_cases() {  # CASE...: the doctor from this tree, then each case in turn: it waits for the builds it needs (as long
  # as the call's time left allows), then runs if it fits in what is left; otherwise "NOT RUN", for the next call
  export PYTHONPATH=$MC
  mkdir -p "$WORK"
  local c n ok est
  for c in "$@"; do
    declare -F "case_$c" > /dev/null || { echo "unknown case $c" >&2; return 2; }
  done
  for c in "$@"; do
    est=$(case_est "$c")
    # shellcheck disable=SC2046  # a word list
    wait_builds $(( $(left) - est - 10 )) $(case_needs "$c")
    [ -f $S/done-te ] || install_te || true
    ok=1
    for n in $(case_needs "$c"); do [ "$(cut -d' ' -f1 "$B/$n.done" 2> /dev/null)" = 0 ] || ok=0; done
    [ -f $S/done-te ] && [ -f $S/done-stack ] || ok=0
    if [ $ok = 0 ]; then ts "$c: NOT RUN (a build it needs is not done, or TE / the stack not installed)"; continue; fi
    case $c in speed-wait|adopt) ;; *) install_doctor || return ;; esac  # waiting and verifying install nothing
    if [ "$(left)" -lt "$est" ]; then ts "$c: NOT RUN (no time: $(left) s left, it may take $est s)"; continue; fi
    ts "case $c"
    "case_$c"
  done
  cd "$WORK" || true
}

record() {  # what the stack was: packages, the GPU, the builds
  local n f
  $PY -m pip list > $R/pip-list.txt 2>&1; $PY -m pip check > $R/pip-check.txt 2>&1; echo "pip check: exit $?" >> $R/pip-check.txt
  { info; echo; nvidia-smi; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; } > $R/nvidia-smi.txt 2>&1
  { builds_status; for n in $BUILDS; do
      f=~/build-$n.log; echo; echo "== $n: $f ($(wc -l < "$f" 2>/dev/null) lines)"
      grep -o -E -- '-gencode[= ]arch=[^ ]+' "$f" 2>/dev/null | sort | uniq -c
      grep -i -E '(^|[^_])error' "$f" 2>/dev/null | head -20; echo "-- tail"; tail -30 "$f" 2>/dev/null | cut -c 1-400
    done; } > $R/builds.txt 2>&1
  ts "recorded: $(ls $R | tr '\n' ' ')"
}

# More cases, one file per kind (cases-*.sh beside this file: the fused-RoPE sub-run, the failure logs, the DSL):
# each defines case_NAME functions, and extends case_est / case_needs by defining est_NAME / needs_NAME if it must.
for _cases in "$(dirname "${BASH_SOURCE[0]}")"/cases-*.sh; do
  [ -f "$_cases" ] && . "$_cases"
done
