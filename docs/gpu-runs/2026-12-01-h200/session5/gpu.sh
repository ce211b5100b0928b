#!/usr/bin/env bash
# Session 5 (2026-12-01, nvidia-h200: 1x H200; nvidia-h200-x2 not lent): the real-stack runs of issues 11 and 13 again,
# with the doctor at the final commit (commit.txt). Artifacts travel in .gpu/ (ignored), made here:
#   ../shared/tools/gpu-stack-wheels .gpu/stack 60                                    -> b1..b3 (frontend 1.27.0 stack)
#   PREFIX=te ONLY_EXTRA=1 EXTRA="transformer-engine==2.12.0 transformer-engine-cu13==2.12.0" ... .gpu/te12 60  -> te1..te4
#   PREFIX=tf ONLY_EXTRA=1 EXTRA="transformer-engine==2.16.1 transformer-engine-cu13==2.16.1" ... .gpu/te16 60  -> tf1..tf4
#   .gpu/te12/te5: TE 2.12.0's Python requirements the image lacks (pip download for cp312: pydantic, pydantic-core,
#     annotated-types, typing-inspection, typing-extensions, einops, nvdlfw-inspect, pyyaml, importlib-metadata, zipp,
#     lazy-importer; not onnx/onnxscript, which TE declares and does not import at load)
#   .gpu/extra: the doctor's wheel (pip wheel --no-deps . at commit.txt), packaging, the transformer_engine_torch 2.12.0
#     sdist (from the index's simple page), Megatron-LM megatron/core at d48bd6be and fast-hadamard-transform at
#     f134af63 (git archive of the fetched repositories)
# One step per device call, back to back (~/stack survives only while the machine is warm):
#   stage DIR...        copy carried folders to ~/stack
#   stack OUT DIR...    install the frontend stack and the doctor, run the stack runs, start the fast-hadamard build
#   te12-build DIR...   install TE 2.12.0's core and meta wheels, build the torch extension, wait for fast-hadamard
#   te12 OUT DIR...     wait for the builds, run the TE runs (before and after TE's Python requirements)
#   te16 OUT DIR...     TE 2.16.1's core in place of 2.12.0: te.import's cuBLAS diagnosis
set -u
S=~/stack
step=${1:?step}; shift
doctor() { python3 -m dsv4_doctor "$@"; }
stage() { mkdir -p "$S"; for d in "$@"; do cp -r "$d" "$S/"; done; }
case $step in
stage) stage "$@"; ls "$S"; df -h ~ | tail -1 ;;
stack)
  out=${1:?out}; shift; stage "$@"
  nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  bash "$S/b1/install-b.sh" "$S" > "$out/install.txt" 2>&1 || { tail -20 "$out/install.txt"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile .gpu/extra/dsv4_doctor-*.whl .gpu/extra/packaging-*.whl || exit 1
  cp .gpu/extra/*.tar.gz "$S/"
  mkdir -p ~/mcore && tar -xzf "$S"/mcore-d48bd6be.tar.gz -C ~/mcore
  tar -xzf "$S"/fht-f134af63.tar.gz -C ~
  python3 -m pip list 2>/dev/null | grep -i -E "cudnn|cutlass|tvm|cuda-|triton|torch|dsv4|packaging"
  mkdir -p "$out/stack"; cd "$out/stack" || exit 1
  export PYTHONPATH=~/mcore NO_COLOR=1
  for cp in 1 2 4; do doctor smoke --cp "$cp" -f json > "smoke-cp$cp.json"; echo "smoke --cp $cp: exit $?"; done
  doctor check --cp 1 -f json > check-cp1.json; echo "check --cp 1: exit $?"
  doctor check --cp 2 -f json > check-cp2.json; echo "check --cp 2: exit $?"
  doctor check --cp 2 > check-cp2.txt; echo "check --cp 2 (text): exit $?"
  doctor check --cp 1 --gpu-arch 10.0 -f json > check-cp1-arch10.json; echo "check --cp 1 --gpu-arch 10.0: exit $?"
  doctor check --cp 2 --dsa-backend none -f json > check-cp2-none.json; echo "check --cp 2 --dsa-backend none: exit $?"
  doctor fix --cp 2 > fix-cp2.sh; echo "fix --cp 2: exit $?"
  # The broken stack: the frontend without apache-tvm-ffi.
  tvm=$(ls "$S"/b*/apache_tvm_ffi-*.whl | head -1)
  python3 -m pip uninstall -q -y apache-tvm-ffi
  doctor smoke --cp 2 -f json > broken-no-tvm-ffi-smoke-cp2.json; echo "no tvm-ffi: smoke --cp 2: exit $?"
  doctor check --cp 2 --no-smoke --only 'tvm-ffi.*,cudnn-fe.*' > broken-no-tvm-ffi-check.txt; echo "no tvm-ffi: check: exit $?"
  python3 -m pip install -q --no-index --no-deps "$tvm"; echo "tvm-ffi reinstalled: $?"
  cd - >/dev/null
  PYTHONPATH=~/mcore python3 benchmarks/bench_smoke.py --repeat 3 --cp 2 > "$out/stack/bench-smoke-cp2.txt" 2>&1
  tail -4 "$out/stack/bench-smoke-cp2.txt"
  python3 - "$out/stack" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())
    print(f"== {f.name}: exit {r['summary']['exit_code']} {r['summary']['counts']}")
    for c in r["checks"]:
        print(f"  {c['id']:24} {c['status']:5} {c['summary'][:160]}")
PY
  tar -czf "$out/stack.tgz" -C "$out" stack && rm -rf "$out/stack"
  # fast-hadamard-transform builds in its own session (it outlives this call, overlapping the next stagings) into its
  # own folder, after the benchmark so that it does not load the machine during it.
  (cd ~/fht && setsid nohup env FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE MAX_JOBS=4 \
      python3 -m pip install --no-build-isolation --no-deps --no-index --target ~/fht-site . > ~/fht.log 2>&1 &) ;;
te12-build)
  stage "$@"
  bash "$S/te1/install-te.sh" "$S" > ~/te-install.log 2>&1; echo "TE 2.12.0 core + meta: exit $?"; tail -2 ~/te-install.log
  (cd ~ && MAX_JOBS=14 NVTE_FRAMEWORK=pytorch python3 -m pip install --no-build-isolation --no-deps \
     --no-index "$S"/transformer_engine_torch-2.12.0.tar.gz > ~/te-build.log 2>&1); echo "TE torch extension build: exit $?"
  for i in $(seq 1 200); do pgrep -f "pip install --no-build-isolation" > /dev/null || break; sleep 1; done
  tail -2 ~/te-build.log; tail -1 ~/fht.log; ls ~/fht-site | head -3 ;;
te12)
  out=${1:?out}; shift; stage "$@"
  for i in $(seq 1 300); do pgrep -f "pip install --no-build-isolation" > /dev/null || break; sleep 1; done
  echo "builds finished after waiting ${i} s"; tail -2 ~/te-build.log; tail -1 ~/fht.log; ls ~/fht-site | head -3
  mkdir -p "$out/te12"; cd "$out/te12" || exit 1
  export PYTHONPATH=~/mcore:~/fht-site NO_COLOR=1
  # TE installed --no-deps: first what the doctor says and its plan, then TE's Python requirements, then the runs.
  doctor check --cp 1 --no-smoke --only 'te.*,deps.consistency' > before-deps.txt; echo "te checks before deps: exit $?"
  doctor fix --cp 1 --only 'te.*,deps.consistency' > before-deps-fix.sh 2>&1; echo "fix plan: exit $?"
  python3 -m pip install -q --no-index --no-deps "$S"/te5/*.whl; echo "TE's requirements installed: $?"
  doctor check --cp 2 -f json > check-cp2.json; echo "check --cp 2: exit $?"
  doctor check --cp 2 --dsa-backend none -f json > check-cp2-none.json; echo "check --cp 2 --dsa-backend none: exit $?"
  doctor smoke --cp 1 --dsa-backend none -f json > smoke-cp1-none.json; echo "smoke --cp 1 --dsa-backend none: exit $?"
  doctor smoke --cp 2 --dsa-backend none -f json > smoke-cp2-none.json; echo "smoke --cp 2 --dsa-backend none: exit $?"
  python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29650 -m dsv4_doctor check --cp 2 --dsa-backend none \
    -f json > fleet-2ranks-cp2-none.json 2> fleet-2ranks-cp2-none.stderr; echo "torchrun 2 ranks: check --cp 2 --dsa-backend none: exit $?"
  python3 - . <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())
    print(f"== {f.name}: exit {r['summary']['exit_code']} {r['summary']['counts']}")
    for c in r["checks"]:
        print(f"  {c['id']:24} {c['status']:5} {c['summary'][:160]}")
PY
  cd - >/dev/null; tar -czf "$out/te12.tgz" -C "$out" te12 && rm -rf "$out/te12" ;;
te16)
  out=${1:?out}; shift; stage "$@"
  mkdir -p "$out/te16"
  python3 -m pip uninstall -q -y transformer-engine-torch transformer-engine transformer-engine-cu13
  bash "$S/tf1/install-tf.sh" "$S" > ~/tf-install.log 2>&1; echo "TE 2.16.1 core + meta: exit $?"
  export PYTHONPATH=~/mcore:~/fht-site NO_COLOR=1
  doctor check --cp 2 --no-smoke -f json > "$out/te16/check-cp2.json"; echo "check --cp 2 --no-smoke: exit $?"
  doctor check --cp 2 --no-smoke --only 'te.*,libs.*,deps.*' > "$out/te16/check-te.txt"; echo "te checks: exit $?"
  doctor fix --cp 2 --only 'te.*' > "$out/te16/fix-te.sh"; echo "fix te: exit $?"
  python3 -c 'import transformer_engine' > "$out/te16/import.txt" 2>&1; echo "import transformer_engine: exit $?"
  tail -2 "$out/te16/import.txt"; cat "$out/te16/check-te.txt" | head -60
  tar -czf "$out/te16.tgz" -C "$out" te16 && rm -rf "$out/te16" ;;
*) echo "unknown step $step" >&2; exit 2 ;;
esac
