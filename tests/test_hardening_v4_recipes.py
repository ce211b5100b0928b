"""Hardening v4, item 1: a kernel recipe is data, never a choice of code.

`dsv4-doctor warm` runs as root, and `--recipes` may name a per-user store another user filled; a `--deep` check's
prewarm replays the shipped recipes. A recipe is checked whole (every field's type, length, count and depth) before
anything in it is imported, built or called; its types come from fixed allow-lists by exact qualified name; its code
comes from the hashed file, under the module name that file's path gives; its key is compared with all it says
before its module is imported. A recipe that fails any of that is "not warmed", and nothing of it ran.

What a hostile recipe would reach is planted where it shows: a Megatron tree whose modules (and packages) write a
marker file when they are imported, and shell commands that would write one. The DSL is the real
nvidia-cutlass-dsl-libs-base 4.5.2 wheel (its `cutlass/base_dsl/env_manager.py` imports `os`) and the frontend
kernels the real nvidia-cudnn-frontend 1.27.0 wheel's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import probe_modules
from dsv4_doctor.kernels import cache as kernelcache
from dsv4_doctor.engine.probes import PROBE_DIR
from dsv4_doctor.kernels.warm import UsageError, read_recipes, shipped_recipes

KERNEL_FOLDER = "megatron/core/transformer/experimental_attention_variant"
DEPTH = 100_000
DEEP_JSON = "[" * DEPTH + "]" * DEPTH

PLANTED = '''
import os

with open(os.path.join({markers!r}, {name!r}), "w") as fh:
    fh.write("imported")


def launch():
    return None


class Kernel:
    def __call__(self):
        return None
'''


def _smoke() -> Path:
    return probe_modules.script("dsv4probe_warm").parent


def _plant(root: Path, markers: Path, modules: dict[str, str]) -> None:
    """A Megatron tree under `root`: each package's __init__ and each module in `modules` (file from the package
    root: extra source) writes a marker named after its dotted name when it is imported."""
    markers.mkdir(parents=True, exist_ok=True)
    folder = root
    for part in KERNEL_FOLDER.split("/"):
        folder = folder / part
        folder.mkdir(parents=True, exist_ok=True)
        dotted = ".".join(folder.relative_to(root).parts)
        (folder / "__init__.py").write_text(PLANTED.format(markers=str(markers), name="package " + dotted))
    for file, extra in modules.items():
        path = root / file
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
        path.write_text(PLANTED.format(markers=str(markers), name=file[:-3].replace("/", ".")) + extra)


def _recipe(root: Path, file: str, *, module: str | None = None, qualname: str = "launch", args=(), key_args=(),
            options=None, key: dict | None = None, state: dict | None = None) -> dict:
    """A recipe for a planted module whose key agrees with it (unless `key` overrides fields of it)."""
    sha = hashlib.sha256((root / file).read_bytes()).hexdigest()
    module = module or file[:-3].replace("/", ".")
    where = {"file": file, "module": module, "qualname": qualname, "sha256": sha}
    recorded = {"v": 1, "stack": {"dsl": "4.5.2"}, "function": [sha, f"{module}.{qualname}"], "options": options,
                "arch": "sm_90a", "settings": [], "kwargs": {}, "args": list(key_args)}
    if state is not None:
        where["state"] = state
        recorded["self"] = [f"{module}.{qualname}", {k: ["int", 0] for k in state}]
    recorded.update(key or {})
    return {"v": 1, "arch": "sm_90a", ("object" if state is not None else "function"): where, "args": list(args),
            "options": options, "key": json.dumps(recorded), "entry": "aot-" + "0" * 40 + ".o"}


def _number(module: str, name: str, value) -> dict:
    return {"kind": "number", "type": module, "name": name, "value": value}


def _plain_type(module: str, name: str) -> dict:
    return {"kind": "plain", "data": {"type": module, "name": name}}


# --- The schema, in this process: nothing is imported to refuse a recipe ----------------------------------------------

def _valid() -> dict:
    """A recipe as a check records one: a kernel object with a DSL type and a NamedBarrier among its attributes,
    a tensor, a DSL number, a plain tuple and a CUstream."""
    where = {"file": "cudnn/deepseek_sparse_attention/x/k.py", "module": "cudnn.deepseek_sparse_attention.x.k",
             "qualname": "Kernel", "sha256": "a" * 64,
             "state": {"dtype": {"type": "cutlass.base_dsl.typing", "name": "BFloat16"},
                       "sync": {"dataclass": "cutlass.pipeline.helpers", "name": "NamedBarrier",
                                "fields": {"barrier_id": {"value": 3}, "num_threads": {"value": 256}}},
                       "tile": {"seq": "tuple", "items": [{"value": 128}, {"value": 64}]}}}
    args = [{"kind": "tensor", "dtype": "BFloat16", "shape": [1, 64], "stride": [64, 1], "align": 16, "tvm_ffi": True,
             "leading_dim": 1}, _number("cutlass.base_dsl.typing", "Int32", 40),
            {"kind": "plain", "data": {"seq": "tuple", "items": [{"value": 1}, {"value": 2.5}]}},
            {"kind": "custream", "module": "cuda.bindings.driver"}, {"kind": "fake-stream", "env": False}]
    return {"v": 1, "arch": "sm_90a", "object": where, "args": args, "options": "--enable-tvm-ffi --gpu-arch sm_90a "
            "--opt-level 3", "key": "{}", "entry": "aot-" + "1" * 40 + ".o", "compile_s": 0.4, "needed_at_s": 12.5}


def _deep_value(levels: int) -> dict:
    value: dict = {"value": 1}
    for _ in range(levels):
        value = {"seq": "list", "items": [value]}
    return value


def _mutations() -> list[tuple[str, object]]:
    """(what, how it changes a valid recipe): each must be refused by the schema alone."""
    def arg(value):
        return lambda r: r["args"].__setitem__(1, value)

    def state(name, value):
        return lambda r: r["object"]["state"].__setitem__(name, value)

    def where(field, value):
        return lambda r: r["object"].__setitem__(field, value)

    return [
        ("a number of env_manager's os.system", arg(_number("cutlass.base_dsl.env_manager", "os.system", "id"))),
        ("a number by an attribute chain", arg(_number("cutlass", "base_dsl.env_manager.os.system", "id"))),
        ("a number of a prefix-matching module", arg(_number("cutlass_evil", "Int32", 1))),
        ("a number of a builtin", arg(_number("builtins", "int", 1))),
        ("builtins.eval as a type", arg(_plain_type("builtins", "eval"))),
        ("builtins.exec as a type", arg(_plain_type("builtins", "exec"))),
        ("builtins.__import__ as a type", arg(_plain_type("builtins", "__import__"))),
        ("a type by an attribute chain", arg(_plain_type("cutlass.base_dsl.env_manager", "os.system"))),
        ("a type of the DSL outside the list", arg(_plain_type("cutlass.base_dsl.typing", "Numeric"))),
        ("a dataclass of os.system", state("sync", {"dataclass": "cutlass.base_dsl.env_manager", "name": "os.system",
                                                    "fields": {}})),
        ("a NamedBarrier with another field", state("sync", {"dataclass": "cutlass.pipeline.helpers",
                                                             "name": "NamedBarrier", "fields": {"cmd": {"value": 1}}})),
        ("builtins.exec among the attributes", state("dtype", {"type": "builtins", "name": "exec"})),
        ("a dunder attribute", state("__class__", {"value": 1})),
        ("a value nested deeper than 6", state("tile", _deep_value(7))),
        ("a value with an extra field", state("tile", {"value": 1, "type": "builtins"})),
        ("a plain value that is an object", state("tile", {"value": {"a": 1}})),
        ("a huge string", state("tile", {"value": "x" * 5000})),
        ("a huge int", state("tile", {"value": 1 << 70})),
        ("too many attributes", where("state", {f"a{i}": {"value": i} for i in range(300)})),
        ("a module that is not its file's", where("module", "megatron.training.initialize")),
        ("a module named os", where("module", "os")),
        ("a qualified name with an attribute chain", where("qualname", "Kernel.__init__.__globals__")),
        ("a function defined inside another", where("qualname", "outer.<locals>.inner")),
        ("a file outside the kernel folders", where("file", "cudnn/graph.py")),
        ("a file climbing out", where("file", "cudnn/deepseek_sparse_attention/../../os.py")),
        ("a file of another package", where("file", "os.py")),
        ("a malformed hash", where("sha256", "0" * 63)),
        ("an unknown argument kind", arg({"kind": "eval", "data": "1"})),
        ("an argument with an extra field", arg(dict(_number("cutlass.base_dsl.typing", "Int32", 1), x=1))),
        ("a tensor of 9 dimensions", arg({"kind": "tensor", "dtype": "Int32", "shape": [1] * 9, "stride": [1] * 9,
                                          "align": 16, "tvm_ffi": True, "leading_dim": None})),
        ("a tensor of another element type", arg({"kind": "tensor", "dtype": "object", "shape": [1], "stride": [1],
                                                  "align": 16, "tvm_ffi": True, "leading_dim": None})),
        ("a tensor whose element type is a list", arg({"kind": "tensor", "dtype": ["Int32"], "shape": [1],
                                                       "stride": [1], "align": 16, "tvm_ffi": True,
                                                       "leading_dim": None})),
        ("a stream of another module", arg({"kind": "custream", "module": "os"})),
        ("a stream whose module is a list", arg({"kind": "custream", "module": ["cuda.bindings.driver"]})),
        ("a number whose type is a list", arg(_number(["cutlass.base_dsl.typing"], "Int32", 1))),
        ("too many arguments", lambda r: r.__setitem__("args", r["args"] * 20)),
        ("--dump-dir", lambda r: r.__setitem__("options", "--enable-tvm-ffi --keep-ptx --dump-dir /etc")),
        ("--link-libraries", lambda r: r.__setitem__("options", "--link-libraries /tmp/evil.bc")),
        ("--ptxas-options", lambda r: r.__setitem__("options", "--ptxas-options -o/etc/x")),
        ("options with quotes", lambda r: r.__setitem__("options", "--gpu-arch 'sm_90a'")),
        ("another recipe version", lambda r: r.__setitem__("v", True)),
        ("an unknown field", lambda r: r.__setitem__("exec", "x")),
        ("a function and an object", lambda r: r.__setitem__("function", r["object"])),
        ("a malformed arch", lambda r: r.__setitem__("arch", "sm_90a; id")),
        ("a key that is no string", lambda r: r.__setitem__("key", {"v": 1})),
        ("a huge key", lambda r: r.__setitem__("key", " " * (1 << 17))),
        ("a malformed entry", lambda r: r.__setitem__("entry", "../aot-x.o")),
        ("negative seconds", lambda r: r.__setitem__("compile_s", -1)),
    ]


def test_every_part_of_a_recipe_is_checked_by_its_schema_without_importing_anything():
    recipes = probe_modules.load("dsv4probe_kernelrecipe")
    before = set(sys.modules)
    recipes.check(_valid())  # the base is a recipe as recorded
    for what, change in _mutations():
        recipe = copy.deepcopy(_valid())
        change(recipe)
        with pytest.raises(recipes.NotRecordable):
            recipes.check(recipe)
            pytest.fail(f"not refused: {what}")
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("cutlass", "cudnn", "megatron", "cuda")}


def test_the_shipped_recipes_pass_the_schema_and_their_own_key_check():
    """The allow-lists hold what the shipped recipes (frontend 1.27.0 and Megatron d48bd6be kernels) use."""
    recipes = probe_modules.load("dsv4probe_kernelrecipe")
    store = probe_modules.load("dsv4probe_kernelstore")
    shipped = json.loads(shipped_recipes().read_text())
    for recipe in shipped:
        recipes.check(recipe)
        recipes.check_key(recipe, recipes.parse_key(recipe["key"]), "sm_90a", store.KEY_VERSION, [])
        broken = dict(recipe, options="--enable-tvm-ffi --opt-level 2")
        with pytest.raises(recipes.NotRecordable, match="key differs from the recipe in options"):
            recipes.check_key(broken, recipes.parse_key(recipe["key"]), "sm_90a", store.KEY_VERSION, [])


REPLAY = r'''
import importlib.util, json, os, sys
lib, smoke, cases_file, out = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(lib, "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
recipes = common.load_module("dsv4probe_kernelrecipe", smoke)


class Tripwire:
    """Any import of the DSL or CUDA's bindings (none is installed here) is noted and refused."""
    asked = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cutlass", "cuda"):
            self.asked.append(name)
            raise ImportError("tripwire: " + name)
        return None


sys.meta_path.insert(0, Tripwire())
real_os = sys.modules["os"]
rows = []
with open(cases_file) as fh:
    cases = json.load(fh)
for call, recipe in cases:
    Tripwire.asked[:] = []
    try:
        if call == "args":
            recipes.replay_args(recipe, lambda tensor: None, [])
        else:
            recipes.replay_callable(recipe)
        result = "replayed"
    except recipes.NotRecordable as exc:
        result = "refused: " + str(exc)
    except BaseException as exc:
        result = "raised %s: %s" % (type(exc).__name__, exc)
    rows.append({"result": result, "asked": list(Tripwire.asked)})
with open(out, "w") as fh:
    json.dump({"rows": rows, "os_intact": sys.modules["os"] is real_os}, fh)
'''


def _replay(tmp_path: Path, root: Path, cases: list) -> dict:
    (tmp_path / "replay.py").write_text(REPLAY)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    out = tmp_path / "replayed.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "DSV4_DOCTOR_"))}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, str(tmp_path / "replay.py"), str(PROBE_DIR), str(_smoke()),
                           str(tmp_path / "cases.json"), str(out)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_recipe_chooses_no_code_a_number_type_a_builtin_or_a_module_other_than_its_hashed_file(tmp_path):
    """In a fresh interpreter (no DSL installed: any import of it trips), each hostile recipe is refused and nothing
    of it is imported: not env_manager (which imports os), not a module the recipe names beside its hashed file, not
    a Megatron module outside the kernel folder. A recipe that is fine is replayed, its module imported as its path
    names it (its parent packages, then its file)."""
    root, markers = tmp_path / "site", tmp_path / "markers"
    k = KERNEL_FOLDER
    _plant(root, markers, {f"{k}/planted_ok.py": "", f"{k}/planted_kernels.py": "", f"{k}/sidefx.py": "",
                           f"{k}/planted_os.py": "", f"{k}/planted_chain.py": "",
                           f"{k}/planted_reexport.py": "\nfrom .planted_ok import launch  # noqa\n",
                           "megatron/training/planted_train.py": ""})
    system = f"touch {markers}/ran-os-system"
    number_cases = [_number("cutlass.base_dsl.env_manager", "os.system", system),
                    _number("cutlass", "base_dsl.env_manager.os.system", system),
                    {"kind": "plain", "data": {"dataclass": "cutlass.base_dsl.env_manager", "name": "os.system",
                                               "fields": {}}}]
    builtin_cases = [_plain_type("builtins", name) for name in ("eval", "exec", "__import__")]
    ok = _recipe(root, f"{k}/planted_ok.py")
    cases = [["args", dict(ok, args=[a])] for a in number_cases + builtin_cases]
    cases += [
        ["callable", _recipe(root, f"{k}/planted_kernels.py", module=f"{k.replace('/', '.')}.sidefx")],
        ["callable", _recipe(root, f"{k}/planted_os.py", module="os")],
        ["callable", _recipe(root, f"{k}/planted_chain.py", qualname="os.system")],
        ["callable", _recipe(root, "megatron/training/planted_train.py")],
        ["callable", _recipe(root, f"{k}/planted_reexport.py")],  # `launch` is planted_ok's, not this file's
        ["args", dict(ok, args=[_plain_type("builtins", "int")])],  # allowed: no import
        ["callable", ok],  # fine: imported as its path names it
    ]
    got = _replay(tmp_path, root, cases)
    rows = got["rows"]
    for row in rows[:-2]:
        assert row["result"].startswith("refused: "), rows
        assert row["asked"] == [], rows  # nothing of the DSL was reached
    assert "outside the allow-list" in rows[0]["result"] and "outside the allow-list" in rows[3]["result"]
    assert "not its file's" in rows[6]["result"] and "not its file's" in rows[7]["result"]
    assert "outside the kernel folders" in rows[9]["result"]
    assert "not a function defined in" in rows[10]["result"]
    assert rows[-2]["result"] == "replayed" and rows[-1]["result"] == "replayed", rows
    assert got["os_intact"]
    dotted = KERNEL_FOLDER.replace("/", ".")
    parents = {"package " + ".".join(KERNEL_FOLDER.split("/")[:n]) for n in range(1, 5)}
    # Only the fine recipe's module, its parent packages and the re-exporting hashed file (whose own import runs it)
    # were imported; no shell command ran.
    assert sorted(p.name for p in markers.iterdir()) == sorted(parents | {f"{dotted}.planted_ok",
                                                                          f"{dotted}.planted_reexport"})


# --- Reading recipe files: a 100,000-deep nest is a refusal, never a crash --------------------------------------------

def test_a_deeply_nested_recipes_file_or_store_entry_is_a_usage_error_naming_it(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP_JSON)
    store = tmp_path / "store"
    store.mkdir()
    (store / ("aot-" + "2" * 40 + ".recipe.json")).write_text(json.dumps(_valid()))
    entry = store / ("aot-" + "3" * 40 + ".recipe.json")
    entry.write_text(DEEP_JSON)
    deeper_than_a_recipe = tmp_path / "forty.json"
    deeper_than_a_recipe.write_text(json.dumps([_deep_value(20)]))
    for path, named in ((deep, deep), (store, entry), (deeper_than_a_recipe, deeper_than_a_recipe)):
        with pytest.raises(UsageError, match=f"--recipes {named}: not a re"):
            read_recipes(path)
    assert read_recipes(shipped_recipes())  # the shipped ones nest 5 levels


def test_warm_with_a_deeply_nested_recipes_file_ends_with_a_usage_error(tmp_path):
    """The command itself: exit 2 naming the file, no traceback (an uncaught RecursionError is exit 3)."""
    if os.geteuid() != 0:
        pytest.skip("warm reads its recipes as root")
    from conftest import run_doctor

    deep = tmp_path / "deep.json"
    deep.write_text(DEEP_JSON)
    done = run_doctor("warm", "--gpu-arch", "9.0", "--into", str(tmp_path / "kernels"), "--recipes", str(deep))
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert f"--recipes {deep}: not a readable JSON file (" in done.stderr and "RecursionError" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_prewarm_reads_a_deep_nest_as_no_recipes_and_no_answer(tmp_path, monkeypatch):
    prewarm = probe_modules.load("dsv4probe_prewarm")
    deep = tmp_path / "kernel_recipes.json"
    deep.write_text(DEEP_JSON)
    monkeypatch.setattr(prewarm, "RECIPES", str(deep))
    assert prewarm.shipped_recipes("sm_90a") == []
    assert prewarm.recorded_dsl({"key": DEEP_JSON}) is None
    shipped = json.loads(shipped_recipes().read_text())
    nested = dict(shipped[0], args=[{"kind": "plain", "data": _deep_value(40)}])
    deep.write_text(json.dumps([shipped[0], nested]))
    assert prewarm.shipped_recipes("sm_90a") == [shipped[0]]  # deeper than any recipe: left out
    answer = tmp_path / "prewarm-0.json"
    answer.write_text(DEEP_JSON)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    got = prewarm.finish({"procs": [{"proc": done, "out": str(answer), "log": "", "recipes": 1}], "started": 0.0,
                          "arch": "sm_90a", "recipes": 1})
    assert got["counts"] == {"failed": 1}, got


# --- The warm probe and the --deep prewarm, with the real DSL: refused recipes run nothing --------------------------

DRIVER = r'''
import importlib.util, json, os, sys
lib, smoke, mode, arg_file, out = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(lib, "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
with open(arg_file) as fh:
    arg = json.load(fh)
if mode == "warm":
    result = common.load_module("dsv4probe_warm_compile", smoke).answer(arg)
    recipes = sys.modules["dsv4probe_kernelrecipe"]
    import cutlass.base_dsl.env_manager as env_manager
    result["env_manager_reaches_os_system"] = env_manager.os.system is os.system
    result["allowed"] = {name: getattr(recipes.allowed_class(name), "__qualname__", None)
                         for name in sorted(recipes.DSL_NUMBERS) + sorted(recipes.DATACLASSES)}
else:
    prewarm = common.load_module("dsv4probe_prewarm", smoke)
    prewarm.RECIPES = arg["recipes_file"]
    result = prewarm.finish(prewarm.start({}, arg["outdir"], "sm_90a"), grace_s=240)
with open(out, "w") as fh:
    json.dump(result, fh)
'''


def _sites() -> list[Path]:
    from test_kernel_store import _sites as store_sites
    from wheels import ensure

    return [*store_sites(), ensure("nvidia-cudnn-frontend-1.27.0")]


def _drive(tmp_path: Path, root: Path, mode: str, arg: dict) -> dict:
    kernelcache.reset()
    cache = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "cache"), kernelcache.IMAGE_ENV: "off"})
    (tmp_path / "driver.py").write_text(DRIVER)
    arg_file = tmp_path / f"arg-{mode}.json"
    arg_file.write_text(json.dumps(arg))
    out = tmp_path / f"out-{mode}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "DSV4_DOCTOR_"))}
    env.update(cache.env_for(True), PYTHONPATH=os.pathsep.join(map(str, [*_sites(), root])),
               DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR), CUTE_DSL_ARCH="sm_90a", CUDA_VISIBLE_DEVICES="")
    try:
        done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(PROBE_DIR), str(_smoke()), mode,
                               str(arg_file), str(out)], env=env, capture_output=True, text=True, timeout=400,
                              pass_fds=cache.pass_fds)
    finally:
        kernelcache.reset()
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _hostile(root: Path, markers: Path) -> tuple[list[dict], dict]:
    """Recipes that must not run anything (one planted module each, so that any import shows), and the frontend's
    CompactifyKernel recipe as shipped, for a control."""
    k = KERNEL_FOLDER
    names = ["system", "chain", "eval", "exec", "import", "state", "sidefx_file", "key", "arch", "deep_key"]
    _plant(root, markers, {**{f"{k}/planted_{n}.py": "" for n in names}, f"{k}/sidefx.py": "",
                           f"{k}/planted_ok.py": ""})
    system = f"touch {markers}/ran-os-system"

    def recipe(name, **kw):
        return _recipe(root, f"{k}/planted_{name}.py", **kw)

    numeric = ["numeric", "cutlass.base_dsl.env_manager.os.system", "runtime"]
    hostile = [
        recipe("system", args=[_number("cutlass.base_dsl.env_manager", "os.system", system)], key_args=[numeric]),
        recipe("chain", args=[_number("cutlass", "base_dsl.env_manager.os.system", system + "-chain")],
               key_args=[numeric]),
        *[recipe(n, args=[_plain_type("builtins", b)], key_args=[["type", "builtins." + b]])
          for n, b in (("eval", "eval"), ("exec", "exec"), ("import", "__import__"))],
        recipe("state", qualname="Kernel", state={"loader": {"type": "builtins", "name": "__import__"}}),
        recipe("sidefx_file", module=f"{k.replace('/', '.')}.sidefx"),
        recipe("key", key={"options": "--enable-tvm-ffi"}),  # the recorded key is not this recipe's
        recipe("arch", key={"arch": "sm_100a"}),
        dict(recipe("deep_key"), key="[" * 30_000 + "]" * 30_000),  # within the key's length: its decoder refuses
    ]
    shipped = next(r for r in json.loads(shipped_recipes().read_text())
                   if r.get("object", {}).get("qualname") == "CompactifyKernel")
    dump = markers.parent / "dump"
    dump.mkdir()
    options = shipped["options"] + f" --keep-ptx --dump-dir {dump}"
    dumping = dict(shipped, options=options, key=json.dumps(dict(json.loads(shipped["key"]), options=options)))
    hostile.append(dumping)  # a real kernel whose options would write files as root where the recipe says
    return hostile, shipped


@pytest.mark.slow
def test_the_warm_probe_refuses_hostile_recipes_before_any_of_them_runs(tmp_path):
    """One warm probe (the real DSL 4.5.2, the frontend 1.27.0's kernels) gets every hostile recipe and a fine one:
    each hostile one is "not warmed" and left no trace (no module of it imported, no package above it, no shell
    command, no file dumped); the frontend's CompactifyKernel is stored. Every allow-listed class is one of the real
    DSL's; env_manager does reach os.system, which is why no recipe may name it."""
    root, markers = tmp_path / "site", tmp_path / "markers"
    hostile, shipped = _hostile(root, markers)
    fine = _recipe(root, f"{KERNEL_FOLDER}/planted_ok.py")
    got = _drive(tmp_path, root, "warm", {"arch": "sm_90a", "store": "user", "recipes": [*hostile, fine, shipped]})
    rows = got["evidence"]["kernels"]
    assert [r["result"] for r in rows[:len(hostile)]] == ["not warmed"] * len(hostile), rows
    assert "differs from the recipe in options" in rows[7]["why"] and "in arch" in rows[8]["why"], rows
    assert "options" in rows[10]["why"], rows
    assert rows[-2]["result"] in ("not warmed", "failed"), rows  # imported, then refused as no jit function
    assert rows[-1]["result"] == "stored", rows
    dotted = KERNEL_FOLDER.replace("/", ".")
    parents = {"package " + ".".join(KERNEL_FOLDER.split("/")[:n]) for n in range(1, 5)}
    assert sorted(p.name for p in markers.iterdir()) == sorted(parents | {f"{dotted}.planted_ok"})
    assert not list((tmp_path / "dump").iterdir())
    assert got["env_manager_reaches_os_system"] is True
    assert got["allowed"] == {name: name.rsplit(".", 1)[1] for name in got["allowed"]} and len(got["allowed"]) == 26


@pytest.mark.slow
def test_a_deep_checks_prewarm_follows_the_same_rules(tmp_path):
    """The --deep prewarm's worker processes get the recipes from the shipped file's place: the same hostile ones
    are "not warmed" there, and none of them ran."""
    root, markers = tmp_path / "site", tmp_path / "markers"
    hostile, _ = _hostile(root, markers)
    hostile = hostile[:-2]  # the deep key is dropped (unreadable key: the DSL is not known), the dumping one compiles
    (tmp_path / "recipes.json").write_text(json.dumps(hostile))
    outdir = tmp_path / "smoke-out"
    outdir.mkdir()
    got = _drive(tmp_path, root, "prewarm", {"recipes_file": str(tmp_path / "recipes.json"), "outdir": str(outdir)})
    assert got.get("counts") == {"not warmed": len(hostile)}, got
    assert not list(markers.iterdir()), sorted(p.name for p in markers.iterdir())


@pytest.mark.slow
def test_warm_of_a_store_folder_with_hostile_recipes_runs_none_of_them(tmp_path):
    """`dsv4-doctor warm --recipes FOLDER`, as root, over a store whose aot-*.recipe.json another user wrote."""
    if os.geteuid() != 0:
        pytest.skip("warm runs as root")
    from conftest import run_doctor

    root, markers = tmp_path / "site", tmp_path / "markers"
    hostile, _ = _hostile(root, markers)
    store = tmp_path / "store"
    store.mkdir()
    for i, recipe in enumerate(hostile[:-1]):
        (store / f"aot-{i:040x}.recipe.json").write_text(json.dumps(recipe))
    done = run_doctor("warm", "--gpu-arch", "9.0", "--into", str(tmp_path / "img" / "kernels"), "--recipes",
                      str(store), "-f", "json", timeout=300, sites=(*_sites(), root))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["kernels"]
    assert [r["result"] for r in rows] == ["not warmed"] * (len(hostile) - 1), rows
    assert not list(markers.iterdir()), sorted(p.name for p in markers.iterdir())
