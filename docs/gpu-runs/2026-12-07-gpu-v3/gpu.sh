#!/usr/bin/env bash
# The 2026-12-06 session (nvidia-h200 kind: an H200 or an H100, python3 3.12 with torch 2.11.0+cu130, nvcc 13.0, 16
# cores, no network): the complete DSv4 stack built there as on 2026-12-04 (../2026-12-04-h200-truth: FlashMLA
# sm_90a, fast-hadamard sm_90, TE's torch extension), then speed v2's measurements (README.md). The payload is .gpu/
# in the tree's root (PAYLOAD overrides), carried as .gpu/cK; the doctor is installed from the copied tree itself.
# Steps, several per call, in order (~ survives between calls only while the machine is warm):
#   stage K     copy .gpu/cK to ~/stack/all, join what is complete, and act on it: the sources -> start the three
#               builds; the kernel stack -> install it, Megatron-Bridge, verl
#   run CASE..  install the doctor from this tree (once per tree: a running bench keeps its installed doctor), wait
#               for the builds, then each case (runs.sh) that fits in the call's time left (CALL_BUDGET, default
#               570 s)
#   record      pip list, pip check, nvidia-smi, the builds' times and logs
# Outputs: plain files under ~/results/$RUN/, sent back after each call as $OUT/results.tar.gz, and
# $OUT/call-log-<steps>.txt.
set -u
PY=${PY:-python3}
S=~/stack; A=$S/all; W=$S/wh; B=~/built
nvcc_path=$(command -v nvcc || true)
export CUDA_HOME=${CUDA_HOME:-$( [ -n "$nvcc_path" ] && dirname "$(dirname "$(readlink -f "$nvcc_path")")" || echo /usr/local/cuda)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
C=${PAYLOAD:-$ROOT/.gpu}
OUTD=${OUT:-/tmp/out}
RUN=${RUN:-2026-12-07-gpu-v3}
# The results gather in the home folder across calls; each call sends them all back as one transport archive
# ($OUT/results.tar.gz: the run tool returns at most 8 files a call), which unpack.sh lays out as plain files.
R=~/results/$RUN
BUDGET=${CALL_BUDGET:-570}
mkdir -p "$S" "$A" "$W" "$B" "$R"
t0=$(date +%s)
ts() { echo "[$(( $(date +%s) - t0 ))s $(date -u +%H:%M:%S)] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
pipi() { $PY -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check "$@"; }
wh() { find "$W" -maxdepth 1 -name "$1" | head -1; }
BUILDS="flashmla fht te-torch"

start_build() {  # NAME SRC-DIR-or-SDIST INSTALL NICE [ENV=VALUE ...]: pip wheel in its own session (it outlives
  # the call). INSTALL: site (into the interpreter's site-packages), none, or a folder (pip install --target)
  local name=$1 src=$2 install=$3 nice=$4; shift 4
  local inst=":"
  case $install in
    site) inst="$PY -m pip install --no-index --no-deps --no-compile $B/$name/*.whl" ;;
    none) ;;
    *) inst="$PY -m pip install --no-index --no-deps --no-compile --target $install $B/$name/*.whl" ;;
  esac
  mkdir -p "$B/$name"
  cat > "$B/$name.sh" <<SH
#!/usr/bin/env bash
s=\$(date +%s)
cd "$(dirname "$src")"
env $* nice -n $nice $PY -m pip wheel -v --no-build-isolation --no-deps --no-index -w "$B/$name" "$src" > ~/build-$name.log 2>&1
rc=\$?
[ \$rc = 0 ] && { $inst >> ~/build-$name.log 2>&1; rc=\$?; }
echo "\$rc \$(( \$(date +%s) - s ))" > "$B/$name.done"
SH
  (setsid nohup bash "$B/$name.sh" > /dev/null 2>&1 &)
  ts "build $name started: $* (install: $install)"
}

act_sources() {
  [ -f $S/done-sources ] && return
  for f in src/mcore-d48bd6be.tar.gz src/flashmla-b7643bd5.tar.gz src/fht-1cc807e.tar.gz \
           extra/transformer_engine_torch-2.12.0.tar.gz; do
    [ -f "$A/$f" ] || return
  done
  mkdir -p ~/mcore ~/fm90 && tar -xzf $A/src/mcore-d48bd6be.tar.gz -C ~/mcore \
    && tar -xzf $A/src/flashmla-b7643bd5.tar.gz -C ~/fm90 \
    && tar -xzf $A/src/fht-1cc807e.tar.gz -C ~ || { ts "unpack FAILED"; return; }
  # FlashMLA as the doctor's fix builds it (knowledge 10.4: the CUDA 13 host include path); sm_90a only, installed
  start_build flashmla ~/fm90/flashmla site 0 CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl FLASH_MLA_DISABLE_SM100=1 \
    MAX_JOBS=6 NVCC_THREADS=2
  # fast-hadamard-transform v1.1.0: its setup.py names its gencodes itself (sm_75 .. sm_121) and reads no arch
  # variable, so this build's copy of setup.py is narrowed to this GPU's sm_90 by one line set after that list
  $PY - ~/fht/setup.py <<'NARROW'
import sys
path = sys.argv[1]
text = open(path).read()
mark = "    # HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI"
assert text.count(mark) == 1, "setup.py has changed: not narrowed"
text = text.replace(mark, '    cc_flag = ["-gencode", "arch=compute_90,code=sm_90"]  # this H200 only\n\n' + mark)
open(path, "w").write(text)
print("fast-hadamard setup.py narrowed to sm_90")
NARROW
  start_build fht ~/fht site 0 FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE MAX_JOBS=2
  # TE's torch extension needs only torch and its own sdist to build; installed with TE's core (install_te)
  cp $A/extra/transformer_engine_torch-2.12.0.tar.gz ~/
  start_build te-torch ~/transformer_engine_torch-2.12.0.tar.gz none 0 NVTE_FRAMEWORK=pytorch MAX_JOBS=6
  touch $S/done-sources
}

install_te() {  # TE 2.12.0: core + meta wheels, TE's Python requirements, the torch extension built here
  [ -f $S/done-te ] && return
  local core meta
  core=$(wh 'transformer_engine_cu13-2.12.0-*.whl'); meta=$(wh 'transformer_engine-2.12.0-*.whl')
  [ -n "$core" ] && [ -n "$meta" ] && ls $B/te-torch/*.whl > /dev/null 2>&1 || { ts "TE not ready (core: ${core:-missing}, meta: ${meta:-missing})"; return 1; }
  pipi "$core" "$meta" $A/extra/tedeps/*.whl $B/te-torch/*.whl && ts "TE 2.12.0 installed (core, meta, torch extension, requirements)" \
    && touch $S/done-te
}

act_stack() {
  [ -f $S/done-stack ] && return
  local n w
  n=$(grep '  wheels/' $A/MANIFEST | grep -c -v 'wheels/transformer_engine')
  [ "$(find "$W" -maxdepth 1 -name '*.whl' ! -name 'transformer_engine*' | wc -l)" -ge "$n" ] || return
  local first=() last=()
  for w in "$W"/*.whl; do
    case $(basename "$w") in
      transformer_engine*) ;;
      *libs_cu13-*) last+=("$w") ;;
      *) first+=("$w") ;;
    esac
  done
  pipi "${first[@]}" && pipi "${last[@]}" && ts "kernel stack installed (${#first[@]} + ${#last[@]} wheels)"
  pipi $A/extra/megatron_bridge-*.whl $A/extra/verl-*.whl $A/extra/omegaconf-*.whl $A/extra/antlr4_*.whl \
    $A/extra/hydra_core-*.whl && ts "megatron-bridge, verl, omegaconf, antlr4, hydra-core installed"
  touch $S/done-stack
}

builds_status() {
  local n
  for n in $BUILDS; do
    if [ -f $B/$n.done ]; then echo "build $n: exit $(cut -d' ' -f1 $B/$n.done), $(cut -d' ' -f2 $B/$n.done) s"
    else echo "build $n: running or not started; log: $(tail -c 200 ~/build-$n.log 2>/dev/null | tail -1 | cut -c 1-160)"; fi
  done
}

wait_builds() {  # MAX_S NAME...: wait for these builds
  local n ok max=$1; shift
  for _ in $(seq 1 "$max"); do
    ok=1; for n in "$@"; do [ -f $B/$n.done ] || ok=0; done
    [ $ok = 1 ] && break
    sleep 1
  done
  ts "waited for the builds $* (at most $max s)"; builds_status
}

stage() {
  local k=$1
  [ -d "$C/c$k" ] || { ts "no $C/c$k: carry .gpu/c$k in this call"; return 1; }
  cp -r "$C/c$k/." $A/ && ts "staged c$k: $(du -sh $A | cut -f1) in all"
  local joined; joined=$(bash "$HERE/../2026-12-06-h200-speed/join.sh")  # the packing scripts are 12-06's
  echo "$joined" | grep -v '^complete'; ts "$(echo "$joined" | grep -c '^complete') of $(grep -c . $A/MANIFEST) files complete"
  act_sources; act_stack
  builds_status
}

info() {
  nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  $PY -c 'import sys, torch; print(sys.executable, sys.version.split()[0], torch.__version__, torch.version.cuda)'
  echo "CUDA_HOME=$CUDA_HOME nvcc=$nvcc_path"; nvcc --version | tail -1; nproc; free -g | head -2; df -h ~ | tail -1
}

install_doctor() {  # the doctor from this call's copy of the tree (the code as it is at the run), once per tree
  local log=$R/doctor-install.txt hash
  hash=$(cd "$ROOT" && find doctor checks pyproject.toml -type f -name '*' ! -path '*/__pycache__/*' \
      -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  [ "$(cat $S/doctor-hash 2>/dev/null)" = "$hash" ] && { ts "doctor already installed from this tree ($hash)"; return 0; }
  # A running bench keeps the doctor it started with: a tree that changed meanwhile is never installed under it
  if [ -f "$R/bench.started" ] && [ ! -f "$R/bench.exit" ]; then
    ts "doctor NOT reinstalled: the bench runs with $(cat "$R/bench.doctor-hash"), this tree is $hash"; return 1
  fi
  { echo "tree: $ROOT"; echo "tree sha256 (doctor, checks, pyproject): $hash"; } > "$log"
  # its one requirement the image does not meet (typer 0.27.2 there; the doctor declares >=0.28,<0.29)
  pipi $A/extra/doctordeps/*.whl >> "$log" 2>&1 && echo "installed: $(ls $A/extra/doctordeps)" >> "$log"
  rm -rf "$ROOT/build" "$ROOT"/*.egg-info  # an earlier call's build output is kept in the tree: never reuse it
  (cd /tmp && $PY -m pip install --no-index --no-deps --no-build-isolation --force-reinstall --no-compile \
    --disable-pip-version-check -q "$ROOT") >> "$log" 2>&1 && ts "doctor $($PY -m dsv4_doctor --version 2>&1) installed from the tree" \
    || { ts "doctor install FAILED"; tail -20 "$log"; return 1; }
  (cd /tmp && $PY -m dsv4_doctor check --help) > $R/check-help.txt 2>&1
  echo "$hash" > $S/doctor-hash
}

. "$HERE/runs.sh"

main() {
  local names
  while [ $# -gt 0 ]; do
    case $1 in
    stage) [ "$2" = 1 ] && info; stage "$2"; shift 2 ;;
    run) shift; names=()
      while [ $# -gt 0 ] && [ "$1" != stage ] && [ "$1" != record ] && [ "$1" != run ]; do names+=("$1"); shift; done
      run_cases "${names[@]}" ;;
    record) record; shift ;;
    *) echo "unknown step $1" >&2; return 2 ;;
    esac
  done
  ts "call done"
  mkdir -p "$OUTD" && tar -C ~/results -czf "$OUTD/results.tar.gz" "$RUN" && ts "results: $(tar -tzf "$OUTD/results.tar.gz" | wc -l) entries sent back"
}
[ "${GPU_SH_SOURCE_ONLY:-0}" = 1 ] && return 0  # the functions only (tests)
log=$OUTD/call-log-$(echo "$*" | tr -c 'A-Za-z0-9.\n-' _ | cut -c 1-80).txt
main "$@" 2>&1 | tee "$log"
