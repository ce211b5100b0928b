"""Rulebook v3, fixes that work as printed and honest summaries: FlashMLA pinned to a commit and built for the target
arch with CUDA 13's include path, fast-hadamard at what the installed Megatron-Bridge declares (real 0.6.2 and 0.5.1
wheels), triton from any specifier torch declares, the torch step from its CUDA wheel index, wrapped step comments,
and no pass over zero packages. Judged and planned in this process over real probe answers (probed)."""

from __future__ import annotations

import shlex

import pytest

from fakes import Env, fake_flash_mla, fake_torch
from probed import RUN_IDS, fix_script, judge
from test_rules import assert_moved_aside, commands

FLASH_MLA_URL = ("flash_mla @ git+https://github.com/deepseek-ai/FlashMLA.git@"
                 "b7643bd54521f563b839b98289b5cd048c062ba2")


@pytest.mark.parametrize("arch, flag", [("9.0", "FLASH_MLA_DISABLE_SM100=1"), ("10.0", "FLASH_MLA_DISABLE_SM90=1"),
                                        (None, None)])
def test_the_flash_mla_fix_pins_the_commit_with_the_cuda_13_include_path_and_the_arch(tmp_path, bare_python, arch,
                                                                                      flag):
    env = Env(tmp_path).fake("flash_mla", fake_flash_mla, "main")
    row = judge(env, bare_python, "kernels.flash-mla", gpu_arch=arch)
    # The job imports flash_mla from its `pip install --target` folder on PYTHONPATH: the build is installed into it
    # (pip builds the git URL's wheel, then lays it into the folder), its old dist-info moved aside first.
    entry = env.sites["flash_mla"]
    assert_moved_aside(row, "flash_mla", entry / "flash_mla-1.0.0.dist-info")
    fix = next(f for f in row["fixes"] if (f.get("action") or {}).get("kind") == "install-into-entry")
    assert fix["argv"] == [["pip", "install", "--upgrade", "--target", str(entry), "--no-build-isolation", "--no-deps",
                            FLASH_MLA_URL]]
    env_vars = fix["env"][0]
    assert env_vars["CPLUS_INCLUDE_PATH"] == "${CUDA_HOME}/include/cccl"
    words = shlex.split(fix["commands"][0])
    assert words[0] == "CPLUS_INCLUDE_PATH=${CUDA_HOME:-/usr/local/cuda}/include/cccl"
    if flag:
        assert flag in words and len(env_vars) == 2
    else:
        assert len(env_vars) == 1 and "not known" in fix["description"]
    plan = fix_script(env, bare_python, ["kernels.flash-mla"], gpu_arch=arch)
    line = next(x for x in plan.splitlines() if "FlashMLA.git" in x)
    assert line.startswith('CPLUS_INCLUDE_PATH="${CUDA_HOME:-/usr/local/cuda}/include/cccl" ')
    assert f'"$PY" -I -m pip install --upgrade --target {entry} --no-build-isolation --no-deps' in line


V110 = "1cc807efbd6cc001df359822d60bf6052dd66859"  # fast-hadamard-transform tag v1.1.0
DEV = "f134af63deb2df17e1171a9ec1ea4a7d8604d5ca"  # Megatron-LM dev's pin (1.0.4.post1)


@pytest.mark.parametrize("bridge, commit", [("megatron-bridge-0.6.2", V110), ("megatron-bridge-0.5.1", DEV)])
def test_fast_hadamard_follows_the_installed_bridge(tmp_path, bare_python, bridge, commit):
    """0.6.2's METADATA folds blank lines into its License field: read as the email parser does, its
    fast-hadamard-transform>=1.1.0 follows them."""
    env = Env(tmp_path).wheel("mbridge", bridge)
    fix = judge(env, bare_python, "kernels.fast-hadamard")["fixes"][0]
    assert fix["argv"][0][-1].endswith("@" + commit)
    if commit == V110:
        assert "declares fast-hadamard-transform>=1.1.0" in fix["description"]


@pytest.mark.parametrize("declared, installed, status, command", [
    ("triton~=3.8.0", "3.8.1", "pass", "pip install 'triton~=3.8.0'"),
    ("triton~=3.9.0", "3.8.1", "warn", "pip install 'triton~=3.9.0'"),
    ("triton==3.6.0", "3.5.0", "warn", "pip install triton==3.6.0"),
])
def test_triton_reads_any_specifier_torch_declares(tmp_path, bare_python, declared, installed, status, command):
    env = Env(tmp_path).fake("torch", lambda s: fake_torch(s, "2.15.0", requires=(declared,)))
    env.fake("triton", lambda s: s.dist("triton", installed) and s.file("triton/__init__.py", ""))
    row = judge(env, bare_python, "kernels.triton")
    assert row["status"] == status, row
    if status == "warn":
        assert commands(row) == [command]


@pytest.mark.parametrize("installed, downgrades", [("2.11.1", True), ("2.11.0", False)])  # either side of 2.11.0
def test_the_torch_fix_uses_the_cuda_index_and_says_when_it_downgrades(tmp_path, bare_python, installed, downgrades):
    env = Env(tmp_path).fake("torch", fake_torch, installed, None)  # a CPU build: torch.install fails
    fix = judge(env, bare_python, "torch.install")["fixes"][0]
    assert fix["argv"][0] == ["pip", "install", "torch==2.11.0", "--index-url", "https://download.pytorch.org/whl/cu130"]
    assert any(f"DOWNGRADES the installed torch {installed}" in n for n in fix["notes"]) == downgrades


def test_megatron_bridge_offers_its_pypi_release_with_no_deps(tmp_path, bare_python):
    env = Env(tmp_path).wheel("mbridge", "megatron-bridge-0.3.1").wheel("verl", "verl-0.9.0")
    row = judge(env, bare_python, "mbridge.dsv4")
    # 0.3.1 is imported from its `pip install --target` folder on PYTHONPATH: the install is aimed there.
    entry = env.sites["mbridge"]
    assert_moved_aside(row, "megatron.bridge", entry / "megatron_bridge-0.3.1.dist-info")
    fix = next(f for f in row["fixes"] if (f.get("action") or {}).get("kind") == "install-into-entry")
    assert fix["argv"][0][:5] == ["pip", "install", "--upgrade", "--target", str(entry)], fix["argv"]
    assert "No PyPI release" not in row["details"] and "0.5.0 and later ship it" in row["details"]
    assert "no PyPI release" not in fix["description"]
    note = " ".join(fix["notes"])
    assert "pip install --no-deps megatron-bridge==0.6.2" in note and "megatron-core[dev,mlm]" in note
    # The note's PyPI route would land behind the folder as well: it says how to aim it there.
    assert f"aim it at the same folder: --upgrade --target {entry}" in note


def test_step_comments_wrap_at_word_boundaries(tmp_path, bare_python):
    plan = fix_script(Env(tmp_path), bare_python, RUN_IDS, gpu_arch="9.0")
    comments = [line for line in plan.splitlines() if line.startswith("#")]
    assert not any(line.endswith("…") for line in comments), plan
    assert all(len(line) <= 120 or "pip" in line for line in comments), plan
    # a description that spans lines is continued, not cut
    flash = [i for i, line in enumerate(comments) if "Build FlashMLA" in line]
    assert flash and comments[flash[0] + 1].startswith("#   ")


def test_deps_consistency_does_not_pass_over_nothing(tmp_path, bare_python):
    row = judge(Env(tmp_path), bare_python, "deps.consistency")
    assert row["status"] == "skip" and "none of the DSv4 and CUDA packages is installed" in row["summary"]
    row = judge(Env(tmp_path), bare_python, "deps.metadata")
    assert row["status"] == "skip" and "no inspected distribution is installed" in row["summary"], row


@pytest.mark.parametrize("cutlass, hint", [("4.8.1", "nvidia-cutlass-dsl-libs-core"), ("4.5.2", "libs-base wheel")])
def test_the_cute_dsl_hint_follows_its_packaging(tmp_path, bare_python, cutlass, hint):
    """4.8.x moved `cutlass` into nvidia-cutlass-dsl-libs-core; the .pth stays in the meta wheel."""
    env = Env(tmp_path).fake("torch", fake_torch)
    env.fake("cuda", lambda s: s.file("cuda/__init__.py", "") and s.file("cuda/bindings/__init__.py", "")
             and s.file("cuda/bindings/driver.py", ""))
    env.fake("cutedsl", lambda s: s.dist("nvidia-cutlass-dsl", cutlass))
    row = judge(env, bare_python, "cutlass-dsl.import", cp=2, gpu_arch="9.0")
    assert row["status"] == "fail" and hint in row["details"], row


def test_apply_offline_leaves_out_git_builds_with_the_reason_and_runs_the_rest(monkeypatch, capfd):
    """`PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheels> fix --apply`: a git+ step cannot be reached offline; it is named as not
    applied, and the wheel steps still run (with a build step's environment set)."""
    from dsv4_doctor.fix import apply as fixapply, plan as fixplan
    from dsv4_doctor.checks.fixes import catalogue as fixes
    from dsv4_doctor.model.core import CheckReport, Status

    class Procs:
        def __init__(self):
            self.runs = []

        def spawn(self, argv, **kwargs):
            self.runs.append((argv, (kwargs.get("env") or {}).get("CPLUS_INCLUDE_PATH")))
            return type("P", (), {"wait": lambda self: 0})()

        def release(self, proc):
            pass

    reports = [CheckReport(id="kernels.flash-mla", title="t", status=Status.FAIL, summary="s",
                           fixes=[fixes.flash_mla((9, 0))]),
               CheckReport(id="tvm-ffi.version", title="t", status=Status.FAIL, summary="s",
                           fixes=[fixes.Fix("tvm", [["pip", "install", "--no-deps", "apache-tvm-ffi==0.1.11"]])])]
    plan = fixplan.build_plan(reports)
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-13")
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    online = Procs()
    done = fixapply.apply(plan, "/py", online)
    assert (done.ran, done.code) == (2, 0)
    assert online.runs[0][1] == "/opt/cuda-13/include/cccl"  # the build step's environment, CUDA_HOME resolved
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    offline, skipped = Procs(), []
    done = fixapply.apply(plan, "/py", offline, not_applied=skipped)
    assert (done.ran, done.code) == (1, 0)
    assert [argv[-1] for argv, _ in offline.runs] == ["apache-tvm-ffi==0.1.11"]
    assert skipped == ["step 1 not applied: PIP_NO_INDEX is set and it installs from git (a clone and a source "
                       "build need the network)"]
    assert skipped[0] in capfd.readouterr().err
