"""Unit tests of the rule classifiers, in-process: a check run by the runner (testing.run_check) over
testing.StubContext, whose facts are plain data (the static probe's answer, probe answers by key, nvidia-smi's GPUs).
No subprocess, no wheel: the same facts the probes report on a real machine (the shapes tests/test_rules*.py get from
real published wheels), fed to the rule directly, so a classifier's branches are pinned cheaply. The error texts are
the ones upstream prints (cited at each test)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from dsv4_doctor.checks import cudnn_fe_checks as cudnn_fe
from dsv4_doctor.checks import deps_checks as deps
from dsv4_doctor.checks import gpu_checks as gpu
from dsv4_doctor.checks import _te_build as te_build
from dsv4_doctor.checks import te_checks as te
from dsv4_doctor.model.facts import StaticFacts
from dsv4_doctor.model.core import Profile, Result, Status
from dsv4_doctor.engine.probes import TORCH
from dsv4_doctor.testing import StubContext, dist, run_check

def _commands(result: Result) -> list[str]:
    return [c.shell() for fix in result.fixes for c in fix.commands]


# --- te.import: the import error's classifier ---------------------------------------------------------------------

TE_INSTALLED = {"distributions": {"transformer-engine": dist("transformer-engine", "2.13.0"),
                                  "transformer-engine-cu13": dist("transformer-engine-cu13", "2.13.0"),
                                  "transformer-engine-torch": dist("transformer-engine-torch", "2.13.0",
                                                                   "pydantic", "einops")},
                "modules": {"transformer_engine": {"found": True, "origin": "/site/transformer_engine/__init__.py"}}}


def _te_import(error: dict, cuda_build: str = "13.0", libs: Mapping[str, Any] | None = None) -> tuple[Result, list]:
    answers = {te.TE_IMPORT.key: {"results": [{"target": "transformer_engine.pytorch", "ok": False, "error": error}]},
               TORCH.key: {"cuda_build": cuda_build}}
    answers.update(libs or {})
    ctx = StubContext(facts=TE_INSTALLED, answers=answers)
    return run_check(te.te_import, ctx), ctx.probed


def test_te_an_undefined_torch_symbol_is_an_abi_mismatch_rebuilt_for_torch_s_cuda():
    # TransformerEngine #1192: the torch extension built against another torch.
    result, _ = _te_import({"type": "ImportError", "message": "/site/transformer_engine_torch.cpython-312-x86_64-"
                            "linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"}, cuda_build="12.8")
    assert result.status is Status.FAIL
    assert "ABI mismatch: a torch symbol is missing" in result.details
    # Only the torch extension is rebuilt, without its dependencies: a forced reinstall of TE re-picked torch.
    assert _commands(result) == ["pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps "
                                 "transformer-engine-torch==2.13.0"]


def test_te_a_versioned_cublas_symbol_names_the_library_and_installs_a_te_it_loads_with():
    # Seen on an H200: TE 2.13's core needs cuBLAS 13.2; torch 2.11.0 installs 13.1 (dsv4-stack.md §9).
    message = ("/site/transformer_engine/libtransformer_engine.so: undefined symbol: "
               "cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13")
    probe = te_build.library_probe("libcublasLt.so.13", "cublasLtGroupedMatrixLayoutInit_internal", "libcublasLt.so.13")
    copies = {"copies": [{"path": "/site/nvidia/cu13/lib/libcublasLt.so.13", "exports": False,
                          "owner": {"distribution": "nvidia-cublas", "version": "13.1.0.3"}}]}
    result, probed = _te_import({"type": "OSError", "message": message}, libs={probe.key: copies})
    assert probe.key in probed
    assert "(nvidia-cublas 13.1.0.3) does not export it" in result.details
    assert "Ways out, with their costs:" in result.details and "nvidia-cublas>=13.2" in result.details
    assert result.evidence["needs"] == {"symbol": "cublasLtGroupedMatrixLayoutInit_internal",
                                        "version": "libcublasLt.so.13",
                                        "from": "/site/transformer_engine/libtransformer_engine.so"}
    assert _commands(result) == ["pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'"]
    # The same symbol exported by the copy found: the one that loads is another, so no TE pin is offered.
    copies["copies"][0]["exports"] = True
    result, _ = _te_import({"type": "OSError", "message": message}, libs={probe.key: copies})
    assert "check LD_LIBRARY_PATH and libs.loaded" in result.details and _commands(result) == []


def test_te_a_missing_module_is_the_requirement_that_declares_it_not_a_rebuild():
    # Seen on an H200 with TE 2.12.0 installed --no-deps: "No module named 'pydantic'".
    result, _ = _te_import({"type": "ModuleNotFoundError", "message": "No module named 'pydantic'",
                            "missing_module": "pydantic"})
    assert "requires pydantic, which is not installed" in result.details
    assert _commands(result) == ["pip install pydantic"]
    # A module TE imports that no TE distribution declares: named, with no command to guess.
    result, _ = _te_import({"type": "ModuleNotFoundError", "message": "No module named 'onnx'",
                            "missing_module": "onnx.helper"})
    assert "TE imports onnx, which is not installed and which no TE distribution here declares" in result.details
    assert _commands(result) == []


@pytest.mark.parametrize("message, hint", [
    ("Could not find shared object file for Transformer Engine torch lib", "without its [pytorch] extra"),
    ("libcudnn_adv.so.9: cannot open shared object file: No such file or directory", "TE cannot load cuDNN"),
    ("libcublasLt.so.12: cannot open shared object file: No such file or directory", "must match torch's CUDA 13"),
    ("Transformer Engine package version mismatch. Found transformer-engine v2.12.0 and "
     "transformer-engine-cu13 v2.13.0.", "inconsistent TE packages"),
])
def test_te_import_errors_are_classified_by_their_upstream_text(message, hint):
    # TransformerEngine #1853 (libcudnn_adv), transformer_engine/common/__init__.py (the version assert).
    result, _ = _te_import({"type": "ImportError", "message": message})
    assert result.status is Status.FAIL and hint in result.details.split("\n")[0], result.details


# --- gpu.arch -----------------------------------------------------------------------------------------------------

def _arch(arch: str | None, cp: int = 1, backend: str = "cudnn", source: str = "option",
          detected: str | None = None) -> Result:
    profile = Profile(cp=cp, dsa_backend=backend, gpu_arch=arch, gpu_arch_source=source if arch else "unknown")
    gpus = [{"compute_capability": detected}] if detected else []
    return run_check(gpu.gpu_arch, StubContext(profile=profile, gpu_list=gpus))


def test_gpu_arch_follows_megatron_s_exact_compute_capability_tables():
    # cp_layout_kernels.py: sm_90a, sm_100a, sm_103a only; transformer_config.py: SM90+ for the cudnn DSA backend.
    assert _arch(None).status is Status.SKIP
    cp = _arch("12.0", cp=2)
    assert cp.status is Status.FAIL and "Unsupported GPU compute capability 12.0" in cp.summary
    assert _arch("8.0", cp=1).status is Status.FAIL and "requires SM90+" in _arch("8.0").summary
    assert _arch("8.0", cp=1, backend="none").status is Status.WARN  # outside the tables, nothing rejects it
    sm103 = _arch("10.3", cp=2)
    assert sm103.status is Status.PASS and "88a285f0; d48bd6be's is == 10.0" in sm103.summary
    assert ">= 1.28.0" in sm103.summary
    assert _arch("9.0", cp=4, detected="9.0").status is Status.PASS
    mismatch = _arch("10.0", cp=2, detected="9.0")
    assert mismatch.status is Status.WARN and "GPU 0 is CC 9.0" in mismatch.summary
    assert _arch("10.0", cp=2, source="detected", detected="10.0").status is Status.PASS


# --- deps.consistency ---------------------------------------------------------------------------------------------

def test_deps_a_runtime_requirement_unmet_fails_and_a_missing_pure_python_one_warns():
    # nvidia-cudnn-frontend 1.32.0 METADATA: nvidia-cutlass-dsl[cu13]>=4.8.0, unconditionally.
    facts = {"distributions": {
        "nvidia-cudnn-frontend": dist("nvidia-cudnn-frontend", "1.32.0", "nvidia-cutlass-dsl[cu13]>=4.8.0"),
        "nvidia-cutlass-dsl": dist("nvidia-cutlass-dsl", "4.5.2"),
    }}
    ctx = StubContext(facts=facts)
    result = run_check(deps.deps_consistency, ctx)
    assert result.status is Status.FAIL
    assert "nvidia-cudnn-frontend 1.32.0 requires nvidia-cutlass-dsl[cu13]>=4.8.0, but 4.5.2 is installed" in \
        result.summary
    facts["distributions"]["nvidia-cutlass-dsl"] = dist("nvidia-cutlass-dsl", "4.8.0")
    assert run_check(deps.deps_consistency, StubContext(facts=facts)).status is Status.PASS
    # TE installed --no-deps without pydantic: a warning with the requirement's own install command.
    facts = {"distributions": {"transformer-engine": dist("transformer-engine", "2.12.0", "pydantic>=2.0")},
             "requirement_targets": {"pydantic": None}}
    result = run_check(deps.deps_consistency, StubContext(facts=facts))
    assert result.status is Status.WARN and "pydantic>=2.0, but it is not installed" in result.summary
    assert _commands(result) == ["pip install 'pydantic>=2.0'"]


def test_deps_a_requirement_behind_an_unused_extra_or_another_python_is_not_judged():
    facts = {"distributions": {"torch": dist("torch", "2.11.0", 'triton==3.6.0; extra == "dev"',
                                             'nvidia-nccl-cu13==2.28.9; python_version < "3.10"'),
                               "triton": dist("triton", "3.5.0")}}
    result = run_check(deps.deps_consistency, StubContext(facts=facts))
    assert result.status is Status.PASS, result.summary


# --- cudnn-fe: the CuTe-DSL stack's requirements -------------------------------------------------------------------

def test_cudnn_fe_unmet_stack_lists_every_unmet_member_at_once():
    # 1.27.0 declares its CuTe-DSL stack under the `cutedsl` extra (its METADATA); an import names only the first.
    fe = dist("nvidia-cudnn-frontend", "1.27.0", 'nvidia-cutlass-dsl>=4.2.0; extra == "cutedsl"',
              'apache-tvm-ffi>=0.1.11; extra == "cutedsl"', 'cuda-python; extra == "cutedsl"', "packaging")
    facts = {"distributions": {"nvidia-cudnn-frontend": fe, "nvidia-cutlass-dsl": dist("nvidia-cutlass-dsl", "4.1.0"),
                               "apache-tvm-ffi": dist("apache-tvm-ffi", "0.1.11")}}
    assert cudnn_fe.unmet_stack(StaticFacts(facts)) == ["nvidia-cutlass-dsl 4.1.0 (needs >=4.2.0)",
                                                        "cuda-python (not installed)"]
    facts["distributions"]["nvidia-cutlass-dsl"] = dist("nvidia-cutlass-dsl", "4.5.2")
    facts["distributions"]["cuda-python"] = dist("cuda-python", "13.0.1")
    assert cudnn_fe.unmet_stack(StaticFacts(facts)) == []
    # No frontend at all: the stack's known members stand in for its requirements.
    assert "torch (not installed)" in cudnn_fe.unmet_stack(StaticFacts({"distributions": {}}))
