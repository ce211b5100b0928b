"""Kernel recipes: how to make one stored kernel's `cute.compile` call again without a GPU (`dsv4-doctor warm`).

When the AOT kernel store (dsv4probe_kernelstore) stores a kernel, it writes beside it what the call compiled: the
jit function (or kernel object) by its module, file and source hash, every argument in a form that can be built
again, the options and the arch. `replay` builds the call again on a machine without a GPU:
- a CuTe tensor from a DLPack producer that says "CUDA device 0" over a small host buffer nothing ever reads (the
  DSL compiles for the tensor's address space, gmem, and never touches its data at compile time), marked dynamic as
  the original was;
- a kernel object as its class with the recorded attributes; DSL numbers, plain values, a fake stream or a CUstream
  handle of 0 as recorded.
A replay is used only when its key (dsv4probe_kernelstore.call_key) is the recorded one: what `warm` stores is then
exactly what a check on that GPU would look up. Only modules of the installed `megatron` and `cudnn` packages are
loaded, and only when their source hash is the recipe's.

Standard library only (the DSL and tvm_ffi are the stack's).
"""

import ctypes
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys

RECIPE_VERSION = 1
PACKAGES = ("megatron", "cudnn")  # the only installed packages a recipe may name
# The DSL's element types as DLPack (code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6.
DLPACK_TYPES = {"Int8": (0, 8), "Int16": (0, 16), "Int32": (0, 32), "Int64": (0, 64), "Uint8": (1, 8),
                "Uint16": (1, 16), "Uint32": (1, 32), "Uint64": (1, 64), "Float16": (2, 16), "Float32": (2, 32),
                "Float64": (2, 64), "BFloat16": (4, 16), "Boolean": (6, 8)}
MAX_ELEMENTS = 1 << 40


class NotRecordable(Exception):
    """This call cannot be written down as a recipe (it is stored, just never warmed)."""


def _module_of(obj):
    """(module name, file tail from its top-level package, source sha256) of where `obj` is defined."""
    code = getattr(obj, "__code__", None)
    path = code.co_filename if code is not None else getattr(sys.modules.get(obj.__module__), "__file__", None)
    if not path:
        raise NotRecordable("no source file")
    parts = os.path.realpath(path).replace(os.sep, "/").split("/")
    starts = [i for i, p in enumerate(parts) if p in PACKAGES]
    if not starts:
        raise NotRecordable("not in %s" % " or ".join(PACKAGES))
    if path not in _DIGESTS:  # one module holds several kernels: read once
        with open(path, "rb") as fh:
            _DIGESTS[path] = hashlib.sha256(fh.read()).hexdigest()
    return {"module": obj.__module__, "file": "/".join(parts[starts[-1]:]), "sha256": _DIGESTS[path]}


_DIGESTS = {}


def _value(value, depth=0):
    """A plain value, a tuple or list of them, or a DSL / torch type, as data `_restore` turns back into it."""
    if depth > 6:
        raise NotRecordable("nested too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if type(value) in (tuple, list):
        return {"seq": type(value).__name__, "items": [_value(v, depth + 1) for v in value]}
    if isinstance(value, type) and value.__module__.split(".")[0] in ("cutlass", "builtins"):
        return {"type": value.__module__, "name": value.__qualname__}
    kind = type(value)
    params = getattr(kind, "__dataclass_params__", None)
    if params is not None and getattr(params, "frozen", False) and kind.__module__.split(".")[0] == "cutlass":
        import dataclasses  # a DSL helper such as pipeline.NamedBarrier: built again from its fields

        return {"dataclass": kind.__module__, "name": kind.__qualname__,
                "fields": {f.name: _value(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}}
    raise NotRecordable("a value of type %s" % kind.__qualname__)


def _restore(data, depth=0):
    if depth > 6 or not isinstance(data, dict):
        raise NotRecordable("a malformed value")
    if "value" in data:
        value = data["value"]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise NotRecordable("a malformed value")
    if "seq" in data:
        items = [_restore(v, depth + 1) for v in data.get("items") or []]
        return tuple(items) if data["seq"] == "tuple" else items
    if "type" in data:
        module = str(data["type"])
        if module.split(".")[0] not in ("cutlass", "builtins"):
            raise NotRecordable("a type outside the DSL")
        obj = importlib.import_module(module)
        for part in str(data.get("name", "")).split("."):
            obj = getattr(obj, part)
        return obj
    if "dataclass" in data:
        module = str(data["dataclass"])
        if module.split(".")[0] != "cutlass":
            raise NotRecordable("a dataclass outside the DSL")
        cls = _attr(importlib.import_module(module), data.get("name"))
        if not isinstance(cls, type) or not getattr(getattr(cls, "__dataclass_params__", None), "frozen", False):
            raise NotRecordable("not a frozen dataclass")
        fields = data.get("fields") if isinstance(data.get("fields"), dict) else {}
        return cls(**{str(k): _restore(v, depth + 1) for k, v in fields.items()})
    raise NotRecordable("a malformed value")


def record_arg(arg):
    kind = type(arg)
    module = getattr(kind, "__module__", "") or ""
    if arg is None or isinstance(arg, (bool, int, float, str, tuple, list)) or isinstance(arg, type):
        return {"kind": "plain", "data": _value(arg)}
    if module.startswith("cutlass") and kind.__qualname__ == "_FakeStream":
        return {"kind": "fake-stream", "env": bool(getattr(arg, "use_tvm_ffi_env_stream", False))}
    if module.startswith("cuda") and kind.__qualname__ == "CUstream":
        return {"kind": "custream", "module": module}
    if module.startswith("cutlass") and kind.__qualname__ == "_Tensor":
        name = getattr(arg.element_type, "__name__", "")
        if name not in DLPACK_TYPES:
            raise NotRecordable("a tensor of %s" % name)
        return {"kind": "tensor", "dtype": name, "shape": [int(s) for s in arg.shape],
                "stride": [int(s) for s in arg.stride], "align": int(arg._assumed_align or 0),
                "tvm_ffi": hasattr(arg, "_tvm_ffi_tensor"), "leading_dim": _int_or_none(arg.leading_dim)}
    if module.startswith("cutlass") and hasattr(arg, "value") and isinstance(arg.value, (bool, int, float)):
        return {"kind": "number", "type": module, "name": kind.__qualname__, "value": arg.value}
    raise NotRecordable("an argument of type %s.%s" % (module, kind.__qualname__))


def _int_or_none(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record(fn, args, options, arch, entry, state=None):
    """The recipe of one compile, or NotRecordable. `state`: a kernel object's attributes as it was built (before
    the compile added to them); its attributes now where not given."""
    target = inspect.unwrap(getattr(fn, "__func__", fn))
    if inspect.ismethod(fn):
        raise NotRecordable("a bound method")
    if inspect.isfunction(target):
        compiled = {"function": dict(_module_of(target), qualname=target.__qualname__)}
    else:
        cls = type(fn)
        state = {k: _value(v) for k, v in sorted((vars(fn) if state is None else state).items())}
        compiled = {"object": dict(_module_of(cls), qualname=cls.__qualname__, state=state)}
    return dict(compiled, v=RECIPE_VERSION, args=[record_arg(a) for a in args], options=options, arch=arch,
                entry=entry)


def _load(where):
    """The installed module a recipe names, only if its file is under an installed PACKAGES package and has the
    recipe's source hash."""
    tail = str(where.get("file") or "").split("/")
    if not tail or tail[0] not in PACKAGES or any(p in ("", ".", "..") for p in tail):
        raise NotRecordable("a module outside %s" % " or ".join(PACKAGES))
    spec = importlib.util.find_spec(tail[0])
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((os.path.join(r, *tail[1:]) for r in roots if os.path.isfile(os.path.join(r, *tail[1:]))), None)
    if path is None:
        raise NotRecordable("%s is not installed here" % "/".join(tail))
    with open(path, "rb") as fh:
        if hashlib.sha256(fh.read()).hexdigest() != where.get("sha256"):
            raise NotRecordable("the installed %s is not the recipe's (another source)" % "/".join(tail))
    name = str(where.get("module") or "")
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.realpath(getattr(loaded, "__file__", "") or "") == os.path.realpath(path):
        return loaded
    if name.split(".")[0] in PACKAGES:  # imported by its name only within those packages
        try:
            module = importlib.import_module(name)
            if os.path.realpath(getattr(module, "__file__", "") or "") == os.path.realpath(path):
                return module
        except Exception:
            pass
    spec = importlib.util.spec_from_file_location(name, path)  # loaded by path, as the layout probe loads it
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _attr(module, qualname):
    obj = module
    for part in str(qualname).split("."):
        if part == "<locals>":
            raise NotRecordable("a function defined inside another")
        obj = getattr(obj, part)
    return obj


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_KEEP = []  # every producer stays alive for the process: the DSL may read its shape and strides at any time


@_DELETER
def _keep(_):
    pass


class CudaShaped:
    """A DLPack producer that says "CUDA device 0", over a 256-byte-aligned host buffer that is never read."""

    def __init__(self, dtype, shape, stride):
        code, bits = DLPACK_TYPES[dtype]
        if len(shape) != len(stride) or not 0 < len(shape) <= 8 or any(not 0 <= s <= MAX_ELEMENTS for s in shape):
            raise NotRecordable("a malformed tensor")
        self._buf = ctypes.create_string_buffer(512)
        addr = ctypes.addressof(self._buf)
        addr += (-addr) % 256
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._stride = (ctypes.c_int64 * len(stride))(*stride)
        self._managed = _Managed(_DLTensor(addr, _Device(2, 0), len(shape), _DType(code, bits, 1), self._shape,
                                           self._stride, 0), None, _keep)
        _KEEP.append(self)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, **_):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)


def _tensor_candidates(data):
    """The tensor as recorded, built the ways a site builds one (static, or marked dynamic at its leading dim)."""
    from cutlass.cute.runtime import from_dlpack

    shape, stride = [int(s) for s in data.get("shape") or []], [int(s) for s in data.get("stride") or []]

    def make():
        return from_dlpack(CudaShaped(str(data.get("dtype")), shape, stride), assumed_align=int(data.get("align") or 0)
                           or None, enable_tvm_ffi=bool(data.get("tvm_ffi")))

    lead = data.get("leading_dim")
    dims = ([lead] if isinstance(lead, int) and 0 <= lead < len(shape) else []) + list(range(len(shape)))
    ways = [make]
    ways += [lambda d=dim: make().mark_layout_dynamic(leading_dim=d) for dim in dims]  # the recorded dim first
    ways += [lambda d=dim: make().mark_compact_shape_dynamic(mode=d) for dim in dims]
    for way in ways:
        try:  # a DSL refuses a way that does not fit the tensor (4.8: a leading dim whose stride is not 1)
            yield way()
        except NotRecordable:
            raise
        except Exception:
            continue


def replay_args(recipe, describe, want):
    """The arguments again: for a tensor, the first way of building it whose description (`describe`) is the one
    recorded in `want` (the call's key, decoded)."""
    out = []
    for i, data in enumerate(recipe.get("args") or []):
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind == "plain":
            out.append(_restore(data.get("data")))
        elif kind == "fake-stream":
            from cutlass.cute.runtime import make_fake_stream

            out.append(make_fake_stream(use_tvm_ffi_env_stream=bool(data.get("env"))))
        elif kind == "custream":
            from cuda.bindings import driver

            out.append(driver.CUstream(0))
        elif kind == "number":
            if not str(data.get("type", "")).startswith("cutlass"):
                raise NotRecordable("a number type outside the DSL")
            cls = _attr(importlib.import_module(str(data["type"])), data.get("name"))
            out.append(cls(data.get("value")))
        elif kind == "tensor":
            wanted = want[i] if i < len(want) else None
            found = next((t for t in _tensor_candidates(data) if describe(t) == wanted), None)
            if found is None:
                raise NotRecordable("argument %d: no way of building it gives the recorded tensor" % i)
            out.append(found)
        else:
            raise NotRecordable("argument %d: unknown kind %r" % (i, kind))
    return out


def replay_callable(recipe):
    """The jit function or kernel object the recipe compiled."""
    if "function" in recipe:
        where = recipe["function"]
        return _attr(_load(where), where.get("qualname"))
    where = recipe.get("object")
    if not isinstance(where, dict):
        raise NotRecordable("no function or object")
    cls = _attr(_load(where), where.get("qualname"))
    if not isinstance(cls, type):
        raise NotRecordable("not a class")
    obj = cls.__new__(cls)
    obj.__dict__.update({str(k): _restore(v) for k, v in (where.get("state") or {}).items()})
    return obj
