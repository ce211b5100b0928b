"""The key of one compile for the AOT kernel store (dsv4probe_kernelstore): the same text only for calls that compile
to the same code. It holds the DSL's version and its compiler library's identity, tvm-ffi's version, the compiled
function's module source hash and qualified name, the options and the arch, and every argument's type, dtype, shape,
stride, dynamic marking and static value. An argument it cannot describe exactly raises Uncacheable: the call is
compiled, not stored (a miss is safe, a wrong hit is not). `call_shape` says how a loaded kernel is called.

A part of the kernel store, loaded by path (dsv4probe_common.load_module). Standard library only.
"""

import hashlib
import inspect
import os
import sys

KEY_VERSION = 1  # bumped when call_key changes what it reads


class Uncacheable(Exception):
    """An argument (or option) the key cannot describe exactly: this call is compiled, not stored."""



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
