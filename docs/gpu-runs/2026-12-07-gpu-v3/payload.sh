#!/usr/bin/env bash
# CPU side: makes the payload .gpu/ (git-ignored) that gpu.sh stages on the device, as 2026-12-04-h200-truth's README
# lists it: the kernel stack and TE 2.12.0 as cp312 wheels (gpu-stack-wheels), the three git sources as archives
# from the fetch mirrors, and the extras (TE's torch-extension sdist, TE's requirements, Megatron-Bridge, verl, Hydra,
# typer for the doctor, cuobjdump).   payload.sh [ROOT]   (ROOT default /work/main)
set -euo pipefail
root=${1:-/work/main}
g=$root/.gpu; here=$(cd "$(dirname "$0")" && pwd)
M=/work/.mirror
tools=/work/shared/tools
mkdir -p "$g/src" "$g/extra/tedeps" "$g/extra/doctordeps"
[ -d "$g/stack/b1" ] || "$tools/gpu-stack-wheels" "$g/stack" 60
[ -d "$g/te12/te1" ] || PREFIX=te ONLY_EXTRA=1 EXTRA="transformer-engine==2.12.0 transformer-engine-cu13==2.12.0" \
  "$tools/gpu-stack-wheels" "$g/te12" 60
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Megatron-LM d48bd6be: megatron/core and megatron/training (PYTHONPATH=~/mcore on the device)
git --git-dir=$M/NVIDIA+Megatron-LM/repo archive --format=tar.gz -o "$g/src/mcore-d48bd6be.tar.gz" d48bd6be \
  megatron/core megatron/training
# FlashMLA nv_dev b7643bd5 with its cutlass submodule (147f5673) headers in csrc/cutlass, under flashmla/
mkdir -p "$tmp/flashmla/csrc/cutlass"
git --git-dir=$M/deepseek-ai+FlashMLA/repo archive b7643bd5 | tar -x -C "$tmp/flashmla"
git --git-dir=$M/NVIDIA+cutlass/repo archive 147f5673 include tools/util/include | tar -x -C "$tmp/flashmla/csrc/cutlass"
tar -C "$tmp" -czf "$g/src/flashmla-b7643bd5.tar.gz" flashmla
# fast-hadamard-transform 1cc807e under fht/
mkdir -p "$tmp/fht"
git --git-dir=$M/Dao-AILab+fast-hadamard-transform/repo archive 1cc807e | tar -x -C "$tmp/fht"
tar -C "$tmp" -czf "$g/src/fht-1cc807e.tar.gz" fht
# TE's torch extension sdist (PyPI's simple index, PEP 691 JSON, gives its URL and sha256)
python3 - "$g/extra" <<'PY'
import hashlib, json, sys, urllib.request
req = urllib.request.Request("https://pypi.org/simple/transformer-engine-torch/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
sdist = next(f for f in files if f["filename"] == "transformer_engine_torch-2.12.0.tar.gz")
data = urllib.request.urlopen(sdist["url"], timeout=300).read()
assert hashlib.sha256(data).hexdigest() == sdist["hashes"]["sha256"]
open(f"{sys.argv[1]}/{sdist['filename']}", "wb").write(data)
print(sdist["filename"], len(data), sdist["hashes"]["sha256"][:12])
PY
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any "$@"; }
dl -d "$g/extra/tedeps" pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 nvdlfw-inspect==0.2.2 importlib-metadata==10.2.0 lazy-importer==0.1.0 zipp==4.1.0
dl -d "$g/extra" megatron-bridge==0.6.2 verl==0.9.1 omegaconf==2.3.0 hydra-core==1.3.2 nvidia-cuda-cuobjdump==13.2.86
dl -d "$g/extra/doctordeps" typer==0.28.0
# antlr4-python3-runtime 4.9.3 has no wheel on PyPI: a py3-none wheel built here from its sdist
[ -n "$(ls "$g"/extra/antlr4_*.whl 2>/dev/null)" ] || python3 -m pip wheel -q --no-deps -w "$g/extra" antlr4-python3-runtime==4.9.3
rm -rf "$g/extra/jobs" && cp -r "$root/docs/gpu-runs/2026-12-02-h200/jobs" "$g/extra/jobs"
du -sh "$g"/src "$g"/extra "$g"/stack "$g"/te12
