# The six cases and what is recorded beside them (sourced by gpu.sh). Every case runs the doctor once as
#   <env> python3 -m dsv4_doctor check <args> -f json -o NAME.json
# at the default --timeout, from an empty working folder, with PYTHONPATH=~/mcore (Megatron d48bd6be) and NO_COLOR=1,
# and writes under $OUT/2026-12-04-h200-truth/: NAME.json (the report), NAME.txt (the doctor's own text rendering of
# that report), NAME.console.txt (the command, its stdout + stderr, "exit N", the wall time). Whatever check rows
# the doctor at the run has are run: nothing here names a check id.
D=(env NO_COLOR=1 "$PY" -m dsv4_doctor)
MC=~/mcore
WORK=~/cases
FILLER_PID=

# name: builds it needs, seconds it may take (a case starts only if that much of the call is left)
case_needs() {
  case $1 in
    flashmla-sm100) echo "flashmla flashmla100 fht te-torch" ;;
    *) echo "flashmla fht te-torch" ;;
  esac
}
case_est() {
  case $1 in
    complete) echo 100 ;; flashmla-sm100) echo 100 ;; arch-10.0) echo 45 ;; hidden-gpu) echo 60 ;;
    gpu-full) echo 110 ;; gpu-busy) echo 120 ;; speed-default) echo 300 ;; *) echo 0 ;;
  esac
}

text_of() {  # NAME: NAME.json -> NAME.txt, the doctor's own text renderer (also possible later on the CPU side)
  (cd /tmp && $PY -c 'import json, sys
from dsv4_doctor.render import render
from dsv4_doctor.report import Report
print(render(Report.from_wire(json.load(open(sys.argv[1]))), "text"))' "$R/$1.json") > "$R/$1.txt" 2>&1 \
    || echo "text rendering failed (render it from $1.json on the CPU side)" >> "$R/$1.txt"
}

doctor() {  # NAME [ENV=VALUE ...] -- CHECK-ARGS...: one doctor run
  local name=$1 envs=() s rc lim; shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  lim=$(( $(left) - 5 )); [ "$lim" -gt 400 ] && lim=400; [ "$lim" -lt 30 ] && lim=30
  mkdir -p "$WORK/$name" && cd "$WORK/$name" || return
  s=$(date +%s%N)
  {
    echo "\$ env ${envs[*]} python3 -m dsv4_doctor check $* -f json -o $name.json   (cwd $PWD; PYTHONPATH=${PYTHONPATH:-} unless set here)"
    env "${envs[@]}" timeout -k 10 "$lim" "${D[@]}" check "$@" -f json -o "$R/$name.json"
    rc=$?
    echo "exit $rc"
    echo "wall $(( ($(date +%s%N) - s) / 1000000 )) ms"
  } > "$R/$name.console.txt" 2>&1
  cd "$WORK" || return
  text_of "$name"
  ts "$name: $(tail -2 "$R/$name.console.txt" | tr '\n' ' ')"
  summarise "$R/$name.json"
}

summarise() {  # REPORT.json: one line per check row
  $PY - "$1" <<'PYEOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    s = r["summary"]
except Exception as exc:
    print("  no report:", exc); sys.exit(0)
print(f"  exit {s.get('exit_code')} {s.get('counts')} {s.get('duration_s')} s")
for c in r.get("checks", []):
    print(f"  {c.get('id', '?'):24} {c.get('status', '?'):6} {str(c.get('summary'))[:160]}")
PYEOF
}

gpu_state() {  # LABEL: nvidia-smi's view (GPU memory and the compute processes holding it), appended to NAME.gpu.txt
  { echo "== $2 ($(date -u +%H:%M:%S))"; nvidia-smi --query-gpu=index,memory.total,memory.used,memory.free --format=csv
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; } >> "$R/$1.gpu.txt" 2>&1
}

start_filler() {  # NAME MODE: another process holding GPU memory (filler.py); waits for its ready file
  local ready=$WORK/$1.filler-ready.json
  rm -f "$ready"
  (cd /tmp && exec "$PY" "$HERE/filler.py" "$ready" "$2") > "$R/$1.filler.txt" 2>&1 &
  FILLER_PID=$!
  for _ in $(seq 1 150); do
    [ -f "$ready" ] && break
    kill -0 "$FILLER_PID" 2> /dev/null || break
    sleep 1
  done
  if [ -f "$ready" ]; then ts "filler $FILLER_PID ready: $(cat "$ready")"; cp "$ready" "$R/$1.filler-ready.json"; return 0; fi
  ts "filler did not get ready:"; tail -5 "$R/$1.filler.txt"; stop_filler; return 1
}

stop_filler() {
  [ -n "$FILLER_PID" ] || return 0
  kill "$FILLER_PID" 2> /dev/null; wait "$FILLER_PID" 2> /dev/null
  ts "filler $FILLER_PID stopped"; FILLER_PID=
}

# The cases (cwd: ~/cases; PYTHONPATH=~/mcore unless a case says otherwise)
case_complete() {  # the complete stack; with --deep where the doctor has it (tier 2 then runs)
  local deep=()
  grep -q -- '--deep' "$R/check-help.txt" && deep=(--deep)
  doctor complete -- --cp 2 "${deep[@]}"
}
case_flashmla-sm100() {  # the SM100-only FlashMLA build first on PYTHONPATH (the sm_90a build stays in site-packages)
  doctor flashmla-sm100 "PYTHONPATH=$HOME/flashmla-sm100:$MC" -- --cp 2
}
case_arch-10.0() {  # a GB200 view of this image on the H200 build box: the sm_90a / sm_90 builds
  doctor arch-10.0 -- --cp 2 --gpu-arch 10.0 --no-smoke
}
case_hidden-gpu() {  # CUDA_VISIBLE_DEVICES set empty: nvidia-smi lists the GPU, torch sees none
  doctor hidden-gpu CUDA_VISIBLE_DEVICES= -- --cp 2
}
case_gpu-full() {  # another process holds the GPU to its last MiB
  start_filler gpu-full full || return
  gpu_state gpu-full "filler ready"
  doctor gpu-full -- --cp 2
  gpu_state gpu-full "after the check"
  stop_filler
}
case_gpu-busy() {  # another process holds 93 % of the GPU (130 GiB of an H200's 140, 73 of an H100's 79): the smoke
  # fits, the job would not
  start_filler gpu-busy 93% || return
  gpu_state gpu-busy "filler ready"
  doctor gpu-busy -- --cp 2
  gpu_state gpu-busy "after the check"
  stop_filler
}

case_speed-default() {  # not one of the six: the default level's check against the floors (bench_check --full, one
  # alternating run), for speed v2's record; its console and JSON go to speed-default.txt, the reports it kept beside
  local lim; lim=$(( $(left) - 10 )); [ "$lim" -gt 560 ] && lim=560
  (cd "$ROOT" && timeout -k 10 "$lim" "$PY" benchmarks/bench_check.py --full --cp 2 --repeat 3 \
    --report-dir "$R/speed-default-reports") > "$R/speed-default.txt" 2>&1
  ts "speed-default: exit $? ($(grep -c . "$R/speed-default.txt") lines)"
}

run_cases() {  # CASE...: the doctor from this tree, then each case in turn: it waits for the builds it needs (as long
  # as the call's time left allows), then runs if it fits in what is left; otherwise "NOT RUN", for the next call
  trap stop_filler EXIT
  export PYTHONPATH=$MC
  mkdir -p "$WORK"
  local c n ok est
  for c in "$@"; do
    declare -F "case_$c" > /dev/null || { echo "unknown case $c" >&2; return 2; }
  done
  install_doctor || return
  for c in "$@"; do
    est=$(case_est "$c")
    # shellcheck disable=SC2046  # a word list
    wait_builds $(( $(left) - est - 10 )) $(case_needs "$c")
    [ -f $S/done-te ] || install_te || true
    ok=1
    for n in $(case_needs "$c"); do [ "$(cut -d' ' -f1 "$B/$n.done" 2> /dev/null)" = 0 ] || ok=0; done
    [ -f $S/done-te ] && [ -f $S/done-stack ] || ok=0
    if [ $ok = 0 ]; then ts "$c: NOT RUN (a build it needs is not done: $(case_needs "$c"); or TE / the stack not installed)"; continue; fi
    if [ "$(left)" -lt "$est" ]; then ts "$c: NOT RUN (no time: $(left) s left, it may take $est s)"; continue; fi
    ts "case $c"
    "case_$c"
  done
  cd "$WORK" || true
}

find_cuobjdump() {  # the toolkit's cuobjdump, else the one of the payload's nvidia-cuda-cuobjdump wheel
  CUOBJDUMP=$(command -v cuobjdump || true)
  [ -n "$CUOBJDUMP" ] || { [ -x "$CUDA_HOME/bin/cuobjdump" ] && CUOBJDUMP=$CUDA_HOME/bin/cuobjdump; }
  if [ -z "$CUOBJDUMP" ]; then
    mkdir -p ~/cuobjdump && $PY -m zipfile -e "$(ls $A/extra/nvidia_cuda_cuobjdump-*.whl | head -1)" ~/cuobjdump \
      && CUOBJDUMP=$(find ~/cuobjdump -name cuobjdump -type f | head -1) && chmod +x "$CUOBJDUMP"
  fi
  ts "cuobjdump: ${CUOBJDUMP:-none} ($("${CUOBJDUMP:-false}" --version 2>&1 | tail -1))"
}

cubins() {  # LABEL FILE: cuobjdump's lists of cubins and PTX, and a count per arch
  local f=$R/cuobjdump-$1.txt
  [ -f "$2" ] || { echo "$1: no file $2" > "$f"; return; }
  { echo "== $2 ($(stat -c %s "$2") bytes), $CUOBJDUMP"; echo "== cuobjdump --list-elf"; "$CUOBJDUMP" --list-elf "$2" 2>&1
    echo "== cuobjdump --list-ptx"; "$CUOBJDUMP" --list-ptx "$2" 2>&1
    echo "== cubins per arch"; "$CUOBJDUMP" --list-elf "$2" 2>/dev/null | grep -o -E 'sm_[0-9]+[a-z]?' | sort | uniq -c
    echo "== PTX per arch"; "$CUOBJDUMP" --list-ptx "$2" 2>/dev/null | grep -o -E 'sm_[0-9]+[a-z]?' | sort | uniq -c; } > "$f"
  ts "cuobjdump $1: $(sed -n '/cubins per arch/,/PTX per arch/p' "$f" | grep -v '==' | tr -s ' \n' ' ')"
}

record() {  # what the stack was: packages, the GPU, the compiled extensions' archs, the builds
  local site n f
  site=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  $PY -m pip list > $R/pip-list.txt 2>&1; $PY -m pip check > $R/pip-check.txt 2>&1; echo "pip check: exit $?" >> $R/pip-check.txt
  { info; echo; nvidia-smi; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; } > $R/nvidia-smi.txt 2>&1
  find_cuobjdump
  cubins flashmla-sm90a "$(find "$site/flash_mla" -maxdepth 1 -name '*.so' 2>/dev/null | head -1)"
  cubins flashmla-sm100 "$(find ~/flashmla-sm100/flash_mla -maxdepth 1 -name '*.so' 2>/dev/null | head -1)"
  cubins fast-hadamard "$(find "$site" -maxdepth 1 -name 'fast_hadamard_transform_cuda*.so' 2>/dev/null | head -1)"
  cubins te-lib "$(find "$site/transformer_engine" -name 'libtransformer_engine.so*' 2>/dev/null | head -1)"
  cubins te-torch "$(find "$site" -maxdepth 1 -name 'transformer_engine_torch*.so' 2>/dev/null | head -1)"
  { builds_status; for n in $BUILDS; do
      f=~/build-$n.log; echo; echo "== $n: $f ($(wc -l < "$f" 2>/dev/null) lines)"
      grep -o -E -- '-gencode[= ]arch=[^ ]+' "$f" 2>/dev/null | sort | uniq -c
      grep -i -E '(^|[^_])error' "$f" 2>/dev/null | head -20; echo "-- tail"; tail -30 "$f" 2>/dev/null | cut -c 1-400
    done; } > $R/builds.txt 2>&1
  for n in $BUILDS; do tail -c 200000 ~/build-$n.log > $R/build-$n.log 2>/dev/null; done
  ls -la "$B"/*/ > $R/built-wheels.txt 2>&1
  ts "recorded: $(ls $R | tr '\n' ' ')"
}
