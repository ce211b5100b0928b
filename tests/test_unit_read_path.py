"""One read path for every file the doctor reads: every .py under doctor/ and checks/ is read with `ast` (nothing is
imported), and a call that opens, reads or decodes a file outside the safe readers fails this test, unless its call
site is on the short, commented allow-list below.

The safe readers: the engine's doctor/hostio/safeio.py (read_file, read_bounded, read_at, read_tail and the guarded
decoders decode_json, load_json, parse_python) and, inside the target interpreter, their copy in
doctor/probes/dsv4probe_read.py (read_bounded, read_tail, open_regular, decode_json, load_json, parse_python; every
probe imports them from dsv4probe_common). They open without blocking, read a bounded number of bytes, and turn every
decoder error (RecursionError, MemoryError, ValueError, UnicodeError, SyntaxError) into one typed refusal.
tests/test_hardening_v4_reads.py feeds each of them a FIFO, a 100,000-deep nest and an oversize file.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("doctor", "checks")

# The readers themselves.
READER_MODULES = {"doctor/hostio/safeio.py", "doctor/probes/dsv4probe_read.py"}

# (file, function, call) -> why this read is safe without the readers. Keep it short: a read that can go through a
# reader goes through one.
ALLOWED: dict[tuple[str, str, str], str] = {
    # `fix --download`'s archive of a git pin: tarfile opened for writing ("w:gz") a .partial file in the folder the
    # user named; it stores the clone's symlinks as links (dereference=False), never what they point at.
    ("doctor/fix/offline.py", "fetch_git", ".open"): "writes the archive (mode w:gz); reads nothing",
    # Directories, never files: the kernel cache is opened from / one component at a time with O_DIRECTORY and
    # O_NOFOLLOW (openat), each descriptor checked; nothing is read from them here.
    ("doctor/kernels/cachedir.py", "open_entry", "os.open"): "opens a directory entry with O_NOFOLLOW|O_DIRECTORY",
    ("doctor/kernels/cachedir.py", "open_verified", "os.open"): "opens directories (O_DIRECTORY|O_NOFOLLOW), checked",
    # The helper's stdin: the null device, opened by name (os.devnull), never a path from outside.
    ("doctor/hostio/procs.py", "start_helper", "open"): "os.devnull as stdin, and the helper's own log and "
                                                     "output, written",
    # On a Ray node, in the task's own mkdtemp folder (mode 0700): the answer of the static probe the task itself ran,
    # at most limit + 1 bytes. The task runs pickled by value on the node, where dsv4probe_common may not import.
    ("doctor/probes/dsv4probe_ray_nodes.py", "_node_run", "open"): "its own mkdtemp folder's answer, bounded",
}

_MODE = re.compile(r"[rwxabtU+]+")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _names_in(node: ast.AST | None) -> set[str]:
    """Every name and attribute name in an expression (os.O_WRONLY -> O_WRONLY)."""
    out: set[str] = set()
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _writes_only(mode: str | None) -> bool:
    return mode is not None and bool(set(mode) & set("wax")) and not set(mode) & set("r+")


def _literal_mode(call: ast.Call, index: int | None) -> str | None:
    """The open mode a call states as a literal (its `mode=`, or its positional argument `index`, or for a method
    its first literal argument that reads as a mode), else None: 'r', or not known."""
    for keyword in call.keywords:
        if keyword.arg == "mode":
            value = keyword.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    candidates = call.args[index:index + 1] if index is not None else call.args
    for arg in candidates:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _MODE.fullmatch(arg.value):
            return arg.value
    return None


class _Calls:
    """(function's qualified name, the call as the allow-list names it, line) of every read call in a module."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # a local name -> what it is (j -> json, loads -> json.loads)
        self.found: list[tuple[str, str, int, int]] = []  # (function, call, line, column)

    def visit(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.aliases[alias.asname or alias.name.split(".")[0]] = \
                        alias.name if alias.asname else alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module in ("json", "ast", "yaml", "io", "os", "builtins",
                                                                       "importlib", "importlib.metadata"):
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        # (node, its function's qualified name, the function node): every call knows the function it is in.
        stack: list[tuple[ast.AST, str, ast.AST | None]] = [(tree, "", None)]
        while stack:
            node, qual, function = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{qual}.{child.name}" if qual else child.name
                    stack.append((child, name, child if not isinstance(child, ast.ClassDef) else function))
                    continue
                if isinstance(child, ast.Call):
                    kind = self._kind(child, function)
                    if kind is not None:
                        self.found.append((qual or "<module>", kind, child.lineno, child.col_offset))
                stack.append((child, qual, function))
        self.found.sort(key=lambda found: found[2:])

    @staticmethod
    def _flags(node: ast.AST | None, function: ast.AST | None) -> set[str]:
        """The names in os.open's flags; a flags variable: the names of every value assigned to it in the function."""
        names = _names_in(node)
        if isinstance(node, ast.Name) and function is not None:
            for sub in ast.walk(function):
                if isinstance(sub, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id
                                                       for t in sub.targets):
                    names |= _names_in(sub.value)
                elif isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name) and sub.target.id == node.id:
                    names |= _names_in(sub.value)
        return names

    def _kind(self, call: ast.Call, function: ast.AST | None) -> str | None:
        func = call.func
        dotted = _dotted(func)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            dotted = self.aliases.get(head, head) + ("." + rest if rest else "")
        if dotted in ("open", "io.open", "builtins.open"):
            return None if _writes_only(_literal_mode(call, 1)) else "open"
        if dotted == "os.open":
            flags = self._flags(call.args[1] if len(call.args) > 1 else None, function)
            return None if "O_WRONLY" in flags and "O_RDWR" not in flags else "os.open"
        if dotted in ("importlib.metadata.version", "importlib.metadata.metadata", "importlib.metadata.requires"):
            return dotted  # a distribution's METADATA, opened by importlib (a FIFO there blocks it)
        if dotted in ("json.load", "json.loads", "ast.parse", "compile", "builtins.compile"):
            return dotted.replace("builtins.", "")
        if dotted and (dotted.startswith("yaml.") and "load" in dotted.split(".")[-1] or dotted == "OmegaConf.load"):
            return dotted
        if isinstance(func, ast.Attribute) and func.attr in ("read_text", "read_bytes"):
            return "." + func.attr
        if isinstance(func, ast.Attribute) and func.attr == "open":
            return None if _writes_only(_literal_mode(call, None)) else ".open"
        return None


def sources() -> Iterator[tuple[str, ast.AST]]:
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_bytes(), str(path))


@functools.cache
def read_calls() -> list[tuple[str, str, str, int]]:
    """Every read call outside the readers: (file, function, call, line)."""
    out = []
    for rel, tree in sources():
        if rel in READER_MODULES:
            continue
        calls = _Calls()
        calls.visit(tree)
        out += [(rel, fn, kind, line) for fn, kind, line, _ in calls.found]
    return out


def test_every_read_goes_through_the_safe_readers():
    outside = [f"{rel}:{line} {fn}: {kind}" for rel, fn, kind, line in read_calls()
               if (rel, fn, kind) not in ALLOWED]
    assert not outside, ("read outside the safe readers (doctor/hostio/safeio.py, dsv4probe_common's read_bounded "
                         "& co.); "
                         "route it through them, or put it on the allow-list with why it is safe:\n"
                         + "\n".join(outside))


def test_the_allow_list_names_only_reads_that_are_still_there():
    """A stale entry would quietly allow the next read put in that function."""
    present = {(rel, fn, kind) for rel, fn, kind, _ in read_calls()}
    assert not set(ALLOWED) - present, sorted(set(ALLOWED) - present)


def test_the_audit_sees_each_kind_of_read_and_not_a_write():
    """The audit itself: each read this test must catch is caught, each write it must let pass is let pass."""
    code = '''
import json, ast, yaml, os, importlib.metadata
from json import loads as L
from importlib import metadata
from pathlib import Path
def reads(p, fd):
    open(p); open(p, "rb"); open(p, "r+"); io.open(p)
    os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    flags = os.O_RDWR
    os.open(p, flags)
    Path(p).read_text(); Path(p).read_bytes(); Path(p).open()
    json.load(fd); json.loads(p); L(p); ast.parse(p); yaml.safe_load(p); yaml.load(p); compile(p, "x", "exec")
    metadata.version(p); importlib.metadata.version(p)
def writes(p):
    open(p, "w"); open(p, "wb"); open(p, mode="a"); Path(p).open("w")
    flags = os.O_WRONLY | os.O_CREAT
    os.open(p, flags, 0o600)
    os.open(p, os.O_WRONLY)
    json.dumps(p); re.compile(p)
'''
    calls = _Calls()
    calls.visit(ast.parse(code))
    seen = [(fn, kind) for fn, kind, _, _ in calls.found]
    assert all(fn == "reads" for fn, _ in seen), seen
    assert [kind for _, kind in seen] == [
        "open", "open", "open", "open", "os.open", "os.open", ".read_text", ".read_bytes", ".open", "json.load",
        "json.loads", "json.loads", "ast.parse", "yaml.safe_load", "yaml.load", "compile",
        "importlib.metadata.version", "importlib.metadata.version"], seen
