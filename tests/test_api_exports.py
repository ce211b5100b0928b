"""`dsv4_doctor.api` exports every engine name a check uses, each the very object of its home module, and importing it
stays as cheap as the names that declare a check: the rest load on first use."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import dsv4_doctor.api as api

API = Path(api.__file__)


def imports_under_type_checking() -> dict[str, tuple[str, str]]:
    """What api.py imports for the type checker only: exported name -> (module under dsv4_doctor, its name there)."""
    tree = ast.parse(API.read_text(encoding="utf-8"))
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.level == 1 and stmt.module, ast.dump(stmt)
                out.update({a.asname or a.name: (stmt.module, a.name) for a in stmt.names})
    return out


def bound_at_import() -> set[str]:
    """The names api.py binds when it is imported: its top-level imports and definitions."""
    tree = ast.parse(API.read_text(encoding="utf-8"))
    names = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.level
             for a in node.names}
    return names | {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_export_is_its_home_modules_object():
    typed = imports_under_type_checking()
    lazy = {name: (module, api._RENAMED.get(name, name)) for module, names in api._LAZY.items() for name in names}
    assert typed == lazy  # the type checker sees what the loader loads
    assert len(api.__all__) == len(set(api.__all__))
    assert set(api.__all__) == (bound_at_import() & set(api.__all__)) | set(lazy), "an export neither bound nor lazy"
    for name, (module, attribute) in lazy.items():
        assert getattr(api, name) is getattr(importlib.import_module(f"dsv4_doctor.{module}"), attribute), name


def test_importing_the_api_loads_no_lazy_module():
    lazy = sorted({f"dsv4_doctor.{module}" for module in api._LAZY} | {"dsv4_doctor.job", "dsv4_doctor.fleet"})
    code = ("import sys, dsv4_doctor.api\n"
            f"print(sorted(m for m in {lazy!r} if m in sys.modules))\n"
            "from dsv4_doctor.api import version\n"
            f"print(sorted(m for m in {lazy!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["[]", "['dsv4_doctor.model.versions']"], out.stdout + out.stderr
