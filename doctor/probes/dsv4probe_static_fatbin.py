"""The device code a compiled extension holds: the cubin archs and PTX versions in its ELF `.nv_fatbin` section,
read without loading the object (a build for the wrong GPU loads fine and fails only at its first kernel launch).

A part of the static probe (dsv4probe_static.py), loaded by path (dsv4probe_common.load_module). Only headers are
read: the ELF section headers, then each fatbin's 16-byte header and each entry's header (its kind, arch and flags),
seeking past every payload, so a 700 MB libtransformer_engine.so costs a few thousand small reads. Compressed entries
carry the same header (their flag says so); no payload is decompressed.

The layout, as NVIDIA's fatbinary (CUDA 13.5) writes it and cuobjdump reads it:
  fatbin header   u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries that follow
  entry header    u16 kind (1 PTX, 2 cubin), u16, u32 header size, u64 payload size, u32 compressed size, u32,
                  u16 minor, u16 major, u32 arch (90 = sm_90), u32, u32, u64 flags, ...
  entry flags     0x100000: arch-specific (sm_90a), 0x200000: family-specific (sm_100f), 0x2000 or 0x8000: compressed
A linked object's section is the concatenation of its translation units' fatbins, each aligned (zero padding between).
Stdlib only, Python 3.8+.
"""

import os
import struct

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_CUBIN = 1, 2
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000
FLAG_COMPRESSED = 0x2000 | 0x8000
MAX_ENTRIES = 200000  # headers read per object (TE's core has thousands); past this the lists are incomplete
MAX_FATBINS = 50000
MAX_ARCHS = 32  # distinct cubin archs (and PTX versions) listed per object
MAX_PADDING = 4096  # zero bytes skipped between two fatbins before the rest is called unreadable
MAX_SECTIONS = 4096
MAX_OBJECTS = 16  # shared objects read per module
SECTION = b".nv_fatbin"


def _common():
    """dsv4probe_common, found by the one rule of the static probe's parts (dsv4probe_static_installed's), which is
    loaded by then."""
    try:
        from dsv4probe_static_installed import _common as common
    except ImportError:  # imported as a package module (in-process tests)
        from .dsv4probe_static_installed import _common as common
    return common()


def _arch_name(prefix, arch, flags):
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY_SPECIFIC else "")
    return "%s_%d%s" % (prefix, arch, suffix)


def _section_of(fh, size):
    """(offset, size) of the .nv_fatbin section of the ELF file open in `fh`, or None when it has none."""
    ident = fh.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shnum == 0 or shnum > MAX_SECTIONS or shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > size:
        raise ValueError("unreadable ELF section table (%d sections of %d bytes at %d)" % (shnum, shentsize, shoff))
    fh.seek(shoff)
    raw = fh.read(shnum * shentsize)
    headers = [struct.unpack_from("<IIQQQQ", raw, i * shentsize) for i in range(shnum)]
    _n, _t, _f, _a, str_off, str_size = headers[shstrndx]
    if str_off + str_size > size or str_size > 1 << 20:
        raise ValueError("unreadable ELF section names")
    fh.seek(str_off)
    names = fh.read(str_size)
    for name, kind, _flags, _addr, offset, length in headers:
        if names[name:name + len(SECTION) + 1] == SECTION + b"\0":
            if kind == 8:  # SHT_NOBITS: no bytes in the file
                return None
            if offset + length > size:
                raise ValueError(".nv_fatbin runs past the end of the file")
            return offset, length
    return None


def read_fatbins(fh, start, length):
    """Every fatbin in the bytes [start, start+length) of `fh`: the cubin archs, PTX versions and counts."""
    cubins, ptx, other = {}, {}, {}
    out = {"fatbins": 0, "entries": 0, "compressed": 0}
    end = start + length
    pos = start
    padding = 0
    while pos + 16 <= end:
        fh.seek(pos)
        head = fh.read(16)
        if len(head) < 16:
            out["error"] = "the section ends inside a fatbin header at offset %d" % (pos - start)
            break
        magic, _version, header_size, body = struct.unpack("<IHHQ", head)
        if magic != FATBIN_MAGIC:
            if head[:8] == b"\0" * 8 and padding < MAX_PADDING:
                pos += 8
                padding += 8
                continue
            out["error"] = "no fatbin header at offset %d of the section (magic 0x%08X)" % (pos - start, magic)
            break
        padding = 0
        if header_size < 16 or pos + header_size + body > end:
            out["error"] = "a fatbin at offset %d claims %d bytes past the section's end" % (
                pos - start, pos + header_size + body - end)
            break
        out["fatbins"] += 1
        if out["fatbins"] > MAX_FATBINS:
            out["capped"] = "stopped after %d fatbins" % MAX_FATBINS
            break
        entry = pos + header_size
        stop = entry + body
        while entry + 16 <= stop:
            if out["entries"] >= MAX_ENTRIES:
                out["capped"] = "stopped after %d entries" % MAX_ENTRIES
                break
            fh.seek(entry)
            eh = fh.read(64)
            if len(eh) < 16:
                out["error"] = "the section ends inside an entry header"
                break
            kind, _u, entry_header, payload = struct.unpack_from("<HHIQ", eh, 0)
            if entry_header < 64 or len(eh) < 64 or entry + entry_header + payload > stop:
                out["error"] = "an entry at offset %d of the section is cut or claims too much (%d + %d bytes)" % (
                    entry - start, entry_header, payload)
                break
            _csize, _u2, _minor, _major, arch, _o, _l, flags = struct.unpack_from("<IIHHIIIQ", eh, 16)
            out["entries"] += 1
            if flags & FLAG_COMPRESSED:
                out["compressed"] += 1
            if kind == KIND_CUBIN:
                name = _arch_name("sm", arch, flags)
                cubins[name] = cubins.get(name, 0) + 1
            elif kind == KIND_PTX:
                name = _arch_name("compute", arch, flags)
                ptx[name] = ptx.get(name, 0) + 1
            else:
                other[str(kind)] = other.get(str(kind), 0) + 1
            entry += entry_header + payload
        if out.get("error") or out.get("capped"):
            break
        pos = stop
    for key, counts in (("cubins", cubins), ("ptx", ptx)):
        names = sorted(counts)
        out[key] = [{"arch": n, "count": counts[n]} for n in names[:MAX_ARCHS]]
        if len(names) > MAX_ARCHS:
            out[key + "_left_out"] = len(names) - MAX_ARCHS
    if other:
        out["other_kinds"] = dict(list(other.items())[:8])
    return out


def read_object(path):
    """What one shared object holds: {path, size, has_fatbin, cubins, ptx, ...} or {path, error}."""
    entry = {"path": path}
    try:
        fh = _common().open_regular(path)  # the probes' one read path: a FIFO or a device is refused at once
    except OSError as exc:
        entry["error"] = "%s: %s" % (type(exc).__name__, exc)
        return entry
    with fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            entry["size"] = size
            section = _section_of(fh, size)
            entry["has_fatbin"] = section is not None
            if section is not None:
                entry["section_bytes"] = section[1]
                entry.update(read_fatbins(fh, section[0], section[1]))
        except (OSError, ValueError, struct.error, IndexError, OverflowError) as exc:
            entry["error"] = "%s: %s" % (type(exc).__name__, _common().cut_text(str(exc), 300))
    return entry


def _shared_objects(directory):
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if n.endswith(".so") or ".so." in n]


def objects_of(located, top):
    """The shared objects of a located module: an extension module itself; for a package, those in its folders (and
    their lib/ folders), and lib<top>.so beside the package (where TE's core may sit)."""
    origin = located.get("origin") or ""
    if located.get("kind") == "extension" or origin.endswith(".so") or ".so." in os.path.basename(origin):
        return [origin] if origin else []
    found = []
    for folder in located.get("locations") or []:
        found += _shared_objects(folder)
        for sub in ("lib", "wheel_lib"):
            found += _shared_objects(os.path.join(folder, sub))
        beside = os.path.join(os.path.dirname(folder.rstrip(os.sep)), "lib%s.so" % top)
        if os.path.isfile(beside):
            found.append(beside)
    seen, out = set(), []
    for path in found:
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(path):
            seen.add(real)
            out.append(path)
    return out


def device_code(name, locate_module):
    """The device code of module `name` as the job would import it (located by the static probe's locator)."""
    located = locate_module(name)
    out = {"found": bool(located.get("found")), "origin": located.get("origin")}
    if not located.get("found"):
        return out
    paths = objects_of(located, name.split(".")[0])
    out["objects"] = [read_object(p) for p in paths[:MAX_OBJECTS]]
    if len(paths) > MAX_OBJECTS:
        out["objects_left_out"] = len(paths) - MAX_OBJECTS
    return out
