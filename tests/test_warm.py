"""`dsv4-doctor warm`: a kernel's recipe, recorded when a check stored it, made again without a GPU (real CuTe DSL
4.5.2 on this CPU), stored in the image-wide store under the key a check computes, and loaded by the next check.

A check's tensors here are CuTe tensors over a DLPack producer that says "CUDA device 0" (what the warm replay
builds too): this CPU has no CUDA tensors, and the DSL compiles for the address space a tensor names, never its
data. The recipes' folder allow-list (Megatron's and the frontend's kernel folders) is widened to this test's own
package in the drivers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import probe_modules
from conftest import run_doctor
from dsv4_doctor.kernels import cache as kernelcache

pytestmark = pytest.mark.slow

KERNELS = '''
import cutlass
import cutlass.cute as cute


@cute.kernel
def _scale_kernel(x: cute.Tensor, y: cute.Tensor, n: cutlass.Int32):
    tid, _, _ = cute.arch.thread_idx()
    if tid < n:
        y[tid] = x[tid] * 2.0


@cute.jit
def scale_launch(x: cute.Tensor, y: cute.Tensor, n: cutlass.Int32, block: cutlass.Constexpr, stream):
    _scale_kernel(x, y, n).launch(grid=[1, 1, 1], block=[block, 1, 1], stream=stream)


class Scaler:
    """As the frontend's kernel classes: a NamedBarrier built in __init__, more attributes set while compiling (a
    recipe records the object as built), a trailing parameter left to its None default (a keyword-wrapped compile)."""

    def __init__(self, block):
        self.block = block
        self.dtype = cutlass.Float32
        self.sync = cutlass.pipeline.NamedBarrier(barrier_id=3, num_threads=block)

    @cute.jit
    def __call__(self, x: cute.Tensor, y: cute.Tensor, n: cutlass.Int32, stream, offsets=None):
        self.traced = object()
        _scale_kernel(x, y, n).launch(grid=[1, 1, 1], block=[self.sync.num_threads, 1, 1], stream=stream)
'''

SITE = '''
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack, make_fake_stream

from {package} import kernels


def site_compile(make_tensor, fn_name):
    x = from_dlpack(make_tensor(), assumed_align=16, enable_tvm_ffi=True).mark_layout_dynamic(leading_dim=0)
    y = from_dlpack(make_tensor(), assumed_align=16, enable_tvm_ffi=True).mark_layout_dynamic(leading_dim=0)
    if fn_name == "Scaler":
        return cute.compile(kernels.Scaler(64), x, y, cutlass.Int32(40), make_fake_stream(),
                            options="--enable-tvm-ffi --gpu-arch sm_90a")
    return cute.compile(kernels.scale_launch, x, y, cutlass.Int32(40), 128, make_fake_stream(),
                        options="--enable-tvm-ffi --gpu-arch sm_90a")
'''

DRIVER = r'''
import importlib.util, json, os, sys
lib, smoke, root, out, mode = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(lib, "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
recipes = common.load_module("dsv4probe_kernelrecipe", smoke)
rules = sys.modules["dsv4probe_kernelrecipe_rules"]  # the recipes' part that says which folders a recipe may name
rules.FOLDERS = ("kernsite/",) + rules.FOLDERS  # this test's package stands for megatron / cudnn
sys.path.insert(0, root)
if mode == "check":
    store = common.load_module("dsv4probe_kernelstore", smoke)
    store.SITES[("kernsite/site.py", "site_compile")] = "this test's call site"
    store.SITES[("cudnn/deepseek_sparse_attention/site.py", "site_compile")] = "this test's call site, in the " \
        "frontend's kernel folder"
    store.SITES[("feside/site.py", "site_compile")] = "this test's call site of the published frontend's kernels"
    note = store.install(store.arch_of(None, None) if os.environ.get("CUTE_DSL_ARCH") else "sm_90a")
    import cutlass.cute
    store.export_only_without_a_gpu()  # this CPU stands for the GPU: a keyword-wrapped kernel only exported here
    import glob, importlib
    site_file = sorted(glob.glob(os.path.join(root, "**", "site.py"), recursive=True))[0]
    site = importlib.import_module(os.path.relpath(site_file, root)[:-3].replace(os.sep, "."))
    for name in json.loads(sys.argv[6]):
        site.site_compile(lambda: recipes.CudaShaped("Float32", [64], [1]), name)
    result = {"note": note, "summary": store.summary()}
elif mode == "prewarm":
    prewarm = common.load_module("dsv4probe_prewarm", smoke)
    arg = json.loads(sys.argv[6])
    prewarm.RECIPES = arg["recipes_file"]
    started = prewarm.start({}, arg["outdir"], "sm_90a")
    result = prewarm.finish(started, grace_s=240)
else:
    warm = common.load_module("dsv4probe_warm_compile", smoke)
    result = warm.answer(json.loads(sys.argv[6]))
with open(out, "w") as fh:
    json.dump(result, fh)
'''


def _sites() -> list[Path]:
    from test_kernel_store import _sites as store_sites

    return store_sites()


def _package(root: Path, name: str = "kernsite") -> Path:
    """This test's kernels and call site in the package `name` (dotted: each level a package)."""
    pkg = root
    for part in name.split("."):
        pkg = pkg / part
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(KERNELS)
    (pkg / "site.py").write_text(SITE.replace("{package}", name))
    return root


def _drive(tmp_path: Path, root: Path, mode: str, arg, env: dict, fds: tuple[int, ...]) -> dict:
    from dsv4_doctor.engine.probes import PROBE_DIR

    driver = tmp_path / "warm_driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / f"out-{os.urandom(4).hex()}.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "DSV4_DOCTOR_"))}
    base.update(PYTHONPATH=os.pathsep.join(map(str, _sites())), DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR))
    base.update(env)
    smoke = probe_modules.script("dsv4probe_warm").parent
    done = subprocess.run([sys.executable, str(driver), str(PROBE_DIR), str(smoke), str(root), str(out), mode,
                           json.dumps(arg)], env=base, capture_output=True, text=True, timeout=300, pass_fds=fds)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture
def image(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the image-wide store is root's: made here as root")
    path = tmp_path / "img" / "kernels"
    path.mkdir(parents=True)
    for p in (path.parent, path):
        os.chmod(p, 0o755)
    yield path
    kernelcache.reset()


def test_a_recipe_recorded_by_a_check_is_warmed_without_a_gpu_and_served_to_the_next_check(tmp_path, image):
    root = _package(tmp_path / "pkgroot")
    kernelcache.reset()
    first = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "a"), kernelcache.IMAGE_ENV: str(image)})
    got = _drive(tmp_path, root, "check", ["scale_launch", "Scaler"], first.env_for(True), first.pass_fds)
    assert [c["result"] for c in got["summary"]["calls"]] == ["compiled", "compiled"], got
    assert all(c["stored"] and "no_recipe" not in c for c in got["summary"]["calls"]), got
    recipe_files = sorted(Path(first.directory).glob("aot-*.recipe.json"))
    assert len(recipe_files) == 2
    recipes = [json.loads(p.read_text()) for p in recipe_files]
    assert {r["arch"] for r in recipes} == {"sm_90a"} and {"function" in r or "object" in r for r in recipes} == {True}

    # warm: the image-wide store only, written; the arch from CUTE_DSL_ARCH; no per-user cache.
    kernelcache.reset()
    verified = kernelcache.open_verified(str(image), root_only=True)
    warm_cache = kernelcache.hold_for_warm(verified)
    verified.close()
    env = dict(warm_cache.env_for(True), DSV4_DOCTOR_AOT_WARM="1", CUTE_DSL_ARCH="sm_90a")
    answer = _drive(tmp_path, root, "warm", {"arch": "sm_90a", "recipes": recipes + [dict(recipes[0], arch="sm_100a")]},
                    env, warm_cache.pass_fds)
    rows = answer["evidence"]["kernels"]
    assert [r["result"] for r in rows] == ["stored", "stored", "other arch"], rows
    stored = sorted(p.name for p in image.glob("aot-*.o"))
    assert stored == sorted(r["entry"] for r in recipes)  # exactly the keys the check looked up
    for p in image.iterdir():
        st = p.stat()
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644

    # The next check, with an empty per-user cache: both kernels from the image-wide store, nothing written.
    kernelcache.reset()
    second = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "b"), kernelcache.IMAGE_ENV: str(image)})
    got = _drive(tmp_path, root, "check", ["scale_launch", "Scaler"], second.env_for(True), second.pass_fds)
    assert [(c["result"], c.get("where")) for c in got["summary"]["calls"]] == [("served", "image")] * 2, got
    assert not list(Path(second.directory).glob("aot-*"))


def test_a_recipe_whose_source_changed_or_that_names_other_code_is_not_warmed(tmp_path, image):
    root = _package(tmp_path / "pkgroot")
    kernelcache.reset()
    first = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "a"), kernelcache.IMAGE_ENV: "off"})
    _drive(tmp_path, root, "check", ["scale_launch"], first.env_for(True), first.pass_fds)
    [recipe] = [json.loads(p.read_text()) for p in Path(first.directory).glob("aot-*.recipe.json")]
    changed = dict(recipe, function=dict(recipe["function"], sha256="0" * 64))
    outside = dict(recipe, function=dict(recipe["function"], file="os.py"))
    climbing = dict(recipe, function=dict(recipe["function"], file="kernsite/../../etc/passwd"))
    key = json.loads(recipe["key"])
    other_dsl = dict(recipe, key=json.dumps(dict(key, stack=dict(key["stack"], dsl="4.8.1"))))
    kernelcache.reset()
    verified = kernelcache.open_verified(str(image), root_only=True)
    warm_cache = kernelcache.hold_for_warm(verified)
    verified.close()
    env = dict(warm_cache.env_for(True), DSV4_DOCTOR_AOT_WARM="1", CUTE_DSL_ARCH="sm_90a")
    answer = _drive(tmp_path, root, "warm", {"arch": "sm_90a", "recipes": [changed, outside, climbing, other_dsl]},
                    env, warm_cache.pass_fds)
    rows = answer["evidence"]["kernels"]
    assert [r["result"] for r in rows] == ["not warmed"] * 4, rows
    assert "another source" in rows[0]["why"] and "outside" in rows[1]["why"] and "outside" in rows[2]["why"]
    assert "recorded with nvidia-cutlass-dsl 4.8.1, this stack has 4.5.2" in rows[3]["why"]
    assert not list(image.iterdir())


def test_the_warm_command(tmp_path):
    """As root: the store made root's and 0755, a recipe for code this interpreter lacks said and not warmed (exit
    0: nothing failed), JSON on request; a recipes file that is no JSON is a usage error; as another user, refused."""
    if os.geteuid() != 0:
        pytest.skip("warm runs as root")
    into = tmp_path / "opt" / "kernels"
    recipe = {"arch": "sm_90a", "function": {"file": "megatron/core/none.py", "module": "x", "qualname": "f",
                                             "sha256": "0" * 64}, "args": [], "options": None, "key": "{}"}
    (tmp_path / "r.json").write_text(json.dumps([recipe]))
    done = run_doctor("warm", "--gpu-arch", "9.0", "--into", str(into), "--recipes", str(tmp_path / "r.json"),
                      "-f", "json", sites=tuple(_sites()))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["schema"] == "dsv4-doctor.warm/1" and data["arch"] == "sm_90a"
    assert [k["result"] for k in data["kernels"]] == ["not warmed"], data
    st = into.stat()
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o755
    (tmp_path / "bad.json").write_text("{not json")
    bad = run_doctor("warm", "--gpu-arch", "9.0", "--into", str(into), "--recipes", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and "not a readable JSON file" in bad.stderr
    from test_hardening_cache import as_uid

    from dsv4_doctor.kernels.warm import warm

    other = as_uid(4321, lambda: warm(sys.executable, "9.0", str(into), None, 30).status)
    assert "UsageError" in other["error"] and "run `dsv4-doctor warm` as root" in other["error"], other


def test_a_user_who_is_not_root_uses_the_root_owned_image_store_and_never_a_store_another_user_owns(tmp_path):
    """The image-wide store is root's and read by every user: as uid 4321 the decision holds it (descriptor 212)
    and an entry in it passes the entry rule; a store owned by another user is refused."""
    if os.geteuid() != 0:
        pytest.skip("made here as root")
    import shutil
    import tempfile

    from test_hardening_cache import as_uid

    base = Path(tempfile.mkdtemp(prefix="image-test-"))
    try:
        os.chmod(base, 0o755)
        image = base / "kernels"
        image.mkdir(mode=0o755)
        (image / "aot-x.o").write_bytes(b"\0")
        os.chmod(image / "aot-x.o", 0o644)
        home = base / "home"
        home.mkdir()
        os.chown(home, 4321, 4321)

        def decide(path: str) -> list:
            from dsv4_doctor.kernels import cachedir

            cache = kernelcache.prepare({"XDG_CACHE_HOME": str(home), kernelcache.IMAGE_ENV: path})
            fd = cachedir.open_entry(kernelcache.IMAGE_FD, "aot-x.o", path, root_only=True) if cache.image else None
            if fd is not None:
                os.close(fd)
            return [cache.image, cache.image_note, list(cache.pass_fds)]

        got = as_uid(4321, decide, str(image))
        assert got.get("result", [None])[0] == str(image), got
        assert got["result"][2] == [kernelcache.PROBE_FD, kernelcache.IMAGE_FD]
        os.chown(image, 4321, 4321)  # a store its reader owns is no image-wide store
        got = as_uid(4321, decide, str(image))
        assert got["result"][0] is None and "not root" in got["result"][1], got
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_shipped_recipes_cross_compile_here_for_the_code_that_is_installed(tmp_path):
    """checks/smoke/kernel_recipes.json (recorded by `check --deep` on an H100, docs/gpu-runs/2026-12-06-h200-speed)
    on this CPU with the published cuDNN frontend 1.27.0 wheel: its frontend kernels are compiled for sm_90a and
    stored; Megatron's (the dev branch, not installed here) are said and not warmed."""
    if os.geteuid() != 0:
        pytest.skip("warm runs as root")
    from wheels import ensure

    from dsv4_doctor.kernels.warm import shipped_recipes

    shipped = json.loads(shipped_recipes().read_text())
    assert {r["arch"] for r in shipped} == {"sm_90a"} and len(shipped) >= 7
    into = tmp_path / "img" / "kernels"
    done = run_doctor("warm", "--gpu-arch", "9.0", "--into", str(into), "-f", "json", timeout=600,
                      sites=(*_sites(), ensure("nvidia-cudnn-frontend-1.27.0")))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["kernels"]
    by_file = {}
    for row in rows:
        by_file.setdefault(row["file"].split("/")[0], []).append(row)
    assert {r["result"] for r in by_file["cudnn"]} == {"stored"} and len(by_file["cudnn"]) >= 3, by_file["cudnn"]
    assert all(r["result"] == "not warmed" and "not installed here" in r["why"] for r in by_file["megatron"])
    assert len(list(into.glob("aot-*.o"))) == len(by_file["cudnn"])


def test_a_deep_checks_prewarm_makes_the_shipped_recipes_beside_the_build_which_then_serves_them(tmp_path):
    """The smoke probe's prewarm (dsv4probe_prewarm): the recipes a check recorded, split over worker processes (the
    warm probe, GPU hidden, into the per-user store), stored under the keys the next check looks up; a second prewarm
    finds them stored. The package is the frontend's kernel folder: a worker process allows only its and Megatron's."""
    root = _package(tmp_path / "pkgroot", "cudnn.deepseek_sparse_attention")
    kernelcache.reset()
    first = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "a"), kernelcache.IMAGE_ENV: "off"})
    _drive(tmp_path, root, "check", ["scale_launch", "Scaler"], first.env_for(True), first.pass_fds)
    recipes = [json.loads(p.read_text()) for p in sorted(Path(first.directory).glob("aot-*.recipe.json"))]
    assert len(recipes) == 2 and all(r.get("compile_s") for r in recipes), recipes
    (tmp_path / "recipes.json").write_text(json.dumps(recipes + [dict(recipes[0], arch="sm_100a")]))

    kernelcache.reset()
    second = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "b"), kernelcache.IMAGE_ENV: "off"})
    env = dict(second.env_for(True), PYTHONPATH=os.pathsep.join(map(str, [*_sites(), root])))
    outdir = tmp_path / "smoke-out"
    outdir.mkdir()
    arg = {"recipes_file": str(tmp_path / "recipes.json"), "outdir": str(outdir)}
    got = _drive(tmp_path, root, "prewarm", arg, env, second.pass_fds)
    assert got["counts"] == {"stored": 2} and got["arch"] == "sm_90a" and got["stopped_unfinished"] == 0, got
    assert sorted(p.name for p in Path(second.directory).glob("aot-*.o")) == sorted(r["entry"] for r in recipes)
    assert not list((outdir / "prewarm-pending").iterdir())  # every marker gone
    (tmp_path / "smoke-out-2").mkdir()  # each smoke probe has a temporary folder of its own
    again = _drive(tmp_path, root, "prewarm", dict(arg, outdir=str(tmp_path / "smoke-out-2")), env, second.pass_fds)
    assert again["counts"] == {"already stored": 2}, again
    served = _drive(tmp_path, root, "check", ["scale_launch", "Scaler"], second.env_for(True), second.pass_fds)
    assert [c["result"] for c in served["summary"]["calls"]] == ["served", "served"], served


def test_a_build_waits_for_a_live_prewarm_of_its_kernel_and_never_for_a_dead_one(tmp_path, monkeypatch):
    store = probe_modules.load("dsv4probe_kernelstore")
    monkeypatch.setenv(store.PENDING_ENV, str(tmp_path))
    marker = tmp_path / "aot-x.o.pending"
    assert store.await_pending("aot-x.o") is None  # no prewarm makes it
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        marker.write_text(str(worker.pid))
        subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(1.0); os.unlink({str(marker)!r})"])
        waited = store.await_pending("aot-x.o")
        assert waited is not None and 0.8 <= waited < 10, waited
        marker.write_text(str(worker.pid))
        assert store.await_pending("aot-x.o", limit_s=0.5) >= 0.5  # never past its limit
    finally:
        worker.kill()
        worker.wait()
    assert store.await_pending("aot-x.o") < 1  # the maker is gone: compile at once


def test_a_warm_probe_that_hangs_is_stopped_at_its_timeout_and_said(tmp_path):
    """An interpreter whose probe never answers: `warm` ends at its timeout with an error result, never hangs."""
    if os.geteuid() != 0:
        pytest.skip("warm runs as root")
    import time

    from dsv4_doctor.kernels.warm import warm

    hanging = tmp_path / "python"
    hanging.write_text("#!/bin/sh\nexec sleep 300\n")
    hanging.chmod(0o755)
    recipe = {"arch": "sm_90a", "function": {"file": "cudnn/x.py", "module": "cudnn.x", "qualname": "f",
                                             "sha256": "0" * 64}, "args": [], "options": None, "key": "{}"}
    (tmp_path / "r.json").write_text(json.dumps([recipe]))
    start = time.monotonic()
    result = warm(str(hanging), "9.0", str(tmp_path / "img" / "kernels"), str(tmp_path / "r.json"), 3)
    assert time.monotonic() - start < 30
    assert result.status == "error" and "warm probe timed out after 3 s" in result.summary, result
    kernelcache.reset()


FRONTEND_SITE = '''
import sys

import cutlass
import cutlass.cute as cute
from cuda.bindings import driver
from cutlass.cute.runtime import from_dlpack


def tensor(dtype, shape):
    stride = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        stride[i] = stride[i + 1] * shape[i + 1]
    made = sys.modules["dsv4probe_kernelrecipe"].CudaShaped(dtype, shape, stride)
    # as the frontend converts a torch tensor (utils/tensor_conversion.py to_cute_tensor)
    return from_dlpack(made, assumed_align=16, enable_tvm_ffi=True).mark_layout_dynamic(leading_dim=len(shape) - 1)


def site_compile(_make, which):
    from cudnn.deepseek_sparse_attention.indexer_backward.indexer_backward_sm90 import IndexerBackwardSm90
    from cudnn.deepseek_sparse_attention.indexer_forward.indexer_fwd_sm90 import IndexerForwardSm90

    options = "--enable-tvm-ffi --gpu-arch sm_90a"
    if which == "IndexerForwardSm90":
        # As indexer_forward/_interface_sm90.py L237-263 builds and compiles it: BSHD, 64 query heads, one KV head.
        kernel = IndexerForwardSm90(cutlass.BFloat16, cutlass.BFloat16, head_dim=128, qhead_per_kvhead=64, ratio=4)
        return cute.compile(kernel, tensor("BFloat16", [1, 64, 64, 128]), tensor("BFloat16", [1, 64, 1, 128]),
                            tensor("BFloat16", [1, 64, 64]), None, None, tensor("Float32", [1, 64, 64]), None,
                            cutlass.Int32(1), cutlass.Int32(64), cutlass.Int32(64), cutlass.Float32(0.088), None,
                            None, None, driver.CUstream(0), options=options)
    # As indexer_backward_sm90.py L1580-1640 builds and compiles it (sparse top-k 512): 14 of its 15 parameters, the
    # last (mQCausalOffsets) left to its None default, so the DSL wraps it; a NamedBarrier among its attributes.
    kernel = IndexerBackwardSm90(head_dim=128, heads=64, block_I=128, topk=512, topk_indices_global=True)
    b, s, h, d, k = 1, 128, 64, 128, 512
    return cute.compile(kernel, tensor("BFloat16", [b, s, h, d]), tensor("BFloat16", [b, s, h]),
                        tensor("BFloat16", [b, s, d]), tensor("BFloat16", [b, s, h, d]), tensor("Float32", [b, s, h]),
                        tensor("Float32", [b, s, d]), tensor("Float32", [b, s, k]), tensor("Int32", [b, s, k]),
                        cutlass.Float32(0.088), driver.CUstream(0), None, None, cutlass.Int32(s), cutlass.Int32(s),
                        options=options)
'''


def test_the_frontends_indexer_kernels_are_recorded_as_built_warmed_and_served(tmp_path, image):
    """The published frontend 1.27.0's indexer kernels, compiled at a test site as its own sites compile them:
    IndexerForwardSm90 sets layouts on itself while it compiles (`_setup_attributes`), which no recipe can write
    down, so its recipe records the object as __init__ left it; IndexerBackwardSm90 holds a NamedBarrier and compiles
    to a keyword-wrapped function. `warm` builds both again under the very keys the check stored them by, and the
    next check is served both from the image-wide store."""
    from wheels import ensure

    root = tmp_path / "pkgroot"
    (root / "feside").mkdir(parents=True)
    (root / "feside" / "__init__.py").write_text("")
    (root / "feside" / "site.py").write_text(FRONTEND_SITE)
    env_sites = os.pathsep.join(map(str, [*_sites(), ensure("nvidia-cudnn-frontend-1.27.0")]))
    kernelcache.reset()
    first = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "a"), kernelcache.IMAGE_ENV: "off"})
    kernels = ["IndexerForwardSm90", "IndexerBackwardSm90"]
    got = _drive(tmp_path, root, "check", kernels, dict(first.env_for(True), PYTHONPATH=env_sites), first.pass_fds)
    calls = got["summary"]["calls"]
    assert [c["kernel"] for c in calls] == kernels, calls
    assert all(c["result"] == "compiled" and c["stored"] and "no_recipe" not in c for c in calls), calls
    recipes = {r["object"]["qualname"]: r for r in
               (json.loads(p.read_text()) for p in Path(first.directory).glob("aot-*.recipe.json"))}
    forward, backward = recipes["IndexerForwardSm90"], recipes["IndexerBackwardSm90"]
    assert "qhead_per_kvhead" in forward["object"]["state"]
    assert not any(name.startswith("sQ_layout") for name in forward["object"]["state"])  # set by the compile
    assert backward["object"]["state"]["compute_sync_barrier"] == {
        "dataclass": "cutlass.pipeline.helpers", "name": "NamedBarrier",
        "fields": {"barrier_id": {"value": 3}, "num_threads": {"value": 256}}}

    kernelcache.reset()
    verified = kernelcache.open_verified(str(image), root_only=True)
    warm_cache = kernelcache.hold_for_warm(verified)
    verified.close()
    env = dict(warm_cache.env_for(True), DSV4_DOCTOR_AOT_WARM="1", CUTE_DSL_ARCH="sm_90a", PYTHONPATH=env_sites)
    answer = _drive(tmp_path, root, "warm", {"arch": "sm_90a", "recipes": [forward, backward]}, env,
                    warm_cache.pass_fds)
    assert [r["result"] for r in answer["evidence"]["kernels"]] == ["stored", "stored"], answer
    assert sorted(p.name for p in image.glob("aot-*.o")) == sorted([forward["entry"], backward["entry"]])

    kernelcache.reset()
    second = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "b"), kernelcache.IMAGE_ENV: str(image)})
    got = _drive(tmp_path, root, "check", kernels, dict(second.env_for(True), PYTHONPATH=env_sites), second.pass_fds)
    assert [(c["result"], c.get("where")) for c in got["summary"]["calls"]] == [("served", "image")] * 2, got
