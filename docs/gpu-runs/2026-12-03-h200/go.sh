#!/usr/bin/env bash
# CPU side, at GO: the doctor's wheel and source at COMMIT (this branch) into .gpu/extra, and the payload packed
# into .gpu/c1 .. .gpu/cN (each carried by one staging call with the tree, under the call's 64 MiB).
set -eu
c=${1:?commit}
root=$(git rev-parse --show-toplevel)
g=$root/.gpu
mkdir -p $g/bin && cp "$(dirname "$0")/pack.py" $g/bin/
rm -rf /tmp/go-src && mkdir -p /tmp/go-src && git -C $root archive "$c" | tar -x -C /tmp/go-src
git -C $root archive "$c" | gzip -9 > $g/extra/go-src.tar.gz
git -C $root rev-parse "$c" > $g/extra/commit.txt
rm -f $g/extra/dsv4_doctor-*.whl
(cd /tmp/go-src && nice $root/.venv/bin/pip wheel -q --no-deps --no-build-isolation -w $g/extra . 2>&1 | grep -v "^WARNING: Location" || true)
ls -la $g/extra/dsv4_doctor-*.whl
T=$(git -C $root ls-files -z | xargs -0 cat | wc -c)
U=$(git -C $root ls-files -z --others --exclude-standard | xargs -0 -r cat | wc -c)
echo "tree $T untracked $U; ${CAP_MIB:-56} MiB payload + these = $(( (${CAP_MIB:-56}*1048576 + T + U) * 100 / 67108864 ))% of 64 MiB"
nice python3 $g/bin/pack.py $(( ${CAP_MIB:-56} * 1048576 ))
