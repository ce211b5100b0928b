#!/usr/bin/env bash
# CPU side: one call's returned files (the run tool's files_at) into this folder, as plain files; the call's log as
# log-LABEL.txt.   unpack.sh FILES_AT LABEL   (LABEL e.g. 07-call7)
set -eu
src=${1:?files_at}; label=${2:?label, e.g. 07-call7}
dest=${DEST:-$(cd "$(dirname "$0")" && pwd)}  # the final run's files: this folder; the first lease's: first/
# The call's results came as one transport archive (the run tool returns at most 8 files); they are kept as plain files.
[ -f "$src/results.tar.gz" ] && tar -xzf "$src/results.tar.gz" -C "$dest" --strip-components=1
for f in "$src"/call-log-*.txt; do [ -f "$f" ] && cp "$f" "$dest/log-$label.txt"; done
ls "$dest"
