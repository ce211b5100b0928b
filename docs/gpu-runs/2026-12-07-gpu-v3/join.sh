#!/usr/bin/env bash
# Joins the staged pieces under ~/stack/all (from .gpu/cN) into whole files, checks each against c1's MANIFEST
# (sha256, size) and lists what is complete: prints "complete NAME" for every whole file ready in ~/stack/wh.
set -u
A=~/stack/all; W=~/stack/wh; mkdir -p "$W"
[ -f "$A/MANIFEST" ] || { echo "no MANIFEST"; exit 1; }
while read -r sha size rel; do
  [ -n "$rel" ] || continue
  case $rel in
    wheels/*) name=${rel#wheels/}; dest=$W/$name
      [ -f "$dest" ] && { echo "complete $name"; continue; }
      parts=$(ls "$A/wheels/$name".part* 2>/dev/null | sort)
      [ -n "$parts" ] || continue
      have=$(cat $parts | wc -c)
      [ "$have" = "$size" ] || continue
      cat $parts > "$dest.tmp"
      if [ "$(sha256sum < "$dest.tmp" | cut -d' ' -f1)" = "$sha" ]; then mv "$dest.tmp" "$dest"; echo "complete $name"
      else echo "SHA MISMATCH $name"; rm -f "$dest.tmp"; fi ;;
    *) f=$A/$rel
      [ -f "$f" ] || continue
      [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$sha" ] && echo "complete $rel" || echo "SHA MISMATCH $rel" ;;
  esac
done < "$A/MANIFEST"
