"""The doctor's modules import downward only and in no loop: read from each module's AST (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DOCTOR = Path(__file__).resolve().parent.parent / "doctor"

# Lowest first. A module may import its own layer and the ones below it, never one above. An entry is a package (its
# modules share its layer) or a module of one placed apart from its package; a module takes its longest entry. A
# module with no entry fails the test, so a new one is placed on purpose. The packages are folders by kind of part; the
# layers order the imports, so a package's modules may sit on different layers (fix.steps is data, fix.plan reads a
# finished report).
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"doctor", "hostio", "model", "upstream.texts", "fix", "kernels", "kernels.cache", "cli.helptext",
              "engine.target"}),
    ("job", {"job"}),
    ("probes", {"probes", "engine.probes"}),
    ("engine", {"engine", "testing", "model.report", "upstream"}),
    ("render", {"report"}),
    ("session", {"report.assemble", "engine.pluginhost", "engine.plugins", "engine.session", "engine.earlystart",
                 "engine.runreport", "fix.plan", "fix.apply", "fix.fetch", "job.compose", "job.stackbuild"}),
    ("commands", {"fleet", "commands", "kernels.warm", "triage"}),
    ("cli", {"cli", "launch", "__main__"}),
    # The checks' one door re-exports what they use from every layer below (the fleet's rows included); nothing of
    # the doctor imports it.
    ("api", {"api"}),
]
MAX_LOOSE_MODULES = 8  # modules at the top of doctor/, beside its packages: the entry points and the public API


def module_name(path: Path) -> str:
    parts = list(path.relative_to(DOCTOR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "doctor"


def group_of(module: str) -> str:
    """The module's entry in LAYERS: itself, else its closest package there."""
    parts = module.split(".")
    places = {name for _, names in LAYERS for name in names}
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in places:
            return ".".join(parts[:k])
    return module


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

def _named_by_importlib(node: ast.AST) -> str | None:
    """The module an `importlib.import_module("...")` or `__import__("...")` call names by a literal, else None."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    value = node.args[0].value
    return value if name in ("import_module", "__import__") and isinstance(value, str) else None


def arrows_of(module: str, path: Path, type_only: bool = True) -> set[tuple[str, tuple[str, ...]]]:
    """What `module` imports, each as (the dotted module under `dsv4_doctor`, the names taken from it): relative
    imports, absolute `dsv4_doctor.*` ones (`from` and plain), and `importlib` by a literal name; lazy ones inside
    functions included, and those under `if TYPE_CHECKING:` unless `type_only` is False. `dsv4_doctor` itself is ``."""
    package = module.split(".") if path.name == "__init__.py" and module != "doctor" else module.split(".")[:-1]
    if module == "doctor":
        package = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    annotations = set() if type_only else typing_only(tree)
    found: set[tuple[str, tuple[str, ...]]] = set()

    def absolute(dotted: str, names: tuple[str, ...]) -> None:
        if dotted == "dsv4_doctor" or dotted.startswith("dsv4_doctor."):
            found.add((dotted[len("dsv4_doctor."):] if "." in dotted else "", names))

    for node in ast.walk(tree):
        if id(node) in annotations:
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
            found.add((".".join([*base, *([node.module] if node.module else [])]), tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            absolute(node.module or "", tuple(a.name for a in node.names))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                absolute(alias.name, ())
        elif (named := _named_by_importlib(node)) is not None:
            absolute(named, ())
    return found


def imports_of(module: str, path: Path, known: set[str], type_only: bool = False) -> set[str]:
    """The doctor modules `module` imports (see `arrows_of`; type-only imports counted when `type_only`): the module
    a `from` names (unless every name taken is a module of its own: `from . import admit` runs the package's
    `__init__` but takes nothing of it), and each name taken from it that is a module of its own."""
    found = set()
    for target, names in arrows_of(module, path, type_only):
        submodules = {m for m in (f"{target}.{name}".lstrip(".") for name in names) if m in known}
        if len(submodules) < len(names) or not names:  # a name of the module itself, or the module as a whole
            submodules.add(target or "doctor")
        found.update(m for m in submodules if m in known and m != module)
    return found


def rulebook_imports_of(module: str, path: Path) -> set[str]:
    """What `module` imports of the rulebook (`dsv4_doctor.checks` and below), however it is written."""
    found = set()
    for target, names in arrows_of(module, path):
        if target.split(".")[0] == "checks":
            found.add(target)
        elif target == "" and "checks" in names:
            found.add("checks")
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


def test_doctor_has_at_most_eight_loose_modules():
    """Every kind of part has its folder; what stays at the top is the package, its entry points and the public API."""
    loose = sorted(p.name for p in DOCTOR.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_every_package_says_what_lives_there_and_what_it_may_import():
    """A folder's docstring is its README: a reader who lands in it learns what it holds and its import rule."""
    for init in sorted([*DOCTOR.glob("*/__init__.py"), *CHECKS.glob("*/__init__.py")]):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        where = init.relative_to(DOCTOR.parent)
        assert len(doc) > 80 and "import" in doc.lower(), f"{where}: say what lives here and what it may import"


def test_the_new_packages_init_files_hold_only_their_docstring():
    """Importing any module of a package runs its __init__: kept empty, the re-file costs no start-up time."""
    for name in ("cli", "commands", "engine", "model", "report", "fix", "kernels", "hostio", "upstream", "probes"):
        tree = ast.parse((DOCTOR / name / "__init__.py").read_text(encoding="utf-8"))
        assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), name


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's strongly connected parts of more than one module (Tarjan): each is one or more import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            part = set()
            while True:
                top = stack.pop()
                part.add(top)
                if top == node:
                    break
            if len(part) > 1:
                out.append(part)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def module_graph() -> dict[str, set[str]]:
    """Every doctor module's imports of other doctor modules: lazy ones and those under `if TYPE_CHECKING:` too."""
    modules = doctor_modules()
    return {m: imports_of(m, p, set(modules), type_only=True) for m, p in modules.items()}


def test_no_import_circle_among_the_doctor_modules_lazy_and_type_only_imports_included():
    graph = module_graph()
    assert "report.terminal" in graph["report.emitter"] and "job.model" in graph["job.bounds"]  # real edges seen
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in found)


def test_the_engine_imports_nothing_of_the_checks():
    """The engine reads the built-in checks only as the registry loads them through their entry point (each stamped
    with its area): no module under doctor/ imports `dsv4_doctor.checks`, however the import is written."""
    arrows = {m: found for m, p in doctor_modules().items() if (found := rulebook_imports_of(m, p))}
    assert not arrows, f"engine modules importing the checks: {arrows}"


@pytest.mark.parametrize("source, expected", [
    ("from dsv4_doctor.checks import AREAS\n", {"checks"}),
    ("from ..checks import AREAS\n", {"checks"}),
    ("def f():\n    import dsv4_doctor.checks.smoke as s\n", {"checks.smoke"}),
    ("from dsv4_doctor import checks\n", {"checks"}),
    ("import importlib\nimportlib.import_module('dsv4_doctor.checks')\n", {"checks"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dsv4_doctor.checks import X\n", {"checks"}),
    ("from dsv4_doctor import model\nimport importlib.util\nimportlib.util.find_spec('dsv4_doctor.checks')\n",
     set()),
])
def test_imports_of_the_checks_are_read_however_written(tmp_path, source, expected):
    (tmp_path / "report").mkdir()
    fake = tmp_path / "report" / "terminal.py"
    fake.write_text(source, encoding="utf-8")
    assert rulebook_imports_of("report.terminal", fake) == expected


@pytest.mark.parametrize("source, expected", [
    ("from dsv4_doctor.model.core import X\n", {"model.core"}),
    ("import dsv4_doctor.report.output\n", {"report.output"}),
    ("from dsv4_doctor.report import output\n", {"report.output"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..model.core import X\n", {"model.core"}),
])
def test_absolute_and_type_only_imports_are_read_for_circles(tmp_path, source, expected):
    (tmp_path / "cli").mkdir()
    fake = tmp_path / "cli" / "main.py"
    fake.write_text(source, encoding="utf-8")
    known = {"model", "model.core", "report", "report.output", "cli", "cli.main"}
    assert imports_of("cli.main", fake, known, type_only=True) == expected


@pytest.mark.parametrize("source, expected", [
    ("from ..model.core import X\n", {"model.core"}),
    ("def f():\n    from ..engine.session import run_check\n", {"engine.session"}),
    ("from ..model import core\n", {"model.core"}),
    ("from . import grammar\n", {"cli.grammar"}),
])
def test_imports_are_read_from_the_ast_lazy_ones_included(tmp_path, source, expected):
    (tmp_path / "cli").mkdir()
    fake = tmp_path / "cli" / "main.py"
    fake.write_text(source, encoding="utf-8")
    known = {"model", "model.core", "engine", "engine.session", "cli", "cli.main", "cli.grammar"}
    assert imports_of("cli.main", fake, known) == expected


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
    assert graph["job.job_checks"] >= {"job.cp", "job.settings", "job.verdict"}  # the reader sees real edges
    assert "smoke._causes" in graph["smoke.thd_cp"] and "fixes.catalogue" in graph["fixes.frontend"]
    loops = import_loops(graph)
    assert not loops, "import loops among the checks modules:\n" + "\n".join(loops)


def test_no_module_is_over_400_lines():
    """A module that grows past this does several things; split it by purpose before it does. Every module counts:
    the doctor's (its probe scripts in doctor/probes/ included) and the checks' (their probe scripts included)."""
    modules = sorted([*DOCTOR.rglob("*.py"), *CHECKS.rglob("*.py")])
    assert DOCTOR / "probes" / "dsv4probe_common.py" in modules and CHECKS / "smoke" / "dsv4probe_smoke.py" in modules
    long = {str(p.relative_to(DOCTOR.parent)): n for p in modules
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, long


def engine_imports_of_a_check_module(source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """Each module of the engine a module of the rulebook imports, as (line, `dsv4_doctor.x`), however written:
    absolute (`from`, plain, `importlib.import_module` by a literal name) or relative climbing out of `checks`; lazy
    ones and those under `if TYPE_CHECKING:` included. `package` is the module's package under `dsv4_doctor`
    (`("checks", "smoke")`); the rulebook's own modules are not the engine's. `from dsv4_doctor import x` counts as
    an import of `dsv4_doctor.x`."""
    found: list[tuple[int, str]] = []

    def take(line: int, parts: list[str]) -> None:
        if parts[:1] != ["checks"]:
            found.append((line, ".".join(["dsv4_doctor", *parts])))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level > len(package) + 1:
                    continue  # above dsv4_doctor: not the engine (and not importable)
                parts = [*package[:len(package) - (node.level - 1)], *(node.module or "").split(".")]
            elif (node.module or "").split(".")[0] == "dsv4_doctor":
                parts = (node.module or "").split(".")[1:]
            else:
                continue
            parts = [p for p in parts if p]
            if parts:
                take(node.lineno, parts)
            else:  # `from dsv4_doctor import x, y`: each name a module of the package
                for alias in node.names:
                    take(node.lineno, [alias.name])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dsv4_doctor":
                    take(node.lineno, alias.name.split(".")[1:])
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.split(".")[0] == "dsv4_doctor"
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")):
            take(node.lineno, node.args[0].value.split(".")[1:])
    return found


def test_the_built_in_checks_import_the_engine_only_through_the_api():
    """A built-in check reads like a plugin's: of the engine it imports `dsv4_doctor.api` and nothing else, so a
    plugin author who copies one learns the right import. Probe scripts (`dsv4probe_*.py`) run in the target
    interpreter and import nothing of the engine; they are not read."""
    written = ("from dsv4_doctor.model.core import Fix\n"
               "import dsv4_doctor.hostio.redact\n"
               "from dsv4_doctor.model import facts\n"
               "from dsv4_doctor import api\n"
               "from ...job import model\n"
               "from ...engine import target\n"
               "if TYPE_CHECKING:\n    from ...model.core import Check\n"
               "def f():\n    from dsv4_doctor.fleet import cp_plan\n"
               "    importlib.import_module('dsv4_doctor.kernels.cache')\n"
               "from dsv4_doctor.api import check\n"
               "from ... import api\n"
               "from .. import fixes\n"
               "from .._reach import route\n"
               "from dsv4_doctor.checks import AREAS\n"
               "import dsv4_doctor\n"
               "import os\n")
    assert sorted(m for _, m in engine_imports_of_a_check_module(written, ("checks", "smoke"))) == [
        "dsv4_doctor", "dsv4_doctor.api", "dsv4_doctor.api", "dsv4_doctor.api", "dsv4_doctor.engine",
        "dsv4_doctor.fleet", "dsv4_doctor.hostio.redact", "dsv4_doctor.job", "dsv4_doctor.kernels.cache",
        "dsv4_doctor.model", "dsv4_doctor.model.core", "dsv4_doctor.model.core"]

    through_api, elsewhere = set(), []
    for path in sorted(CHECKS.rglob("*.py")):
        if path.name.startswith("dsv4probe_"):
            continue
        package = ("checks", *path.relative_to(CHECKS).parent.parts)
        for line, module in engine_imports_of_a_check_module(path.read_text(encoding="utf-8"), package):
            if module == "dsv4_doctor.api":
                through_api.add(path.name)
            else:
                elsewhere.append(f"{path.relative_to(CHECKS.parent)}:{line} imports {module}")
    through_api_expected = {"te_checks.py", "job_checks.py", "kernels.py", "catalogue.py"}
    assert through_api_expected <= through_api  # the reader sees real imports
    assert not elsewhere, "import these through dsv4_doctor.api (export them there):\n" + "\n".join(elsewhere)
