"""GPU truth on a machine without a GPU: the archs a compiled extension holds (real cubins, PTX and fatbins made by
NVIDIA's ptxas and fatbinary from the nvidia-cuda-nvcc wheel, wrapped in a shared object with gcc and objcopy, listed
by cuobjdump as the oracle; fake fatbins for the edge cases), CUDA's arch rules, the kernels rows over them, the
cause of a GPU crash from its recorded words (the H200's texts), the cause of a hidden GPU (a stub nvidia-smi, the
real CPU torch) and gpu.memory."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4_doctor.model.core import Profile
from dsv4_doctor.probes import dsv4probe_static_fatbin as fatbin
from dsv4_doctor.testing import StubContext
from dsv4_doctor.checks._archs import judge as judge_archs, runs_on
from dsv4_doctor.checks.smoke._causes import cause_of, crash_cause, crash_text
from fakes import Env, fake_flash_mla, fake_kernel
from probed import judge
from wheels import ensure

needs_tools = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("objcopy")),
                                 reason="needs gcc and objcopy (binutils) to wrap a fatbin in a shared object")
PTX = ".version {version}\n.target sm_{target}\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n  ret;\n}}\n"
PTX_VERSION = {"90": "8.0", "90a": "8.0", "100a": "8.7", "100f": "8.8", "100": "8.7"}


def _bin(key: str) -> Path:
    return ensure(key) / "nvidia" / "cu13" / "bin"


def make_fatbin(tmp: Path, name: str, images: list[tuple[str, str]], compress: bool = False) -> Path:
    """A fatbin of real cubins (ptxas) and PTX, put together by NVIDIA's fatbinary."""
    tools = _bin("nvidia-cuda-nvcc-13.5.37")
    base = tmp / f"{name}.base.ptx"
    base.write_text(PTX.format(version="8.0", target="90"))
    args = []
    for i, (kind, arch) in enumerate(images):
        if kind == "elf":
            out = tmp / f"{name}.{i}.cubin"
            subprocess.run([str(tools / "ptxas"), f"-arch=sm_{arch}", str(base), "-o", str(out)], check=True)
        else:
            out = tmp / f"{name}.{i}.ptx"
            out.write_text(PTX.format(version=PTX_VERSION.get(arch, "8.0"), target=arch))
        args.append(f"--image3=kind={kind},sm={arch},file={out}")
    target = tmp / f"{name}.fatbin"
    subprocess.run([str(tools / "fatbinary"), "-64", f"--create={target}", *args,
                    "--compress-all" if compress else "--compress=false"], check=True)
    return target


def make_object(tmp: Path, name: str, fatbins: list[Path]) -> Path:
    """A shared object whose translation units each carry one fatbin in .nv_fatbin, as nvcc's objects do; the linker
    concatenates them."""
    objs = []
    for i, fb in enumerate(fatbins):
        src = tmp / f"{name}.{i}.c"
        src.write_text(f"int {name}_{i}(void) {{ return {i}; }}\n")
        obj = tmp / f"{name}.{i}.o"
        subprocess.run(["gcc", "-c", "-fPIC", str(src), "-o", str(obj)], check=True)
        subprocess.run(["objcopy", "--add-section", f".nv_fatbin={fb}", "--set-section-flags",
                        ".nv_fatbin=alloc,readonly", str(obj)], check=True)
        objs.append(str(obj))
    out = tmp / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", *objs, "-o", str(out)], check=True)
    return out


def cuobjdump(path: Path) -> tuple[list[str], list[str]]:
    text = subprocess.run([str(_bin("nvidia-cuda-cuobjdump-13.5.37") / "cuobjdump"), "--list-elf", "--list-ptx",
                           str(path)], capture_output=True, text=True, check=True).stdout
    cubins = re.findall(r"ELF file\s+\d+: \S+\.(sm_\d+[a-z]?)\.cubin", text)
    ptx = [a.replace("sm_", "compute_") for a in re.findall(r"PTX file\s+\d+: \S+\.(sm_\d+[a-z]?)\.ptx", text)]
    return sorted(cubins), sorted(ptx)


def expand(items: list[dict]) -> list[str]:
    return sorted(a["arch"] for a in items for _ in range(a["count"]))


BUILDS = {
    # FlashMLA's two builds (setup.py: compute_90a,code=sm_90a; compute_100f,code=sm_100f), two TUs each
    "flashmla_sm90": [[("elf", "90a")], [("elf", "90a")]],
    "flashmla_sm100": [[("elf", "100f")], [("elf", "100f")]],
    "hadamard_sm90": [[("elf", "90")]],
    "with_ptx": [[("elf", "90a"), ("ptx", "90")]],
    "compressed": [[("elf", "90a"), ("ptx", "90")]],
    "blackwell": [[("elf", "100a"), ("elf", "103a"), ("ptx", "100a")]],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not (shutil.which("gcc") and shutil.which("objcopy")):
        pytest.skip("needs gcc and objcopy")
    tmp = tmp_path_factory.mktemp("fatbins")
    return {name: make_object(tmp, name, [make_fatbin(tmp, f"{name}{i}", images, compress=name == "compressed")
                                          for i, images in enumerate(tus)]) for name, tus in BUILDS.items()}


@needs_tools
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_reader_lists_what_cuobjdump_lists(built, name):
    read = fatbin.read_object(str(built[name]))
    assert read["has_fatbin"] and not read.get("error"), read
    want = sorted(f"sm_{a}" for tu in BUILDS[name] for k, a in tu if k == "elf")
    assert expand(read["cubins"]) == want
    assert expand(read["ptx"]) == sorted(f"compute_{a}" for tu in BUILDS[name] for k, a in tu if k == "ptx")
    cubins, ptx = cuobjdump(built[name])
    # cuobjdump prints a family-specific cubin (sm_100f) as sm_100; the entry's flag keeps the f
    assert sorted(c[:-1] if c.endswith("f") else c for c in expand(read["cubins"])) == cubins
    assert expand(read["ptx"]) == ptx
    assert read["fatbins"] == len(BUILDS[name])
    assert read["compressed"] == (2 if name == "compressed" else 0)


def test_cuda_arch_rules():
    assert runs_on("sm_90a", (9, 0)) and not runs_on("sm_90a", (10, 0)) and not runs_on("sm_90a", (9, 1))
    assert runs_on("sm_90", (9, 0)) and not runs_on("sm_90", (10, 0))
    assert runs_on("sm_100f", (10, 0)) and runs_on("sm_100f", (10, 3)) and not runs_on("sm_100f", (9, 0))
    assert runs_on("sm_100", (10, 3)) and not runs_on("sm_103a", (10, 0)) and not runs_on("sm_100a", (10, 3))
    assert runs_on("compute_90", (10, 0)) and runs_on("compute_90", (12, 0)) and not runs_on("compute_90", (8, 9))
    assert runs_on("compute_90a", (9, 0)) and not runs_on("compute_90a", (10, 0))
    assert runs_on("compute_100f", (10, 3)) and not runs_on("compute_100f", (12, 0))
    assert not runs_on("nonsense", (9, 0))


def _elf_with(tmp: Path, payload: bytes) -> Path:
    blob = tmp / "blob.bin"
    blob.write_bytes(payload)
    src = tmp / "x.c"
    src.write_text("int x(void) { return 0; }\n")
    obj = tmp / "x.o"
    subprocess.run(["gcc", "-c", "-fPIC", str(src), "-o", str(obj)], check=True)
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={blob}", str(obj)], check=True)
    return obj


def _entry(kind: int, arch: int, flags: int = 0x11, payload: bytes = b"") -> bytes:
    head = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x101, 64, len(payload), 0, 0, 8, 1, arch, 0, 0, flags, 0, 0)
    return head + payload


def _fatbin(entries: bytes, claimed: int | None = None) -> bytes:
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(entries) if claimed is None else claimed) + entries


@needs_tools
def test_fake_fatbins_never_break_the_reader(tmp_path, monkeypatch):
    two = _fatbin(_entry(2, 90, 0x100011) + _entry(1, 90, 0x8011)) + b"\0" * 8 + _fatbin(_entry(2, 100, 0x1200011))
    ok = fatbin.read_object(str(_elf_with(tmp_path, two)))
    assert expand(ok["cubins"]) == ["sm_100f", "sm_90a"] and expand(ok["ptx"]) == ["compute_90"]
    assert ok["compressed"] == 1 and ok["fatbins"] == 2 and not ok.get("error")
    bad = fatbin.read_object(str(_elf_with(tmp_path, b"\x01\x02\x03\x04" * 8)))
    assert "no fatbin header" in bad["error"]
    huge = fatbin.read_object(str(_elf_with(tmp_path, _fatbin(_entry(2, 90), claimed=2 ** 63))))
    assert "past the section's end" in huge["error"]
    cut = fatbin.read_object(str(_elf_with(tmp_path, _fatbin(_entry(2, 90, payload=b"x" * 64))[:-20])))
    assert "error" in cut and cut["cubins"] == []
    liar = _fatbin(struct.pack("<HHIQ", 2, 0x101, 64, 2 ** 40) + b"\0" * 48)
    assert "claims too much" in fatbin.read_object(str(_elf_with(tmp_path, liar)))["error"]
    many = _fatbin(b"".join(_entry(2, 20 + i) for i in range(40)))
    capped = fatbin.read_object(str(_elf_with(tmp_path, many)))
    assert len(capped["cubins"]) == fatbin.MAX_ARCHS and capped["cubins_left_out"] == 8
    monkeypatch.setattr(fatbin, "MAX_ENTRIES", 5)
    assert "stopped after 5 entries" in fatbin.read_object(str(_elf_with(tmp_path, many)))["capped"]
    text = tmp_path / "t.txt"
    text.write_text("hello")
    assert fatbin.read_object(str(text))["error"].startswith("ValueError: not an ELF")
    src = tmp_path / "y.c"
    src.write_text("int y(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(tmp_path / "liby.so")], check=True)
    assert fatbin.read_object(str(tmp_path / "liby.so"))["has_fatbin"] is False
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    assert fatbin.read_object(str(fifo))["error"] == "ReadRefused: it is a FIFO, not a regular file"  # not blocked


def _verdict(obj_path: Path, arch: str, source: str = "option") -> dict:
    code = {"found": True, "objects": [fatbin.read_object(str(obj_path))]}
    from dsv4_doctor.model.facts import StaticFacts

    clean = StaticFacts({"device_code": {"m": code}}).device_code("m")
    return judge_archs(clean, Profile(gpu_arch=arch, gpu_arch_source=source))


@needs_tools
def test_arch_verdicts_on_real_builds(built):
    assert _verdict(built["flashmla_sm100"], "9.0")["state"] == "none-runs"
    assert _verdict(built["flashmla_sm100"], "10.0")["state"] == "runs"
    assert _verdict(built["flashmla_sm100"], "10.3")["state"] == "runs"
    assert _verdict(built["flashmla_sm90"], "10.0")["state"] == "none-runs"
    assert _verdict(built["hadamard_sm90"], "10.0")["state"] == "none-runs"
    assert _verdict(built["with_ptx"], "10.0")["state"] == "runs"  # compute_90 PTX JIT-compiles for 10.0
    assert _verdict(built["blackwell"], "9.0")["state"] == "none-runs"
    v = _verdict(built["flashmla_sm100"], "9.0")
    assert "sm_100f x2 cubins" in v["text"] and "CC 9.0, from --gpu-arch" in v["text"]


def _flash_mla_with(obj: Path):
    def build(site):
        fake_flash_mla(site, "nv_dev")
        shutil.copy(obj, site.root / "flash_mla" / "cuda.cpython-311-x86_64-linux-gnu.so")
    return build


@needs_tools
def test_kernels_flash_mla_fails_a_build_for_another_gpu(tmp_path, bare_python, built):
    env = Env(tmp_path).fake("flash_mla", _flash_mla_with(built["flashmla_sm100"]))
    row = judge(env, bare_python, "kernels.flash-mla", gpu_arch="9.0")
    assert row["status"] == "fail" and "built for the wrong GPU" in row["summary"], row["summary"]
    assert "sm_100f" in row["summary"] and "no kernel image is available" in row["details"]
    assert any("FLASH_MLA_DISABLE_SM100=1" in c for f in row["fixes"] for c in f["commands"])
    assert judge(env, bare_python, "kernels.flash-mla", gpu_arch="10.0")["status"] == "pass"
    env = Env(tmp_path / "b").fake("flash_mla", _flash_mla_with(built["flashmla_sm90"]))
    row = judge(env, bare_python, "kernels.flash-mla", gpu_arch="10.0")
    assert row["status"] == "fail" and "sm_90a" in row["summary"]
    assert any("FLASH_MLA_DISABLE_SM90=1" in c for f in row["fixes"] for c in f["commands"])
    ok = judge(env, bare_python, "kernels.flash-mla", gpu_arch="9.0")
    assert ok["status"] == "pass" and "sm_90a" in ok["summary"]


@needs_tools
def test_kernels_fast_hadamard_built_for_sm90_fails_on_blackwell(tmp_path, bare_python, built):
    def build(site):
        fake_kernel(site, "fast_hadamard_transform", "fast-hadamard-transform", "hadamard_transform")
        shutil.copy(built["hadamard_sm90"], site.root / "fast_hadamard_transform_cuda.so")
    env = Env(tmp_path).fake("fht", build)
    row = judge(env, bare_python, "kernels.fast-hadamard", gpu_arch="10.0")
    assert row["status"] == "fail" and "sm_90" in row["summary"], (row["summary"], row["evidence"])
    assert "compute_100,code=sm_100" in row["fixes"][0]["description"]
    assert judge(env, bare_python, "kernels.fast-hadamard", gpu_arch="9.0")["status"] == "pass"


# --- the cause of a GPU crash, from its own words (texts recorded on the H200) ---------------------------------------

H200_NO_KERNEL = ("CUDA error (/tmp/FlashMLA/csrc/sm90/prefill/sparse/instantiations/../phase1.cuh:687): no kernel "
                  "image is available for execution on the device")
H200_OOM = ("torch.AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\nCUDA "
            "kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
            "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to "
            "enable device-side assertions.")
SMI_MEMORY = "0, GPU-0f1e2d3c-aaaa-bbbb-cccc-000000000001, 143770, 1, 143771\n"
SMI_APPS = "GPU-0f1e2d3c-aaaa-bbbb-cccc-000000000001, 4242, python3, 143700\n"


def _ctx(**answers) -> StubContext:
    return StubContext(profile=Profile(gpu_arch="9.0", gpu_arch_source="detected", gpus=1), answers=answers)


def test_crash_causes_from_recorded_texts():
    assert cause_of(H200_NO_KERNEL + "\nkilled by SIGSEGV") == "wrong-arch"
    assert cause_of(H200_OOM) == "oom"
    assert cause_of("RuntimeError: CUDA error: an illegal memory access was encountered") == "illegal-access"
    assert cause_of("RuntimeError: CUDA driver version is insufficient for CUDA runtime version") == "driver"
    assert cause_of("RuntimeError: no CUDA-capable device is detected") == "no-device"
    assert cause_of("ValueError: shapes differ") is None
    cause = crash_cause(_ctx(), crash_text("killed by SIGSEGV", H200_NO_KERNEL), what="the FlashMLA sub-run",
                        hint="kernels.flash-mla")
    assert cause["rule"] == "kernels.flash-mla" and "\n" not in cause["summary"]
    assert cause["summary"] == ("the FlashMLA sub-run has no kernel for this GPU (CC 9.0): CUDA error at "
                                "phase1.cuh:687: no kernel image is available for execution on the "
                                "device (see kernels.flash-mla: the archs the build holds)")
    assert cause["fixes"][0].key.startswith("flash-mla:FLASH_MLA_DISABLE_SM100")
    oom = crash_cause(_ctx(**{"nvidia-smi:memory": SMI_MEMORY, "nvidia-smi:compute-apps": SMI_APPS}),
                      crash_text(H200_OOM), what="the smoke probe")
    assert oom["summary"] == ("the smoke probe ran out of GPU memory: GPU 0 has 1 of 143771 MiB free, held by pid 4242 "
                              "(python3, 143700 MiB); a smoke process needs less than 1 GiB (about 612 MiB with its "
                              "CUDA context)")
    assert "CUDA_LAUNCH_BLOCKING" not in oom["summary"]
    assert crash_cause(_ctx(), "an illegal memory access was encountered")["fixes"][0].key == "illegal-memory-access"
    assert crash_cause(_ctx(), "CUDA driver version is insufficient")["rule"] == "gpu.driver"


def test_crash_text_is_redacted_before_it_is_cut(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretsecretsecret123")
    text = crash_text("x" * 10000, "token hf_secretsecretsecret123 at the end")
    assert "hf_secretsecretsecret123" not in text and len(text) <= 4000 and text.endswith("at the end")


# --- the GPU the job will get, and gpu.memory (a stub nvidia-smi; the real CPU torch) ------------------------------

def stub_smi(tmp_path: Path, memory: str = "0, GPU-0f1e2d3c-aaaa-bbbb-cccc-000000000001, 500, 143271, 143771\n",
             apps: str = "", driver: str = "580.159.04") -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-gpu=index,uuid*) printf '%s' '{memory}' ;;\n"
                   f"  --query-compute-apps*) printf '%s' '{apps}' ;;\n"
                   f"  *) echo '0, NVIDIA H200, 9.0, 143771, {driver}' ;;\nesac\n")
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


torch_only = pytest.mark.skipif(not __import__("importlib").util.find_spec("torch"), reason="needs torch")


@torch_only
@pytest.mark.parametrize("visible, words", [("", "CUDA_VISIBLE_DEVICES is set empty"),
                                            ("3", "names GPU 3, which does not exist"),
                                            (None, "is a CPU-only build")])
def test_a_hidden_gpu_names_its_cause(tmp_path, visible, words, monkeypatch):
    env = stub_smi(tmp_path)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        env["CUDA_VISIBLE_DEVICES"] = visible
    row = judge(None, sys.executable, "gpu.devices", probe_env=env)
    assert row["status"] == "fail" and words in row["summary"], row["summary"]
    keys = [f["id"] for f in row["fixes"]]
    assert keys == (["torch"] if visible is None else ["cuda-visible-devices"]), keys


def test_gpu_memory_fails_full_warns_busy_and_names_holders(tmp_path, bare_python):
    full = judge(None, bare_python, "gpu.memory", probe_env=stub_smi(tmp_path, SMI_MEMORY, SMI_APPS))
    assert full["status"] == "fail" and "pid 4242 (python3, 143700 MiB)" in full["summary"], full["summary"]
    busy = "0, GPU-0f1e2d3c-aaaa-bbbb-cccc-000000000001, 133120, 10651, 143771\n"
    row = judge(None, bare_python, "gpu.memory", probe_env=stub_smi(tmp_path, busy, SMI_APPS.replace(
        "143700", "133000")))
    assert row["status"] == "warn" and "more than 50%" in row["summary"], row["summary"]
    unseen = judge(None, bare_python, "gpu.memory", probe_env=stub_smi(tmp_path, busy, ""))
    assert unseen["status"] == "warn" and "held outside this container" in unseen["summary"]
    ok = judge(None, bare_python, "gpu.memory", probe_env=stub_smi(tmp_path))
    assert ok["status"] == "pass" and "143271 of 143771 MiB free" in ok["summary"]


@needs_tools
def test_te_built_for_another_gpu_fails_te_import(tmp_path, bare_python, built):
    from fakes import fake_te

    def build(site):
        fake_te(site, "2.12.0")
        shutil.copy(built["flashmla_sm90"], site.root / "transformer_engine" / "libtransformer_engine.so")
    env = Env(tmp_path).fake("te", build)
    row = judge(env, bare_python, "te.import", gpu_arch="10.0")
    assert row["status"] == "fail" and "libtransformer_engine.so holds sm_90a" in row["summary"], row["summary"]
    assert row["fixes"][0]["id"] == "te-arch:100" and "NVTE_CUDA_ARCHS=100" in row["fixes"][0]["description"]
    ok = judge(env, bare_python, "te.import", gpu_arch="9.0")
    assert ok["status"] == "pass" and "sm_90a" in ok["summary"]


def crashing_flash_mla(site):
    """A FlashMLA built for SM100 on an H200, as recorded there: the CUDA error on stderr, then a segfault."""
    fake_flash_mla(site, "nv_dev")
    site.file("flash_mla/flash_mla_interface.py", "import os, signal, sys\n\n\n"
              "def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None,\n"
              "                         indexer_topk=0):\n"
              f"    sys.stderr.write({H200_NO_KERNEL!r} + '\\n')\n    sys.stderr.flush()\n"
              "    os.kill(os.getpid(), signal.SIGSEGV)\n")


@torch_only
def test_a_kernel_sub_run_that_segfaults_names_the_wrong_arch_and_its_fix(tmp_path):
    env = Env(tmp_path).fake("flash_mla", crashing_flash_mla)
    row = judge(env, sys.executable, "smoke.dsv4-kernels", device="cpu", cp=1, gpu_arch="9.0")
    fm = row["evidence"]["subruns"]["flashmla"]
    assert fm["status"] == "fail" and fm["cause"] == "wrong-arch", fm
    assert row["status"] == "fail" and "no kernel image is available" in row["summary"], row["summary"]
    assert "phase1.cuh:687" in row["summary"] and "SIGSEGV" in fm["crash_text"]
    assert "probe" not in row["summary"].split("(")[0]  # the cause, not "the probe killed by SIGSEGV"
    assert any("FLASH_MLA_DISABLE_SM100=1" in c for f in row["fixes"] for c in f["commands"])


@torch_only
def test_with_a_listed_gpu_the_kernel_sub_runs_never_fall_back_to_the_cpu(tmp_path):
    env = Env(tmp_path).fake("flash_mla", fake_flash_mla, "nv_dev")
    smi = stub_smi(tmp_path)
    smi["CUDA_VISIBLE_DEVICES"] = ""
    row = judge(env, sys.executable, "smoke.dsv4-kernels", cp=1, probe_env=smi)
    fm = row["evidence"]["subruns"]["flashmla"]
    assert fm["status"] == "fail" and fm["cause"] == "no-device", fm
    assert "the GPU was not tested" in row["summary"] and "CUDA_VISIBLE_DEVICES is set empty" in row["summary"]
    assert [f["id"] for f in row["fixes"]] == ["cuda-visible-devices"]
    assert "refuses CPU tensors" not in str(row)


@pytest.mark.slow  # the smoke probe imports torch
@torch_only
def test_the_smoke_names_the_hidden_gpu_cause_and_no_torch_reinstall(tmp_path):
    smi = stub_smi(tmp_path)
    smi["CUDA_VISIBLE_DEVICES"] = ""
    row = judge(None, sys.executable, "smoke.thd-cp", probe_env=smi)
    assert row["status"] == "fail" and "CUDA_VISIBLE_DEVICES is set empty" in row["summary"], row["summary"]
    assert [f["id"] for f in row["fixes"]] == ["cuda-visible-devices"]


def test_a_driver_older_than_torchs_cuda_is_named(tmp_path, bare_python, monkeypatch):
    from fakes import fake_torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = Env(tmp_path).fake("torch", fake_torch)
    row = judge(env, bare_python, "gpu.devices", probe_env=stub_smi(tmp_path, driver="550.54.15"))
    assert row["status"] == "fail" and "older than the CUDA 13.0" in row["summary"], row["summary"]
    assert [f["id"] for f in row["fixes"]] == ["setting:driver"]


def test_an_oom_crash_of_the_smoke_probe_is_one_sentence_with_the_holder():
    from dsv4_doctor.checks.smoke.thd_cp import crashed
    from dsv4_doctor.engine.probes import ProbeResult

    result = ProbeResult("smoke", ok=False, error="stopped with AcceleratorError: CUDA error: out of memory",
                         stderr_tail=H200_OOM)
    row = crashed(_ctx(**{"nvidia-smi:memory": SMI_MEMORY, "nvidia-smi:compute-apps": SMI_APPS}), result)
    assert row.status.value == "error" and "\n" not in row.summary
    assert "held by pid 4242 (python3, 143700 MiB)" in row.summary and "CUDA_LAUNCH_BLOCKING" in row.details
    unknown = crashed(_ctx(), ProbeResult("smoke", ok=False, error="killed by SIGSEGV", signal="SIGSEGV"))
    assert unknown.summary == "the smoke probe killed by SIGSEGV"


def test_a_probe_that_raises_is_summarised_in_one_line_with_its_whole_text_kept(tmp_path):
    from dsv4_doctor.engine.probes import Probe, run_probe
    from dsv4_doctor.hostio.procs import Processes

    script = tmp_path / "dsv4probe_raises.py"
    script.write_text(
        "import importlib.util, os, sys\n"
        "spec = importlib.util.spec_from_file_location('dsv4probe_common', os.path.join(\n"
        "    os.environ['DSV4_DOCTOR_PROBE_LIB'], 'dsv4probe_common.py'))\n"
        "sys.modules['dsv4probe_common'] = m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n\n\n"
        "def answer(request):\n"
        f"    raise RuntimeError({H200_OOM.split(': ', 1)[1]!r})\n\n\n"
        "m.serve(answer)\n")
    result = run_probe(Probe.python("raises", script), sys.executable, 30, Processes())
    assert not result.ok and result.error == "stopped with RuntimeError: CUDA error: out of memory", result.error
    assert "inside the probe" not in result.error and "CUDA_LAUNCH_BLOCKING=1" in result.stderr_tail
