"""The library probe's answer (its entry: dsv4probe_libs.py): each copy of a shared library found on disk, the
distribution that ships it (its RECORD), and whether its ELF dynamic symbol table exports the symbol (at the version
asked), read without loading it. Stdlib only, Python 3.8+; loaded by path (dsv4probe_common.load_module).
"""

import os
import sys

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import open_regular, read_bounded

import glob
import struct


SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/cuda/lib64",
               "/usr/local/cuda/compat", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
SHT_DYNSYM, SHT_VERDEF, SHT_VERSYM = 11, 0x6FFFFFFD, 0x6FFFFFFF
METADATA_LIMIT, RECORD_LIMIT = 1 << 22, 1 << 23  # as the static probe reads them


def _section(fh, sh):
    fh.seek(sh["offset"])
    return fh.read(sh["size"])


def elf_exports(path, symbol, version=None):
    """Whether `path` defines `symbol` (with that version, when given), and the versions it defines it at."""
    with open_regular(path) as fh:  # a FIFO or a device is refused (ReadRefused, an OSError), never waited on
        ident = fh.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            return {"error": "not a little-endian 64-bit ELF file"}
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum, _ = struct.unpack_from("<HHH", ident, 0x3A)
        fh.seek(shoff)
        raw = fh.read(shentsize * shnum)
        sections = []
        for i in range(shnum):
            name, kind, _flags, _addr, offset, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", raw, i * shentsize)
            sections.append({"type": kind, "offset": offset, "size": size, "link": link, "info": info,
                             "entsize": entsize})
        dynsym = next((s for s in sections if s["type"] == SHT_DYNSYM), None)
        if dynsym is None:
            return {"error": "no dynamic symbol table"}
        strtab = _section(fh, sections[dynsym["link"]])
        symbols = _section(fh, dynsym)
        versym = next((s for s in sections if s["type"] == SHT_VERSYM), None)
        verdef = next((s for s in sections if s["type"] == SHT_VERDEF), None)
        versions = {}
        if verdef is not None:
            data, vstr, pos = _section(fh, verdef), _section(fh, sections[verdef["link"]]), 0
            for _ in range(verdef["info"]):
                _v, _flags, ndx, cnt, _hash, aux, nxt = struct.unpack_from("<HHHHIII", data, pos)
                if cnt:
                    vname, = struct.unpack_from("<I", data, pos + aux)
                    versions[ndx] = vstr[vname:vstr.index(b"\0", vname)].decode("utf-8", "replace")
                if not nxt:
                    break
                pos += nxt
        vs = _section(fh, versym) if versym is not None else b""
    wanted = symbol.encode()
    found = []
    for i in range(len(symbols) // 24):
        st_name, _info, _other, shndx, _value, _size = struct.unpack_from("<IBBHQQ", symbols, i * 24)
        if shndx == 0 or strtab[st_name:st_name + len(wanted) + 1] != wanted + b"\0":
            continue
        ndx = struct.unpack_from("<H", vs, i * 2)[0] & 0x7FFF if len(vs) >= (i + 1) * 2 else 0
        found.append(versions.get(ndx))
    exports = bool(found) and (version is None or version in found)
    return {"exports": exports, "defined_at_versions": found, "symbol_count": len(symbols) // 24}


def _name_version(folder):
    """Name and Version from a .dist-info folder's METADATA headers (the folder name when it cannot be read)."""
    name, _, version = os.path.basename(folder)[:-len(".dist-info")].partition("-")
    try:
        text = read_bounded(os.path.join(folder, "METADATA"), METADATA_LIMIT)[0].decode("utf-8", "replace")
    except OSError:  # ReadRefused: missing, a FIFO, a device
        text = ""
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
    return {"distribution": name, "version": version}


def _owner(path):
    """The distribution whose RECORD lists `path` (nvidia-* wheels put libraries in site-packages/nvidia/*/lib)."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for i in range(len(parts) - 1, 0, -1):
        site = os.sep.join(parts[:i])
        rel = os.sep.join(parts[i:])
        for record in glob.glob(os.path.join(site, "*.dist-info", "RECORD")):
            try:
                text = read_bounded(record, RECORD_LIMIT)[0].decode("utf-8", "replace")
            except OSError:  # ReadRefused
                continue
            if any(line.split(",", 1)[0] == rel for line in text.splitlines()):
                return dict(_name_version(os.path.dirname(record)), record=record)
        if os.path.basename(site) in ("site-packages", "dist-packages"):
            break
    return None


def candidates(soname):
    dirs = []
    for entry in sys.path:
        dirs += glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib"))
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs += list(SYSTEM_DIRS)
    seen, out = set(), []
    for d in dirs:
        path = os.path.join(d, soname)
        real = os.path.realpath(path)
        if os.path.isfile(path) and real not in seen:
            seen.add(real)
            out.append(path)
    return out


def answer(request):
    soname, symbol, version = request["soname"], request["symbol"], request.get("version")
    copies = []
    for path in candidates(soname)[:8]:
        entry = {"path": path, "realpath": os.path.realpath(path), "owner": _owner(path)}
        try:
            entry.update(elf_exports(path, symbol, version))
        except (OSError, struct.error, ValueError, IndexError) as exc:
            entry["error"] = "%s: %s" % (type(exc).__name__, exc)
        copies.append(entry)
    return {"soname": soname, "symbol": symbol, "version": version, "copies": copies}

