#!/usr/bin/env python3
"""Packs the payload for the device calls: .gpu/c1 .. .gpu/cN, each at most CAP bytes (with the tree and .gpu/bin it
fits one call's 64 MiB). c1 first holds the small files (sources, extras, the doctor), then a stream of the big
wheels in order (the kernel stack first, for the runs without TE; then TE, installed later), split into .partNN
pieces where a call is full. Writes .gpu/c1/MANIFEST (sha256 and size of every whole file) for join.sh on the device.
    pack.py CAP_BYTES"""
import hashlib
import pathlib
import shutil
import sys

g = pathlib.Path(__file__).resolve().parent.parent
cap = int(sys.argv[1])
first = sorted(p for d in ("src", "extra") for p in (g / d).rglob("*") if p.is_file())
stream: list[pathlib.Path] = []
for d, pats in (("stack", ["*.whl", "nvidia_cutlass_dsl_libs_base-*", "nvidia_cutlass_dsl_libs_cu13-*"]),
                ("te12", ["transformer_engine-*", "transformer_engine_cu13-*"])):
    for pat in pats:
        for p in sorted((g / d).rglob(pat)):
            if p.is_file() and ".download" not in str(p) and p.name not in {s.name for s in stream}:
                stream.append(p)


def whole(p):  # the wheels gpu-stack-wheels split into .partNN pieces: join them back here
    return p.name.split(".part")[0]


files = {str(p.relative_to(g)): p.read_bytes() for p in first}
wheels: dict[str, list[pathlib.Path]] = {}
for p in stream:
    if p.name.endswith(".sh") or p.name == "SHA256SUMS":
        continue
    wheels.setdefault(whole(p), []).append(p)
blobs = []
for name, parts in wheels.items():
    parts.sort(key=lambda x: int(x.name.rsplit(".part", 1)[1]) if ".part" in x.name else 0)
    blobs.append((name, b"".join(x.read_bytes() for x in parts)))
# the joined wheels must match gpu-stack-wheels' SHA256SUMS
sums = {}
for s in list(g.glob("stack/*/SHA256SUMS")) + list(g.glob("te12/*/SHA256SUMS")):
    for line in s.read_text().split("\n"):
        if line.strip():
            h, n = line.split()
            sums[n] = h
for name, data in blobs:
    assert sums.get(name) == hashlib.sha256(data).hexdigest(), name
for old in g.glob("c[0-9]*"):
    shutil.rmtree(old)
calls: list[list[tuple[str, bytes]]] = [list(files.items())]
used = sum(len(data) for data in files.values())
assert used < cap
manifest = [f"{hashlib.sha256(d).hexdigest()}  {len(d)}  {r}" for r, d in files.items()]
for name, data in blobs:
    manifest.append(f"{hashlib.sha256(data).hexdigest()}  {len(data)}  wheels/{name}")
    off, part = 0, 0
    while off < len(data):
        room = cap - used
        if room < 1 << 20:  # start the next call
            calls.append([])
            used = 0
            continue
        piece = data[off:off + room]
        calls[-1].append((f"wheels/{name}.part{part:02d}", piece))
        used += len(piece)
        off += len(piece)
        part += 1
for i, c in enumerate(calls, 1):
    d = g / f"c{i}"
    for rel, data in c:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    print(f"c{i}: {sum(len(x) for _, x in c) / 2**20:.2f} MiB, {len(c)} files")
(g / "c1" / "MANIFEST").write_text("\n".join(manifest) + "\n")
