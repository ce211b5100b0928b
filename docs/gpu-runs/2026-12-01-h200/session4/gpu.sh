#!/usr/bin/env bash
# Session 4 (2026-12-01, nvidia-h200: 1x H200; nvidia-h200-x2 was not lent): issue 12's runs 2 and 3 on the one GPU,
# two torchrun ranks sharing cuda:0. Run 1 (two NCCL ranks, one per GPU) cannot be made on one GPU: NCCL refuses two
# ranks on one device. Artifacts travel in .gpu/ (ignored), made here:
#   ../shared/tools/gpu-stack-wheels .gpu/stack 60      -> b1..b3 (frontend 1.27.0 stack)
#   .gpu/extra: the doctor's wheel (pip wheel --no-deps . at the commit in commit.txt), packaging, the
#   nvidia-cudnn-frontend 1.26.0 cp312 wheel, Megatron-LM megatron/core at d48bd6be (git archive)
# Usage, one step per device call:
#   bash docs/gpu-runs/2026-12-01-h200/session4/gpu.sh stage .gpu/stack/b1     (then b2)
#   bash docs/gpu-runs/2026-12-01-h200/session4/gpu.sh runs $OUT .gpu/stack/b3
set -u
S=~/stack
step=${1:?step}; shift
case $step in
stage)
  mkdir -p "$S"; for d in "$@"; do cp -r "$d" "$S/"; done; ls "$S" ;;
runs)
  out=${1:?out}; shift; mkdir -p "$S"; for d in "$@"; do cp -r "$d" "$S/"; done
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv
  bash "$S/b1/install-b.sh" "$S" > "$out/install.txt" 2>&1 || { tail -20 "$out/install.txt"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile .gpu/extra/dsv4_doctor-*.whl .gpu/extra/packaging-*.whl || exit 1
  mkdir -p ~/mcore && tar -xzf .gpu/extra/mcore-d48bd6be.tar.gz -C ~/mcore
  # The stale node: frontend 1.26.0 in its own folder, put first on one rank's PYTHONPATH.
  python3 -m pip install -q --no-index --no-deps --no-compile --target ~/fe126 .gpu/extra/nvidia_cudnn_frontend-1.26.0-*.whl || exit 1
  cat > ~/rank.sh <<'SH'
#!/usr/bin/env bash
# One torchrun rank: the rank named by ODD_RANK sees frontend 1.26.0 first on its PYTHONPATH.
export PYTHONPATH=~/mcore NO_COLOR=1
if [ "$LOCAL_RANK" = "${ODD_RANK:--}" ]; then export PYTHONPATH=~/fe126:$PYTHONPATH; fi
exec python3 -m dsv4_doctor "$@"
SH
  chmod +x ~/rank.sh
  cd "$out" || exit 1
  for r in 0 1; do
    echo "rank $r sees: $( [ "$r" = 1 ] && pp=~/fe126:~/mcore || pp=~/mcore; PYTHONPATH=$pp python3 -c 'import cudnn; print(cudnn.__version__, cudnn.__file__)')"
  done
  run() {  # name, ODD_RANK, doctor args...
    local name=$1 odd=$2; shift 2
    local t0=$SECONDS
    ODD_RANK=$odd python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29650 --no-python ~/rank.sh "$@" \
      > "$name.json" 2> "$name.stderr"
    echo "$name: torchrun exit $?, $((SECONDS - t0)) s"
  }
  # Run 2: the same stack on both ranks: one fleet report, fleet.drift passes (the TE rules fail: no TE here).
  run fleet-same-stack - check --distributed --cp 2 -f json
  # Run 3: rank 1 has frontend 1.26.0 first on its PYTHONPATH: fleet.drift fails and names rank 1 and both versions.
  run fleet-rank1-fe126 1 check --distributed --cp 2 -f json
  # Run 3 as text, as a person reads it.
  run fleet-rank1-fe126-text 1 check --distributed --cp 2 --no-smoke
  mv fleet-rank1-fe126-text.json fleet-rank1-fe126-text.txt
  python3 - <<'PY'
import json
for name in ("fleet-same-stack", "fleet-rank1-fe126"):
    r = json.load(open(name + ".json"))
    print(f"== {name}: exit_code {r['summary']['exit_code']}")
    for c in r["checks"]:
        if c["id"].startswith(("fleet.", "cudnn-fe.", "smoke.")):
            print(f"  {c['id']:22} {c['status']:6} {c['summary'][:300]}")
PY
  ;;
esac
