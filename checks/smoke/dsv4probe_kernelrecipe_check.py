"""Kernel recipes checked (dsv4probe_kernelrecipe): a recipe against its schema (`check`: every field's type, length,
count and depth) and its recorded key against the recipe (`check_key`), before anything in it is imported, built or
called. Nothing here imports, builds or calls anything a recipe names.

A part of the kernel recipes (dsv4probe_kernelrecipe), loaded by path (dsv4probe_common.load_module). Standard
library only (the DSL and tvm_ffi are the stack's).
"""

import math
import os

from dsv4probe_common import load_module  # in sys.modules: the probe loaded it

HERE = os.path.dirname(os.path.realpath(__file__))
load_module("dsv4probe_kernelrecipe_rules", HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_kernelrecipe_rules import (BUILTIN_TYPES, CUSTREAM_MODULE, DATACLASSES, DLPACK_TYPES, DSL_NUMBERS,
                                          KEY_FIELDS, MAX_ALIGN, MAX_ARGS, MAX_ATTRIBUTES, MAX_DIMS, MAX_ELEMENTS,
                                          MAX_INT, MAX_ITEMS, MAX_KEY_CHARS, MAX_NAME_CHARS, MAX_OPTIONS_CHARS,
                                          MAX_SECONDS, MAX_TEXT, MAX_VALUES, MAX_VALUE_DEPTH, NotRecordable,
                                          OPTION_FLAGS, OPTION_VALUES, RECIPE_VERSION, TOP_FIELDS, _ARCH, _DOTTED,
                                          _ENTRY, _IDENTIFIER, _OPTION_TEXT, _SHA256, _check_file, decode_json,
                                          module_names)


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
