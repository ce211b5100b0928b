#!/usr/bin/env bash
# The 2026-12-03 H200 session (nvidia-h200: 1x H200, python3 3.12 with torch 2.11.0+cu130,
# nvcc 13.0, 16 cores, no network): the complete DSv4 stack built there, then issue 24's runs (exit 0, tier 2 fused
# vs unfused, the bench). The payload is .gpu/ in the worktree's root (PAYLOAD overrides), carried as .gpu/cK.
# Made here (.gpu/ is ignored; pack.py lays the payload out for the calls):
#   gpu-stack-wheels .gpu/stack 60                       the kernel stack (frontend 1.27.0, CuTe DSL 4.5.2, tvm-ffi ...)
#   PREFIX=te ONLY_EXTRA=1 EXTRA="transformer-engine==2.12.0 transformer-engine-cu13==2.12.0" ... .gpu/te12 60
#   .gpu/src: Megatron-LM megatron/core + megatron/training at d48bd6be, FlashMLA b7643bd5 with cutlass 147f5673's
#     include/ and tools/util/include/ in csrc/cutlass, fast-hadamard-transform 1cc807e (v1.1.0): git archive
#   .gpu/extra: the doctor's wheel and source at the GO commit, transformer_engine_torch 2.12.0 sdist, TE's Python
#     requirements the image lacks (tedeps/), megatron-bridge 0.6.2, verl 0.9.1, omegaconf 2.3.0 + antlr4 4.9.3 (what
#     the bridge's DSv4 module imports that the image lacks), jobs/ (../2026-12-02-h200/jobs: verl's DSv4 command
#     written out, a stand-in job)
#   pack.py CAP -> .gpu/c1 .. .gpu/cN, one per staging call
# One step per device call, back to back (~ survives only while the machine is warm):
#   stage K     copy .gpu/cK to ~/stack/all, join what is complete, and act on it: sources -> start the FlashMLA and
#               fast-hadamard builds; TE's wheels -> install them and start the torch extension build; the kernel
#               stack -> install it, Megatron-Bridge, verl
#   run NAME    one group of runs (see the run_* functions), outputs under $OUT
set -u
PY=${PY:-python3}
S=~/stack; A=$S/all; W=$S/wh; R=~/results; B=~/built
nvcc_path=$(command -v nvcc || true)
export CUDA_HOME=${CUDA_HOME:-$( [ -n "$nvcc_path" ] && dirname "$(dirname "$(readlink -f "$nvcc_path")")" || echo /usr/local/cuda)}
HERE=$(cd "$(dirname "$0")" && pwd)
C=${PAYLOAD:-$(cd "$HERE/../../.." && pwd)/.gpu}
OUTD=${OUT:-/tmp/out}
mkdir -p "$S" "$A" "$W" "$R" "$B" "$OUTD"
t0=$(date +%s)
ts() { echo "[$(( $(date +%s) - t0 ))s $(date -u +%H:%M:%S)] $*"; }
pipi() { $PY -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check "$@"; }
wh() { ls "$W"/$1 2>/dev/null | head -1; }

start_build() {  # NAME DIR-or-SDIST INSTALL(0/1) NICE [ENV=VALUE ...]: pip wheel in its own session (it outlives
  # the call); INSTALL=1 installs the wheel when it is built
  local name=$1 src=$2 install=$3 nice=$4; shift 4
  mkdir -p "$B/$name"
  cat > "$B/$name.sh" <<SH
#!/usr/bin/env bash
s=\$(date +%s)
cd "$(dirname "$src")"
env $* nice -n $nice $PY -m pip wheel --no-build-isolation --no-deps --no-index -w "$B/$name" "$src" > ~/build-$name.log 2>&1
rc=\$?
[ \$rc = 0 ] && [ $install = 1 ] && { $PY -m pip install --no-index --no-deps --no-compile "$B/$name"/*.whl >> ~/build-$name.log 2>&1; rc=\$?; }
echo "\$rc \$(( \$(date +%s) - s ))" > "$B/$name.done"
SH
  (setsid nohup bash "$B/$name.sh" > /dev/null 2>&1 &)
  ts "build $name started"
}

act_sources() {
  [ -f $S/done-sources ] && return
  for f in src/mcore-d48bd6be.tar.gz src/flashmla-b7643bd5.tar.gz src/fht-1cc807e.tar.gz extra/go-src.tar.gz; do
    [ -f "$A/$f" ] || return
  done
  mkdir -p ~/mcore ~/go && tar -xzf $A/src/mcore-d48bd6be.tar.gz -C ~/mcore && tar -xzf $A/src/flashmla-b7643bd5.tar.gz -C ~ \
    && tar -xzf $A/src/fht-1cc807e.tar.gz -C ~ && tar -xzf $A/extra/go-src.tar.gz -C ~/go || { ts "unpack FAILED"; return; }
  pipi $A/extra/dsv4_doctor-*.whl && ts "doctor $($PY -m dsv4_doctor --version) installed"
  # FlashMLA as the doctor's fix builds it (knowledge 10.4: the CUDA 13 host include path, SM90 only on this GPU)
  [ -n "${PREBUILT:-}" ] || start_build flashmla ~/flashmla 1 0 CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl FLASH_MLA_DISABLE_SM100=1 MAX_JOBS=16 NVCC_THREADS=2
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
  start_build fht ~/fht 1 0 FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE MAX_JOBS=4
  # TE's torch extension needs only torch and its own sdist to build; it is installed with TE's core after the runs
  # without TE, and yields the CPU to the two builds those runs need
  cp $A/extra/transformer_engine_torch-2.12.0.tar.gz ~/
  [ -n "${PREBUILT:-}" ] || start_build te-torch ~/transformer_engine_torch-2.12.0.tar.gz 0 15 NVTE_FRAMEWORK=pytorch MAX_JOBS=12
  touch $S/done-sources
}

install_te() {  # TE 2.12.0: core + meta wheels, TE's Python requirements, the torch extension built here
  [ -f $S/done-te ] && return
  local core meta
  core=$(wh 'transformer_engine_cu13-2.12.0-*.whl'); meta=$(wh 'transformer_engine-2.12.0-*.whl')
  [ -n "$core" ] && [ -n "$meta" ] && ls $B/te-torch/*.whl > /dev/null 2>&1 || { ts "TE not ready"; return 1; }
  pipi "$core" "$meta" $A/extra/tedeps/*.whl $B/te-torch/*.whl && ts "TE 2.12.0 installed (core, meta, torch extension, requirements)" \
    && touch $S/done-te
}

act_stack() {
  [ -f $S/done-stack ] && return
  local n
  n=$(grep '  wheels/' $A/MANIFEST | grep -c -v 'wheels/transformer_engine'); [ "$(ls $W | grep -c -v '^transformer_engine')" -ge "$n" ] || return
  local first=() last=()
  for w in $W/*.whl; do
    case $(basename "$w") in
      transformer_engine*) ;;
      *libs_cu13-*) last+=("$w") ;;
      *) first+=("$w") ;;
    esac
  done
  pipi "${first[@]}" && pipi "${last[@]}" && ts "kernel stack installed (${#first[@]} + ${#last[@]} wheels)"
  pipi $A/extra/megatron_bridge-*.whl $A/extra/verl-*.whl $A/extra/omegaconf-*.whl $A/extra/antlr4_*.whl \
    && ts "megatron-bridge, verl, omegaconf, antlr4 installed"
  touch $S/done-stack
}

use_prebuilt() {  # the FlashMLA and TE torch-extension wheels built there in an earlier lease, carried as .gpu/built
  mkdir -p $B/flashmla $B/te-torch
  cp $C/built/flash_mla-*.whl $B/flashmla/ && pipi $B/flashmla/*.whl && echo "0 0" > $B/flashmla.done && touch $B/flashmla/*.whl.sent && ts "FlashMLA installed from its earlier build"
  cp $C/built/transformer_engine_torch-*.whl $B/te-torch/ && echo "0 0" > $B/te-torch.done && touch $B/te-torch/*.whl.sent && ts "TE torch extension: its earlier build"
}

builds_status() {
  for n in flashmla fht te-torch; do
    if [ -f $B/$n.done ]; then echo "build $n: exit $(cut -d' ' -f1 $B/$n.done), $(cut -d' ' -f2 $B/$n.done) s"
    else echo "build $n: running or not started"; tail -c 300 ~/build-$n.log 2>/dev/null | tail -2; fi
  done
}

wait_builds() {  # MAX_S NAME...: wait for these builds
  local i n ok max=$1; shift
  for i in $(seq 1 "$max"); do
    ok=1; for n in "$@"; do [ -f $B/$n.done ] || ok=0; done
    [ $ok = 1 ] && break
    sleep 1
  done
  ts "waited for the builds $*"; builds_status
}

give_back_built() {  # MAX_FILES: built wheels back to this side (split under 16 MiB), whole wheels only, smallest
  # first, at most MAX_FILES pieces and 40 MiB in this call (the rest in a later call)
  local w n parts used=0 bytes=0 size
  for w in $(ls -Sr $B/*/*.whl 2>/dev/null); do
    [ -f "$w.sent" ] && continue
    size=$(stat -c %s "$w"); n=$(( (size + 15728639) / 15728640 ))
    [ $(( used + n )) -le "$1" ] && [ $(( bytes + size )) -le 41943040 ] || continue
    split -b 15M -d "$w" "$OUTD/$(basename "$w" | tr + _).part" && touch "$w.sent" && used=$(( used + n )) && bytes=$(( bytes + size ))
    ts "giving back $(basename "$w") ($(( size / 1048576 )) MiB, $n piece(s))"
  done
}

stage() {
  local k=$1
  cp -r "$C/c$k/." $A/ && ts "staged c$k: $(du -sh $A | cut -f1) in all"
  local joined; joined=$(bash "$HERE/join.sh")
  echo "$joined" | grep -v '^complete'; ts "$(echo "$joined" | grep -c '^complete') of $(grep -c . $A/MANIFEST) files complete"
  act_sources; act_stack
  builds_status
}

info() {
  nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  $PY -c 'import sys, torch; print(sys.executable, sys.version.split()[0], torch.__version__, torch.version.cuda)'
  echo "CUDA_HOME=$CUDA_HOME nvcc=$nvcc_path"; ls -d $CUDA_HOME/include/cccl; nvcc --version | tail -2; nproc; free -g | head -2; df -h ~ | tail -1
  $PY -m pip list 2>/dev/null | grep -i -E "^(typing.extensions|pydantic|onnx|packaging|setuptools|wheel|ninja|cuda|nvidia-cudnn|triton|transformers|einops) "
}

finish() {  # NAME: pack $R/NAME into $OUT/NAME.tgz (unpacked and committed as plain files on the other side)
  tar -czf "$OUTD/$1.tgz" -C $R "$1" && ts "packed $1: $(du -h "$OUTD/$1.tgz" | cut -f1)"
}

summarise() {  # DIR: one line per check of every JSON report in it
  $PY - "$1" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).rglob("*.json")):
    try:
        r = json.loads(f.read_text())
        s = r["summary"]
    except Exception:
        continue
    print(f"== {f.name}: exit {s.get('exit_code')} {s.get('counts')} {s.get('duration_s')} s; profile {r.get('profile', {}).get('cp')} {r.get('profile', {}).get('dsa_backend')}")
    for c in r.get("checks", []):
        print(f"  {c['id']:24} {c['status']:5} {str(c.get('summary'))[:150]}")
PY
}

text_of() {  # JSON -> the doctor's own text rendering of that report, beside it
  $PY -c 'import json, sys; from dsv4_doctor.render import render; from dsv4_doctor.report import Report; print(render(Report.from_wire(json.load(open(sys.argv[1]))), "text"))' "$1" > "${1%.json}.txt" 2>&1
}

. "$HERE/runs.sh"
# Steps, in order, in one call: stage K | run NAME (several may follow each other: `stage 7 run bench`)
main() {
  while [ $# -gt 0 ]; do
    case $1 in
    stage) [ "$2" = 1 ] && info; stage "$2"; shift 2 ;;
    te) install_te; shift ;;
    prebuilt) use_prebuilt; shift ;;
    wait) wait_builds "$2" flashmla fht te-torch; shift 2 ;;
    run) name=$2; shift 2; mkdir -p $R/$name
      ( cd $R/$name && export PYTHONPATH=~/mcore NO_COLOR=1 && ts "run $name" && "run_$name" ) 2>&1 | tee $R/$name/console.txt
      summarise $R/$name > $R/$name/summary.txt; cat $R/$name/summary.txt; finish $name ;;
    *) echo "unknown step $1" >&2; return 2 ;;
    esac
  done
  ts "call done"
}
main "$@" 2>&1 | tee "$OUTD/call-log.txt"
