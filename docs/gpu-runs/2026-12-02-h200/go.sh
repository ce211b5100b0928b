#!/usr/bin/env bash
# CPU side, at GO: the doctor's wheel and source at COMMIT into .gpu/extra, the payload packed, and a static preview
# of the GO code against the same wheels (python3.12, no torch) for the expectations.
set -eu
c=${1:?commit}
g=/work/main/.gpu
rm -rf /tmp/go-src && mkdir -p /tmp/go-src && git -C /work/main archive "$c" | tar -x -C /tmp/go-src
git -C /work/main archive "$c" | gzip -9 > $g/extra/go-src.tar.gz
git -C /work/main rev-parse "$c" > $g/extra/commit.txt
rm -f $g/extra/dsv4_doctor-*.whl
(cd /tmp/go-src && nice /work/wt/gpurun/.venv/bin/pip wheel -q --no-deps --no-build-isolation -w $g/extra . 2>&1 | grep -v "^WARNING: Location" || true)
ls -la $g/extra/dsv4_doctor-*.whl
T=$(git -C /work/main ls-files -z | xargs -0 cat | wc -c)
U=$(git -C /work/main ls-files -z --others --exclude-standard | xargs -0 -r cat | wc -c)
BIN=$(cat $g/bin/* | wc -c)
echo "tree $T untracked $U bin $BIN; 58 MiB payload + these = $(( (58*1048576 + T + U + BIN) * 100 / 67108864 ))% of 64 MiB"
nice python3 $g/bin/pack.py $(( 58 * 1048576 ))
rm -rf /tmp/govenv && python3 -m venv /tmp/govenv && /tmp/govenv/bin/pip install -q --no-deps $g/extra/dsv4_doctor-*.whl packaging 2>&1 | grep -v "^WARNING: Location" || true
/tmp/govenv/bin/dsv4-doctor --version
