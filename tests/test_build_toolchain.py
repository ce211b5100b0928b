"""build.toolchain: the toolchain probe on real states (PyPI's nvidia-cuda-nvcc and nvidia-cuda-cccl wheels as a
CUDA_HOME, a PATH without nvcc, ninja or a compiler; a hanging or babbling nvcc, a state no release shows, so a fake),
the check's judgement of them against torch's CUDA (a CUDA torch cannot be installed here: its torch probe answer is
given as data), its applying only when the plan builds against torch, and the plan putting its steps first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsv4_doctor.api import TORCH, CheckReport, Fix, Phase, Status
from dsv4_doctor.checks import build_checks
from dsv4_doctor.checks.fixes import catalogue
from dsv4_doctor.fix.plan import ORDER, build_plan
from dsv4_doctor.testing import StubContext, run_check

from wheels import ensure

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "doctor" / "probes" / "dsv4probe_launch.py"
PROBE = ROOT / "checks" / "dsv4probe_toolchain.py"
CUDA_TORCH = {"imported": True, "version": "2.11.0+cu130", "cuda_build": "13.0"}


def probe(tmp_path: Path, env: dict, timeout_s: float = 10.0) -> tuple[dict, float]:
    """The toolchain probe's answer in exactly `env` (PATH, CUDA_HOME, CXX ...), and how long it took."""
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"nvcc_timeout_s": timeout_s}))
    out = tmp_path / "answer.json"
    t0 = time.monotonic()
    subprocess.run([sys.executable, str(LAUNCHER), str(PROBE), str(out), str(request)], env=env, check=True,
                   timeout=60, stdin=subprocess.DEVNULL)
    return json.loads(out.read_text()), time.monotonic() - t0


def bare_path(tmp_path: Path, *tools: str) -> str:
    """A PATH of one folder holding only `tools` (links to the system's), e.g. a compiler but no ninja or nvcc."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for tool in tools:
        real = next((Path(d) / tool for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / tool).exists()), None)
        if real is None:
            pytest.skip(f"no {tool} on this machine")
        (folder / tool).symlink_to(real)
    return str(folder)


def check_with(answer: dict, torch: dict | None = None, outcomes: dict | None = None):
    planned = {"kernels.flash-mla": CheckReport("kernels.flash-mla", "FlashMLA", Status.FAIL, "missing",
                                                fixes=[catalogue.FLASH_MLA])}
    ctx = StubContext(answers={build_checks.TOOLCHAIN.key: answer, TORCH.key: torch or CUDA_TORCH},
                      outcomes=planned if outcomes is None else outcomes)
    return run_check(build_checks.build_toolchain, ctx), ctx


def wheel_home(tmp_path: Path, cccl: bool) -> Path:
    """A CUDA_HOME as the CUDA 13 wheels lay it out (site-packages/nvidia/cu13): the real nvcc wheel's bin, and the
    real nvidia-cuda-cccl wheel's include when `cccl`."""
    home = tmp_path / "nvidia" / "cu13"
    home.mkdir(parents=True)
    (home / "bin").symlink_to(ensure("nvidia-cuda-nvcc-13.5.37") / "nvidia" / "cu13" / "bin")
    if cccl:
        (home / "include").symlink_to(ensure("nvidia-cuda-cccl-13.0.85") / "nvidia" / "cu13" / "include")
    return home


@pytest.mark.slow  # the nvcc wheel is 47 MB (143 MB unpacked), fetched once into .cache/wheels
def test_the_real_nvcc_wheel_without_cccl(tmp_path):
    home = wheel_home(tmp_path, cccl=False)
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path, "c++", "ninja"), "CUDA_HOME": str(home)})
    assert answer["cuda_home_from"] == "CUDA_HOME" and answer["nvcc"]["release"] == "13.5"
    assert answer["cccl"]["exists"] is False and answer["cudart"]["linkable"] is False
    result, _ = check_with(answer)
    assert result.status is Status.FAIL
    assert "minor version" in result.summary and "without its CCCL headers" in result.summary
    assert "libcudart.so" in result.summary
    # The wheels' own folder: the CCCL fix is the nvidia-cuda-cccl wheel of the nvcc there (headers go with it).
    argvs = [c.argv for f in result.fixes for c in f.commands]
    assert ("pip", "install", "nvidia-cuda-cccl==13.5.*") in argvs
    assert all(f.phase is Phase.TOOLCHAIN for f in result.fixes)


@pytest.mark.slow
def test_the_real_nvcc_and_cccl_wheels_against_another_cuda_major(tmp_path):
    home = wheel_home(tmp_path, cccl=True)
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path, "c++", "ninja"), "CUDA_HOME": str(home)})
    assert answer["cccl"]["exists"] is True
    result, _ = check_with(answer, torch={"imported": True, "version": "2.8.0+cu128", "cuda_build": "12.8"})
    assert result.status is Status.FAIL and "another CUDA major" in result.summary
    assert "CCCL" not in result.summary
    # CUDA 12's wheels split the toolkit over several folders: the fix is a CUDA 12.8 toolkit, by hand.
    assert any(f.manual and "cuda-toolkit-12-8" in f.description for f in result.fixes)


def test_no_nvcc_under_cuda_home(tmp_path):
    empty = tmp_path / "cuda"
    empty.mkdir()
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path, "c++", "ninja"), "CUDA_HOME": str(empty)})
    assert answer["nvcc"]["missing"] is True and answer["nvcc_on_path"] is None
    result, _ = check_with(answer)
    assert result.status is Status.FAIL and f"no nvcc at {empty}/bin/nvcc" in result.summary
    argvs = [c.argv for f in result.fixes for c in f.commands]
    assert ("pip", "install", "nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-cccl==13.0.*") in argvs
    assert any("CUDA_HOME=" in n for f in result.fixes for n in f.notes)


def test_no_cuda_home_at_all():
    answer = {"cuda_home": None, "cuda_home_from": "none: CUDA_HOME and CUDA_PATH are unset, no nvcc on PATH, no "
              "/usr/local/cuda", "cuda_home_exists": False, "cxx": {"name": "c++", "path": "/usr/bin/c++"},
              "ninja": {"path": "/usr/bin/ninja"}, "purelib": "/venv/lib/python3.12/site-packages"}
    result, _ = check_with(answer)
    assert result.status is Status.FAIL and "no CUDA toolkit" in result.summary
    assert any("/venv/lib/python3.12/site-packages/nvidia/cu13" in n for f in result.fixes for n in f.notes)


def test_no_ninja_and_no_compiler(tmp_path):
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path), "CUDA_HOME": "/usr/local/cuda"})
    assert answer["ninja"]["path"] is None and answer["cxx"]["path"] is None
    result, _ = check_with(answer)
    assert result.status is Status.FAIL
    assert "no C++ compiler: 'c++'" in result.summary and "no ninja on PATH" in result.summary
    compiler = next(f for f in result.fixes if f.key == "toolchain:compiler")
    assert compiler.manual and not compiler.commands and "apt-get install g++" in compiler.description
    ninja = next(f for f in result.fixes if f.key == "toolchain:ninja")
    assert [c.argv for c in ninja.commands] == [("pip", "install", "ninja")] and not ninja.manual
    assert any("not on PATH" in n for n in ninja.notes)  # the venv's bin is not on this PATH


def test_cxx_names_the_compiler(tmp_path):
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path, "ninja"), "CXX": "g++-does-not-exist"})
    assert answer["cxx"] == {"name": "g++-does-not-exist", "from": "CXX", "path": None}
    # CXX as a command line (a compiler cache in front, flags after): its first word is the program looked up
    folder = tmp_path / "bin"  # bare_path's folder, made above
    wrapper = folder / "cc-wrapper"
    wrapper.write_text("#!/bin/sh\nexec \"$@\"\n")
    wrapper.chmod(0o755)
    answer, _ = probe(tmp_path, {"PATH": str(folder), "CXX": "cc-wrapper g++ -O2"})
    assert answer["cxx"] == {"name": "cc-wrapper g++ -O2", "from": "CXX", "path": str(wrapper)}


def fake_nvcc(tmp_path: Path, body: str) -> Path:
    home = tmp_path / "fake-cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + body)
    nvcc.chmod(0o755)
    return home


def test_a_hanging_nvcc_is_not_known_within_the_timeout(tmp_path):
    # A grandchild holding the output open too: the probe reads a file and kills the whole group.
    home = fake_nvcc(tmp_path, "sleep 300 &\nsleep 300\n")
    answer, took = probe(tmp_path, {"PATH": bare_path(tmp_path, "c++", "ninja", "sleep"), "CUDA_HOME": str(home)},
                         timeout_s=1.0)
    assert took < 8, took
    assert answer["nvcc"]["release"] is None and answer["nvcc"]["timed_out"] is True
    result, _ = check_with(answer)
    assert result.status is Status.FAIL and "nvcc's version is not known" in result.summary
    assert "did not finish within 1 s" in result.summary


def test_a_babbling_nvcc_is_not_known(tmp_path):
    home = fake_nvcc(tmp_path, "head -c 100000 /dev/urandom\n")
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path, "c++", "ninja", "head"), "CUDA_HOME": str(home)})
    assert answer["nvcc"]["release"] is None and len(answer["nvcc"]["head"]) <= 300
    result, _ = check_with(answer)
    assert result.status is not Status.PASS and "not known" in result.summary


def test_it_does_not_apply_when_no_build_step_is_planned():
    passed_rows = {cid: CheckReport(cid, cid, Status.PASS, "ok") for cid in build_checks.BUILDS_AGAINST_TORCH}
    # A warning whose fixes are no build (a pin) plans no build either.
    passed_rows["deps.consistency"] = CheckReport("deps.consistency", "deps", Status.WARN, "pin",
                                                  fixes=[Fix("pin", [["pip", "install", "x==1"]], key="x")])
    result, ctx = check_with({}, outcomes=passed_rows)
    assert result.status is Status.SKIP and "no build step is planned" in result.summary
    assert build_checks.TOOLCHAIN.key not in ctx.probed  # not even probed
    no_torch = {"torch.install": CheckReport("torch.install", "torch", Status.FAIL, "torch is not installed")}
    waiting, _ = check_with({}, outcomes=no_torch)
    assert waiting.status is Status.SKIP and waiting.summary.startswith("needs torch.install")


def test_a_good_toolchain_passes_only_against_torchs_cuda():
    answer = {"cuda_home": "/usr/local/cuda", "cuda_home_from": "CUDA_HOME", "cuda_home_exists": True,
              "nvcc": {"path": "/usr/local/cuda/bin/nvcc", "release": "13.0"},
              "cccl": {"path": "/usr/local/cuda/include/cccl", "exists": True},
              "cudart": {"dir": "/usr/local/cuda/lib64", "linkable": True, "found": ["libcudart.so"]},
              "cxx": {"name": "c++", "from": "default", "path": "/usr/bin/c++"}, "ninja": {"path": "/usr/bin/ninja"}}
    result, _ = check_with(answer)
    assert result.status is Status.PASS, result.summary
    cpu, _ = check_with(answer, torch={"imported": True, "version": "2.13.0+cpu", "cuda_build": None})
    assert cpu.status is Status.WARN and "is not known" in cpu.summary  # never a pass it did not earn
    # a distro's toolkit (CUDA_HOME=/usr): libcudart.so in the multiarch folder, where ld finds it, not in lib64
    distro = dict(answer, cudart={"dir": "/usr/lib64", "linkable": False, "found": [],
                                  "elsewhere": "/usr/lib/x86_64-linux-gnu/libcudart.so"})
    result, _ = check_with(distro)
    assert result.status is Status.WARN and "the linker finds /usr/lib/x86_64-linux-gnu/libcudart.so" in result.summary


def test_the_probe_finds_libcudart_where_the_linker_looks(tmp_path):
    lib = tmp_path / "libs"
    lib.mkdir()
    (lib / "libcudart.so").write_bytes(b"")  # only its name is looked up, as ld's -lcudart does
    home = tmp_path / "cuda"
    (home / "lib64").mkdir(parents=True)
    answer, _ = probe(tmp_path, {"PATH": bare_path(tmp_path), "CUDA_HOME": str(home), "LIBRARY_PATH": str(lib)})
    assert answer["cudart"]["linkable"] is False and answer["cudart"]["elsewhere"] == str(lib / "libcudart.so")


def test_every_check_that_declares_a_build_fix_is_read():
    from dsv4_doctor.checks import CHECKS

    declaring = {c.id for c in CHECKS if any(f.phase is Phase.BUILD for f in c.fixes)}
    assert declaring <= set(build_checks.BUILDS_AGAINST_TORCH)
    assert set(build_checks.build_toolchain.after) == set(build_checks.BUILDS_AGAINST_TORCH)


def test_the_plan_puts_the_toolchain_first_and_never_holds_it():
    assert ORDER.index(Phase.TOOLCHAIN) == ORDER.index(Phase.PATH) + 1 < ORDER.index(Phase.RUNTIME)
    from dsv4_doctor.checks.fixes import toolchain

    reports = [CheckReport("kernels.flash-mla", "", Status.FAIL, "", fixes=[catalogue.FLASH_MLA]),
               CheckReport("torch.install", "", Status.FAIL, "", fixes=[catalogue.TORCH]),
               CheckReport("build.toolchain", "", Status.FAIL, "", fixes=[toolchain.COMPILER, toolchain.NINJA])]
    plan = build_plan(reports)
    assert [s.fix.phase for s in plan.steps] == [Phase.TOOLCHAIN, Phase.TOOLCHAIN, Phase.RUNTIME, Phase.BUILD]
    ninja = next(s for s in plan.steps if s.fix.key == "toolchain:ninja")
    assert ninja.automatic and ninja.held_by is None  # pip runs it even while torch's manual step is pending
    assert plan.steps[-1].held_by == 1  # the build waits for the first manual step it needs: here the compiler
    # with pip's toolchain only (ninja), the build waits for torch's manual step alone
    plan = build_plan(reports[:2] + [CheckReport("build.toolchain", "", Status.FAIL, "", fixes=[toolchain.NINJA])])
    assert [s.fix.phase for s in plan.steps] == [Phase.TOOLCHAIN, Phase.RUNTIME, Phase.BUILD]
    assert plan.steps[-1].held_by == 2
    # a manual toolchain step holds the build even where torch is right
    plan = build_plan([reports[0], reports[2]])
    assert plan.steps[-1].fix.phase is Phase.BUILD and plan.steps[-1].held_by == 1 and not plan.steps[-1].automatic


@pytest.mark.parametrize("line", [
    "RuntimeError: Ninja is required to load C++ extensions (pip install ninja to get it)",
    "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
    # torch raises it with its %s unfilled: RuntimeError(CUDA_MISMATCH_MESSAGE, '12.8', '13.0')
    "RuntimeError: ('The detected CUDA version (%s) mismatches the version that was used to compilePyTorch (%s). "
    "Please make sure to use the same CUDA versions.', '12.8', '13.0')",
    "csrc/api.cpp:3:10: fatal error: cuda/std/utility: No such file or directory",
])
def test_triage_names_the_toolchain(line):
    from dsv4_doctor.triage.match import causes_in

    found = causes_in(line)
    assert found and found[0].check_id == "build.toolchain", [(m.check_id, m.text_id) for m in found]
