"""Kernel recipes: how to make one stored kernel's `cute.compile` call again without a GPU (`dsv4-doctor warm`).

When the AOT kernel store (dsv4probe_kernelstore) stores a kernel, it writes beside it what the call compiled: the
jit function (or kernel object) by its module, file and source hash, every argument in a form that can be built
again, the options and the arch. `replay` builds the call again on a machine without a GPU:
- a CuTe tensor from a DLPack producer that says "CUDA device 0" over a small host buffer nothing ever reads (the
  DSL compiles for the tensor's address space, gmem, and never touches its data at compile time), marked dynamic as
  the original was;
- a kernel object as its class with the recorded attributes; DSL numbers, plain values, a fake stream or a CUstream
  handle of 0 as recorded.

A recipe is data, never a choice of code (it may come from a store another user wrote, and `warm` runs as root):
- `check` validates all of it (every field's type, length, count and depth) before anything in it is imported,
  built or called;
- a type or number class comes from fixed allow-lists (DSL_NUMBERS, BUILTIN_TYPES, DATACLASSES) by exact qualified
  name: no prefix match, no attribute chain, no builtin function;
- the code comes from the hashed file (`locate`): a `.py` file under one of FOLDERS of the installed package, whose
  SHA-256 is the recipe's; its module name is derived from that path (or is the name the doctor's own layout probe
  loads that file by, BY_PATH), and the recipe must name exactly that one. Importing it runs that file and its
  parent packages only; the function or class must be defined at its top level, in that file;
- `check_key` compares the recorded key with everything the recipe says before anything is imported.
A replay is used only when the key the replayed call gives (dsv4probe_kernelstore.call_key) is the recorded one:
what `warm` stores is then exactly what a check on that GPU would look up.

Standard library only (the DSL and tvm_ffi are the stack's).
This module records a recipe; its parts, loaded by path: dsv4probe_kernelrecipe_rules (what a recipe may name, its
limits, its reads), _check (the schema and the key), _replay.
"""

import hashlib
import inspect
import os
import sys

from dsv4probe_common import load_module  # in sys.modules: the probe loaded it

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_kernelrecipe_rules", "dsv4probe_kernelrecipe_check", "dsv4probe_kernelrecipe_replay"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_kernelrecipe_check import check, check_arg, check_key, parse_key, type_name
from dsv4probe_kernelrecipe_replay import CudaShaped, Located, allowed_class, locate, replay_args, replay_callable
from dsv4probe_kernelrecipe_rules import (BUILTIN_TYPES, CUSTREAM_MODULE, DATACLASSES, DLPACK_TYPES, DSL_NUMBERS,
                                          MAX_DEPTH, MAX_KEY_CHARS, MAX_SOURCE_BYTES, MAX_VALUE_DEPTH, NotRecordable,
                                          RECIPE_VERSION, _IDENTIFIER, _check_file, _packages, decode_json,
                                          module_names, nesting_depth, read_regular)

# What the recipes' users (the kernel store, the warm and prewarm probes) read from them, the parts' included.
__all__ = ["BUILTIN_TYPES", "CudaShaped", "DATACLASSES", "DSL_NUMBERS", "Located", "MAX_DEPTH",
           "MAX_KEY_CHARS", "NotRecordable", "RECIPE_VERSION", "allowed_class", "check", "check_arg", "check_key",
           "decode_json", "locate", "module_names", "nesting_depth", "parse_key", "read_regular", "record",
           "record_arg", "replay_args", "replay_callable", "type_name"]


def _module_of(obj):
    """(module name, file tail from its top-level package, source sha256) of where `obj` is defined."""
    code = getattr(obj, "__code__", None)
    path = code.co_filename if code is not None else getattr(sys.modules.get(obj.__module__), "__file__", None)
    if not path:
        raise NotRecordable("no source file")
    parts = os.path.realpath(path).replace(os.sep, "/").split("/")
    packages = _packages()
    starts = [i for i, p in enumerate(parts) if p in packages]
    if not starts:
        raise NotRecordable("not in %s" % " or ".join(packages))
    file = "/".join(parts[starts[-1]:])
    _check_file(file)
    if obj.__module__ not in module_names(file):
        raise NotRecordable("module %s is not its file's name (%s)" % (obj.__module__, file))
    if path not in _DIGESTS:  # one module holds several kernels: read once
        data = read_regular(path, MAX_SOURCE_BYTES)
        if data is None:
            raise NotRecordable("its source file cannot be read")
        _DIGESTS[path] = hashlib.sha256(data).hexdigest()
    return {"module": obj.__module__, "file": file, "sha256": _DIGESTS[path]}


_DIGESTS = {}


def _value(value, depth=0):
    """A plain value, a tuple or list of them, or a DSL / builtin type, as data `_restore` turns back into it."""
    if depth > MAX_VALUE_DEPTH:
        raise NotRecordable("nested too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if type(value) in (tuple, list):
        return {"seq": type(value).__name__, "items": [_value(v, depth + 1) for v in value]}
    if isinstance(value, type):
        if value.__module__ + "." + value.__qualname__ not in DSL_NUMBERS and \
                value.__module__ + "." + value.__qualname__ not in BUILTIN_TYPES:
            raise NotRecordable("the type %s.%s" % (value.__module__, value.__qualname__))
        return {"type": value.__module__, "name": value.__qualname__}
    kind = type(value)
    if kind.__module__ + "." + kind.__qualname__ in DATACLASSES:
        import dataclasses  # a DSL helper such as pipeline.NamedBarrier: built again from its fields

        return {"dataclass": kind.__module__, "name": kind.__qualname__,
                "fields": {f.name: _value(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}}
    raise NotRecordable("a value of type %s" % kind.__qualname__)


def record_arg(arg):
    kind = type(arg)
    module = getattr(kind, "__module__", "") or ""
    if arg is None or isinstance(arg, (bool, int, float, str, tuple, list)) or isinstance(arg, type):
        return {"kind": "plain", "data": _value(arg)}
    if module.startswith("cutlass") and kind.__qualname__ == "_FakeStream":
        return {"kind": "fake-stream", "env": bool(getattr(arg, "use_tvm_ffi_env_stream", False))}
    if module == CUSTREAM_MODULE and kind.__qualname__ == "CUstream":
        return {"kind": "custream", "module": module}
    if module.startswith("cutlass") and kind.__qualname__ == "_Tensor":
        name = getattr(arg.element_type, "__name__", "")
        if name not in DLPACK_TYPES:
            raise NotRecordable("a tensor of %s" % name)
        return {"kind": "tensor", "dtype": name, "shape": [int(s) for s in arg.shape],
                "stride": [int(s) for s in arg.stride], "align": int(arg._assumed_align or 0),
                "tvm_ffi": hasattr(arg, "_tvm_ffi_tensor"), "leading_dim": _int_or_none(arg.leading_dim)}
    if module + "." + kind.__qualname__ in DSL_NUMBERS and isinstance(getattr(arg, "value", None), (bool, int, float)):
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
        if not _IDENTIFIER.match(target.__qualname__):
            raise NotRecordable("a function not defined at its module's top level")
        compiled = {"function": dict(_module_of(target), qualname=target.__qualname__)}
    else:
        cls = type(fn)
        if not _IDENTIFIER.match(cls.__qualname__):
            raise NotRecordable("a class not defined at its module's top level")
        state = {k: _value(v) for k, v in sorted((vars(fn) if state is None else state).items())}
        compiled = {"object": dict(_module_of(cls), qualname=cls.__qualname__, state=state)}
    recipe = dict(compiled, v=RECIPE_VERSION, args=[record_arg(a) for a in args], options=options, arch=arch,
                  entry=entry)
    check(dict(recipe, key="{}"))  # what `warm` would refuse is not written down
    return recipe
