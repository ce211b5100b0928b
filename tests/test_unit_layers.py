"""The doctor's modules import downward only and in no loop: read from each module's AST (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DOCTOR = Path(__file__).resolve().parent.parent / "doctor"

# Lowest first. A module may import its own layer and the ones below it, never one above. A module missing here
# fails the test, so a new one is placed on purpose.
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"doctor", "fix", "fixmet", "fixpep668", "model", "redact", "validtext", "kernelcache", "facts",
              "versions", "located", "procs", "signals", "safeio", "cachedir", "helptext", "target", "upstreamtext"}),
    ("job", {"job", "jobpath"}),
    ("probes", {"probes"}),
    ("engine", {"registry", "runner", "api", "testing", "report", "upstream_texts"}),
    ("render", {"render"}),
    ("session", {"assemble", "pluginhost", "plugins", "session", "earlystart", "runreport", "fixplan", "jobcompose",
                 "stackbuild"}),
    ("commands", {"fleet", "app", "catalog", "execjob", "gendocs", "warm"}),
    ("cli", {"cli", "commandline", "completion", "launch", "__main__"}),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(DOCTOR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "doctor"


def group_of(module: str) -> str:
    """A sub-package (render, probes, job) is one unit: its modules share its layer and may import each other."""
    return module.split(".")[0]


def typing_only(tree: ast.AST) -> set[int]:
    """The ids of import nodes under `if TYPE_CHECKING:`: annotations name a type, they load nothing at run time."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def doctor_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(DOCTOR.rglob("*.py")):
        if "probes" in path.parts and path.name != "__init__.py":
            continue  # probe scripts run in the target interpreter and import nothing of the doctor
        if "schema" in path.parts:
            continue
        out[module_name(path)] = path
    return out



def import_loops(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle a depth-first walk of the import graph meets, as "a -> b -> a"."""
    loops: list[str] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                loops.append(" -> ".join(trail[trail.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, trail + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return loops

def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The doctor modules `module` imports (relative imports, lazy ones inside functions included)."""
    package = module.split(".") if path.name == "__init__.py" and module != "doctor" else module.split(".")[:-1]
    if module == "doctor":
        package = []
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    annotations = typing_only(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level or id(node) in annotations:
            continue
        base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
        target = ".".join([*base, *([node.module] if node.module else [])])
        for candidate in [target, *(f"{target}.{a.name}".lstrip(".") for a in node.names)]:
            candidate = candidate or "doctor"
            if candidate in known and candidate != module:
                found.add(candidate)
    return found


def layer_index() -> dict[str, int]:
    return {name: i for i, (_, names) in enumerate(LAYERS) for name in names}


def test_every_module_has_a_layer():
    layers = layer_index()
    missing = sorted(m for m in doctor_modules() if group_of(m) not in layers)
    assert not missing, f"place these modules in LAYERS: {missing}"


def test_no_module_imports_a_layer_above_its_own():
    layers = layer_index()
    modules = doctor_modules()
    upward = []
    for module, path in modules.items():
        mine = layers.get(group_of(module))
        if mine is None:
            continue
        for dep in imports_of(module, path, set(modules)):
            theirs = layers.get(group_of(dep))
            if theirs is not None and theirs > mine:
                upward.append(f"{module} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[theirs][0]})")
    assert not upward, "\n".join(upward)


def test_no_import_loop_between_units():
    modules = doctor_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        mine = group_of(module)
        graph.setdefault(mine, set()).update(d for d in map(group_of, imports_of(module, path, set(modules)))
                                             if d != mine)
    graph.get("doctor", set()).clear()  # the package itself: its __init__ holds only the version
    loops = import_loops(graph)
    assert not loops, "import loops:\n" + "\n".join(loops)


@pytest.mark.parametrize("source, expected", [
    ("from .model import X\n", {"model"}),
    ("def f():\n    from .session import run_check\n", {"session"}),
    ("from . import model\n", {"model"}),
])
def test_imports_are_read_from_the_ast_lazy_ones_included(tmp_path, source, expected):
    fake = tmp_path / "cli.py"
    fake.write_text(source, encoding="utf-8")
    assert imports_of("cli", fake, {"model", "session", "cli"}) == expected


CHECKS = DOCTOR.parent / "checks"


def checks_modules() -> dict[str, Path]:
    """The built-in checks' modules by dotted name under `checks` (`job_checks`, `smoke.thd_cp`); the package itself
    is ``. Probe scripts and their references run in the target interpreter and import none of these."""
    out = {}
    for path in sorted(CHECKS.rglob("*.py")):
        if path.name.startswith("dsv4probe_") or path.name == "dsv4ref.py":
            continue
        parts = list(path.relative_to(CHECKS).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def checks_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The checks modules `module` imports with a relative import (lazy ones included). `from . import fixes` is an
    import of `fixes`, not of the package whose `__init__` only lists the areas."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package[:len(package) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
        names = [".".join(filter(None, (target, a.name))) for a in node.names]
        submodules = {n for n in names if n in known}
        found.update(submodules or ({target} & known))
    return found - {module}


def test_no_import_loop_among_the_checks_modules():
    modules = checks_modules()
    graph = {m: checks_imports(m, p, set(modules)) for m, p in modules.items()}
    assert graph["job_checks"] >= {"_job_cp", "_job_settings", "_job_verdict"}  # the reader sees real edges
    assert "smoke._causes" in graph["smoke.thd_cp"] and "fixes" in graph["frontend_fixes"]
    loops = import_loops(graph)
    assert not loops, "import loops among the checks modules:\n" + "\n".join(loops)


def test_no_module_under_doctor_is_over_400_lines():
    """A module that grows past this does several things; split it by purpose before it does."""
    long = {str(p.relative_to(DOCTOR)): n for p in sorted(DOCTOR.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, long
