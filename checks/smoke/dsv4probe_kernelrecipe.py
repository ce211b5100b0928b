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
"""

import ctypes
import hashlib
import importlib
import importlib.util
import inspect
import math
import os
import re
import sys

RECIPE_VERSION = 1
# The only folders (from a package root) whose files a recipe may name: where the store's call sites compile their
# kernels (dsv4probe_kernelstore.SITES).
FOLDERS = ("megatron/core/transformer/experimental_attention_variant/", "cudnn/deepseek_sparse_attention/")
# A file the doctor's own layout probe (dsv4probe_kernels_layout) loads by path, under its own name, so its kernels
# are recorded under that name: the one other module name such a file may have.
_CP_LAYOUT = "dsv4doctor_cp_layout_kernels"
BY_PATH = {"megatron/core/transformer/experimental_attention_variant/csa_utils/cp_layout_kernels.py": _CP_LAYOUT,
           "megatron/core/transformer/experimental_attention_variant/csa_cp_layout_kernels.py": _CP_LAYOUT}
# The DSL's number classes (nvidia-cutlass-dsl 4.5.2 base_dsl/typing.py, the concrete Numeric subclasses), by the
# qualified name a recipe writes: a "number" argument, or a type among the plain values (`dtype = cutlass.BFloat16`).
_TYPING = "cutlass.base_dsl.typing"
DSL_NUMBERS = frozenset(_TYPING + "." + name for name in (
    "Boolean", "Int4", "Int8", "Int16", "Int32", "Int64", "Int128", "Uint8", "Uint16", "Uint32", "Uint64", "Uint128",
    "Float16", "BFloat16", "TFloat32", "Float32", "Float64", "Float8E5M2", "Float8E4M3", "Float8E4M3FN",
    "Float8E4M3B11FNUZ", "Float8E8M0FNU", "Float4E2M1FN", "Float6E2M3FN", "Float6E3M2FN"))
BUILTIN_TYPES = {"builtins.int": int, "builtins.float": float, "builtins.bool": bool, "builtins.str": str}
# Frozen dataclasses of the DSL a kernel object holds (the frontend's `pipeline.NamedBarrier`), with their fields.
DATACLASSES = {"cutlass.pipeline.helpers.NamedBarrier": ("barrier_id", "num_threads")}
CUSTREAM_MODULE = "cuda.bindings.driver"
# The DLPack (code, bits) of the DSL's element types a tensor may have: kDLInt 0, kDLUInt 1, kDLFloat 2,
# kDLBfloat 4, kDLBool 6.
DLPACK_TYPES = {"Int8": (0, 8), "Int16": (0, 16), "Int32": (0, 32), "Int64": (0, 64), "Uint8": (1, 8),
                "Uint16": (1, 16), "Uint32": (1, 32), "Uint64": (1, 64), "Float16": (2, 16), "Float32": (2, 32),
                "Float64": (2, 64), "BFloat16": (4, 16), "Boolean": (6, 8)}
# Compile options a recipe may carry (nvidia-cutlass-dsl 4.5.2 base_dsl/compiler.py L527-536): never one that writes
# files (--dump-dir, --keep-ptx, --keep-cubin), links a library (--link-libraries) or passes text to ptxas.
OPTION_FLAGS = ("--enable-tvm-ffi", "--enable-assertions", "--generate-line-info")
_ARCH = re.compile(r"sm_[0-9]{2,3}[a-z]?\Z")
OPTION_VALUES = {"--gpu-arch": _ARCH, "--opt-level": re.compile(r"[0-3]\Z")}

# Limits of a recipe (the shipped ones: at most 20 arguments, 7 attributes, no nested value, a 2 KB key; the
# frontend's NamedBarrier: one level).
MAX_ELEMENTS = 1 << 40
MAX_DIMS = 8
MAX_ARGS = 64
MAX_ATTRIBUTES = 256
MAX_ITEMS = 64  # of one tuple or list
MAX_VALUE_DEPTH = 6
MAX_VALUES = 4096  # values and arguments in one recipe, all nested ones counted
MAX_TEXT = 4096  # characters of a plain string value
MAX_KEY_CHARS = 1 << 16
MAX_OPTIONS_CHARS = 512
MAX_FILE_CHARS = 300
MAX_NAME_CHARS = 200
MAX_INT = 1 << 64
MAX_ALIGN = 4096
MAX_SECONDS = 1e6
MAX_SOURCE_BYTES = 16 << 20  # of a kernel's source file, read to hash it
MAX_DEPTH = 32  # of a recipe's JSON: deeper is no recipe (nesting_depth)
TOP_FIELDS = frozenset(("v", "arch", "args", "options", "key", "function", "object", "entry", "compile_s",
                        "needed_at_s"))
KEY_FIELDS = frozenset(("v", "stack", "function", "options", "arch", "settings", "kwargs", "args"))

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_ENTRY = re.compile(r"aot-[0-9a-f]{40}\.o\Z")
_OPTION_TEXT = re.compile(r"[A-Za-z0-9_. -]*\Z")


class NotRecordable(Exception):
    """This call cannot be written down as a recipe (it is stored, just never warmed), or a recipe that is not
    replayed (it is "not warmed")."""


# --- Reading -------------------------------------------------------------------------------------------------------

def read_regular(path, limit):
    """The bytes of the regular file at `path`, at most `limit` (larger: None); None for anything else (a FIFO, a
    device, a folder, a missing file). dsv4probe_common.read_bounded: never blocks, checked on the opened file."""
    from dsv4probe_common import ReadRefused, read_bounded  # in sys.modules: the probe loaded it

    try:
        data, size = read_bounded(path, limit + 1)
    except ReadRefused:
        return None
    return data if len(data) <= limit and size <= limit else None


def decode_json(data):
    """`data` (bytes or text) decoded as JSON, or None: dsv4probe_common.decode_json, which catches every decoder
    error (a 100,000-deep nest raises RecursionError, a huge one MemoryError; bad UTF-8, no JSON)."""
    from dsv4probe_common import ReadRefused
    from dsv4probe_common import decode_json as decode

    try:
        return decode(data)
    except ReadRefused:
        return None


def nesting_depth(value, limit=MAX_DEPTH):
    """How deeply `value` (decoded JSON) nests, counted without recursion; limit + 1 once it is deeper than `limit`."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if not isinstance(item, (dict, list)):
            continue
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


# --- Recording -----------------------------------------------------------------------------------------------------

def _packages():
    return tuple(sorted({folder.split("/")[0] for folder in FOLDERS}))


def module_names(file):
    """The module names the file `file` (from its package root, "cudnn/x/y.py") may have: its dotted path, and the
    doctor's own by-path name where BY_PATH gives one (the value: whether it is loaded by path alone)."""
    parts = file[:-3].split("/")
    names = {".".join(parts): False}
    if file in BY_PATH:
        names[BY_PATH[file]] = True
    return names


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


# --- Checking: nothing here imports, builds or calls anything a recipe names ----------------------------------------

def _is_int(value, low, high):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_number(value):
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -MAX_INT <= value <= MAX_INT
    return isinstance(value, float)


def _is_seconds(value):
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and
                             math.isfinite(value) and 0 <= value <= MAX_SECONDS)


def _exact_keys(data, required, optional=(), what="a value"):
    if not isinstance(data, dict):
        raise NotRecordable("%s that is no JSON object" % what)
    keys = set(data)
    missing = set(required) - keys
    extra = keys - set(required) - set(optional)
    if missing or extra:
        raise NotRecordable("%s with %s" % (what, "no %s" % sorted(missing)[0] if missing else
                                           "an unknown field %r" % str(sorted(extra, key=str)[0])[:40]))


def _attribute_name(name):
    return isinstance(name, str) and bool(_IDENTIFIER.match(name)) and not (name.startswith("__") and
                                                                            name.endswith("__"))


def _check_value(data, depth, budget):
    """A recorded value's data: {"value": plain}, {"seq", "items"}, {"type", "name"} of an allow-listed type, or
    {"dataclass", "name", "fields"} of an allow-listed dataclass."""
    budget[0] += 1
    if budget[0] > MAX_VALUES:
        raise NotRecordable("more than %d values" % MAX_VALUES)
    if depth > MAX_VALUE_DEPTH:
        raise NotRecordable("a value nested deeper than %d" % MAX_VALUE_DEPTH)
    if not isinstance(data, dict):
        raise NotRecordable("a malformed value")
    if "value" in data:
        _exact_keys(data, ("value",))
        value = data["value"]
        if value is None or _is_number(value) or (isinstance(value, str) and len(value) <= MAX_TEXT):
            return
        raise NotRecordable("a malformed plain value")
    if "seq" in data:
        _exact_keys(data, ("seq", "items"))
        items = data["items"]
        if data["seq"] not in ("tuple", "list") or not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise NotRecordable("a malformed sequence")
        for item in items:
            _check_value(item, depth + 1, budget)
        return
    if "type" in data:
        _exact_keys(data, ("type", "name"))
        type_name(data)
        return
    if "dataclass" in data:
        _exact_keys(data, ("dataclass", "name", "fields"))
        fields = data["fields"]
        allowed = DATACLASSES.get(_qualified(data["dataclass"], data["name"]))
        if allowed is None:
            raise NotRecordable("a dataclass outside the allow-list")
        if not isinstance(fields, dict) or sorted(fields) != sorted(allowed):
            raise NotRecordable("a dataclass with other fields than its own")
        for item in fields.values():
            _check_value(item, depth + 1, budget)
        return
    raise NotRecordable("a malformed value")


def _qualified(module, name):
    if not isinstance(module, str) or not isinstance(name, str) or len(module) + len(name) > MAX_NAME_CHARS:
        return ""
    return module + "." + name


def type_name(data):
    """The allow-listed qualified name of a recorded type ({"type": module, "name": qualname}), or NotRecordable."""
    name = _qualified(data.get("type"), data.get("name"))
    if name not in DSL_NUMBERS and name not in BUILTIN_TYPES:
        raise NotRecordable("a type outside the allow-list (%s)" % (name or "malformed")[:80])
    return name


def _check_tensor(data):
    _exact_keys(data, ("kind", "dtype", "shape", "stride", "align", "tvm_ffi", "leading_dim"), what="a tensor")
    shape, stride, lead = data["shape"], data["stride"], data["leading_dim"]
    well_formed = (isinstance(data["dtype"], str) and data["dtype"] in DLPACK_TYPES and
                   isinstance(shape, list) and isinstance(stride, list) and 0 < len(shape) <= MAX_DIMS and
                   len(stride) == len(shape) and all(_is_int(s, 0, MAX_ELEMENTS) for s in shape + stride) and
                   _is_int(data["align"], 0, MAX_ALIGN) and isinstance(data["tvm_ffi"], bool) and
                   (lead is None or _is_int(lead, 0, len(shape) - 1)))
    if not well_formed:
        raise NotRecordable("a malformed tensor")


def check_arg(data, budget=None):
    """One recorded argument, checked (NotRecordable when it is not exactly one of the kinds `replay_args` builds)."""
    budget = [0] if budget is None else budget
    budget[0] += 1
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "plain":
        _exact_keys(data, ("kind", "data"), what="an argument")
        _check_value(data["data"], 0, budget)
    elif kind == "fake-stream":
        _exact_keys(data, ("kind", "env"), what="an argument")
        if not isinstance(data["env"], bool):
            raise NotRecordable("a malformed fake stream")
    elif kind == "custream":
        _exact_keys(data, ("kind", "module"), what="an argument")
        if data["module"] != CUSTREAM_MODULE:
            raise NotRecordable("a stream of another module")
    elif kind == "number":
        _exact_keys(data, ("kind", "type", "name", "value"), what="an argument")
        if _qualified(data["type"], data["name"]) not in DSL_NUMBERS:
            raise NotRecordable("a number type outside the allow-list (%s)" % (
                _qualified(data["type"], data["name"]) or "malformed")[:80])
        if not _is_number(data["value"]):
            raise NotRecordable("a malformed number")
    elif kind == "tensor":
        _check_tensor(data)
    else:
        raise NotRecordable("an argument of unknown kind %r" % (str(kind)[:40] if kind is not None else None))


def _check_file(file):
    """A recipe's file: a `.py` file under one of FOLDERS, each part a plain name (no climbing out)."""
    if not isinstance(file, str) or len(file) > MAX_FILE_CHARS or not file.endswith(".py") or \
            not any(file.startswith(folder) for folder in FOLDERS):
        raise NotRecordable("a file outside the kernel folders of %s" % " and ".join(_packages()))
    parts = file[:-3].split("/")
    if len(parts) > 16 or not all(_IDENTIFIER.match(p) for p in parts) or parts[-1] == "__init__":
        raise NotRecordable("a file outside the kernel folders of %s (a malformed path)" % " and ".join(_packages()))


def _check_where(recipe):
    """The recipe's function or object: its file, module, top-level name, hash (and a kernel object's attributes)."""
    if ("function" in recipe) == ("object" in recipe):
        raise NotRecordable("not exactly one function or object")
    is_object = "object" in recipe
    where = recipe["object" if is_object else "function"]
    _exact_keys(where, ("file", "module", "qualname", "sha256") + (("state",) if is_object else ()),
                what="a function or object")
    _check_file(where["file"])
    module = where["module"]
    if not isinstance(module, str) or len(module) > MAX_NAME_CHARS or not _DOTTED.match(module):
        raise NotRecordable("a malformed module name")
    if module not in module_names(where["file"]):
        raise NotRecordable("the recipe names the module %s, which is not its file's (%s)" % (module, where["file"]))
    if not isinstance(where["qualname"], str) or not _IDENTIFIER.match(where["qualname"]):
        raise NotRecordable("a name not defined at its module's top level")
    if not isinstance(where["sha256"], str) or not _SHA256.match(where["sha256"]):
        raise NotRecordable("a malformed source hash")
    return where, is_object


def _check_options(options):
    if options is None:
        return
    if not isinstance(options, str) or len(options) > MAX_OPTIONS_CHARS or not _OPTION_TEXT.match(options):
        raise NotRecordable("malformed options")
    words = options.split()
    i = 0
    while i < len(words):
        word = words[i]
        if word in OPTION_FLAGS:
            i += 1
        elif word in OPTION_VALUES and i + 1 < len(words) and OPTION_VALUES[word].match(words[i + 1]):
            i += 2
        else:
            raise NotRecordable("a compile option outside the allow-list (%s)" % word[:40])


def check(recipe):
    """The whole recipe against its schema; NotRecordable naming the first thing that is not. Nothing is imported,
    built or called."""
    _exact_keys(recipe, ("v", "arch", "args", "options", "key"), TOP_FIELDS - {"v", "arch", "args", "options", "key"},
                what="a recipe")
    if not _is_int(recipe["v"], RECIPE_VERSION, RECIPE_VERSION):
        raise NotRecordable("a recipe of another version")
    if not isinstance(recipe["arch"], str) or not _ARCH.match(recipe["arch"]):
        raise NotRecordable("a malformed arch")
    if not isinstance(recipe["key"], str) or len(recipe["key"]) > MAX_KEY_CHARS:
        raise NotRecordable("the recipe has no key")
    if "entry" in recipe and not (isinstance(recipe["entry"], str) and _ENTRY.match(recipe["entry"])):
        raise NotRecordable("a malformed entry")
    if not _is_seconds(recipe.get("compile_s")) or not _is_seconds(recipe.get("needed_at_s")):
        raise NotRecordable("malformed seconds")
    _check_options(recipe["options"])
    where, is_object = _check_where(recipe)
    budget = [0]
    if is_object:
        state = where["state"]
        if not isinstance(state, dict) or len(state) > MAX_ATTRIBUTES or not all(_attribute_name(k) for k in state):
            raise NotRecordable("malformed attributes")
        for value in state.values():
            _check_value(value, 0, budget)
    args = recipe["args"]
    if not isinstance(args, list) or len(args) > MAX_ARGS:
        raise NotRecordable("malformed arguments")
    for arg in args:
        check_arg(arg, budget)


def parse_key(text):
    """The recorded key (JSON text) as a dict with exactly the key's fields, or NotRecordable."""
    data = decode_json(text) if isinstance(text, str) and len(text) <= MAX_KEY_CHARS else None
    if not isinstance(data, dict) or not (KEY_FIELDS <= set(data) <= KEY_FIELDS | {"self"}) or \
            not isinstance(data.get("args"), list) or not isinstance(data.get("stack"), dict):
        raise NotRecordable("the recipe has no key")
    return data


def _plain_description(data):
    """What dsv4probe_kernelstore.describe gives for a recorded plain value, from its data alone."""
    if "value" in data:
        value = data["value"]
        return [type(value).__name__, repr(value) if isinstance(value, float) else value]
    if "seq" in data:
        return [data["seq"], [_plain_description(v) for v in data["items"]]]
    if "type" in data:
        return ["type", type_name(data)]
    raise NotRecordable("a dataclass argument")  # describe() has no form for one: no key was ever recorded


def _arg_matches(data, described):
    kind = data["kind"]
    if kind == "plain":
        return described == _plain_description(data["data"])
    if kind == "fake-stream":
        return described == ["fake-stream", data["env"]]
    if kind == "custream":
        return described == ["stream", CUSTREAM_MODULE + ".CUstream"]
    if kind == "number":
        return isinstance(described, list) and len(described) == 3 and described[0] == "numeric" and \
            described[1] == data["type"] + "." + data["name"] and isinstance(described[2], str)
    return isinstance(described, list) and len(described) == 4 and described[0] == "cute" and \
        isinstance(described[2], str)  # a tensor: the DSL's own text, compared once it is built


def check_key(recipe, key, arch, key_version, settings):
    """Everything of the recorded key (parse_key) that the checked recipe itself says, compared before anything is
    imported: the version, arch, options, settings, the function's name and hash, each argument's kind (a plain
    value, a DSL number's type, a stream) and a kernel object's attribute names. NotRecordable naming what differs."""
    where, is_object = _check_where(recipe)
    qualified = where["module"] + "." + where["qualname"]
    function = key.get("function")
    differs = []
    if key.get("v") != key_version:
        differs.append("v")
    if key.get("arch") != arch or recipe["arch"] != arch:
        differs.append("arch")
    if key.get("options") != recipe["options"]:
        differs.append("options")
    if key.get("kwargs") != {}:
        differs.append("kwargs")
    if key.get("settings") != [list(s) for s in settings]:
        differs.append("settings")
    if not (isinstance(function, list) and len(function) == 2 and function[1] == qualified and
            isinstance(function[0], str) and _SHA256.match(function[0]) and
            (is_object or function[0] == where["sha256"])):  # an object's __call__ may be its base class's
        differs.append("function")
    self_ = key.get("self")
    if is_object:
        if not (isinstance(self_, list) and len(self_) == 2 and self_[0] == qualified and
                isinstance(self_[1], dict) and sorted(self_[1]) == sorted(where["state"])):
            differs.append("self")
    elif self_ is not None:
        differs.append("self")
    args = recipe["args"]
    if len(key["args"]) != len(args) or not all(_arg_matches(a, d) for a, d in zip(args, key["args"])):
        differs.append("args")
    if differs:
        raise NotRecordable("the recipe's key differs from the recipe in " + ", ".join(differs))


# --- Replaying: only a checked recipe, only allow-listed classes, only the hashed file -------------------------------

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
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


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
