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

Standard library only (the DSL, torch and tvm_ffi are the stack's, imported by the kernels themselves).
"""

import hashlib
import importlib.util
import inspect
import os
import sys
import time

AOT_ENV, AOT_IMAGE_ENV, AOT_WRITE_IMAGE_ENV = "DSV4_DOCTOR_AOT_CACHE", "DSV4_DOCTOR_AOT_IMAGE", "DSV4_DOCTOR_AOT_WARM"
KEY_VERSION = 1  # bumped when call_key changes what it reads
MAX_EVENTS = 200
LOADED_AT = time.monotonic()  # about when the probe process started: a recipe says when its kernel was needed
MAX_OBJECT_BYTES = 64 << 20

# (the calling module's path, from its package root; the calling function's qualified name): what the doctor read
# at that site. Listed in docs/smoke.md ("The AOT kernel store").
_FE = "cudnn/deepseek_sparse_attention/"
SITES = {
    ("megatron/core/transformer/experimental_attention_variant/csa_utils/cp_layout_kernels.py", "_run_compiled_launch"):
        "Megatron d48bd6be L630-644: called with the torch tensors, Int32 values and a CUstream, positionally",
    (_FE + "indexer_forward/_interface_sm90.py", "indexer_fwd"):
        "cuDNN frontend 1.27.0 L249-288: IndexerForwardSm90, called positionally (tensors, None, Int32, stream)",
    (_FE + "indexer_forward/_interface.py", "indexer_fwd"):
        "cuDNN frontend 1.27.0 L598-635: IndexerForwardSm100, called positionally",
    (_FE + "indexer_top_k/compactify.py", "_compile_or_fetch"):
        "cuDNN frontend 1.27.0 L131-171: CompactifyKernel, called positionally",
    (_FE + "score_recompute/_interface_sm90.py", "_sparse_score_recompute"):
        "cuDNN frontend 1.27.0 L203-225: called positionally (tensors, stream, None)",
    (_FE + "indexer_backward/indexer_backward_sm90.py", "_score_grad_inplace_cute"):
        "cuDNN frontend 1.27.0 L1503-1520: ScoreGradSm90, called positionally",
    (_FE + "indexer_backward/indexer_backward_sm90.py", "_ensure_compiled"):
        "cuDNN frontend 1.27.0 L1630-1672: called positionally",
    (_FE + "sparse_attention_backward/_interface_sm90.py", "flash_attn_bwd_sm90"):
        "cuDNN frontend 1.27.0 L198-345: pre, main and post kernels, each called positionally",
}
# What is stored: a plain compiled function, and the keyword-wrapped one 4.5.2 returns for a signature with defaults
# (cutlass_dsl/cutlass.py L666-671; 4.8 returns it always), whose wrapper `call_shape` stands in for when serving.
STORED_TYPES = ("TVMFFIJitCompiledFunction", "TVMFFIJitCompiledFunctionWithKwargs")

EVENTS = []  # one per wrapped compile: kernel, site, result ("served" / "compiled" / "uncached"), where, seconds
SINK = []  # (kind, entry) pairs for a listener (the kernel probe's CACHE_EVENTS): "aot-served", "aot-stored", ...


class Uncacheable(Exception):
    """An argument (or option) the key cannot describe exactly: this call is compiled, not stored."""


def _cachedir():
    """doctor/kernels/cachedir.py, the one module with the cache directories' rules, loaded by path (the probe
    directory's parent), under a name nothing else uses."""
    name = "dsv4_doctor_cachedir"
    if name in sys.modules:
        return sys.modules[name]
    from dsv4probe_common import LIB  # the doctor's probe folder (in sys.modules: the probe loaded it)

    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(LIB), "kernels/cachedir.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _fd_of(value):
    """N for "/proc/self/fd/N" (a directory the doctor opened and checked), else None."""
    prefix = "/proc/self/fd/"
    if value and value.startswith(prefix) and value[len(prefix):].isdigit():
        return int(value[len(prefix):])
    return None


class Store:
    """The directories this probe reads kernels from (image first) and the one it writes to."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.read = []  # (label, dir fd, root_only)
        self.write = None  # (label, dir fd, root_only)
        self.note = ""
        warm = environ.get(AOT_WRITE_IMAGE_ENV) == "1"
        image = _fd_of(environ.get(AOT_IMAGE_ENV))
        if image is not None and _is_dir(image):
            self.read.append(("image", image, True))
            if warm:
                self.write = ("image", image, True)
        user = environ.get(AOT_ENV)
        fd = _fd_of(user)
        if fd is None and user and os.path.isabs(user):
            try:  # a path (no descriptor was handed over): opened and checked here, by the same rules
                fd = _cachedir().open_verified(user).fd
            except Exception as exc:
                self.note = "per-user kernel store not used: %s" % exc
                fd = None
        if fd is not None and _is_dir(fd) and not warm:
            self.read.append(("user", fd, False))
            self.write = ("user", fd, False)

    def load(self, name, function_name):
        """(the loaded function, where) from the first store holding `name`, or (None, why not)."""
        rules = _cachedir()
        why = "not stored yet"
        for label, dir_fd, root_only in self.read:
            try:
                fd = rules.open_entry(dir_fd, name, label, root_only)
            except rules.Refused as exc:
                if "No such file" not in str(exc):
                    why = "%s store: %s" % (label, exc)
                continue
            try:
                if os.fstat(fd).st_size > MAX_OBJECT_BYTES:
                    why = "%s store: %s is too large" % (label, name)
                    continue
                from cutlass.cute.runtime import load_module

                module = load_module("/proc/self/fd/%d" % fd, enable_tvm_ffi=True)
                return getattr(module, function_name), label
            except Exception as exc:
                why = "%s store: loading %s failed: %s: %s" % (label, name, type(exc).__name__, str(exc)[:200])
            finally:
                os.close(fd)
        return None, why

    def has(self, name):
        """Whether a store this probe reads holds `name` as the rules accept it (the entry is not loaded)."""
        rules = _cachedir()
        for label, dir_fd, root_only in self.read:
            try:
                os.close(rules.open_entry(dir_fd, name, label, root_only))
                return True
            except rules.Refused:
                continue
        return False

    def save(self, compiled, name, function_name, recipe=None):
        """Export `compiled` into the writable store (a temporary name, then renamed: atomic for concurrent
        writers), with its recipe beside it (`dsv4-doctor warm`); None when stored, else why not."""
        if self.write is None:
            return "no writable kernel store"
        label, dir_fd, root_only = self.write
        tmp = ".tmp-%d-%s-%s" % (os.getpid(), os.urandom(4).hex(), name)
        if recipe is not None:
            self._write_recipe(recipe, name[:-2] + ".recipe.json", dir_fd, root_only)
        try:
            compiled.export_to_c("/proc/self/fd/%d/%s" % (dir_fd, tmp), function_name)
            os.chmod(tmp, 0o644 if root_only else 0o600, dir_fd=dir_fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return None
        except Exception as exc:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            return "%s store: %s: %s" % (label, type(exc).__name__, str(exc)[:200])


    @staticmethod
    def _write_recipe(recipe, name, dir_fd, root_only):
        import json

        tmp = ".tmp-%d-%s-%s" % (os.getpid(), os.urandom(4).hex(), name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                         0o644 if root_only else 0o600, dir_fd=dir_fd)
            with os.fdopen(fd, "w") as fh:
                json.dump(recipe, fh, sort_keys=True)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except Exception:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass


def _is_dir(fd):
    try:
        import stat

        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False


_SOURCE_HASHES = {}
SOURCE_LIMIT = 8 << 20  # a kernel's source module: the static probe's bound for a source
RECORD_LIMIT = 4 << 20  # a wheel's RECORD: the static probe's bound for METADATA


def _source_hash(path):
    if path not in _SOURCE_HASHES:
        from dsv4probe_common import read_bounded

        try:
            raw, size = read_bounded(path, SOURCE_LIMIT + 1)
        except OSError as exc:
            raise Uncacheable("its source %s cannot be read (%s)" % (path, exc.strerror or exc))
        if size > SOURCE_LIMIT or len(raw) > SOURCE_LIMIT:
            raise Uncacheable("its source %s is larger than %d bytes" % (path, SOURCE_LIMIT))
        _SOURCE_HASHES[path] = hashlib.sha256(raw).hexdigest()
    return _SOURCE_HASHES[path]


def _kernel_object(fn):
    """Whether `fn` is a kernel object (its class's __call__ is the jit function), not a function or bound method."""
    return not inspect.isfunction(inspect.unwrap(getattr(fn, "__func__", fn)))


def _class_call(obj):
    """The function behind a kernel object's call: its class's __call__, unwrapped."""
    call = type(obj).__dict__.get("__call__") or getattr(type(obj), "__call__", None)  # noqa: B004
    return inspect.unwrap(getattr(call, "__func__", call))


def _function_identity(fn):
    """(module source hash, qualified name) of the compiled function; a bound method's instance is an argument."""
    target = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(target, "__code__", None)
    if code is None:
        code = getattr(_class_call(target), "__code__", None)
        qualname = type(target).__module__ + "." + type(target).__qualname__
    else:
        qualname = getattr(target, "__module__", "?") + "." + getattr(target, "__qualname__", code.co_name)
    if code is None or not os.path.isabs(code.co_filename):
        raise Uncacheable("the compiled function has no source file")
    return [_source_hash(code.co_filename), qualname]


_SIMPLE = (bool, int, float, str, type(None))


def describe(value, depth=0, static=True):
    """What of `value` decides the compiled code, as JSON-able data; Uncacheable for what it cannot describe.
    `static` False: the value is passed to a runtime (non-Constexpr) parameter, so a DSL number's value is not
    compiled in (its type is)."""
    if depth > 6:
        raise Uncacheable("an argument nested too deep")
    kind = type(value)
    if isinstance(value, _SIMPLE):
        return [kind.__name__, value if not isinstance(value, float) else repr(value)]
    if kind in (tuple, list):
        return [kind.__name__, [describe(v, depth + 1) for v in value]]
    module = getattr(kind, "__module__", "") or ""
    name = module + "." + kind.__qualname__
    if isinstance(value, type):
        return ["type", value.__module__ + "." + value.__qualname__]
    if module.startswith("torch") and hasattr(value, "data_ptr") and hasattr(value, "stride"):
        return ["torch.Tensor", str(value.dtype), list(value.shape), list(value.stride()), value.device.type,
                value.data_ptr() % 256]
    if module.startswith("torch") and "Stream" in kind.__qualname__:
        return ["stream", name]
    if module.startswith("cuda") and "CUstream" in kind.__qualname__:
        return ["stream", name]
    if module.startswith("cutlass") and kind.__qualname__ == "_FakeStream":
        return ["fake-stream", bool(getattr(value, "use_tvm_ffi_env_stream", False))]
    key = getattr(value, "__cache_key__", None) if module.startswith("cutlass") else None
    if key is not None:  # the DSL's own JIT-cache key of a runtime or fake tensor: dtype, align, shape, stride, marks
        text = repr(key)
        if " at 0x" in text:
            raise Uncacheable("argument %s has no stable description" % name)
        return ["cute", name, text, _masks(value)]
    if module.startswith("cutlass") and hasattr(value, "value") and isinstance(value.value, _SIMPLE):
        return ["numeric", name, repr(value.value) if static else "runtime"]
    raise Uncacheable("argument of type %s" % name)


def _masks(tensor):
    out = []
    for attr in ("dynamic_shapes_mask", "dynamic_strides_mask", "leading_dim", "memspace"):
        try:
            out.append(str(getattr(tensor, attr)))
        except Exception:
            out.append(None)
    return out


_STACK = None


def _stack_identity():
    global _STACK
    if _STACK is None:
        import cutlass

        ident = {"dsl": getattr(cutlass, "__version__", None), "python": list(sys.version_info[:2])}
        libs = os.path.join(os.path.dirname(cutlass.__file__), "_mlir", "_mlir_libs")
        try:
            for entry in sorted(os.scandir(libs), key=lambda e: e.name):
                if entry.name.startswith("_cutlass_ir") and entry.name.endswith(".so"):
                    ident["compiler_library"] = _library_identity(entry.path, entry.stat())
        except OSError:
            pass
        if "compiler_library" not in ident:
            raise Uncacheable("the DSL's compiler library was not found")
        try:
            import tvm_ffi

            ident["tvm_ffi"] = getattr(tvm_ffi, "__version__", None)
        except Exception as exc:
            raise Uncacheable("tvm_ffi does not import (%s)" % type(exc).__name__)
        _STACK = ident
    return _STACK


def _library_identity(path, st):
    """The compiler library's digest as its wheel's RECORD states it (baked at build time: the same in every
    installation of that wheel), when the installed file has the size RECORD gives; else its size and mtime. Never
    a hash of the 144 MB file itself."""
    parts = os.path.realpath(path).split(os.sep)
    for up in range(2, min(len(parts), 8)):
        site = os.sep.join(parts[:-up])
        rel = "/".join(parts[-up:])
        try:
            infos = [e.path for e in os.scandir(site) if e.name.endswith(".dist-info") and "cutlass" in e.name]
        except OSError:
            continue
        from dsv4probe_common import read_bounded

        for info in infos:
            try:
                raw, _ = read_bounded(os.path.join(info, "RECORD"), RECORD_LIMIT)
            except OSError:
                continue
            for line in raw.decode("utf-8", "replace").splitlines():
                if line.startswith(rel + ","):
                    _, digest, size = line.rsplit(",", 2) if line.count(",") >= 2 else ("", "", "")
                    if size.isdigit() and int(size) == st.st_size and digest.startswith("sha256="):
                        return [os.path.basename(path), digest, st.st_size]
    return [os.path.basename(path), st.st_size, st.st_mtime_ns]


def dsl_settings():
    """The DSL's settings from this process's environment that a key holds: CUTE_DSL_ARCH is the arch (call_key's
    own field); the cache and dump folders do not change the code."""
    return sorted((k, v) for k, v in os.environ.items() if k.startswith("CUTE_DSL_")
                  and k not in ("CUTE_DSL_CACHE_DIR", "CUTE_DSL_DUMP_DIR", "CUTE_DSL_ARCH"))


def call_key(fn, args, kwargs, options, arch):
    """The key of one compile: the same text only for calls that compile to the same code."""
    import json

    settings = dsl_settings()
    extra = {k: describe(v) for k, v in sorted(kwargs.items())}
    runtime = _runtime_positions(fn, len(args))
    key = {"v": KEY_VERSION, "stack": _stack_identity(), "function": _function_identity(fn),
           "options": options, "arch": arch, "settings": settings, "kwargs": extra,
           "args": [describe(a, static=i not in runtime) for i, a in enumerate(args)]}
    if inspect.ismethod(fn):
        key["self"] = _instance(fn.__self__)
    elif _kernel_object(fn):
        key["self"] = _instance(fn)
    return json.dumps(key, sort_keys=True)


def _parameters(fn):
    """The jit function's parameters, the kernel object's or bound method's `self` left out; None where the
    signature cannot be read."""
    target = _class_call(fn) if _kernel_object(fn) else inspect.unwrap(getattr(fn, "__func__", fn))
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if inspect.ismethod(fn) or _kernel_object(fn):
        params = params[1:]  # self
    return params


def _runtime_positions(fn, count):
    """The positions of the arguments that go to a parameter annotated as anything but `Constexpr` (a runtime value:
    the DSL passes it at each call). Every other one, and all of them where the signature cannot be read, counts as
    compiled in."""
    out = set()
    for i, param in enumerate((_parameters(fn) or [])[:count]):
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            break
        note = param.annotation
        text = note if isinstance(note, str) else getattr(note, "__qualname__", None) or repr(note)
        if note is not param.empty and "Constexpr" not in str(text):
            out.add(i)
    return out


def _is_constexpr(annotation):
    """The DSL's own rule (base_dsl/runtime/jit_arg_adapters.py is_arg_annotation_constexpr): such a parameter is
    compiled in and never passed at a call."""
    import typing

    from cutlass import Constexpr

    return (isinstance(annotation, type) and issubclass(annotation, Constexpr)) or \
        typing.get_origin(annotation) is Constexpr


def call_shape(fn, args):
    """(the number of arguments the site passes at each call, the values the DSL's keyword wrapper adds after them)
    for a compile given `args` positionally: a loaded kernel, which has no wrapper, is called with exactly these.

    The DSL wraps a compiled function whose signature has defaults (TVMFFIJitCompiledFunctionWithKwargs; 4.8 wraps
    every one): a call's positional arguments fill the non-Constexpr parameters in order and the wrapper adds the
    defaults of the rest (tvm_ffi/utils/kwargs_wrapper.py). Only None and bool defaults are taken (the wrapper embeds
    those as they are); keyword-only or variadic parameters, another default, or an env stream: Uncacheable."""
    params = _parameters(fn)
    if params is None:
        raise Uncacheable("the compiled function's signature cannot be read")
    if len(args) > len(params):
        raise Uncacheable("more arguments than parameters")
    passed, tail = params[:len(args)], params[len(args):]
    for param in params:
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            raise Uncacheable("a keyword-only or variadic parameter (%s)" % param.name)
    for arg in args:
        if type(arg).__qualname__ == "_FakeStream" and getattr(arg, "use_tvm_ffi_env_stream", False):
            raise Uncacheable("an env stream argument (the wrapper leaves it out)")
    count = sum(1 for p in passed if not _is_constexpr(p.annotation))
    defaults = []
    for param in tail:
        if _is_constexpr(param.annotation):
            continue
        if param.default is not None and type(param.default) is not bool:
            raise Uncacheable("parameter %s left to its default %s" % (param.name, type(param.default).__name__))
        defaults.append(param.default)
    return count, tuple(defaults)


def _instance(obj):
    """A kernel object's configuration: its type and its simple attributes (anything else: uncached)."""
    state = getattr(obj, "__dict__", None)
    if state is None:
        raise Uncacheable("a compiled method of %s without attributes" % type(obj).__qualname__)
    return [type(obj).__module__ + "." + type(obj).__qualname__, {k: _attribute(v) for k, v in sorted(state.items())}]


def _attribute(value):
    """describe(), and a frozen dataclass of the DSL by its fields (e.g. cutlass.pipeline.NamedBarrier: a barrier id
    and a thread count). Only as a kernel object's attribute: a dataclass argument is flattened at each call."""
    params = getattr(type(value), "__dataclass_params__", None)
    module = getattr(type(value), "__module__", "") or ""
    if params is not None and getattr(params, "frozen", False) and module.startswith("cutlass"):
        import dataclasses

        return ["dataclass", module + "." + type(value).__qualname__,
                [[f.name, describe(getattr(value, f.name))] for f in dataclasses.fields(value)]]
    return describe(value)


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
    from dsv4probe_common import load_module

    return load_module("dsv4probe_kernelrecipe", os.path.dirname(os.path.realpath(__file__)))


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
    cute = sys.modules.get("cutlass.cute")
    if cute is not None:
        _wrap(cute, store, arch)
    else:
        sys.meta_path.insert(0, _Watch(store, arch))
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


class _Watch:
    """Wraps `cutlass.cute.compile` as soon as `cutlass.cute` is imported (by whichever kernel needs it)."""

    TARGET = "cutlass.cute"

    def __init__(self, store, arch):
        self.store, self.arch = store, arch

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            try:
                _wrap(module, self.store, self.arch)
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec


def summary():
    """The evidence: each wrapped compile, and the counts."""
    counts = {}
    for e in EVENTS:
        counts[e["result"]] = counts.get(e["result"], 0) + 1
    return {"calls": list(EVENTS), "counts": counts, "note": NOTE[0] if NOTE else "not installed",
            "sites": len(SITES)}
