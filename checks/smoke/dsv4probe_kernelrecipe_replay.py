"""Kernel recipes replayed (dsv4probe_kernelrecipe): only a checked recipe, only allow-listed classes, only the
hashed file. The code comes from the installed file whose SHA-256 is the recipe's (`locate`); a CuTe tensor from a
DLPack producer that says "CUDA device 0" over a small host buffer nothing ever reads (`CudaShaped`).

A part of the kernel recipes (dsv4probe_kernelrecipe), loaded by path (dsv4probe_common.load_module). Standard
library only (the DSL and tvm_ffi are the stack's).
"""

import ctypes
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys

from dsv4probe_common import load_module, run_spec  # in sys.modules: the probe loaded it

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_kernelrecipe_rules", "dsv4probe_kernelrecipe_check"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_kernelrecipe_rules import (BUILTIN_TYPES, DATACLASSES, DLPACK_TYPES, DSL_NUMBERS, MAX_ELEMENTS,
                                          MAX_SOURCE_BYTES, NotRecordable, _check_file, module_names, read_regular)
from dsv4probe_kernelrecipe_check import (_check_tensor, _check_value, _check_where, _qualified, check, type_name)


class Located:
    """A recipe's source: its file from the package root, the installed path, the module name it is loaded as, and
    whether it is loaded by path alone (BY_PATH) rather than as a submodule of its packages."""

    def __init__(self, file, path, module, by_path):
        self.file, self.path, self.module, self.by_path = file, path, module, by_path


def locate(where):
    """The installed file a checked recipe's function or object names, when its SHA-256 is the recipe's. Nothing is
    imported: the package's folder is found (importlib.util.find_spec of a top-level name runs no code of it) and
    the file read."""
    file = where["file"]
    _check_file(file)
    names = module_names(file)
    if not isinstance(where["module"], str) or where["module"] not in names:
        raise NotRecordable("the recipe names the module %s, which is not its file's (%s)" % (where["module"], file))
    tail = file.split("/")
    spec = importlib.util.find_spec(tail[0])
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((os.path.join(r, *tail[1:]) for r in roots if os.path.isfile(os.path.join(r, *tail[1:]))), None)
    if path is None:
        raise NotRecordable("%s is not installed here" % file)
    data = read_regular(path, MAX_SOURCE_BYTES)
    if data is None:
        raise NotRecordable("the installed %s cannot be read (not a regular file, or larger than %d bytes)" % (
            file, MAX_SOURCE_BYTES))
    if hashlib.sha256(data).hexdigest() != where["sha256"]:
        raise NotRecordable("the installed %s is not the recipe's (another source)" % file)
    return Located(file, path, where["module"], names[where["module"]])


def _same_file(module, path):
    return os.path.realpath(getattr(module, "__file__", None) or "") == os.path.realpath(path)


def _import(located):
    """The module of the located file: by path under its BY_PATH name (only that file runs), or as the submodule its
    path names (its parent packages, the job's own, then that file). Never a module found by another file."""
    name, path = located.module, located.path
    loaded = sys.modules.get(name)
    if loaded is None and not located.by_path:
        importlib.import_module(name.rpartition(".")[0])  # the parent packages: the job imports them too
        loaded = sys.modules.get(name)  # a parent may import it
    if loaded is not None:
        if _same_file(loaded, path):
            return loaded
        raise NotRecordable("%s is already loaded from another file" % name)
    if located.by_path:
        spec = importlib.util.spec_from_file_location(name, path)
    else:
        spec = importlib.util.find_spec(name)  # found, not run
    if spec is None or spec.loader is None or not spec.origin or \
            os.path.realpath(spec.origin) != os.path.realpath(path):
        raise NotRecordable("%s is not found as %s" % (name, located.file))
    return run_spec(name, spec)


def replay_callable(recipe, located=None):
    """The jit function or kernel object the recipe compiled: the checked recipe's top-level name in its hashed file
    (`locate`), defined there. A kernel object is made without running its __init__, its attributes set from the
    recorded values."""
    check(recipe)
    where, is_object = _check_where(recipe)
    located = locate(where) if located is None else located
    module = _import(located)
    qualname = where["qualname"]
    found = vars(module).get(qualname)  # the module's own top-level name: no attribute walk, no __getattr__
    if not is_object:
        target = inspect.unwrap(getattr(found, "__func__", found)) if found is not None else None
        code = getattr(target, "__code__", None)
        if not inspect.isfunction(target) or target.__qualname__ != qualname or target.__module__ != module.__name__ \
                or code is None or os.path.realpath(code.co_filename) != os.path.realpath(located.path):
            raise NotRecordable("%s is not a function defined in %s" % (qualname, located.file))
        return found
    if not isinstance(found, type) or found.__qualname__ != qualname or found.__module__ != module.__name__:
        raise NotRecordable("%s is not a class defined in %s" % (qualname, located.file))
    obj = found.__new__(found)
    obj.__dict__.update({k: _restore(v) for k, v in where["state"].items()})
    return obj


def allowed_class(name):
    """The class an allow-listed qualified name is: its module imported by the allow-list's own name, the class taken
    from that module's namespace, and checked to be defined there under that name."""
    if name in BUILTIN_TYPES:
        return BUILTIN_TYPES[name]
    if name not in DSL_NUMBERS and name not in DATACLASSES:
        raise NotRecordable("a type outside the allow-list")
    module_name, _, short = name.rpartition(".")
    cls = vars(importlib.import_module(module_name)).get(short)
    if not isinstance(cls, type) or cls.__module__ != module_name or cls.__qualname__ != short:
        raise NotRecordable("%s is not a class of this DSL" % name)
    return cls


def _restore(data, depth=0):
    _check_value(data, depth, [0])
    if "value" in data:
        return data["value"]
    if "seq" in data:
        items = [_restore(v, depth + 1) for v in data["items"]]
        return tuple(items) if data["seq"] == "tuple" else items
    if "type" in data:
        return allowed_class(type_name(data))
    cls = allowed_class(_qualified(data["dataclass"], data["name"]))
    if not getattr(getattr(cls, "__dataclass_params__", None), "frozen", False):
        raise NotRecordable("not a frozen dataclass")
    return cls(**{k: _restore(v, depth + 1) for k, v in data["fields"].items()})


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

    _check_tensor(data)
    shape, stride = list(data["shape"]), list(data["stride"])

    def make():
        return from_dlpack(CudaShaped(data["dtype"], shape, stride), assumed_align=data["align"] or None,
                           enable_tvm_ffi=data["tvm_ffi"])

    lead = data["leading_dim"]
    dims = ([lead] if lead is not None else []) + list(range(len(shape)))
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
    """The arguments of a checked recipe again: for a tensor, the first way of building it whose description
    (`describe`) is the one recorded in `want` (the call's key, decoded); a number as its allow-listed DSL class."""
    check(recipe)
    out = []
    for i, data in enumerate(recipe["args"]):
        kind = data["kind"]
        if kind == "plain":
            out.append(_restore(data["data"]))
        elif kind == "fake-stream":
            from cutlass.cute.runtime import make_fake_stream

            out.append(make_fake_stream(use_tvm_ffi_env_stream=data["env"]))
        elif kind == "custream":
            from cuda.bindings import driver

            out.append(driver.CUstream(0))
        elif kind == "number":
            out.append(allowed_class(_qualified(data["type"], data["name"]))(data["value"]))
        else:
            wanted = want[i] if i < len(want) else None
            found = next((t for t in _tensor_candidates(data) if describe(t) == wanted), None)
            if found is None:
                raise NotRecordable("argument %d: no way of building it gives the recorded tensor" % i)
            out.append(found)
    return out
