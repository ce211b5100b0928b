#!/usr/bin/env bash
# CPU side: packs the payload .gpu/ (made as README.md's "The payload" says) into .gpu/c1 .. .gpu/cN, each carried by
# one staging call with the tree, under the call's 64 MiB. The doctor is not in the payload: the run calls install it
# from the tree they carry.   go.sh [ROOT]   (ROOT: the checkout the device calls are made from, default /work/main)
set -eu
root=${1:-/work/main}
g=$root/.gpu
mkdir -p "$g/bin" && cp "$(dirname "$0")/pack.py" "$g/bin/"
T=$(git -C "$root" ls-files -z | xargs -0 cat | wc -c)
U=$(git -C "$root" ls-files -z --others --exclude-standard | xargs -0 -r cat | wc -c)
cap=${CAP_MIB:-53}
echo "tree $T untracked $U; $cap MiB payload + these = $(( (cap*1048576 + T + U) * 100 / 67108864 ))% of 64 MiB"
[ $(( cap*1048576 + T + U )) -lt $(( 63 * 1048576 )) ] || { echo "over 63 MiB with the tree: lower CAP_MIB" >&2; exit 1; }
nice python3 "$g/bin/pack.py" $(( cap * 1048576 ))
du -sb "$g"/c[0-9]* | sed 's/^/bytes /'
