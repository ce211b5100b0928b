#!/usr/bin/env bash
# CPU side: unpack one call's returned files (FILES_AT) into the run folder DEST; built wheels to .gpu/built.
set -u
src=${1:?files_at}; dest=${2:?dest}; label=${3:?label, e.g. 1-stage1}
g=$(git rev-parse --show-toplevel)/.gpu
mkdir -p "$dest" "$g/built"
for f in $(find "$src" -type f | sort); do
  case $f in
    *.tgz) tar -xzf "$f" -C "$dest" ;;
    *call-log.txt) cp "$f" "$dest/log-$label.txt" ;;
    *.whl.part*) cp "$f" "$g/built/" ;;
    *) cp "$f" "$dest/" ;;
  esac
done
for first in "$g"/built/*.whl.part00; do
  [ -f "$first" ] || continue
  w=${first%.part00}; cat "$w".part* > "$w" && rm -f "$w".part* && echo "built: $(basename "$w")"
done
ls "$dest"
