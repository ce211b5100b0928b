"""Kernel recipes' rules (dsv4probe_kernelrecipe): what a recipe may name (the kernel folders, the allow-lists of
classes, the compile options), its limits, and its bounded reads.

A part of the kernel recipes (dsv4probe_kernelrecipe), loaded by path (dsv4probe_common.load_module). Standard
library only (the DSL and tvm_ffi are the stack's).
"""

import re

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


def _check_file(file):
    """A recipe's file: a `.py` file under one of FOLDERS, each part a plain name (no climbing out)."""
    if not isinstance(file, str) or len(file) > MAX_FILE_CHARS or not file.endswith(".py") or \
            not any(file.startswith(folder) for folder in FOLDERS):
        raise NotRecordable("a file outside the kernel folders of %s" % " and ".join(_packages()))
    parts = file[:-3].split("/")
    if len(parts) > 16 or not all(_IDENTIFIER.match(p) for p in parts) or parts[-1] == "__init__":
        raise NotRecordable("a file outside the kernel folders of %s (a malformed path)" % " and ".join(_packages()))
