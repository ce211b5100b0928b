"""What ran: each kernel's calls (first and steady times) and the CuTe DSL file cache's reads, writes and
compiles during them.

A part of the kernel smoke probe (dsv4probe_kernels.py), loaded by path (dsv4probe_common.load_module).
"""

import inspect
import os
import sys
import time

from dsv4probe_common import load_module, stage  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_device", "dsv4probe_import_watch"):
    load_module(_part, HERE)
# The modules just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_device import sync
from dsv4probe_import_watch import when_imported


CALLS = []  # (kernel name, seconds, CuTe DSL file-cache events during the call)
# ("load-hit" | "load-miss" | "write" | "compile" | "compile-no-cache", module hash prefix), and the doctor's AOT
# kernel store's ("aot-served" | "aot-stored" | "aot-compiled" | "aot-uncached", entry prefix)
CACHE_EVENTS = []


def _kernel_name(fn):
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        name = "%s.%s" % (getattr(owner, "__name__", type(owner).__name__), getattr(fn, "__name__", name))
    return str(name)[:120]


def _named(fn, name):
    """fn under the name the evidence lists it by (one function compiling two kernels gets two names)."""
    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    call.__qualname__ = call.__name__ = name
    return call


def _timed(torch, device, fn, *args, **kwargs):
    name = _kernel_name(fn)
    if not any(call[0] == name for call in CALLS):
        stage("%s: first call (compiles the kernel)" % name)
    seen = len(CACHE_EVENTS)
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    sync(torch, device)
    took = time.monotonic() - t0
    CALLS.append((name, took, list(CACHE_EVENTS[seen:])))
    stage("%s: against the reference" % name)
    return out, took


def _wrap_cache_functions(dsl):
    """Count the CuTe DSL's file-cache reads and writes (cutlass/base_dsl/dsl.py resolves load_cache_from_path and
    dump_cache_to_path from its own globals at each compile); the kernels are called and compared as always."""
    load, dump = getattr(dsl, "load_cache_from_path", None), getattr(dsl, "dump_cache_to_path", None)
    if load is None or dump is None or getattr(load, "_dsv4_doctor", False):
        return

    def counted_load(dsl_name, file, *a, **k):
        fn = load(dsl_name, file, *a, **k)
        CACHE_EVENTS.append(("load-hit" if fn is not None else "load-miss", str(file)[:16]))
        return fn

    def counted_dump(dsl_name, jit_function, file, *a, **k):
        CACHE_EVENTS.append(("write", str(file)[:16]))
        return dump(dsl_name, jit_function, file, *a, **k)

    counted_load._dsv4_doctor = True
    dsl.load_cache_from_path, dsl.dump_cache_to_path = counted_load, counted_dump
    _wrap_compile(getattr(dsl, "BaseDSL", None))


def _wrap_compile(base):
    """Count each CuTe DSL compile and whether it bypassed the file cache: `cute.compile` passes no_cache=True
    (nvidia-cutlass-dsl 4.5.2 cutlass/base_dsl/compiler.py L604-605) and BaseDSL.compile_and_cache reads and writes
    the file cache only without it (dsl.py L1642, L1729), so such a kernel is compiled in-process at every run."""
    compile_and_cache = getattr(base, "compile_and_cache", None)
    if compile_and_cache is None or getattr(compile_and_cache, "_dsv4_doctor", False):
        return
    try:
        signature = inspect.signature(compile_and_cache)
    except (TypeError, ValueError):
        return

    def counted_compile(self, *args, **kwargs):
        try:
            no_cache = bool(signature.bind_partial(self, *args, **kwargs).arguments.get("no_cache"))
        except TypeError:
            no_cache = None
        CACHE_EVENTS.append(("compile-no-cache" if no_cache else "compile", ""))
        return compile_and_cache(self, *args, **kwargs)

    counted_compile._dsv4_doctor = True
    base.compile_and_cache = counted_compile


def watch_cute_dsl_cache():
    """Count the DSL's file-cache calls from when cutlass.base_dsl.dsl is imported (by whichever kernel needs it), so
    a sub-run that never uses the CuTe DSL does not pay its import."""
    when_imported("cutlass.base_dsl.dsl", _wrap_cache_functions)


def _cache_files(directory):
    try:
        return sum(1 for e in os.scandir(directory) if e.name.endswith(".mlir"))
    except OSError:
        return None


CUTE_COMPILE_BYPASS = ("compiled in-process: %d module(s) by cute.compile, which bypasses the CuTe DSL file cache "
                       "(no_cache=True, nvidia-cutlass-dsl cutlass/base_dsl/compiler.py); only the doctor's AOT "
                       "kernel store serves such kernels, at the call sites it has checked")


def kernels_ran(cache_dir, files_before):
    """Every kernel called, in order of first call: its first-call and steady (fastest later) times, and whether the
    first call's CuTe DSL modules came from the file cache."""
    rows, order = {}, []
    for name, took, events in CALLS:
        if name not in rows:
            order.append(name)
            hits = sum(1 for e in events if e[0] == "load-hit")
            writes = sum(1 for e in events if e[0] == "write")
            bypassed = sum(1 for e in events if e[0] == "compile-no-cache")
            lookups = sum(1 for e in events if e[0] in ("load-hit", "load-miss"))
            served = sum(1 for e in events if e[0] == "aot-served")
            stored = sum(1 for e in events if e[0] == "aot-stored")
            aot = [e[0] for e in events if e[0].startswith("aot-")]
            cache = ("from the doctor's AOT kernel store (%d kernel(s) loaded, none compiled)" % served
                     if served and not bypassed and not writes else
                     "compiled: %d by cute.compile, %d of them stored in the doctor's AOT kernel store for the next "
                     "run%s" % (bypassed, stored, ", %d loaded from it" % served if served else "") if aot else
                     "not a CuTe DSL compile (no DSL compile or cache lookup)" if not events else
                     "from the CuTe DSL file cache (%d module(s) read, none compiled)" % hits if hits and not writes
                     and not bypassed else "compiled (%d module(s) written to the cache%s)" % (
                         writes, ", %d read" % hits if hits else "") if writes and not bypassed else
                     CUTE_COMPILE_BYPASS % bypassed if bypassed and not (hits or writes) else
                     "compiled: %d by cute.compile (file cache bypassed), %d written, %d read" % (
                         bypassed, writes, hits) if bypassed else
                     "looked up, neither read nor written (%d miss(es); file caching off?)" % lookups)
            rows[name] = {"kernel": name, "first_call_s": round(took, 4), "steady_s": None, "calls": 1,
                          "cache": cache, "from_cache": (hits > 0 or served > 0) and writes == 0 and bypassed == 0,
                          "cache_bypassed": bypassed > 0, "served_by_store": served}
        else:
            row = rows[name]
            row["calls"] += 1
            row["steady_s"] = round(took, 5) if row["steady_s"] is None else min(row["steady_s"], round(took, 5))
    # /proc/self/fd/N: the directory the doctor opened and checked, held as descriptor N; shown by its path now.
    shown = os.path.realpath(cache_dir) if cache_dir and cache_dir.startswith("/proc/self/fd/") else cache_dir
    return {"kernels": [rows[n] for n in order], "cute_dsl_cache_dir": shown,
            "cute_dsl_cache_opened_as": cache_dir if shown != cache_dir else None,
            "cache_files_before": files_before, "cache_files_after": _cache_files(cache_dir) if cache_dir else None}
