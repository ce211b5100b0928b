"""The doctor's AOT kernel store: `cutlass.cute.compile`, wrapped inside the doctor's own probe processes (never in
the user's job), so that a kernel compiled once is loaded, not compiled, by every later check.

`cute.compile` never uses the CuTe DSL's file cache (it forces no_cache=True: nvidia-cutlass-dsl 4.5.2
base_dsl/compiler.py L604-605, 4.8.1 L1633-1634; NVIDIA/cutlass#3398). A compiled TVM-FFI function round-trips
through `export_to_c(path, name)` and `cute.runtime.load_module(path, enable_tvm_ffi=True)` (4.5.2
cutlass_dsl/tvm_ffi_provider.py L504, cute/runtime.py L986): that object file is what this store keeps.

- Only at the call sites in SITES: the doctor has read that each calls its compiled function positionally, with no
  dataclass argument and no attribute of the compiled object (a loaded function is a plain `tvm_ffi.Function`).
  Any other caller gets the real compile, untouched.
- The key (`call_key`): the DSL's version and its compiler library's identity (the digest its wheel's RECORD states,
  else its size and mtime: never a hash of the 144 MB file), tvm-ffi's version; the compiled function's module
  source hash and qualified name; the options and the arch; every argument's type, dtype, shape, stride, dynamic
  marking and static value. An argument this store cannot describe exactly makes the call uncached (a miss is safe,
  a wrong hit is not).
- Where: the per-user cache (the directory the doctor opened and checked, handed over as descriptor 211) is read and
  written; the image-wide one (`dsv4-doctor warm`, descriptor 212, root's) is only read. Every entry is opened
  through its directory's descriptor and checked by the doctor's own rules (doctor/kernels/cachedir.py, loaded by path);
  `load_module` then reads /proc/self/fd/N of that opened file, so what was checked is what is loaded.
- Any load or call error falls back to a real compile, and is recorded; EVENTS says which kernels were served.

This module wraps the compile; its parts, loaded by path: dsv4probe_kernelstore_key (the key, how a loaded kernel is
called), _dirs (the store's folders); dsv4probe_import_watch (the import hook) is shared with the kernel probe.
Standard library only (the DSL, torch and tvm_ffi are the stack's, imported by the kernels themselves).
"""

import hashlib
import os
import sys
import time

from dsv4probe_common import load_module  # in sys.modules: the probe loaded it

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_kernelstore_key", "dsv4probe_kernelstore_dirs", "dsv4probe_import_watch"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_import_watch import when_imported
from dsv4probe_kernelstore_dirs import Store
from dsv4probe_kernelstore_key import (KEY_VERSION, Uncacheable, _kernel_object, _stack_identity, call_key, call_shape,
                                       describe, dsl_settings)

# What the store's users (the kernel, smoke and warm probes) read from it, the parts' included.
__all__ = ["KEY_VERSION", "SITES", "STORED_TYPES", "Store", "Uncacheable", "_stack_identity", "arch_of",
           "await_pending", "call_key", "call_shape", "describe", "dsl_settings", "export_only_without_a_gpu",
           "install", "pending_marker", "summary"]

MAX_EVENTS = 200
LOADED_AT = time.monotonic()  # about when the probe process started: a recipe says when its kernel was needed

# (the calling module's path, from its package root; the calling function's qualified name): what the doctor read
# at that site. Listed in docs/smoke.md ("The AOT kernel store").
_FE = "cudnn/deepseek_sparse_attention/"
_CP_LAYOUT = "megatron/core/transformer/experimental_attention_variant/csa_utils/cp_layout_kernels.py"
SITES = {tuple(site.rsplit(":", 1)): read for site, read in {  # "file:function", as an event names its site
    _CP_LAYOUT + ":_run_compiled_launch":
        "Megatron d48bd6be L630-644: called with the torch tensors, Int32 values and a CUstream, positionally",
    _FE + "indexer_forward/_interface_sm90.py:indexer_fwd":
        "cuDNN frontend 1.27.0 L249-288: IndexerForwardSm90, called positionally (tensors, None, Int32, stream)",
    _FE + "indexer_forward/_interface.py:indexer_fwd":
        "cuDNN frontend 1.27.0 L598-635: IndexerForwardSm100, called positionally",
    _FE + "indexer_top_k/compactify.py:_compile_or_fetch":
        "cuDNN frontend 1.27.0 L131-171: CompactifyKernel, called positionally",
    _FE + "score_recompute/_interface_sm90.py:_sparse_score_recompute":
        "cuDNN frontend 1.27.0 L203-225: called positionally (tensors, stream, None)",
    _FE + "indexer_backward/indexer_backward_sm90.py:_score_grad_inplace_cute":
        "cuDNN frontend 1.27.0 L1503-1520: ScoreGradSm90, called positionally",
    _FE + "indexer_backward/indexer_backward_sm90.py:_ensure_compiled":
        "cuDNN frontend 1.27.0 L1630-1672: called positionally",
    _FE + "sparse_attention_backward/_interface_sm90.py:flash_attn_bwd_sm90":
        "cuDNN frontend 1.27.0 L198-345: pre, main and post kernels, each called positionally",
}.items()}
# What is stored: a plain compiled function, and the keyword-wrapped one 4.5.2 returns for a signature with defaults
# (cutlass_dsl/cutlass.py L666-671; 4.8 returns it always), whose wrapper `call_shape` stands in for when serving.
STORED_TYPES = ("TVMFFIJitCompiledFunction", "TVMFFIJitCompiledFunctionWithKwargs")

EVENTS = []  # one per wrapped compile: kernel, site, result ("served" / "compiled" / "uncached"), where, seconds
SINK = []  # (kind, entry) pairs for a listener (the kernel probe's CACHE_EVENTS): "aot-served", "aot-stored", ...

def _site(frame):
    code = frame.f_code
    path = code.co_filename.replace(os.sep, "/")
    qualname = getattr(code, "co_qualname", code.co_name)
    for (tail, where), _ in SITES.items():
        if path.endswith("/" + tail) and where in (qualname, code.co_name):
            return tail + ":" + where
    return None


def _record(event):
    if len(EVENTS) < MAX_EVENTS:
        EVENTS.append(event)
    kind = "aot-served" if event["result"] == "served" else "aot-stored" if event.get("stored") else \
        "aot-" + event["result"]
    for sink in SINK:
        sink.append((kind, str(event.get("entry", ""))[:16]))


PENDING_ENV = "DSV4_DOCTOR_AOT_PENDING"  # a folder of the smoke probe's: "<entry>.pending" while a prewarm makes it
PENDING_WAIT_S = 30.0  # the longest compile seen (the DSA backward, ~6 s) several times over


def pending_marker(name):
    folder = os.environ.get(PENDING_ENV)
    return os.path.join(folder, name + ".pending") if folder and os.path.isabs(folder) else None


def await_pending(name, limit_s=PENDING_WAIT_S):
    """Seconds waited when a prewarm process (dsv4probe_warm, started by the smoke probe) was making this entry, up
    to `limit_s` and only while that process lives; None when none was."""
    marker = pending_marker(name)
    if marker is None:
        return None
    from dsv4probe_common import read_bounded

    t0 = time.monotonic()
    seen = False
    while time.monotonic() - t0 < limit_s:
        try:
            pid = int(read_bounded(marker, 32)[0].strip() or 0)
        except (OSError, ValueError):
            break
        seen = True
        try:
            os.kill(pid, 0) if pid > 0 else None
        except OSError:
            break  # the prewarm process is gone: compile here
        time.sleep(0.05)
    return round(time.monotonic() - t0, 3) if seen else None


def _recipe(fn, args, options, arch, key, entry, event, state=None):
    """How to make this compile again without a GPU (dsv4probe_kernelrecipe), or None (said in the event). `state`:
    a kernel object's attributes before the compile (its __call__ may add layouts and copies a recipe cannot write
    down, and builds them again anyway)."""
    try:
        recipes = _recipes()
        recipe = recipes.record(fn, args, options, arch, entry, state)
        recipe["key"] = key
        recipe["compile_s"] = event.get("seconds")  # a prewarm hands out the longest compiles first,
        recipe["needed_at_s"] = round(time.monotonic() - LOADED_AT, 2)  # and makes each process's share in this order
        return recipe
    except Exception as exc:
        event["no_recipe"] = "%s: %s" % (type(exc).__name__, str(exc)[:160])
        return None


def _recipes():
    return load_module("dsv4probe_kernelrecipe", HERE)


class Served:
    """A kernel loaded from the store. A call that raises falls back to a real compile (then recorded)."""

    def __init__(self, loaded, compile_again, event, shape):
        self._loaded, self._compile_again, self._event, self._fallback = loaded, compile_again, event, None
        self._count, self._defaults = shape  # call_shape: what the site passes, what the DSL's wrapper adds

    def __call__(self, *args, **kwargs):
        if self._fallback is not None:
            return self._fallback(*args, **kwargs)
        if kwargs:
            self._event["call_error"] = "called with keyword arguments"
        elif len(args) != self._count:
            self._event["call_error"] = "called with %d arguments, stored for %d" % (len(args), self._count)
        else:
            try:
                return self._loaded(*args, *self._defaults)
            except Exception as exc:
                self._event["call_error"] = "%s: %s" % (type(exc).__name__, str(exc)[:200])
        self._event["result"] = "compiled after a call error"
        self._fallback = self._compile_again()
        return self._fallback(*args, **kwargs)


class StoreCompile:
    """In place of `cutlass.cute.compile`: the real one for every call, except at SITES, where a stored kernel is
    loaded instead (and a compiled one stored)."""

    def __init__(self, real, store, arch, options=None):
        self._real, self._store, self._arch, self._options = real, store, arch, options

    def __getitem__(self, options):
        return StoreCompile(self._real[options], self._store, self._arch,
                            options if isinstance(options, str) else Uncacheable)

    def __call__(self, fn, *args, **kwargs):
        site = _site(sys._getframe(1))
        if site is None:
            return self._real(fn, *args, **kwargs)
        name = str(getattr(fn, "__qualname__", None) or type(fn).__qualname__)[:120]
        event = {"kernel": name, "site": site}
        try:
            if self._options is Uncacheable:
                raise Uncacheable("options that are not a string")
            options = kwargs.get("options", self._options)
            if options is not None and not isinstance(options, str):
                raise Uncacheable("options that are not a string")
            rest = {k: v for k, v in kwargs.items() if k != "options"}
            if rest:
                raise Uncacheable("keyword arguments to cute.compile")
            shape = call_shape(fn, args)
            key = call_key(fn, args, rest, options, self._arch)
            # a kernel object as built, before compiling adds to it
            state = dict(vars(fn)) if _kernel_object(fn) and hasattr(fn, "__dict__") else None
        except Uncacheable as exc:
            event.update(result="uncached", why=str(exc))
            _record(event)
            return self._real(fn, *args, **kwargs)
        digest = hashlib.sha256(key.encode()).hexdigest()
        file_name, function_name = "aot-%s.o" % digest[:40], "dsv4_doctor_%s" % digest[:24]
        event["entry"] = file_name
        t0 = time.monotonic()
        loaded, where = self._store.load(file_name, function_name)
        if loaded is None:
            waited = await_pending(file_name)  # being compiled ahead from its recipe in another process
            if waited is not None:
                event["waited_for_prewarm_s"] = waited
                loaded, where = self._store.load(file_name, function_name)
        if loaded is not None:
            event.update(result="served", where=where, seconds=round(time.monotonic() - t0, 4))
            _record(event)

            def compile_again():
                return self._real(fn, *args, **kwargs)

            return Served(loaded, compile_again, event, shape)
        event["miss"] = where
        t0 = time.monotonic()
        compiled = self._real(fn, *args, **kwargs)
        event.update(result="compiled", seconds=round(time.monotonic() - t0, 4))
        t0 = time.monotonic()
        kind = type(compiled).__name__
        why = self._store.save(compiled, file_name, function_name, _recipe(fn, args, options, self._arch, key,
                                                                            file_name, event, state)) \
            if kind in STORED_TYPES else "a compiled %s is not stored" % kind
        event.update(stored=why is None, store_s=round(time.monotonic() - t0, 4))
        if why:
            event["not_stored"] = why
        _record(event)
        return compiled


def export_only_without_a_gpu():
    """For `warm`, which compiles with no GPU and only exports: 4.5.2's keyword-wrapped compiled function asserts that
    its module loaded into the process (cutlass_dsl/tvm_ffi_provider.py L600), which needs a CUDA driver, while
    export_to_c reads only the IR module. In that process the assertion is relaxed: such an object exports, and
    raises if called."""
    try:
        from cutlass.cutlass_dsl import tvm_ffi_provider
    except Exception:
        return
    cls = getattr(tvm_ffi_provider, "TVMFFIJitCompiledFunctionWithKwargs", None)
    if cls is None or getattr(cls, "_dsv4_doctor_export_only", False):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        try:
            original(self, *args, **kwargs)
        except AssertionError:
            if getattr(self, "_tvm_ffi_function", True) is not None:
                raise
            self._kwargs_wrapper = None

    cls.__init__ = __init__
    cls._dsv4_doctor_export_only = True


NOTE = []  # the store's note, once installed


def install(arch, environ=None, events=None):
    """Wrap `cutlass.cute.compile` in this process (now, or when `cutlass.cute` is first imported). `arch`: the GPU
    the kernels are compiled for ("sm_90"), part of every key; `events`: a list that also gets (kind, entry) for
    each wrapped compile. Returns the store's note ("" when it is usable)."""
    if events is not None and not any(s is events for s in SINK):
        SINK.append(events)
    if NOTE:
        return NOTE[0]
    store = Store(environ)
    NOTE.append(store.note if store.read else
                store.note or "no kernel store (--no-kernel-cache, or no directory from the doctor)")
    if not store.read:
        return NOTE[0]
    when_imported("cutlass.cute", lambda cute: _wrap(cute, store, arch))  # by whichever kernel imports it first
    return NOTE[0]


def arch_of(torch, device):
    """The key's arch: the one the DSL compiles for where the options name none: CUTE_DSL_ARCH when set (`dsv4-doctor
    warm --gpu-arch`), else the GPU's, as the DSL names it (base_dsl/env_manager.py detect_gpu_arch: "sm_90a")."""
    if os.environ.get("CUTE_DSL_ARCH"):
        return os.environ["CUTE_DSL_ARCH"]
    if device is not None and getattr(device, "type", None) == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return "sm_%d%d%s" % (major, minor, "a" if major >= 9 else "")
    return "none"


def _wrap(cute, store, arch):
    current = getattr(cute, "compile", None)
    if current is not None and not isinstance(current, StoreCompile):
        cute.compile = StoreCompile(current, store, arch)


def summary():
    """The evidence: each wrapped compile, and the counts."""
    counts = {}
    for e in EVENTS:
        counts[e["result"]] = counts.get(e["result"], 0) + 1
    return {"calls": list(EVENTS), "counts": counts, "note": NOTE[0] if NOTE else "not installed",
            "sites": len(SITES)}
