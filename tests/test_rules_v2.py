"""Rulebook v2: the corrections (no false pass, fixes that work where they are run) and the new checks, against real
published wheels and fakes that mirror the upstream files they name. The rules and plans are judged in this process
over real probe answers (probed); the CLI runs where its own contract is tested."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pip
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import FakeSite
from dsv4_doctor.checks import deps_checks
from dsv4_doctor.model.core import Status
from dsv4_doctor import testing
from dsv4_doctor.report.explain import explain_text
from dsv4_doctor.testing import StubContext, run_check, static_answer
from fakes import Env, fake_flash_mla, fake_mbridge, fake_megatron_dev, fake_te, fake_torch, healthy
from probed import BY_ID, RUN_IDS, fix_script, judge, judge_all, profile
from test_rules import assert_entry_dropped, commands, fix_turns_green, run

EAV = "megatron/core/transformer/experimental_attention_variant/"
LIBZ = next((p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                         "/lib64/libz.so.1", "/usr/lib64/libz.so.1") if os.path.exists(p)), None)
needs_elf = pytest.mark.skipif(LIBZ is None, reason="needs a real ELF shared library (libz.so.1) to copy")


# --- kernels.flash-mla: the parameter Megatron passes, not just the import ------------------------------------------

def test_flash_mla_from_main_fails_and_nv_dev_passes(tmp_path, bare_python):
    env = Env(tmp_path).fake("flash_mla", fake_flash_mla, "main")
    row = judge(env, bare_python, "kernels.flash-mla")
    assert row["status"] == "fail" and "no indexer_topk parameter" in row["summary"]
    assert "unexpected keyword argument 'indexer_topk'" in row["summary"]
    assert "FlashMLA.git@b7643bd5" in commands(row)[0]  # nv_dev, pinned to its commit
    fix_turns_green(env, bare_python, "kernels.flash-mla")
    ok = judge(env, bare_python, "kernels.flash-mla")
    assert ok["evidence"]["params_from"] == "signature" and "indexer_topk" in ok["evidence"]["params"]


def test_each_part_of_megatrons_dependency_error_is_stated_once_by_its_own_check(tmp_path, bare_python):
    """Megatron's one ValueError names every missing fused-DSA package; the frontend's part belongs to
    cudnn-fe.version, FlashMLA's to kernels.flash-mla, and neither summary repeats the other's finding."""
    sentence = "requires fused DSA kernels, but the following packages are not available"
    rows = judge_all(Env(tmp_path), bare_python, RUN_IDS, smoke="off")
    quoting = {i: c["summary"] for i, c in rows.items() if sentence in c["summary"]}
    assert sorted(quoting) == ["cudnn-fe.version", "kernels.flash-mla"], quoting
    assert "flash_mla" not in quoting["cudnn-fe.version"]
    assert "cudnn-frontend DSA (nvidia-cudnn-frontend[cutedsl])" in quoting["cudnn-fe.version"]
    assert "cudnn-frontend" not in quoting["kernels.flash-mla"]
    assert quoting["kernels.flash-mla"].startswith("flash_mla is not installed. dsa_kernel_backend=cudnn requires")
    assert "see kernels.flash-mla" in rows["cudnn-fe.version"]["details"]
    text = Env(tmp_path).doctor("check", "--no-smoke", python=bare_python).stdout
    assert " ".join(text.split()).count("flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev)") <= 2
    with_frontend = judge(Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0"), bare_python, "kernels.flash-mla")
    assert with_frontend["summary"] == (
        "flash_mla is not installed. "
        "dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: flash_mla "
        "(https://github.com/deepseek-ai/FlashMLA/tree/nv_dev). Install them or set dsa_kernel_backend=none to use the "
        "PyTorch fallback.")


def test_flash_mla_signature_falls_back_to_ast(tmp_path, bare_python):
    def builtin_fwd(site: FakeSite):  # the function the package exports has no readable signature (a builtin)
        fake_flash_mla(site, "main")
        site.file("flash_mla/__init__.py", "flash_mla_sparse_fwd = max\n")
    row = judge(Env(tmp_path).fake("flash_mla", builtin_fwd), bare_python, "kernels.flash-mla")
    assert row["evidence"]["params_from"].startswith("ast")
    assert row["status"] == "fail" and "no indexer_topk parameter" in row["summary"]


# --- cudnn-fe.dsa: what the installed Megatron calls ----------------------------------------------------------------

def test_dsa_wrappers_are_read_from_the_installed_megatron(tmp_path, bare_python):
    def megatron(site: FakeSite):
        fake_megatron_dev(site)
        site.file(EAV + "dsa_cudnn_kernels.py", """
            _cudnn_dsa = None
            def fwd(q):
                return _cudnn_dsa.indexer_forward_wrapper(q)["scores"], _cudnn_dsa.future_magic_wrapper(q)
        """)
    env = healthy(tmp_path).fake("megatron", megatron)
    row = judge(env, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")
    assert row["status"] == "fail" and "cudnn.DSA.future_magic_wrapper does not load" in row["summary"]
    assert row["evidence"]["wrappers_from"][0].endswith("dsa_cudnn_kernels.py")
    assert row["evidence"]["wrappers"]["indexer_forward_wrapper"]["resolves"] is True


def test_dsa_wrappers_of_verls_tested_megatron_are_read(tmp_path, bare_python):
    """fd1121b8 (the commit verl's DSv4 example was tested with) calls the wrappers from dsa_kernels.py, through
    `_DSA`, including two d48bd6be does not (as upstream, lines 317 and 748)."""
    def megatron(site: FakeSite):
        fake_megatron_dev(site)
        site.file(EAV + "dsa_kernels.py", """
            _DSA = None
            def compact(global_idxs):
                return _DSA.compactify_wrapper(global_idxs)
            def recompute(*a):
                return _DSA.sparse_indexer_score_recompute_wrapper(*a)
        """)
    env = healthy(tmp_path).fake("megatron", megatron)
    row = judge(env, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")
    assert any(f.endswith("dsa_kernels.py") for f in row["evidence"]["wrappers_from"])
    assert {"compactify_wrapper", "sparse_indexer_score_recompute_wrapper"} <= set(row["evidence"]["wrappers"])


def test_the_dense_indexer_loss_is_read_from_the_job():
    """The q_causal_offsets rule for the dense wrappers follows the job's indexer loss when a command is given (the
    profile's job.dense_indexer_loss, which the next test feeds the rule)."""
    from dsv4_doctor.job.command import parse

    otc = "actor_rollout_ref.actor.megatron.override_transformer_config"
    sparse = parse(["python3", "-m", "verl.trainer.main_ppo", f"++{otc}.dsa_indexer_loss_coeff=0.1",
                    f"++{otc}.dsa_indexer_use_sparse_loss=True"])
    dense = parse(["python3", "-m", "verl.trainer.main_ppo", f"++{otc}.dsa_indexer_loss_coeff=0.1"])
    assert sparse.dense_indexer_loss() is False and dense.dense_indexer_loss() is True
    assert parse(["pretrain_gpt.py", "--context-parallel-size", "2"]).dense_indexer_loss() is False  # default None
    assert parse(["python3", "-m", "verl.trainer.main_ppo", "x=1"]).dense_indexer_loss() is None  # the Bridge's


@pytest.mark.parametrize("loss, status", [("dense", "fail"), ("sparse", "pass"), ("off", "pass"), ("unstated", "warn")])
def test_dense_wrappers_without_offsets_fail_when_the_job_trains_the_dense_loss(tmp_path, bare_python, loss, status):
    """TC:1793-1817: with CP > 1 and the dense indexer loss on (coeff > 0, not dsa_indexer_use_sparse_loss), Megatron
    requires q_causal_offsets by name on the three dense wrappers too; with the sparse loss, or none, it does not."""
    from test_rules import OLD_FRONTEND

    def frontend(site: FakeSite):  # indexer_forward_wrapper names the offsets; the dense wrappers take **kwargs only
        site.dist("nvidia-cudnn-frontend", "1.25.0")
        site.file("cudnn/__init__.py", OLD_FRONTEND.format(extra=", q_causal_offsets=None"))
    otc = "actor_rollout_ref.actor.megatron.override_transformer_config"
    settings = {"dense": [f"++{otc}.dsa_indexer_loss_coeff=0.1"],
                "sparse": [f"++{otc}.dsa_indexer_loss_coeff=0.1", f"++{otc}.dsa_indexer_use_sparse_loss=True"],
                "off": [f"++{otc}.dsa_indexer_loss_coeff=0.0"], "unstated": None}[loss]
    def job(cp: int):  # the job's CP comes from its own arguments then
        if settings is None:
            return profile(cp=cp, gpu_arch="9.0")
        return profile(gpu_arch="9.0", job_args=["python3", "-m", "verl.trainer.main_ppo", *settings,
                                                 f"++{otc}.dsa_kernel_backend=cudnn",
                                                 # cudnn as stated, whatever the bridge writes:
                                                 f"++{otc}.apply_dsa_kernel_fusion=null",
                                                 f"actor_rollout_ref.actor.megatron.context_parallel_size={cp}"])
    job_profile = job(2)
    row = judge(Env(tmp_path).fake("fe", frontend), bare_python, "cudnn-fe.dsa", prof=job_profile)
    assert row["status"] == status, row["summary"]
    dense = ("dense_indexer_score_recompute_wrapper", "dense_attn_score_recompute_wrapper",
             "dense_indexer_backward_wrapper")
    if status == "fail":
        assert row["summary"].startswith("DSv4 CP with ratio-4 fused DSA requires cuDNN Frontend wrappers with "
                                         "q_causal_offsets support; missing from: ")
        missing = row["summary"].split("missing from: ", 1)[1].split(". Install", 1)[0].split(", ")
        assert set(missing) == set(dense), missing  # indexer_forward_wrapper names it: not listed
    else:
        assert "missing from" not in row["summary"]
    if settings is not None:
        assert job_profile.to_dict()["job"]["dense_indexer_loss"] is (loss == "dense")
    # CP 1: Megatron requires none of them
    cp1 = judge(Env(tmp_path).fake("fe", frontend), bare_python, "cudnn-fe.dsa", prof=job(1))
    assert cp1["status"] == "pass"


# --- cudnn-fe.csa: only where the installed Megatron has a fused compressor -----------------------------------------

def test_csa_skips_without_megatrons_fused_compressor(tmp_path, bare_python):
    def before_108cb6bc(site: FakeSite):  # verl's tested fd1121b8: no fused compressor under either name
        fake_megatron_dev(site)
        (site.root / EAV / "csa_utils" / "fused_compressor.py").unlink()
    env = healthy(tmp_path).fake("megatron", before_108cb6bc).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    row = judge(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")
    assert row["status"] == "skip" and "no fused CSA compressor" in row["summary"]

    def old_name(site: FakeSite):  # 108cb6bc to before 1c44a570: csa_fused_compressor.py
        before_108cb6bc(site)
        site.file(EAV + "csa_fused_compressor.py", "_SUPPORTED_COMPUTE_CAPABILITY = (10, 0)\n")
    env.fake("megatron", old_name)
    row = judge(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")
    assert row["status"] == "fail" and "has no cudnn.csa" in row["summary"]


# --- te.import: an undefined versioned symbol names its library -------------------------------------------------------

CUBLAS_ERROR = ("{lib}: undefined symbol: cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13")


@needs_elf
@pytest.mark.parametrize("te_lib", ["/site/transformer_engine/wheel_lib/libtransformer_engine.so",
                                    # otherwise: the same cuBLAS symbol missing from TE's torch extension was
                                    # called a torch ABI mismatch
                                    "/site/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"])
def test_te_import_reads_the_library_that_lacks_the_symbol(tmp_path, bare_python, te_lib):
    def cublas(site: FakeSite):  # nvidia-cublas 13.1.0.3's layout, its library a real ELF without that symbol
        d = site.dist("nvidia-cublas", "13.1.0.3")
        lib = site.root / "nvidia" / "cublas" / "lib" / "libcublasLt.so.13"
        lib.parent.mkdir(parents=True)
        shutil.copy(LIBZ, lib)
        (d / "RECORD").write_text("nvidia/cublas/lib/libcublasLt.so.13,,\n")
    env = Env(tmp_path).fake("cublas", cublas).fake("te", fake_te, "2.16.1", import_error=CUBLAS_ERROR.format(
        lib=te_lib))
    row = judge(env, bare_python, "te.import")
    assert row["status"] == "fail"
    assert "nvidia-cublas 13.1.0.3" in row["details"] and "does not export it" in row["details"]
    assert "ABI mismatch" not in row["details"]
    assert "nvidia-cublas>=13.2" in row["details"] and "cuda-toolkit==13.0.2" in row["details"]
    assert "4. torch 2.15.0 from PyPI: it pins cuda-toolkit==13.2.2, which brings nvidia-cublas 13.4.1.3" in row[
        "details"]
    assert commands(row) == ["pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'"]
    assert_entry_dropped(row, "transformer_engine", env.sites["te"])  # --target --no-deps would drop the extras
    provider = row["evidence"]["providers"][0]
    assert provider["exports"] is False and provider["owner"]["distribution"] == "nvidia-cublas"


TORCH_SYMBOL_ERROR = ("/site/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so: undefined symbol: "
                      "_ZN3c104cuda9SetDeviceEi")


def test_te_import_torch_symbol_is_still_an_abi_mismatch(tmp_path, bare_python):
    """The rebuild reinstalls TE's torch extension alone: otherwise a forced reinstall of
    transformer-engine[pytorch,...] without --no-deps re-picks every dependency, torch included."""
    # torch is there (a torch symbol is what the extension misses): the plan installs no torch, so no cuBLAS either.
    env = Env(tmp_path).fake("torch", fake_torch).fake("te", fake_te, "2.16.1", import_error=TORCH_SYMBOL_ERROR)
    row = judge(env, bare_python, "te.import")
    assert row["status"] == "fail" and "ABI mismatch" in row["details"]
    assert commands(row) == ["pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps "
                             "transformer-engine-torch==2.16.1"]
    assert "torch included" in row["fixes"][0]["description"]


def _cublas(version_: str):
    """nvidia-cublas's METADATA as published (torch 2.11.0's cuda-toolkit==13.0.2 brings 13.1.0.3)."""
    return lambda site: site.dist("nvidia-cublas", version_)


@pytest.mark.parametrize("cublas, torch, te", [("13.1.2.11", False, "2.12.0"),  # the newest below 13.2
                                               ("13.2.0.9", False, "2.16.1"), (None, False, "2.12.0"),
                                               (None, True, "2.16.1")])
def test_te_fixes_pick_the_release_the_installed_cublas_loads(tmp_path, bare_python, cublas, torch, te):
    """TE 2.13 and later need cublasLtGroupedMatrixLayoutInit_internal, which nvidia-cublas exports from 13.2 on
    (§9.4, nm -D on the published wheels): below it, every TE install fix pins 2.12.0 and says why. Without torch the
    plan's first step installs torch 2.11.0, whose cuda-toolkit pin brings cuBLAS 13.1.0.3: 2.12.0 too (torch 2.11.0
    with TE 2.16.1 was measured not to load)."""
    env = Env(tmp_path)
    if cublas:
        env.fake("cublas", _cublas(cublas))
    if torch:
        env.fake("torch", fake_torch)
    missing = judge(env, bare_python, "te.version")
    assert missing["status"] == "fail"
    assert commands(missing) == [f"pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]=={te}'"]
    says_why = (f"nvidia-cublas {cublas} lacks cublasLtGroupedMatrixLayoutInit_internal" if cublas else
                "torch 2.11.0, which the plan's first step installs, brings nvidia-cublas 13.1.0.3")
    assert (says_why in missing["fixes"][0]["description"]) == (te == "2.12.0"), missing["fixes"][0]
    env.fake("te", fake_te, "2.16.1", dists={"transformer-engine": "2.16.1", "transformer-engine-cu13": "2.14.0"})
    mixed = judge(env, bare_python, "te.version")
    assert commands(mixed)[1] == f"pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]=={te}'"
    assert_entry_dropped(mixed, "transformer_engine", env.sites["te"])  # --target --no-deps would drop the extras
    # A torch ABI mismatch in TE 2.16.1: rebuilding its extension cannot help where its core cannot load.
    env.fake("te", fake_te, "2.16.1", import_error=TORCH_SYMBOL_ERROR)
    abi = judge(env, bare_python, "te.import")
    assert ("transformer-engine-torch==2.16.1" in commands(abi)[0]) == (te == "2.16.1"), commands(abi)
    assert ("'transformer-engine[pytorch,core_cu13]==2.12.0'" in commands(abi)[0]) == (te == "2.12.0")
    # TE 2.12.0 with the same mismatch: its own extension is rebuilt, whatever the cuBLAS.
    env.fake("te", fake_te, "2.12.0", import_error=TORCH_SYMBOL_ERROR)
    old = judge(env, bare_python, "te.import")
    assert commands(old) == ["pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps "
                             "transformer-engine-torch==2.12.0"]


# --- Megatron: the pin, and a PYTHONPATH checkout pip cannot change --------------------------------------------------

def test_megatron_fix_pins_d48bd6be_and_explains_fd1121b8(tmp_path, bare_python):
    row = judge(Env(tmp_path), bare_python, "mcore.dsv4")
    assert commands(row) == ["pip install --no-deps 'megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git"
                             "@d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1'"]
    explained = explain_text(BY_ID["mcore.dsv4"])
    assert "fd1121b8" in explained and "4b01a1b9" in explained and "108cb6bc" in explained


def test_a_megatron_checkout_on_pythonpath_is_named_in_the_fix(tmp_path, bare_python):
    def release_and_checkout(site: FakeSite):  # verl's image: Megatron-Bridge's 3rdparty/Megatron-LM on PYTHONPATH
        (site.root / "3rdparty" / "Megatron-LM" / "megatron" / "core").mkdir(parents=True)
        (site.root / "3rdparty" / "Megatron-LM" / "megatron" / "core" / "__init__.py").write_text("")
    env = Env(tmp_path).fake("checkout", release_and_checkout)
    env.sites["checkout"] = env.sites["checkout"] / "3rdparty" / "Megatron-LM"
    row = judge(env, bare_python, "mcore.dsv4")
    assert row["status"] == "fail" and not commands(row)
    assert "`pip install` would not change" in row["fixes"][0]["description"]
    assert "3rdparty/Megatron-LM" in row["fixes"][0]["description"]
    assert "PYTHONPATH entry 1" in row["fixes"][0]["description"]  # which copy, and why the job imports it
    assert row["fixes"][0]["action"]["kind"] == "replace-copy"
    assert row["fixes"][0]["action"]["path"].endswith("3rdparty/Megatron-LM")


def test_mcore_config_says_which_scheduler_verl_uses(tmp_path, bare_python):
    env = Env(tmp_path).fake("megatron", fake_megatron_dev).wheel("verl", "verl-0.9.0")
    row = judge(env, bare_python, "mcore.config", cp=2)
    assert "sequence_packing_scheduler=default_dynamic_cp" in row["details"] and "PR #6555" in row["details"]


# --- torch fix: a manual step naming the extensions to rebuild -------------------------------------------------------

def test_the_torch_fix_is_manual_and_names_the_extensions_found(tmp_path, bare_python):
    """End to end for the fix plan: `fix` through the CLI prints the script the in-process plan renders
    (probed.fix_script, which the other plan tests use)."""
    env = Env(tmp_path).fake("te", fake_te, "2.16.1").fake("flash_mla", fake_flash_mla)
    row = judge(env, bare_python, "torch.install")
    fix = row["fixes"][0]
    assert fix["manual"] and fix["phase"] == "runtime"
    assert "transformer-engine-torch 2.16.1" in fix["notes"][0] and "flash-mla 1.0.0" in fix["notes"][0]
    plan = env.doctor("fix", "--only", "torch.install", python=bare_python).stdout
    assert '#   "$PY" -I -m pip install torch==2.11.0' in plan  # printed as a comment, never run
    assert plan == fix_script(env, bare_python, ["torch.install"])


# --- cutlass follows the frontend; the plan as a whole resolves -----------------------------------------------------

@pytest.mark.slow  # asks the package index (pip --dry-run)
def test_frontend_1_32_with_cutlass_4_5_2_gets_a_plan_pip_accepts(tmp_path, bare_python):
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.32.0").wheel("cutlass", "nvidia-cutlass-dsl-4.5.2")
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("typing_extensions", "typing-extensions-4.16.0")  # what apache-tvm-ffi requires: not the plan's job
    row = judge(env, bare_python, "deps.consistency")
    assert row["status"] == "fail"
    assert "nvidia-cudnn-frontend 1.32.0 requires nvidia-cutlass-dsl[cu13]>=4.8.0" in row["summary"]
    script = fix_script(env, bare_python, ["deps.*", "cudnn-fe.*", "tvm-ffi.version", "cutlass-dsl.import"], cp=2)
    pins = [line for line in script.splitlines() if line.startswith('"$PY" -I -m pip install')]
    assert any("'nvidia-cutlass-dsl[cu13]>=4.8.0'" in p for p in pins), pins
    assert not any("nvidia-cutlass-dsl[cu13]==4.5.2" in p for p in pins)  # never what the frontend rejects
    assert not any("nvidia-cudnn-frontend==1.27.0" in p for p in pins)  # the installed frontend is kept
    # cutlass 4.8 does not bring cuda-python, which 1.32.0's cutedsl extra declares (otherwise: after the plan,
    # deps.consistency still failed on it)
    assert any(p.endswith("install cuda-python") for p in pins), pins
    assert_plan_resolves(script, env, tmp_path, bare_python)


@pytest.mark.slow  # asks the package index (pip --dry-run)
@pytest.mark.parametrize("plan", [
    # what frontend 1.32.0 rejects: pip check names the unconditional nvidia-cutlass-dsl[cu13]>=4.8.0
    ["'nvidia-cutlass-dsl[cu13]==4.5.2'"],
    # cutlass 4.8 without cuda-python, which 1.32.0's cutedsl extra declares: pip check does not read extras
    ["'nvidia-cutlass-dsl[cu13]>=4.8.0'"]])
def test_the_plan_oracle_rejects_a_plan_that_leaves_a_requirement_unmet(tmp_path, bare_python, plan):
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.32.0").wheel("cutlass", "nvidia-cutlass-dsl-4.5.2")
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("typing_extensions", "typing-extensions-4.16.0")
    script = "\n".join(f'"$PY" -I -m pip install {spec}' for spec in plan)
    with pytest.raises(AssertionError, match="cutlass|cuda-python"):
        assert_plan_resolves(script, env, tmp_path, bare_python)


def assert_plan_resolves(script: str, env: Env, tmp_path: Path, python: str) -> None:
    """The oracle: carry out the plan's pip commands as printed, in order, as pip dry runs against the package index
    with the environment's installed set visible to pip (on PYTHONPATH, as the doctor saw it): pip must resolve
    each one; what each would install is laid over the environment before the next. Then `pip check` on the result
    reports no conflict, and every Requires-Dist of the stack's packages (with the extras the stack uses) holds."""
    overlay = tmp_path / "plan-result"  # first on the path: what the plan installed shadows what was there
    overlay.mkdir()
    pip_only = tmp_path / "pip-only"  # pip itself, without its dist-info: not part of the inspected set
    pip_only.mkdir()
    (pip_only / "pip").symlink_to(Path(pip.__file__).parent)
    path = os.pathsep.join(map(str, [overlay, *env.sites.values(), pip_only]))
    pip_env = dict(os.environ, PYTHONPATH=path, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    commands_run = plan_pip_commands(script, env.sites.values())
    assert commands_run, script
    for n, (options, specs) in enumerate(commands_run):
        report = tmp_path / f"dry-run-{n}.json"
        done = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--only-binary=:all:", "-q", "--report",
                               str(report), *options, *specs], env=pip_env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, (options, specs, done.stderr[-3000:])
        for item in json.loads(report.read_text())["install"]:
            _lay_over(overlay, item["metadata"])
    done = subprocess.run([python, "-m", "pip", "check"], env=pip_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    final = _installed_set([overlay, *env.sites.values()])
    for name, extras in STACK_EXTRAS.items():
        meta = final.get(name)
        if meta is None:
            continue
        for line in meta["requires_dist"]:
            req = Requirement(line)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                continue
            have = final.get(canonicalize_name(req.name))
            assert have is not None, f"after the plan, {name} {meta['version']} requires {line}: not installed"
            assert req.specifier.contains(have["version"], prereleases=True), (name, line, have["version"])


# The stack's packages whose requirements the plan must satisfy, with the extras the stack installs them with.
STACK_EXTRAS = {"nvidia-cudnn-frontend": ("cutedsl",), "nvidia-cutlass-dsl": ("cu13",),
                "nvidia-cutlass-dsl-libs-base": (), "nvidia-cutlass-dsl-libs-cu13": (),
                "nvidia-cutlass-dsl-libs-core": (), "torch-c-dlpack-ext": (), "apache-tvm-ffi": (), "cuda-python": (),
                "cuda-bindings": (), "cuda-core": ()}


def plan_pip_commands(script: str, entries=()) -> list[tuple[list[str], list[str]]]:
    """Each `pip install` of a fix script as (its options, its requirements), parsed as the shell would. A step aimed
    at a `pip install --target` folder (checks/_reach.py: `--upgrade --target ENTRY --no-deps`) must name one of
    `entries` (the environment's folders on PYTHONPATH); its options are given without `--target ENTRY`: what it
    installs is laid over the environment, in front of that folder, as the folder's new content would be."""
    out = []
    for line in script.splitlines():
        if not line.startswith('"$PY" '):
            continue
        words = shlex.split(line)
        assert words[:5] == ["$PY", "-I", "-m", "pip", "install"], line
        words = words[5:]
        if "--target" in words:
            at = words.index("--target")
            entry = words[at + 1]
            assert entry in {str(e) for e in entries}, (line, entries)
            assert "--upgrade" in words and "--no-deps" in words, line
            words = words[:at] + words[at + 2:]
        options = [w for w in words if w.startswith("-")]
        specs = [w for w in words if not w.startswith("-")]
        assert set(options) <= {"--no-deps", "--force-reinstall", "--no-build-isolation", "--upgrade"}, line
        assert specs and all(" @ " not in s for s in specs), line  # no VCS builds in the plans this oracle runs
        out.append((options, specs))
    return out


def _lay_over(overlay: Path, meta: dict) -> None:
    """A dist-info for what a dry run would install (its metadata from pip's report), replacing an earlier one."""
    name = canonicalize_name(meta["name"])
    for old in overlay.glob("*.dist-info"):
        if canonicalize_name(old.name.split("-", 1)[0]) == name:
            shutil.rmtree(old)
    d = overlay / f"{name.replace('-', '_')}-{meta['version']}.dist-info"
    d.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}"]
    lines += [f"Provides-Extra: {e}" for e in meta.get("provides_extra") or []]
    lines += [f"Requires-Dist: {r}" for r in meta.get("requires_dist") or []]
    (d / "METADATA").write_text("\n".join(lines) + "\n")
    (d / "INSTALLER").write_text("pip\n")


def _installed_set(sites: list[Path]) -> dict[str, dict]:
    """name -> {version, requires_dist}, the first copy on the path winning, as importlib.metadata and pip see it."""
    found: dict[str, dict] = {}
    for dist in importlib.metadata.distributions(path=[str(s) for s in sites]):
        name = canonicalize_name(dist.metadata["Name"] or "")
        found.setdefault(name, {"version": dist.version, "requires_dist": list(dist.requires or [])})
    return found


def _pins(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith('"$PY" -I -m pip install')]


STACK_CHECKS = ["deps.consistency", "cudnn-fe.*", "cutlass-dsl.import", "tvm-ffi.version"]


def test_a_replaced_frontend_gets_one_cutlass_pin(tmp_path, bare_python):
    """Frontend 1.26.0 got the tested set (cutlass 4.5.2), then 1.26.0's own cutlass==4.5.0."""
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0").wheel("cutlass", "nvidia-cutlass-dsl-4.5.2")
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.11")
    script = fix_script(env, bare_python, STACK_CHECKS, cp=2, gpu_arch="9.0")
    cutlass = [p for p in _pins(script) if "nvidia-cutlass-dsl" in p]
    assert cutlass and all("==4.5.2" in p for p in cutlass), script
    assert any("nvidia-cudnn-frontend==1.27.0" in p for p in _pins(script))


@pytest.mark.parametrize("fe", ["1.26.0", "1.27.0"])  # replaced by the tested set; kept
def test_the_plan_installs_torch_c_dlpack_ext_which_the_cutedsl_extra_declares(tmp_path, bare_python, fe):
    """Frontend 1.27.0's cutedsl extra declares torch-c-dlpack-ext and nothing else brings it (otherwise: the
    tested-set plan left it out). The pin is PINS' (0.1.5, the H200's), --no-deps: it requires only torch."""
    from fakes import fake_cutedsl

    env = Env(tmp_path).wheel("fe", f"nvidia-cudnn-frontend-{fe}").fake("cutedsl", fake_cutedsl)
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("typing_extensions", "typing-extensions-4.16.0")
    script = fix_script(env, bare_python, STACK_CHECKS, cp=2, gpu_arch="9.0")
    assert '"$PY" -I -m pip install --no-deps torch-c-dlpack-ext==0.1.5' in _pins(script), script
    env.fake("dlpack", lambda s: s.dist("torch-c-dlpack-ext", "0.1.4"))  # installed: a plan leaves it alone
    script = fix_script(env, bare_python, STACK_CHECKS, cp=2, gpu_arch="9.0")
    assert not any("torch-c-dlpack-ext" in p for p in _pins(script)), script


@pytest.mark.slow  # asks the package index (pip --dry-run)
def test_the_tested_set_plan_is_one_pip_accepts(tmp_path, bare_python):
    """Frontend 1.26.0 is replaced by the tested set (1.27.0, tvm-ffi 0.1.11, cutlass 4.5.2, torch-c-dlpack-ext):
    after the plan, every requirement of the stack holds, the cutedsl extra's included."""
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0").wheel("cutlass", "nvidia-cutlass-dsl-4.5.2")
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("typing_extensions", "typing-extensions-4.16.0")
    script = fix_script(env, bare_python, STACK_CHECKS, cp=2, gpu_arch="9.0")
    # The job imports 1.26.0 from its `pip install --target` folder on PYTHONPATH: the pin is aimed there.
    assert f'"$PY" -I -m pip install --upgrade --target {env.sites["fe"]} --force-reinstall --no-deps ' \
        "nvidia-cudnn-frontend==1.27.0" in _pins(script), script
    assert any("torch-c-dlpack-ext==0.1.5" in p for p in _pins(script)), script
    assert_plan_resolves(script, env, tmp_path, bare_python)


def test_a_kept_frontend_keeps_a_cutlass_that_meets_it_and_names_what_a_pin_breaks(tmp_path, bare_python):
    """Frontend 1.27.0 with cutlass 4.8.1 (>=4.5.0 holds) got cutlass==4.5.2, breaking its libs;
    the tvm-ffi pin broke vLLM's declared ==0.1.9 without saying so."""
    from fakes import fake_cutedsl

    def vllm(site: FakeSite):
        site.dist("vllm", "0.15.0", requires=("apache-tvm-ffi==0.1.9",))
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").fake("cutedsl", fake_cutedsl, "4.8.1")
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.9").fake("vllm", vllm)
    env.fake("dlpack", lambda s: s.dist("torch-c-dlpack-ext", "0.1.5"))
    row = judge_all(env, bare_python, ["deps.consistency", "tvm-ffi.version"])["deps.consistency"]
    # tvm-ffi older than the frontend declares: a warning, as tvm-ffi.version says (0.1.9 ran the indexer right).
    assert row["status"] == "warn" and "apache-tvm-ffi>=0.1.11" in row["summary"], row["summary"]
    script = fix_script(env, bare_python, ["deps.consistency", "tvm-ffi.version"], cp=2, gpu_arch="9.0")
    assert not any("nvidia-cutlass-dsl" in p for p in _pins(script)), script
    assert any("apache-tvm-ffi==0.1.11" in p for p in _pins(script))
    assert "vllm 0.15.0 requires apache-tvm-ffi==0.1.9" in " ".join(script.split())


def test_deps_consistency_counts_only_extras_that_are_asked_for(tmp_path, bare_python):
    """Cuda-python's `cuda-bindings[all]; extra == "all"` made cuda-toolkit[...] warnings; and the
    CuTe DSL's own libraries were listed as "other installed packages"."""
    def cuda(site: FakeSite):  # cuda-python 13.4.4 and cuda-bindings 13.4.4 as published (their extras)
        site.dist("cuda-python", "13.4.4", requires=('cuda-bindings~=13.4.4',
                                                     'cuda-bindings[all]~=13.4.4; extra == "all"'))
        site.dist("cuda-bindings", "13.4.4", requires=('cuda-pathfinder~=1.1',
                                                       'cuda-toolkit[nvrtc,nvjitlink]==13.*; extra == "all"'))
        site.dist("cuda-pathfinder", "1.9.1")
        site.dist("nvidia-cutlass-dsl-libs-base", "4.5.2", requires=("cuda-python>=12.8",))
    env = healthy(tmp_path).fake("cuda", cuda)
    row = judge(env, bare_python, "deps.consistency")
    assert "cuda-toolkit" not in row["summary"] + row["details"], row["summary"]
    assert "nvidia-cutlass-dsl-libs-base 4.5.2 requires" not in row["details"]


def test_a_missing_cutedsl_library_fails_deps_consistency(tmp_path, bare_python):
    """nvidia-cutlass-dsl 4.5.2 (the real meta wheel) requires libs-base==4.5.2 and, with [cu13], libs-cu13==4.5.2:
    the compiler and its CUDA 13 runtime. One missing was only a warning (they were not counted as
    DSv4 packages)."""
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").wheel("cutlass", "nvidia-cutlass-dsl-4.5.2")
    env.fake("torch", fake_torch).wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("typing_extensions", "typing-extensions-4.16.0")
    env.fake("dlpack", lambda s: s.dist("torch-c-dlpack-ext", "0.1.5"))
    env.fake("cuda", lambda s: (s.dist("cuda-python", "13.4.4", requires=("cuda-bindings~=13.4.4",)),
                                s.dist("cuda-bindings", "13.4.4")))
    row = judge(env, bare_python, "deps.consistency")
    assert row["status"] == "fail", row["summary"]
    assert "nvidia-cutlass-dsl 4.5.2 requires nvidia-cutlass-dsl-libs-base==4.5.2, but it is not installed" in \
        row["summary"]
    assert 'nvidia-cutlass-dsl-libs-cu13==4.5.2; extra == "cu13", but it is not installed' in row["summary"]
    assert commands(row) == ["pip install 'nvidia-cutlass-dsl[cu13]==4.5.2'"]  # pip adds the missing libraries
    env.fake("libs", lambda s: s.dist("nvidia-cutlass-dsl-libs-base", "4.5.2", requires=("cuda-python>=12.8",)))
    row = judge(env, bare_python, "deps.consistency")
    assert row["status"] == "fail" and "libs-base" not in row["summary"] and "libs-cu13" in row["summary"]
    env.fake("libs", lambda s: (s.dist("nvidia-cutlass-dsl-libs-base", "4.5.2", requires=("cuda-python>=12.8",)),
                                s.dist("nvidia-cutlass-dsl-libs-cu13", "4.5.2", requires=("cuda-python>=12.8",))))
    row = judge(env, bare_python, "deps.consistency")
    assert row["status"] == "pass", row["summary"]


def test_a_hostile_specifier_never_reaches_a_command(tmp_path, bare_python):
    """`===` takes any text, and a frontend METADATA's `apache-tvm-ffi===a&...` went into the fix
    script. A specifier from METADATA is used only when it is a plain one; else the command is withheld."""
    def hostile(site: FakeSite):
        site.dist("nvidia-cudnn-frontend", "1.27.0", requires=(
            "apache-tvm-ffi===a&/TOKEN='&touch${IFS}PWNED7&#",))
        site.file("cudnn/__init__.py", "__version__ = '1.27.0'\n")
    env = Env(tmp_path).fake("fe", hostile).fake("torch", fake_torch)
    script = env.doctor("fix", "--cp", "2", "--gpu-arch", "10.0", python=bare_python).stdout
    assert "PWNED7" not in "\n".join(_pins(script)) and "===" not in "\n".join(_pins(script))
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    body = "\n".join(line for line in script.splitlines() if not line.startswith("PY="))
    subprocess.run(["sh", "-c", f"PY={stub}\n{body}"], cwd=tmp_path, check=True)
    assert not list(tmp_path.glob("PWNED*"))


@pytest.mark.parametrize("check_id, cited", [
    ("mcore.config", ["https://github.com/verl-project/verl/pull/6555"]),
    ("mcore.dsv4", ["https://github.com/NVIDIA/Megatron-LM/pull/5809", "4b01a1b9",
                    "https://github.com/NVIDIA/Megatron-LM/commit/108cb6bc",
                    "https://github.com/NVIDIA/Megatron-LM/commit/6888385f"]),
    ("te.import", ["docs/gpu-runs/2026-12-01-h200", "https://pypi.org/project/nvidia-cublas/13.2.0.9/",
                   "cuda-toolkit[cublas,...]==13.0.2"]),
    ("cudnn-fe.dsa", ["https://github.com/NVIDIA/Megatron-LM/blob/fd1121b8ff7e3a4f83a28d35aed172d7bc0260e1/megatron/"
                      "core/transformer/experimental_attention_variant/dsa_kernels.py"]),
    ("kernels.triton", ["https://pypi.org/project/torch/2.11.0/", "triton==3.6.0"]),
])
def test_explain_cites_the_upstream_source_of_each_claim(check_id, cited):
    sources = explain_text(BY_ID[check_id]).split("\nSources:\n", 1)[1]
    for text in cited:
        assert text in sources, (check_id, text)


def test_explain_claims_no_tvm_ffi_nan():
    text = explain_text(BY_ID["tvm-ffi.version"])
    assert "NaN cured" not in text and "no confirmed record" in text


# --- new checks -----------------------------------------------------------------------------------------------------

def test_mbridge_dsv4(tmp_path, bare_python):
    """End to end for mbridge: the real 0.3.1 release through the CLI; the other states in this process."""
    assert judge(Env(tmp_path), bare_python, "mbridge.dsv4")["status"] == "skip"
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")
    missing = judge(env, bare_python, "mbridge.dsv4")
    assert missing["status"] == "fail" and "No module named 'megatron.bridge'" in missing["summary"]
    env.wheel("mbridge", "megatron-bridge-0.3.1")  # the newest release: no DeepSeek-V4 bridge
    release = run(env, bare_python, "--only", "mbridge.dsv4").check("mbridge.dsv4")
    assert release["status"] == "fail" and "Megatron-Bridge 0.3.1 has no DeepSeek-V4 bridge" in release["summary"]
    assert "c7774d44d4b3101dc6bdf8c8d38a32e909e1ea11" in commands(release)[0]
    env.fake("mbridge", fake_mbridge, "flex")
    main = judge(env, bare_python, "mbridge.dsv4")
    assert main["status"] == "pass" and main["evidence"]["default_dispatcher"] == "flex (HybridEP)"
    env.fake("mbridge", fake_mbridge, "alltoall")
    tested = judge(env, bare_python, "mbridge.dsv4")
    assert tested["evidence"]["default_dispatcher"] == "alltoall"


def _smi(tmp_path: Path, driver: str) -> dict:
    bin_dir = tmp_path / f"bin-{driver}"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '0, NVIDIA H200, 9.0, 143771, {driver}'\n")
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_gpu_driver(tmp_path, bare_python):
    env = Env(tmp_path).fake("torch", fake_torch)  # torch.version.cuda = 13.0
    assert judge(env, bare_python, "gpu.driver", gpu_arch="9.0")["status"] == "skip"
    old = judge(env, bare_python, "gpu.driver", probe_env=_smi(tmp_path, "570.86.15"))
    assert old["status"] == "fail" and "needs driver API 13000" in old["summary"] and "12080" in old["summary"]
    new = judge(env, bare_python, "gpu.driver", probe_env=_smi(tmp_path, "580.159.04"))
    assert new["status"] == "pass" and "CUDA 13.0" in new["summary"]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in libcuda")
def test_gpu_driver_reads_forward_compatibility_from_libcuda(tmp_path, bare_python):
    """A libcuda that reports API 13000 (as cuda-compat does) on an R570 host: the job gets CUDA 13."""
    lib = tmp_path / "compat" / "libcuda.so.1"
    lib.parent.mkdir()
    src = tmp_path / "cuda.c"
    src.write_text("int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    env = Env(tmp_path).fake("torch", fake_torch)
    row = judge(env, bare_python, "gpu.driver",
                probe_env=dict(_smi(tmp_path, "570.86.15"), LD_LIBRARY_PATH=str(lib.parent)))
    assert row["status"] == "pass" and "forward compatibility" in row["summary"]
    assert row["evidence"]["cuDriverGetVersion"] == 13000 and row["evidence"]["libcuda"].endswith("libcuda.so.1")


def test_deps_consistency_names_other_dependents_and_warns_on_the_rest(tmp_path, bare_python):
    def vllm(site: FakeSite):
        site.dist("vllm", "0.15.0", requires=("apache-tvm-ffi==0.1.10", "torch==2.10.0"))
        # torchmetrics 1.9.0's METADATA as on the H200 image: its torch pin is behind extras nobody installed.
        site.dist("torchmetrics", "1.9.0", requires=("torch>=2.0.0", 'torch==2.8.0; extra == "typing"',
                                                     'torch==2.8.0; extra == "dev"'))
    env = healthy(tmp_path).fake("vllm", vllm)
    row = judge(env, bare_python, "deps.consistency")
    assert row["status"] == "pass", row["summary"]
    assert "vllm 0.15.0 requires apache-tvm-ffi==0.1.10" in row["details"]
    assert "torchmetrics 1.9.0 requires torch>=2.0.0" in row["details"] and "2.8.0" not in row["details"]


def test_deps_consistency_judges_the_requirements_of_the_extras_the_stack_uses():
    # TE's metapackage as PyPI ships it: its torch extension behind the `pytorch` extra, which the DSv4 stack uses.
    te = testing.dist("transformer-engine", "2.16.1", 'transformer_engine_torch==2.16.1; extra == "pytorch"',
                      'transformer_engine_cu13==2.16.1; extra == "core-cu13"')
    facts = static_answer(distributions={"transformer-engine": te, "torch": testing.dist("torch", "2.11.0"),
                                         "transformer-engine-cu13": testing.dist("transformer-engine-cu13", "2.16.1")})
    broken = run_check(deps_checks.deps_consistency, StubContext(facts=facts))
    assert broken.status is Status.FAIL and "transformer_engine_torch==2.16.1" in broken.summary
    facts["distributions"]["transformer-engine-torch"] = testing.dist("transformer-engine-torch", "2.16.1")
    assert run_check(deps_checks.deps_consistency, StubContext(facts=facts)).status is Status.PASS


@needs_elf
def test_libs_loaded(tmp_path, bare_python):
    def torch_with_libs(site: FakeSite, other: Path | None, cudnn: int):
        fake_torch(site)
        wheel_lib = site.root / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
        wheel_lib.parent.mkdir(parents=True)
        shutil.copy(LIBZ, wheel_lib)
        site.dist("nvidia-cudnn-cu13", "9.19.0.56")
        loads = [str(wheel_lib)] + ([str(other)] if other else [])
        init = site.root / "torch" / "__init__.py"
        init.write_text(init.read_text().replace("return 91900", f"return {cudnn}") +
                        f"\nimport ctypes\nfor _p in {loads!r}:\n    ctypes.CDLL(_p)\n")
    good = Env(tmp_path / "good").fake("torch", torch_with_libs, None, 91900)
    row = judge_all(good, bare_python, ["libs.loaded", "torch.install"])["libs.loaded"]
    assert row["status"] == "pass" and "cuDNN 9.19.0" in row["summary"], row["summary"]
    apt = tmp_path / "apt" / "libcudnn.so.9"
    apt.parent.mkdir()
    shutil.copy(LIBZ, apt)
    both = Env(tmp_path / "both").fake("torch", torch_with_libs, apt, 91000)
    row = judge_all(both, bare_python, ["libs.loaded", "torch.install"])["libs.loaded"]
    assert row["status"] == "warn"
    assert "two copies of cuDNN are loaded" in row["summary"] and "9.10.0" in row["summary"]
    cpu = judge(Env(tmp_path / "cpu").fake("torch", fake_torch, "2.11.0", None), bare_python, "libs.loaded")
    assert cpu["status"] == "skip"


def test_te_missing_its_own_dependency_is_named_with_the_requirement_to_install(tmp_path):
    """H200, 2026-12-01: TE 2.12.0 installed with --no-deps failed `import transformer_engine.pytorch` with
    ModuleNotFoundError: No module named 'pydantic' (transformer_engine_torch requires pydantic). The fix installs
    that requirement; a rebuild of TE's extension would not help."""
    env = Env(tmp_path).fake("torch", fake_torch).fake(
        "te", fake_te, "2.12.0", imports="dsv4fake_pydantic",
        requires={"transformer-engine-torch": ("torch>=2.1", "dsv4fake-pydantic>=2.0")})
    rows = judge_all(env, sys.executable, ["te.import", "deps.consistency"])
    te = rows["te.import"]
    assert te["status"] == "fail" and "No module named 'dsv4fake_pydantic'" in te["summary"]
    assert "transformer-engine-torch 2.12.0 requires dsv4fake-pydantic>=2.0" in te["details"]
    assert [c for f in te["fixes"] for c in f["commands"]] == ["pip install 'dsv4fake-pydantic>=2.0'"]
    deps = rows["deps.consistency"]  # a warning: te.import is where the import breaks
    assert deps["status"] == "warn" and "dsv4fake-pydantic>=2.0, but it is not installed" in deps["summary"]
    assert [c for f in deps["fixes"] for c in f["commands"]] == ["pip install 'dsv4fake-pydantic>=2.0'"]


@pytest.mark.parametrize("requirement", ["dsv4fake-pydantic===a&touch${IFS}PWNED8&#", "dsv4fake-pydantic===2.0"])
def test_te_missing_dependency_with_an_arbitrary_equality_specifier_is_withheld(tmp_path, requirement):
    """te.import judges a specifier with facts.safe_specifier, as everywhere: `===` takes any text, so the command
    is withheld."""
    env = Env(tmp_path).fake("torch", fake_torch).fake(
        "te", fake_te, "2.12.0", imports="dsv4fake_pydantic",
        requires={"transformer-engine-torch": ("torch>=2.1", requirement)})
    te = judge(env, sys.executable, "te.import")
    assert te["status"] == "fail" and "No module named 'dsv4fake_pydantic'" in te["summary"]
    assert [c for f in te["fixes"] for c in f["commands"]] == []
    assert "command withheld: its version specifier is not a plain value" in te["fixes"][0]["description"]
    script = fix_script(env, sys.executable, ["te.import"])
    assert "===" not in "\n".join(_pins(script)) and "PWNED8" not in "\n".join(_pins(script))
