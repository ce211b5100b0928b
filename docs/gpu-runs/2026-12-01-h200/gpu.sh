#!/usr/bin/env bash
# The steps of the 2026-12-01 H200 session (device tool, nvidia-h200: 1x H200, python3 3.12 with torch 2.11 + CUDA 13;
# no TE, Megatron-core or cuDNN frontend until these steps bring them). Artifacts travel in .gpu/ (ignored), made here:
#   ../shared/tools/gpu-stack-wheels .gpu/stack 60                         -> b1..b3 (frontend 1.27.0 stack)
#   PREFIX=te ONLY_EXTRA=1 EXTRA="transformer-engine==2.12.0 transformer-engine-cu13==2.12.0" ... .gpu/te12 60
#   PREFIX=tf ONLY_EXTRA=1 EXTRA="transformer-engine==2.16.1 transformer-engine-cu13==2.16.1" ... .gpu/te16 60
#   .gpu/te12/te5: TE 2.12.0's Python requirements the image lacks (pydantic 2.14.4, pydantic-core 2.50.5,
#   annotated-types, typing-inspection, typing-extensions 4.16.0, einops), from pip download
#   .gpu/extra: the doctor's wheel (pip wheel --no-deps . at the commit in commit.txt), packaging, the
#   transformer_engine_torch 2.12.0 sdist, Megatron-LM megatron/core at d48bd6be (git archive), fast-hadamard-transform
#   at f134af63 (git archive)
# Usage, one step per device call: bash docs/gpu-runs/2026-12-01-h200/gpu.sh STEP [ARGS]
set -u
S=~/stack
step=${1:?step}; shift
doctor() { python3 -m dsv4_doctor "$@"; }
case $step in
stage)  # copy carried folders to ~/stack (carried paths do not survive to the next call; the home folder does)
  mkdir -p "$S"; for d in "$@"; do cp -r "$d" "$S/"; done; ls "$S"; df -h ~ | tail -1 ;;
install-stack)
  nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  bash "$S/b1/install-b.sh" "$S" || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile .gpu/extra/dsv4_doctor-*.whl .gpu/extra/packaging-*.whl || exit 1
  cp .gpu/extra/*.tar.gz "$S/"
  mkdir -p ~/mcore && tar -xzf "$S"/mcore-d48bd6be.tar.gz -C ~/mcore
  tar -xzf "$S"/fht-f134af63.tar.gz -C ~
  # fast-hadamard-transform builds in its own session (it outlives this call) into its own folder, so that it is
  # absent from the runs without TE and present in the runs with TE.
  (cd ~/fht && setsid nohup env FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE MAX_JOBS=8 \
      python3 -m pip install --no-build-isolation --no-deps --no-index --target ~/fht-site . > ~/fht.log 2>&1 &)
  python3 -m pip list 2>/dev/null | grep -i -E "cudnn|cutlass|tvm|cuda-|triton|torch|dsv4|packaging" ;;
runs-stack)  # the frontend 1.27.0 stack + Megatron d48bd6be, no TE
  out=${1:?out}; mkdir -p "$out/stack"; cd "$out/stack" || exit 1
  export PYTHONPATH=~/mcore NO_COLOR=1
  for cp in 1 2 4; do doctor smoke --cp "$cp" -f json > "smoke-cp$cp.json"; echo "smoke --cp $cp: exit $?"; done
  doctor check --cp 1 --no-smoke -f json > check-cp1.json; echo "check --cp 1 --no-smoke: exit $?"
  doctor check --cp 2 -f json > check-cp2.json; echo "check --cp 2: exit $?"
  doctor check --cp 1 --gpu-arch 10.0 -f json > check-cp1-arch10.json; echo "check --cp 1 --gpu-arch 10.0: exit $?"
  doctor check --cp 2 --dsa-backend none -f json > check-cp2-none.json; echo "check --cp 2 --dsa-backend none: exit $?"
  # The broken stack: the frontend without apache-tvm-ffi.
  tvm=$(ls "$S"/b*/apache_tvm_ffi-*.whl | head -1)
  python3 -m pip uninstall -q -y apache-tvm-ffi
  doctor smoke --cp 2 -f json > broken-no-tvm-ffi-smoke-cp2.json; echo "no tvm-ffi: smoke --cp 2: exit $?"
  doctor check --cp 2 --no-smoke --only 'tvm-ffi.*,cudnn-fe.*' > broken-no-tvm-ffi-check.txt; echo "no tvm-ffi: check: exit $?"
  python3 -m pip install -q --no-index --no-deps "$tvm"; echo "tvm-ffi reinstalled: $?"
  cd - >/dev/null
  echo "## bench_smoke --repeat 3 --cp 2"
  PYTHONPATH=~/mcore python3 benchmarks/bench_smoke.py --repeat 3 --cp 2 > "$out/stack/bench-smoke-cp2.txt" 2>&1
  cat "$out/stack/bench-smoke-cp2.txt"
  tar -czf "$out/stack.tgz" -C "$out" stack && rm -rf "$out/stack" ;;
install-te12)
  bash "$S/te1/install-te.sh" "$S" || exit 1
  (cd ~ && MAX_JOBS=16 NVTE_FRAMEWORK=pytorch python3 -m pip install --no-build-isolation --no-deps --no-index \
     "$S"/transformer_engine_torch-2.12.0.tar.gz > ~/te-build.log 2>&1); echo "TE torch extension build: exit $?"
  tail -3 ~/te-build.log; tail -2 ~/fht.log; ls ~/fht-site | head ;;
runs-te)  # + TE 2.12.0 (core wheel, torch extension built here) + fast-hadamard-transform
  out=${1:?out}; mkdir -p "$out/te12"; cd "$out/te12" || exit 1
  export PYTHONPATH=~/mcore:~/fht-site NO_COLOR=1
  # TE installed --no-deps: first what the doctor says, then its fix (TE's missing Python requirements), then the runs.
  doctor check --cp 1 --no-smoke --only 'te.*,deps.consistency' > before-deps.txt; echo "te checks before deps: exit $?"
  doctor fix --cp 1 --only 'te.*,deps.consistency' > before-deps-fix.sh 2>&1; echo "fix plan: exit $?"
  python3 -m pip install -q --no-index --no-deps "$S"/te5/*.whl; echo "TE's requirements installed: $?"
  doctor check --cp 1 -f json > check-cp1.json; echo "check --cp 1: exit $?"
  doctor check --cp 2 -f json > check-cp2.json; echo "check --cp 2: exit $?"
  doctor check --cp 2 --dsa-backend none -f json > check-cp2-none.json; echo "check --cp 2 --dsa-backend none: exit $?"
  doctor smoke --cp 1 --dsa-backend none -f json > smoke-cp1-none.json; echo "smoke --cp 1 --dsa-backend none: exit $?"
  doctor smoke --cp 2 --dsa-backend none -f json > smoke-cp2-none.json; echo "smoke --cp 2 --dsa-backend none: exit $?"
  doctor smoke --cp 2 -f json > smoke-cp2.json; echo "smoke --cp 2: exit $?"
  # Fleet mode on this one GPU: two ranks under torchrun (both on cuda:0), one merged report.
  python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29650 -m dsv4_doctor check --cp 2 -f json > fleet-2ranks-cp2.json \
    2> fleet-2ranks-cp2.stderr; echo "torchrun 2 ranks: check --cp 2: exit $?"
  cd - >/dev/null; tar -czf "$out/te12.tgz" -C "$out" te12 && rm -rf "$out/te12" ;;
te16)  # TE 2.16.1's core on torch 2.11's cuBLAS 13.1: te.import must fail with the cuBLAS diagnosis
  out=${1:?out}; mkdir -p "$out/te16"
  python3 -m pip uninstall -q -y transformer-engine-torch transformer-engine transformer-engine-cu13
  bash "$S/tf1/install-tf.sh" "$S" || exit 1
  export PYTHONPATH=~/mcore:~/fht-site NO_COLOR=1
  doctor check --cp 2 --no-smoke -f json > "$out/te16/check-cp2.json"; echo "check --cp 2 --no-smoke: exit $?"
  doctor check --cp 2 --no-smoke --only 'te.*,libs.*,deps.*' > "$out/te16/check-te.txt"; echo "te checks: exit $?"
  python3 -c 'import transformer_engine' > "$out/te16/import.txt" 2>&1; echo "import transformer_engine: exit $?"
  tail -3 "$out/te16/import.txt"
  tar -czf "$out/te16.tgz" -C "$out" te16 && rm -rf "$out/te16" ;;
focus)  # session 3: after the fixes found by session 2 (probes without the launcher's variables; tier 2 deferral),
  # TE 2.12.0 with its requirements + fast-hadamard + Megatron d48bd6be, no frontend stack: tier 2 and fleet mode.
  out=${1:?out}; mkdir -p "$out/focus"
  python3 -m pip install -q --no-index --no-deps --no-compile .gpu/extra/dsv4_doctor-*.whl .gpu/extra/packaging-*.whl || exit 1
  cp .gpu/extra/*.tar.gz "$S/"; mkdir -p ~/mcore && tar -xzf "$S"/mcore-d48bd6be.tar.gz -C ~/mcore
  tar -xzf "$S"/fht-f134af63.tar.gz -C ~
  (cd ~/fht && FAST_HADAMARD_TRANSFORM_FORCE_BUILD=TRUE MAX_JOBS=8 python3 -m pip install --no-build-isolation \
     --no-deps --no-index --target ~/fht-site . > ~/fht.log 2>&1) &
  bash "$S/te1/install-te.sh" "$S" || exit 1   # TE 2.12.0 core + meta, and te5: its Python requirements
  (cd ~ && MAX_JOBS=16 NVTE_FRAMEWORK=pytorch python3 -m pip install --no-build-isolation --no-deps --no-index \
     "$S"/transformer_engine_torch-2.12.0.tar.gz > ~/te-build.log 2>&1); echo "TE torch extension build: exit $?"
  wait; tail -1 ~/fht.log
  cd "$out/focus" || exit 1
  export PYTHONPATH=~/mcore:~/fht-site NO_COLOR=1
  doctor smoke --cp 2 --dsa-backend none -f json > smoke-cp2-none.json; echo "smoke --cp 2 --dsa-backend none: exit $?"
  python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29650 -m dsv4_doctor check --cp 2 \
    --dsa-backend none -f json > fleet-2ranks-cp2-none.json 2> fleet.stderr; echo "torchrun 2 ranks, check --cp 2 --dsa-backend none: exit $?"
  doctor check --cp 2 -f json > check-cp2.json; echo "check --cp 2 (no frontend stack): exit $?"
  cd - >/dev/null; tar -czf "$out/focus.tgz" -C "$out" focus && rm -rf "$out/focus" ;;
*) echo "unknown step $step" >&2; exit 2 ;;
esac
