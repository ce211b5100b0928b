#!/usr/bin/env bash
# CPU side, after the device call that ran `faillogs` and unpack.sh: the returned failure logs into the triage test's
# case folders, next to each case.json (tests/triage/gpu/NAME/: logs/ the torchrun --log-dir tree, console.txt the
# launcher's stdout+stderr, run.txt the command and exit code, and the OOM case's filler files and gpu.txt).
#   collect-faillogs.sh RESULTS_DIR   (the unpacked results: the folder holding faillogs/, e.g. this folder)
# A case that did not run (no console.txt) is named and left as it is; the exit code is then 1.
set -eu
src=${1:?RESULTS_DIR: the unpacked results folder, the one holding faillogs/}
[ -d "$src/faillogs" ] && src=$src/faillogs
root=$(cd "$(dirname "$0")/../../.." && pwd)
dest=$root/tests/triage/gpu
missing=0
for name in fail-wrong-arch fail-oom fail-nan fail-no-dsa fail-rank-dies; do
  [ -f "$dest/$name/case.json" ] || { echo "$name: no $dest/$name/case.json" >&2; exit 2; }
  if [ ! -f "$src/$name/console.txt" ]; then echo "$name: NOT COLLECTED (no $src/$name/console.txt)"; missing=1; continue; fi
  find "$dest/$name" -mindepth 1 -maxdepth 1 ! -name case.json -exec rm -rf {} +
  for f in logs console.txt run.txt gpu.txt filler.txt filler-ready.json; do
    [ -e "$src/$name/$f" ] && cp -R "$src/$name/$f" "$dest/$name/"
  done
  echo "$name: $(find "$dest/$name" -type f ! -name case.json | wc -l) files, $(du -sh "$dest/$name" | cut -f1); $(grep '^exit' "$dest/$name/run.txt" 2> /dev/null)"
done
[ $missing = 0 ] && echo "now: set LOGS_COMMITTED = True in tests/test_triage_gpu.py, run it, commit the logs with it"
exit $missing
