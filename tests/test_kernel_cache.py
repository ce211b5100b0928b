"""The probes' persistent CuTe DSL kernel cache (doctor/kernels/cache.py) and the kernel smoke's record of what ran."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from dsv4_doctor.engine.probes import LAUNCHER

from conftest import has_torch, run_doctor
from fakes import Env, fake_cudnn_dsa, fake_layout_kernels
import probe_modules

from dsv4_doctor.kernels import cache as kernelcache


def prepare(tmp_path, **env):
    return kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "xdg"), **env})


def test_a_per_user_0700_directory_is_made_and_fixes_the_dsls_dump_dir(tmp_path):
    cache = prepare(tmp_path)
    path = tmp_path / "xdg" / "dsv4-doctor" / "cute-dsl"
    assert cache.source == "doctor" and cache.directory == str(path)
    # The probes get the checked folder as the doctor's descriptor (a stable path: the DSL hashes it into its keys).
    assert cache.env == {"CUTE_DSL_CACHE_DIR": kernelcache.PROBE_PATH, "CUTE_DSL_DUMP_DIR": kernelcache.PROBE_PATH,
                         kernelcache.AOT_ENV: kernelcache.PROBE_PATH}
    assert os.path.samefile(kernelcache.PROBE_PATH, path)
    for p in (path, path.parent):
        assert (p.stat().st_mode & 0o777) == 0o700
    assert prepare(tmp_path).directory == str(path)  # a second run (or another rank) reuses it


@pytest.mark.parametrize("make", ["group-writable", "symlink", "file"])
def test_an_unsafe_directory_is_refused_and_the_probes_get_no_cache(tmp_path, make):
    path = tmp_path / "xdg" / "dsv4-doctor" / "cute-dsl"
    path.parent.mkdir(parents=True, mode=0o700)
    if make == "group-writable":
        path.mkdir()
        path.chmod(0o770)
    elif make == "symlink":
        (tmp_path / "elsewhere").mkdir()
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_text("x")
    cache = prepare(tmp_path)
    assert cache.source == "refused" and cache.directory is None and cache.env == {}
    assert {"group-writable": "writable by group", "symlink": "symlink", "file": "not a directory"}[make] in cache.note


def test_the_cache_is_pruned_oldest_first_beyond_its_size_limit(tmp_path):
    path = tmp_path / "xdg" / "dsv4-doctor" / "cute-dsl"
    path.mkdir(parents=True, mode=0o700)
    path.parent.chmod(0o700)
    for i in range(10):
        f = path / f"cute_dsl_{i}.mlir"
        f.write_bytes(b"x" * (256 << 10))  # 10 x 256 KiB = 2.5 MiB
        os.utime(f, (1000 + i, 1000 + i))
    cache = prepare(tmp_path, DSV4_DOCTOR_KERNEL_CACHE_MIB="1")
    left = sorted(p.name for p in path.iterdir())
    assert cache.pruned_files == 7 and left == ["cute_dsl_7.mlir", "cute_dsl_8.mlir", "cute_dsl_9.mlir"]
    assert cache.size_bytes <= 0.8 * (1 << 20)


def test_the_off_switch_and_a_users_own_directory(tmp_path):
    off = prepare(tmp_path, DSV4_DOCTOR_KERNEL_CACHE="off")
    assert off.source == "off" and off.env == {} and not (tmp_path / "xdg").exists()
    mine = prepare(tmp_path, CUTE_DSL_CACHE_DIR="/somewhere/mine")
    assert mine.source == "user" and mine.directory == "/somewhere/mine" and mine.env == {}
    chosen = prepare(tmp_path, DSV4_DOCTOR_KERNEL_CACHE=str(tmp_path / "chosen"))
    assert chosen.directory == str(tmp_path / "chosen") and (tmp_path / "chosen").is_dir()


def test_a_chosen_directory_in_a_sticky_shared_folder_is_used_and_a_plain_shared_one_refused(tmp_path):
    """DSV4_DOCTOR_KERNEL_CACHE=/tmp/<dir> (bench_check's fresh caches): /tmp is writable by all but sticky, so
    nobody else can replace the 0700 directory made in it; a shared folder without the sticky bit is refused."""
    for mode, used in ((0o1777, True), (0o777, False)):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        cache = prepare(tmp_path, DSV4_DOCTOR_KERNEL_CACHE=str(shared / "cache"))
        assert (cache.source == "doctor") is used, cache
        if used:
            assert cache.directory == str(shared / "cache") and cache.env["CUTE_DSL_CACHE_DIR"] == \
                kernelcache.PROBE_PATH and os.path.samefile(kernelcache.PROBE_PATH, shared / "cache")
            assert ((shared / "cache").stat().st_mode & 0o777) == 0o700
        else:
            assert "writable by group or others" in cache.note


def test_the_bench_says_which_kernel_cache_its_rows_ran_on(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import bench_check
    finally:
        sys.path.pop(0)
    cache = {"directory": None, "source": "refused", "note": "kernel cache refused: /tmp is writable"}
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"checks": [{"id": "smoke.dsv4-kernels", "evidence": {"kernel_cache": cache}}]}))
    assert bench_check.where_time_goes(str(report))["kernel_cache"] == cache


def probe_module():
    return probe_modules.load("dsv4probe_kernels_ran")


class Device:
    type = "cpu"


def test_each_kernel_is_listed_with_its_first_and_steady_time_and_whether_the_dsl_cache_served_it():
    """The DSL's own cache functions are wrapped (as cutlass/base_dsl/dsl.py calls them): a first call that wrote a
    module compiled; one that only read modules came from the file cache; a call with no lookup is no DSL kernel."""
    pk = probe_module()
    pk.CALLS.clear()
    pk.CACHE_EVENTS.clear()
    stored: dict[str, object] = {}
    dsl = types.SimpleNamespace(load_cache_from_path=lambda name, file, *a, **k: stored.get(file),
                                dump_cache_to_path=lambda name, fn, file, *a, **k: stored.__setitem__(file, fn))
    pk._wrap_cache_functions(dsl)
    compiled_once: set[str] = set()

    def jit_kernel(key):  # a DSL kernel: a file-cache lookup at its first call in a process, a write on a miss
        if key not in compiled_once:
            compiled_once.add(key)
            if dsl.load_cache_from_path("cute_dsl", key) is None:
                dsl.dump_cache_to_path("cute_dsl", object(), key)
        return key

    a = pk._named(lambda: jit_kernel("aaaa"), "kernel_a")
    plain = pk._named(lambda: None, "torch_op")
    for fn in (a, a, a, plain):
        pk._timed(None, Device(), fn)
    first = {r["kernel"]: r for r in pk.kernels_ran(None, None)["kernels"]}
    assert first["kernel_a"]["calls"] == 3 and first["kernel_a"]["steady_s"] is not None
    assert "compiled (1 module(s) written" in first["kernel_a"]["cache"] and not first["kernel_a"]["from_cache"]
    assert first["torch_op"]["cache"].startswith("not a CuTe DSL compile")
    pk.CALLS.clear()
    compiled_once.clear()  # a second process: the module is on disk now
    pk._timed(None, Device(), a)
    second = pk.kernels_ran(None, None)["kernels"][0]
    assert second["from_cache"] and "from the CuTe DSL file cache" in second["cache"]


def test_a_kernel_compiled_by_cute_compile_is_said_to_bypass_the_file_cache_every_run():
    """cute.compile passes no_cache=True (nvidia-cutlass-dsl 4.5.2 cutlass/base_dsl/compiler.py L604-605), and
    BaseDSL.compile_and_cache reads and writes the file cache only without it (dsl.py L1642, L1729): such a kernel
    is compiled in-process in every run, which the evidence says instead of "not a CuTe DSL compile"."""
    pk = probe_module()
    pk.CALLS.clear()
    pk.CACHE_EVENTS.clear()
    stored: dict[str, object] = {}

    class BaseDSL:  # compile_and_cache's signature and file-cache use as in dsl.py 4.5.2
        def compile_and_cache(self, module, module_hash, function_name, pipeline, sig, no_cache, no_jit_engine,
                              func_type=None, **kwargs):
            if not no_cache and dsl.load_cache_from_path("cute_dsl", module_hash) is not None:
                return stored[module_hash]
            fn = object()
            if not no_cache:
                dsl.dump_cache_to_path("cute_dsl", fn, module_hash)
            return fn

    dsl = types.SimpleNamespace(load_cache_from_path=lambda name, file, *a, **k: stored.get(file),
                                dump_cache_to_path=lambda name, fn, file, *a, **k: stored.__setitem__(file, fn),
                                BaseDSL=BaseDSL)
    pk._wrap_cache_functions(dsl)

    def compiled_by_cute_compile():  # cute.compile: compile_only and no_cache, whatever is on disk
        return BaseDSL().compile_and_cache(None, "bbbb", "layout", None, None, True, False)

    for _ in range(2):  # two processes: the second finds nothing more on disk to serve it
        pk.CALLS.clear()
        pk._timed(None, Device(), pk._named(compiled_by_cute_compile, "layout_kernel"))
        row = pk.kernels_ran(None, None)["kernels"][0]
        assert row["cache_bypassed"] and not row["from_cache"], row
        assert row["cache"].startswith("compiled in-process: 1 module(s) by cute.compile"), row["cache"]
        assert "only the doctor's AOT kernel store serves" in row["cache"] and not stored


@pytest.mark.slow
@pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")
def test_the_kernel_smoke_names_every_kernel_that_ran_and_the_cache_directory_its_probes_got(tmp_path):
    env = Env(tmp_path).fake("fe", fake_cudnn_dsa, "ok").fake("megatron", fake_layout_kernels, "ok")
    run = run_doctor("check", "-f", "json", "--device", "cpu", "--cp", "2", "--only", "smoke.dsv4-kernels",
                     sites=tuple(env.sites.values()), python=sys.executable, timeout=180,
                     env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    row = run.check("smoke.dsv4-kernels")
    assert row["evidence"]["kernel_cache"]["source"] == "doctor"
    layout = row["evidence"]["subruns"]["layout"]["evidence"]["kernels_ran"]
    names = [k["kernel"] for k in layout["kernels"]]
    assert names == ["CompressorInputCompact.forward", "CompressorInputCompact.backward",
                     "build_attention_indices (all visible)", "build_attention_indices (top-k)"]
    assert all(k["first_call_s"] >= 0 and k["steady_s"] is not None and k["calls"] == 2 for k in layout["kernels"])
    assert layout["cute_dsl_cache_dir"] == str(tmp_path / "xdg" / "dsv4-doctor" / "cute-dsl")
    assert row["evidence"]["subruns"]["layout"]["torch_start_s"] > 0  # `import torch` and the device's set-up
    off = run_doctor("check", "-f", "json", "--device", "cpu", "--cp", "2", "--only", "smoke.dsv4-kernels",
                     "--no-kernel-cache", sites=tuple(env.sites.values()), python=sys.executable, timeout=180,
                     env={"XDG_CACHE_HOME": str(tmp_path / "xdg2")})
    assert off.check("smoke.dsv4-kernels")["evidence"]["kernel_cache"]["source"] == "off"
    ev = off.check("smoke.dsv4-kernels")["evidence"]["subruns"]["layout"]["evidence"]["kernels_ran"]
    assert ev["cute_dsl_cache_dir"] is None and not (tmp_path / "xdg2").exists()


@pytest.mark.slow
@pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")
def test_the_split_layout_sub_run_compiles_each_index_mode_in_its_own_process(tmp_path):
    """What a GPU run does by default: the two build_attention_indices modes in processes of their own, merged into
    the same per-rank evidence."""
    import json
    import subprocess

    from dsv4_doctor.engine.probes import PROBE_DIR

    import dsv4_doctor.checks.smoke as smoke_pkg

    script = Path(smoke_pkg.__file__).parent / "dsv4probe_kernels.py"
    for mode, status in (("ok", "pass"),):
        env = Env(tmp_path / mode).fake("megatron", fake_layout_kernels, mode)
        out = tmp_path / f"{mode}.json"
        request = {"subrun": "layout", "cp": 2, "device": "cpu", "split_layout": True}
        request_file = tmp_path / f"{mode}.request.json"  # as the doctor hands a probe its request: a file
        request_file.write_text(json.dumps(request))
        subprocess.run([sys.executable, str(LAUNCHER), str(script), str(out), str(request_file)],
                       check=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, env.sites.values())),
                                DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR)))
        answer = json.loads(out.read_text())
        assert answer["status"] == status, answer.get("summary")
        ev = answer["evidence"]
        if status == "pass":
            assert ev["index_modes_in_own_processes"] and set(ev["index_mode_processes"]) == {"all visible", "top-k"}
            # What each extra process pays before its kernel, beside this process's own.
            assert answer["torch_start_s"] > 0
            assert all(p["torch_start_s"] > 0 for p in ev["index_mode_processes"].values())
            assert all(set(r["call_s"]) == {"compact_forward", "compact_backward", "indices all visible",
                                            "indices top-k"} for r in ev["ranks"])
            own = [k for k in ev["kernels_ran"]["kernels"] if k.get("process")]
            assert [k["kernel"] for k in own] == ["build_attention_indices (all visible)",
                                                  "build_attention_indices (top-k)"]


def test_the_long_probes_are_started_first():
    """The pool runs at most workers() probes at a time: the smoke and the kernel sub-runs must not wait for a wave
    of short import probes."""
    from dsv4_doctor.checks.smoke.kernels import kernel_probe
    from dsv4_doctor.checks.smoke.thd_cp import smoke_probe
    from dsv4_doctor.model.core import Check, Profile, Result, Status
    from dsv4_doctor.engine.probes import import_probe
    from dsv4_doctor.engine.runner import Runner

    profile = Profile(cp=2)
    short = [import_probe(f"mod{i}") for i in range(5)]
    submitted: list[str] = []
    pool = types.SimpleNamespace(submit=lambda probe: submitted.append(probe.key))
    ctx = types.SimpleNamespace(profile=profile, pool=pool)
    checks = [Check(id=f"c{i}", title="t", explanation="e", applies_when="a", detects="d",
                    run=lambda c: Result(Status.PASS, "ok"), probes=probes)
              for i, probes in enumerate([short[:3], [kernel_probe(profile, "layout")], short[3:],
                                          [smoke_probe(profile)]])]
    Runner(checks, ctx, deadline=0.0).start_probes()
    assert submitted[:2] == [kernel_probe(profile, "layout").key, smoke_probe(profile).key]
    assert sorted(submitted[2:]) == sorted(p.key for p in short)


# The real CuTe DSL on this CPU: a host-only function (no GPU kernel) is traced, compiled and run without a GPU, so
# the probes' record of the DSL's file cache is checked against nvidia-cutlass-dsl 4.5.2 itself.
DSL_DRIVER = r'''
import importlib.util, json, os, sys
lib, smoke = os.environ["DSV4_DOCTOR_PROBE_LIB"], sys.argv[1]
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(lib, "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
ran = common.load_module("dsv4probe_kernels_ran", smoke)
ran.watch_cute_dsl_cache()  # before the DSL is imported, as the kernel probe does
import cutlass
import cutlass.cute as cute


@cute.jit
def host_add(a: cutlass.Int32, b: cutlass.Int32, k: cutlass.Constexpr):
    c = a + b + k


class Cpu:
    type = "cpu"


cache = os.environ.get("CUTE_DSL_CACHE_DIR")
before = ran._cache_files(cache)
for _ in range(2):
    ran._timed(None, Cpu(), ran._named(lambda: host_add(cutlass.Int32(1), cutlass.Int32(2), 3), "jit call"))
    compiled = ran._timed(None, Cpu(), ran._named(
        lambda: cute.compile(host_add, cutlass.Int32(1), cutlass.Int32(2), 4), "cute.compile"))[0]
    compiled(cutlass.Int32(1), cutlass.Int32(2))
print(json.dumps(ran.kernels_ran(cache, before)))
'''


def _dsl_sites() -> list[Path]:
    from wheels import ensure

    base = ensure("nvidia-cutlass-dsl-libs-base-4.5.2")
    # The wheel's .pth file (which puts `cutlass` on sys.path) is not read from PYTHONPATH: its folder is named here.
    return [base / "nvidia_cutlass_dsl" / "python_packages", base] + [
        ensure(k) for k in ("cuda-bindings-13.4.4", "cuda-pathfinder-1.9.1", "numpy-2.4.6", "typing-extensions-4.16.0")]


def _run_dsl(tmp_path: Path, cwd: Path, cache_env: dict, pass_fds: tuple[int, ...] = ()) -> dict:
    import subprocess

    from dsv4_doctor.engine.probes import PROBE_DIR

    driver = tmp_path / "dsl_driver.py"
    driver.write_text(DSL_DRIVER)
    cwd.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_")}
    env.update(cache_env, PYTHONPATH=os.pathsep.join(map(str, _dsl_sites())), DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR))
    smoke = probe_modules.script("dsv4probe_kernels_ran").parent
    done = subprocess.run([sys.executable, str(driver), str(smoke)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180, pass_fds=pass_fds)  # the doctor's probes get the cache's fd
    assert done.returncode == 0, done.stderr[-3000:]
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    return {"rows": {k["kernel"]: k for k in ran["kernels"]}, "files": ran["cache_files_after"]}


@pytest.mark.slow
def test_the_real_cute_dsl_serves_a_jit_call_from_the_doctors_cache_and_never_a_cute_compile(tmp_path):
    """nvidia-cutlass-dsl 4.5.2 on this CPU, in the doctor's per-user 0700 cache directory: a `@cute.jit` call
    writes its module and the next process (another working directory) reads it instead of compiling; the same
    function through `cute.compile` neither reads nor writes the cache, in either process (compiler.py L604-605,
    dsl.py L2178-2180), and the evidence says so. Without the fixed CUTE_DSL_DUMP_DIR the module hash changes with
    the working directory, so that process compiles again."""
    cache = kernelcache.prepare({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert cache.source == "doctor", cache.note
    # As the probes get it: /proc/self/fd/211, the checked folder held by the doctor (the same string in both runs).
    assert cache.env["CUTE_DSL_CACHE_DIR"] == kernelcache.PROBE_PATH and cache.pass_fds == (kernelcache.PROBE_FD,)
    first = _run_dsl(tmp_path, tmp_path / "a", cache.env, cache.pass_fds)
    second = _run_dsl(tmp_path, tmp_path / "b", cache.env, cache.pass_fds)
    for run in (first, second):
        row = run["rows"]["cute.compile"]
        assert row["cache_bypassed"] and not row["from_cache"], row
        assert row["cache"].startswith("compiled in-process: 1 module(s) by cute.compile"), row["cache"]
        assert run["files"] == 1  # the jit call's module alone
    assert first["rows"]["jit call"]["cache"].startswith("compiled (1 module(s) written to the cache")
    assert not first["rows"]["jit call"]["from_cache"]
    assert second["rows"]["jit call"]["from_cache"], second["rows"]["jit call"]
    assert second["rows"]["jit call"]["cache"] == "from the CuTe DSL file cache (1 module(s) read, none compiled)"
    moved = _run_dsl(tmp_path, tmp_path / "c", {"CUTE_DSL_CACHE_DIR": cache.env["CUTE_DSL_CACHE_DIR"]},
                     cache.pass_fds)
    assert not moved["rows"]["jit call"]["from_cache"] and moved["files"] == 2, moved["rows"]["jit call"]
    # The checked folders renamed away after the check, an empty 0777 folder put at the old path: the DSL still
    # reads (and would write) the checked folder through the descriptor, never the one at the path.
    checked = Path(cache.directory)
    os.rename(checked.parent, checked.parent.with_name("taken"))
    checked.mkdir(parents=True)
    checked.chmod(0o777)
    swapped = _run_dsl(tmp_path, tmp_path / "d", cache.env, cache.pass_fds)
    assert swapped["rows"]["jit call"]["from_cache"] and swapped["files"] == 2, swapped["rows"]["jit call"]
    assert not any(checked.iterdir())
    kernelcache.release()
