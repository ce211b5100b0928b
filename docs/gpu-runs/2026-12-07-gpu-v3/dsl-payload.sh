#!/usr/bin/env bash
# CPU side: the CuTe DSL 4.8.1 set for the device (cp312 manylinux x86_64), for case_dsl481 (cases-dsl.sh): downloads
# the wheels into ROOT/.gpu/dsl/wheels, prints each one's size and the total, and splits them into ROOT/.gpu/dsl/c1 ..
# cN, each at most CAP_MIB (default 47: two parts; beside the ~14 MiB tree, under one call's 64 MiB), with
# c1/MANIFEST (sha256, size, name of every whole wheel). DSL_PY=3.11 fetches the cp311 set instead (a CPU rehearsal). Carry .gpu/dsl/cK in a call that runs `run dsl-stage` (or dsl481 itself): the
# case joins what it has.   dsl-payload.sh [ROOT]   (ROOT: the checkout the device calls are made from)
#
# The set is what `pip install 'nvidia-cutlass-dsl[cu13]==4.8.1'` installs on the device, less what the device
# already has (cuda-bindings 13.4.4 >= 12.8, protobuf 7.36.2, typing-extensions 4.16.0: pip-list.txt of 2026-12-06),
# and less -libs-cu12 (92 MB; the meta wheel requires it unconditionally, but on a CUDA 13 driver cutlass loads the
# cu13 _cutlass_ir: cutlass/_mlir/_mlir_libs/__init__.py picks the newest flavour the driver supports). DSL_CU12=1
# adds it (then `pip check` is clean; without it pip check and deps.* name the missing -libs-cu12).
set -eu
root=${1:-/work/main}
d=$root/.gpu/dsl
cap=$(( ${CAP_MIB:-47} * 1048576 ))
V=4.8.1
pyv=${DSL_PY:-3.12}
mkdir -p "$d/wheels"
reqs=("nvidia-cutlass-dsl==$V" "nvidia-cutlass-dsl-libs-core==$V" "nvidia-cutlass-dsl-libs-base==$V"
      "nvidia-cutlass-dsl-libs-cu13==$V")
[ "${DSL_CU12:-0}" = 1 ] && reqs+=("nvidia-cutlass-dsl-libs-cu12==$V")
s=$(date +%s)
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$d/wheels" \
  --python-version "$pyv" --implementation cp --abi "cp${pyv/./}" --abi none --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any "${reqs[@]}"
echo "downloaded in $(( $(date +%s) - s )) s"
# only this set: a wheel left from an earlier DSL_CU12=1 run is dropped
keep=$(printf '%s\n' "${reqs[@]}" | sed 's/==.*//; s/-/_/g')
for w in "$d/wheels"/*.whl; do
  n=$(basename "$w" | sed "s/-$V-.*//")
  echo "$keep" | grep -qx "$n" || { echo "dropped $(basename "$w")"; rm -f "$w"; }
done
ls -l "$d/wheels"/*.whl | awk '{printf "%12d  %s\n", $5, $NF; t += $5} END {printf "%12d  total (%.1f MiB)\n", t, t/1048576}'
rm -rf "$d"/c[0-9]*
k=1; used=0; mkdir -p "$d/c1"; : > "$d/MANIFEST"
for w in "$d/wheels"/*.whl; do
  name=$(basename "$w"); size=$(stat -c %s "$w")
  echo "$(sha256sum < "$w" | cut -d' ' -f1)  $size  $name" >> "$d/MANIFEST"
  off=0; part=0
  while [ "$off" -lt "$size" ]; do
    room=$(( cap - used ))
    if [ "$room" -lt 1048576 ]; then k=$(( k + 1 )); used=0; mkdir -p "$d/c$k"; continue; fi
    n=$(( size - off < room ? size - off : room ))
    tail -c +$(( off + 1 )) "$w" | head -c "$n" > "$d/c$k/$name.part$(printf %02d $part)"
    off=$(( off + n )); used=$(( used + n )); part=$(( part + 1 ))
  done
done
cp "$d/MANIFEST" "$d/c1/MANIFEST"
for c in "$d"/c[0-9]*; do echo "$(basename "$c"): $(du -sb "$c" | cut -f1) bytes, $(ls "$c" | wc -l) files"; done
echo "carry, one per call: $(cd "$root" && ls -d .gpu/dsl/c[0-9]* | tr '\n' ' ')"
