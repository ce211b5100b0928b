"""The doctor's AOT kernel store (checks/smoke/dsv4probe_kernelstore.py) against the real CuTe DSL (nvidia-cutlass-dsl
4.5.2 and apache-tvm-ffi 0.1.11) on this CPU: a host-only `@cute.jit` function and a GPU kernel built for sm_90a are
compiled, exported, loaded in a fresh process, and the loaded function is called. Each process is a real
subprocess with the cache directory the doctor opened and checked (descriptor 211), as a probe gets it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import probe_modules
from dsv4_doctor.kernels import cache as kernelcache

pytestmark = pytest.mark.slow

SITE = '''
import cutlass
import cutlass.cute as cute

# {tag}


@cute.jit
def host_add(a: cutlass.Int32, b: cutlass.Int32, k: cutlass.Constexpr):
    cute.printf("sum %d\\n", a + b + k)


@cute.jit
def host_sub(a: cutlass.Int32, b: cutlass.Int32, k: cutlass.Constexpr):
    cute.printf("diff %d\\n", a - b + k)


@cute.jit
def host_kw(a: cutlass.Int32, b: cutlass.Int32 = 1):
    cute.printf("kw %d\\n", a + b)


@cute.jit
def host_none(a: cutlass.Int32, offsets=None):
    if cutlass.const_expr(offsets is None):
        cute.printf("none %d\\n", a)


def site_compile(fn, *args, **kwargs):
    return cute.compile(fn, *args, **kwargs)


def elsewhere_compile(fn, *args, **kwargs):
    return cute.compile(fn, *args, **kwargs)
'''

DRIVER = r'''
import importlib.util, json, os, sys
lib, smoke, site_dir, out, plan = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(lib, "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
store = common.load_module("dsv4probe_kernelstore", smoke)
store.SITES[("kern_site.py", "site_compile")] = "this test's call site"
events = []
note = store.install(plan.get("arch", "sm_90"), events=events)
sys.path.insert(0, site_dir)
import cutlass
import kern_site

result = {"note": note, "types": [], "keys": []}
for call in plan["calls"]:
    fn = getattr(kern_site, call["fn"])
    args = [cutlass.Int32(a) for a in call["args"]] + call.get("static", [])
    compile_ = getattr(kern_site, call.get("site", "site_compile"))
    compiled = compile_(fn, *args, options=call.get("options", "--enable-tvm-ffi"))
    result["types"].append(type(compiled).__name__)
    if call.get("break_loaded") and isinstance(compiled, store.Served):
        compiled._loaded = lambda *a: (_ for _ in ()).throw(RuntimeError("a broken loaded kernel"))
    compiled(*[cutlass.Int32(a) for a in call.get("call", call["args"])])
if plan.get("keys"):
    import torch
    from cutlass.cute.runtime import from_dlpack

    def tensor(shape=(64,), dtype=torch.float32, dynamic=True, stride=None):
        t = torch.zeros(shape, dtype=dtype) if stride is None else torch.empty_strided(shape, stride, dtype=dtype)
        c = from_dlpack(t, assumed_align=16, enable_tvm_ffi=True)
        return c.mark_layout_dynamic(leading_dim=len(shape) - 1) if dynamic else c

    base = dict(fn=kern_site.host_add, args=[tensor(), cutlass.Int32(1), 3], options="--enable-tvm-ffi", arch="sm_90")
    variants = {
        "base": {}, "same again, other runtime value": {"args": [tensor(), cutlass.Int32(99), 3]},
        "a dynamic tensor of another size": {"args": [tensor((96,)), cutlass.Int32(1), 3]},
        "static value": {"args": [tensor(), cutlass.Int32(1), 4]},
        "qualified name": {"fn": kern_site.host_sub},
        "options": {"options": "--enable-tvm-ffi --opt-level 2"}, "arch": {"arch": "sm_100"},
        "dtype": {"args": [tensor(dtype=torch.float16), cutlass.Int32(1), 3]},
        "shape (static layout)": {"args": [tensor(dynamic=False), cutlass.Int32(1), 3]},
        "stride": {"args": [tensor((4, 16), stride=(32, 1), dynamic=False), cutlass.Int32(1), 3]},
        "stride, other": {"args": [tensor((4, 16), stride=(16, 1), dynamic=False), cutlass.Int32(1), 3]},
        "a dynamic stride": {"args": [tensor((4, 16), stride=(32, 1)), cutlass.Int32(1), 3]},
        "a dynamic stride, other": {"args": [tensor((4, 16), stride=(16, 1)), cutlass.Int32(1), 3]},
        "dynamic marking": {"args": [tensor(dynamic=False), cutlass.Int32(1), 3]},
    }
    for name, change in variants.items():
        v = dict(base, **change)
        result["keys"].append([name, store.call_key(v["fn"], v["args"], {}, v["options"], v["arch"])])
    key = sys.modules["dsv4probe_kernelstore_key"]  # the store's part that makes the key, loaded by path by the store
    key._STACK = dict(key._STACK, tvm_ffi="0.0.0")
    result["keys"].append(["tvm-ffi version", store.call_key(base["fn"], base["args"], {}, base["options"], "sm_90")])
    key._STACK = dict(key._STACK, compiler_library=["_cutlass_ir.so", 1, 2])
    result["keys"].append(["compiler library", store.call_key(base["fn"], base["args"], {}, base["options"], "sm_90")])
result["summary"] = store.summary()
result["events"] = events
with open(out, "w") as fh:
    json.dump(result, fh)
'''


def _sites() -> list[Path]:
    """The CuTe DSL as test_kernel_cache imports it, and tvm-ffi, which export_to_c and load_module need."""
    from test_kernel_cache import _dsl_sites
    from wheels import ensure

    return _dsl_sites() + [ensure("apache-tvm-ffi-0.1.11")]


def _site(folder: Path, tag: str = "one") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kern_site.py").write_text(SITE.replace("{tag}", tag))
    return folder


def _run(tmp_path: Path, site: Path, plan: dict, cache: kernelcache.KernelCache | None = None,
         extra_env: dict | None = None, background: bool = False):
    from dsv4_doctor.engine.probes import PROBE_DIR

    driver = tmp_path / "store_driver.py"
    if not driver.exists():
        # Written whole and renamed: a concurrent run must never start from a half-written driver.
        partial = tmp_path / f".store_driver-{os.urandom(4).hex()}.py"
        partial.write_text(DRIVER)
        partial.replace(driver)
    out = tmp_path / f"out-{os.urandom(4).hex()}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "DSV4_DOCTOR_"))}
    env.update(PYTHONPATH=os.pathsep.join(map(str, _sites())), DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR))
    fds: tuple[int, ...] = ()
    if cache is not None:
        env.update(cache.env_for(True))
        fds = cache.pass_fds
    env.update(extra_env or {})
    smoke = probe_modules.script("dsv4probe_kernelstore").parent
    argv = [sys.executable, str(driver), str(PROBE_DIR), str(smoke), str(site), str(out), json.dumps(plan)]
    if background:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                pass_fds=fds), out
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, pass_fds=fds)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


ADD = {"calls": [{"fn": "host_add", "args": [3, 4], "static": [5]}]}


@pytest.fixture
def cache(tmp_path):
    kernelcache.reset()
    made = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "xdg"), kernelcache.IMAGE_ENV: "off"})
    assert made.source == "doctor" and made.pass_fds == (kernelcache.PROBE_FD,), made.note
    yield made
    kernelcache.reset()


def _entries(cache) -> list[str]:
    return sorted(n for n in os.listdir(cache.directory) if n.startswith(("aot-", ".tmp-")))


def test_a_kernel_compiled_once_is_loaded_by_the_next_process_and_gives_the_same_result(tmp_path, cache):
    site = _site(tmp_path / "site")
    first, out1 = _run(tmp_path, site, ADD, cache)
    assert [c["result"] for c in first["summary"]["calls"]] == ["compiled"] and first["summary"]["calls"][0]["stored"]
    stored = ("aot-stored", first["summary"]["calls"][0]["entry"][:16])
    assert first["types"] == ["TVMFFIJitCompiledFunction"] and stored in [tuple(e) for e in first["events"]]
    entries = _entries(cache)
    assert len(entries) == 1 and entries[0].endswith(".o")
    assert (os.stat(os.path.join(cache.directory, entries[0])).st_mode & 0o777) == 0o600
    second, out2 = _run(tmp_path, site, ADD, cache)
    call = second["summary"]["calls"][0]
    assert call["result"] == "served" and call["where"] == "user" and second["types"] == ["Served"]
    assert "sum 12" in out1 and "sum 12" in out2  # the loaded kernel computes what the compiled one did


def test_each_keyed_part_changes_the_key_and_a_runtime_value_does_not(tmp_path, cache):
    site = _site(tmp_path / "site")
    keys = dict(_run(tmp_path, site, {"calls": [], "keys": True}, cache)[0]["keys"])
    base = keys.pop("base")
    assert keys.pop("same again, other runtime value") == base  # an Int32 is passed at each call, not compiled in
    assert keys.pop("a dynamic tensor of another size") == base  # mark_layout_dynamic: the size is a runtime value
    assert keys["shape (static layout)"] == keys.pop("dynamic marking")
    assert keys["stride"] != keys["stride, other"]
    assert keys["a dynamic stride"] == keys.pop("a dynamic stride, other")  # mark_layout_dynamic: a runtime stride
    for part, key in keys.items():
        assert key != base, part
    assert "0x" not in base  # never an address: the same call gives the same key in every process
    # The function's source: the same qualified name from a changed file is another key.
    other = dict(_run(tmp_path, _site(tmp_path / "site2", tag="two"), {"calls": [], "keys": True}, cache)[0]["keys"])
    assert other["base"] != base


def test_a_corrupt_entry_or_a_broken_load_falls_back_to_a_compile_and_is_replaced(tmp_path, cache):
    site = _site(tmp_path / "site")
    _run(tmp_path, site, ADD, cache)
    [entry] = _entries(cache)
    path = os.path.join(cache.directory, entry)
    with open(path, "r+b") as fh:
        fh.write(b"\0" * 256)
    again, out = _run(tmp_path, site, ADD, cache)
    call = again["summary"]["calls"][0]
    assert call["result"] == "compiled" and "loading" in call["miss"] and call["stored"], call
    assert "sum 12" in out
    served, _ = _run(tmp_path, site, ADD, cache)
    assert served["summary"]["calls"][0]["result"] == "served"  # the compile replaced the corrupt entry
    # A loaded kernel whose call raises: compiled for real, recorded, and the call still computes.
    broken, out = _run(tmp_path, site, {"calls": [dict(ADD["calls"][0], break_loaded=True)]}, cache)
    call = broken["summary"]["calls"][0]
    assert call["result"] == "compiled after a call error" and "a broken loaded kernel" in call["call_error"]
    assert "sum 12" in out


def test_an_entry_of_another_user_or_writable_by_others_is_never_loaded(tmp_path, cache):
    site = _site(tmp_path / "site")
    _run(tmp_path, site, ADD, cache)
    [entry] = _entries(cache)
    path = os.path.join(cache.directory, entry)
    if os.geteuid() == 0:
        os.chown(path, 4321, 4321)
        got = _run(tmp_path, site, ADD, cache)[0]["summary"]["calls"][0]
        assert got["result"] == "compiled" and "owned by uid 4321" in got["miss"], got
        os.chown(path, 0, 0)
    _run(tmp_path, site, ADD, cache)  # stored again, this user's
    os.chmod(path, 0o666)
    got = _run(tmp_path, site, ADD, cache)[0]["summary"]["calls"][0]
    assert got["result"] == "compiled" and "writable by group or others" in got["miss"], got


def test_concurrent_writers_leave_one_whole_entry(tmp_path, cache):
    site = _site(tmp_path / "site")
    procs = [_run(tmp_path, site, ADD, cache, background=True) for _ in range(4)]
    for proc, out in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        assert json.loads(out.read_text())["summary"]["calls"][0]["result"] in ("compiled", "served")
    entries = _entries(cache)
    assert len(entries) == 1 and not entries[0].startswith(".tmp-"), entries
    assert _run(tmp_path, site, ADD, cache)[0]["summary"]["calls"][0]["result"] == "served"


def test_other_call_sites_keyword_arguments_and_no_cache_are_never_stored(tmp_path, cache):
    site = _site(tmp_path / "site")
    got, out = _run(tmp_path, site, {"calls": [{"fn": "host_add", "args": [1, 1], "static": [1],
                                                "site": "elsewhere_compile"}]}, cache)
    assert got["summary"]["calls"] == [] and _entries(cache) == [] and "sum 3" in out
    kw, out = _run(tmp_path, site, {"calls": [{"fn": "host_kw", "args": [2]}]}, cache)
    call = kw["summary"]["calls"][0]
    assert call["result"] == "uncached" and "left to its default int" in call["why"], call
    assert _entries(cache) == [] and "kw 3" in out
    off = kernelcache.KernelCache(None, "off", "--no-kernel-cache")
    got, _ = _run(tmp_path, site, ADD, off)
    assert got["summary"]["calls"] == [] and "no kernel store" in got["note"]


def test_a_keyword_wrapped_kernel_is_served_with_the_wrappers_none_defaults(tmp_path, cache):
    """The DSL wraps a compile of a signature with defaults (TVMFFIJitCompiledFunctionWithKwargs): stored when every
    parameter left out defaults to None or a bool, and served with those values added after the call's."""
    site = _site(tmp_path / "site")
    plan = {"calls": [{"fn": "host_kw", "args": [2, 5]}, {"fn": "host_none", "args": [4]}]}
    first, out = _run(tmp_path, site, plan, cache)
    assert first["types"] == ["TVMFFIJitCompiledFunctionWithKwargs"] * 2, first
    assert [c["stored"] for c in first["summary"]["calls"]] == [True, True], first
    assert "kw 7" in out and "none 4" in out
    second, out = _run(tmp_path, site, plan, cache)
    assert [c["result"] for c in second["summary"]["calls"]] == ["served", "served"], second
    assert "kw 7" in out and "none 4" in out
    # A call with another count of arguments than the stored kernel takes: compiled, never guessed.
    wrong, out = _run(tmp_path, site, {"calls": [{"fn": "host_kw", "args": [2, 5], "call": [2]}]}, cache)
    assert "called with 1 arguments, stored for 2" in wrong["summary"]["calls"][0]["call_error"], wrong
    assert "kw 3" in out  # the compiled kernel's wrapper added b's default


def test_the_image_wide_store_is_read_and_never_written_by_a_check(tmp_path, cache):
    """`dsv4-doctor warm` writes the image-wide store (root's, 0755); a check loads from it first and stores what it
    compiles in the per-user one only."""
    if os.geteuid() != 0:
        pytest.skip("the image-wide store is root's: made here as root")
    site = _site(tmp_path / "site")
    image = tmp_path / "image" / "kernels"
    image.mkdir(parents=True)
    os.chmod(image.parent, 0o755)
    os.chmod(image, 0o755)
    kernelcache.reset()
    both = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "xdg"), kernelcache.IMAGE_ENV: str(image)})
    assert both.image == str(image) and both.pass_fds == (kernelcache.PROBE_FD, kernelcache.IMAGE_FD), both.image_note
    warm = _run(tmp_path, site, ADD, both, extra_env={"DSV4_DOCTOR_AOT_WARM": "1"})[0]
    assert warm["summary"]["calls"][0]["stored"] and len(os.listdir(image)) == 1
    assert (os.stat(image / os.listdir(image)[0]).st_mode & 0o777) == 0o644 and _entries(both) == []
    got = _run(tmp_path, site, ADD, both)[0]["summary"]["calls"][0]
    assert got["result"] == "served" and got["where"] == "image" and _entries(both) == []
    os.chmod(image, 0o775)  # writable by a group: refused as a whole
    kernelcache.reset()
    refused = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "xdg"), kernelcache.IMAGE_ENV: str(image)})
    assert refused.image is None and "writable by group or others" in refused.image_note
    kernelcache.reset()
