"""The settings probe (doctor/probes/dsv4probe_settings.py) runs the stack's own configuration code on the CPU: verl
0.9.1's validation of the composed config, Megatron-LM d48bd6be's TransformerConfig.__post_init__, and the host side
(doctor/job/stackbuild.py) and row (job.stack-config) that read its answer.

The stack is real: verl 0.9.1 and Hydra 1.3.2 from PyPI (`pip install --no-deps --target`, tests/wheels.py), the
cuDNN frontend 1.32.0 (its `from cudnn import DSA` imports on a CPU), Megatron-LM d48bd6be's megatron/core files its
config classes import (tests/fixtures/megatron-lm-d48bd6be) with the triton 3.7.0 wheel, and what importing verl's
config classes needs (transformers 5.12.1, tensordict, codetiming, orjson; pip-installed once into .cache/). Ray and
torch are the test environment's. Megatron-Bridge does not import here (it needs Megatron's GPT model and
Transformer Engine), so these cases run the probe's named "direct" mode: Megatron's MLATransformerConfig built from
the model's config.json with the bridge's decision supplied; tests/test_settings_provider.py runs the whole
provider path.

One probe process answers every case of this module (its batch request): the stack's imports are paid once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4_doctor.engine.probes import LAUNCHER

from wheels import CACHE, ensure, pip_target_once

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "doctor" / "probes" / "dsv4probe_settings.py"
MEGATRON = ROOT / "tests" / "fixtures" / "megatron-lm-d48bd6be"
STACK_DEPS = CACHE.parent / "settings-probe" / "stack-deps"
# What `import verl` and its config classes need beside torch and Ray (verl.protocol imports tensordict; verl's
# workers' configs import transformers; its profiler codetiming and orjson). tensordict's own requirements but
# torch are listed so that pip installs no second torch.
STACK_DEPS_PACKAGES = (["transformers==5.12.1", "einops==0.8.2", "codetiming==1.4.0", "orjson"],
                       ["--no-deps", "tensordict==0.15.3", "cloudpickle", "pyvers>=0.2,<0.3"])

DSV4_CONFIG = {"model_type": "deepseek_v4", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
               "num_nextn_predict_layers": 1, "compress_ratios": [0, 0, 4, 128, 0]}
BATCH_SIZES = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
               "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
               "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1"]
OTC = "++actor_rollout_ref.actor.megatron.override_transformer_config."


def stack_deps() -> Path:
    return pip_target_once(STACK_DEPS, *STACK_DEPS_PACKAGES)


def stack_path() -> str:
    return os.pathsep.join(str(p) for p in (
        ensure("verl-0.9.1"), ensure("hydra-core-1.3.2"), MEGATRON, ensure("triton-3.7.0"), stack_deps(),
        ensure("nvidia-cudnn-frontend-1.32.0")))


def run_probe(cases: list[dict], tmp: Path, extra_env: dict | None = None) -> list[dict]:
    request = tmp / "request.json"
    request.write_text(json.dumps({"batch": cases}))
    os.chmod(request, 0o600)
    out = tmp / "answer.json"
    env = dict(os.environ, PYTHONPATH=stack_path(), HF_HOME=str(tmp / "hf-home"), **(extra_env or {}))
    env.pop("HF_HUB_CACHE", None)
    proc = subprocess.run([sys.executable, str(LAUNCHER), str(PROBE), str(out), str(request)],
                          env=env, capture_output=True,
                          text=True, timeout=240)
    assert out.exists(), proc.stderr[-3000:]
    answer = json.loads(out.read_text())
    assert "batch" in answer, answer
    return answer["batch"]


def verl_case(model: Path | str, *overrides: str, cc=(9, 0), imports=True) -> dict:
    entry = ensure("verl-0.9.1") / "verl" / "trainer" / "main_ppo.py"
    return {"kind": "verl", "entry_file": str(entry), "gpu": {"cc": list(cc), "fused_dsa_imports": imports},
            "words": {"overrides": ["model_engine=megatron", f"actor_rollout_ref.model.path={model}", *BATCH_SIZES,
                                    *overrides]}}


CASES: dict[str, tuple] = {
    # verl's own validation (McoreEngineConfig.__post_init__, verl 0.9.1 workers/config/engine.py)
    "verl_dynamic_cp": ("actor_rollout_ref.actor.megatron.dynamic_context_parallel=True",),
    "verl_dtype": ("actor_rollout_ref.actor.megatron.dtype=float32",),
    # Megatron d48bd6be TransformerConfig.__post_init__
    "conflict_h100": ("actor_rollout_ref.actor.megatron.context_parallel_size=2", OTC + "dsa_kernel_backend=cudnn"),
    "mtp_tp_sp": ("actor_rollout_ref.actor.megatron.context_parallel_size=2",
                  "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                  "actor_rollout_ref.actor.megatron.sequence_parallel=True", "actor_rollout_ref.model.mtp.enable=True"),
    # CC 10 with both imports: the bridge's switch True folds a stated `none` into cudnn. CP 1: with CP > 1
    # Megatron reads the cudnn DSA wrappers' signatures, which need the CuTe DSL 4.8 (not in the test wheels).
    "none_on_blackwell": (OTC + "dsa_kernel_backend=none",),
}


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("settings-probe")
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DSV4_CONFIG))
    own_code = tmp / "own-code"
    own_code.mkdir()
    marker = tmp / "own-code-ran"
    (own_code / "config.json").write_text(json.dumps(dict(DSV4_CONFIG, auto_map={
        "AutoConfig": "configuration_dsv4.DeepseekV4Config"})))
    (own_code / "configuration_dsv4.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    cases = {name: verl_case(model, *overrides, **({"cc": (10, 0)} if name == "none_on_blackwell" else {}))
             for name, overrides in CASES.items()}
    cases["not_local"] = verl_case("deepseek-ai/DeepSeek-V4-Flash")
    cases["own_code"] = verl_case(own_code)
    names = list(cases)
    got = run_probe([cases[n] for n in names], tmp)
    return dict(zip(names, got, strict=True), own_code_marker=marker)


def test_verl_validation_failures_quote_verls_message(answers):
    dynamic, dtype = answers["verl_dynamic_cp"], answers["verl_dtype"]
    assert dynamic["status"] == "raised" and dtype["status"] == "raised", (dynamic, dtype)
    assert dynamic["error"]["message"] == ("max_seqlen_per_dp_cp_rank must be a positive integer when "
                                           "dynamic_context_parallel is enabled")
    assert dynamic["error"]["type"] == "ValueError" and dynamic["error"]["file"] == "verl/workers/config/engine.py"
    assert dtype["error"]["message"] == "dtype float32 not supported"
    assert dtype["error"]["type"] == "AssertionError" and dtype["error"]["file"] == "verl/workers/config/engine.py"
    assert isinstance(dynamic["error"]["line"], int)


def test_megatron_post_init_failures_quote_megatrons_message(answers):
    conflict, mtp = answers["conflict_h100"], answers["mtp_tp_sp"]
    assert conflict["status"] == "raised", conflict
    assert conflict["error"]["message"].startswith(
        "Conflicting DSA kernel controls: apply_dsa_kernel_fusion=False maps to dsa_kernel_backend='none', but "
        "dsa_kernel_backend='cudnn' was also selected.")
    assert conflict["error"]["file"] == "megatron/core/transformer/transformer_config.py"
    assert conflict["mode"] == "direct" and conflict["bridge_decision"] is False  # CC 9.0: the bridge writes False
    assert mtp["status"] == "raised", mtp
    assert mtp["error"]["message"].startswith("MTP with tensor_model_parallel_size > 1, sequence_parallel=True, and "
                                              "cp_partition_mode='contiguous' has a known token-side padding-mask")
    assert mtp["error"]["file"] == "megatron/core/transformer/transformer_config.py"


def test_a_model_that_is_not_local_is_not_built(answers):
    got = answers["not_local"]
    assert got["status"] == "not built" and "not local" in got["why"], got
    assert "roles" not in got


def test_a_model_config_that_needs_its_own_code_is_not_built_and_its_code_never_runs(answers):
    got = answers["own_code"]
    assert got["status"] == "not built" and "needs its own code" in got["why"], got
    assert not answers["own_code_marker"].exists()


def test_a_built_config_becomes_the_profile(answers):
    from dsv4_doctor.checks.job import job_checks
    from dsv4_doctor.job.profile import job_profile
    from dataclasses import replace

    from dsv4_doctor.job.stackbuild import BUILT_BY, answer_to_built, apply, differs
    from dsv4_doctor.model.core import Profile, Status
    from dsv4_doctor.testing import StubContext, run_check

    got = answers["none_on_blackwell"]
    assert got["status"] == "built", got.get("error")
    settings = got["roles"]["actor"]["settings"]
    # The bridge's switch (True on CC 10 with both imports) folds the stated `none` into cudnn.
    assert settings["dsa_kernel_backend"] == "cudnn" and settings["apply_dsa_kernel_fusion"] is True
    assert settings["context_parallel_size"] == 1 and settings["experimental_attention_variant"] == "dsv4_hybrid"
    command = ["python3", "-m", "verl.trainer.main_ppo", OTC + "dsa_kernel_backend=none"]
    profile = job_profile(Profile(gpu_arch="10.0", gpu_arch_source="option"), command, None, None)
    built = apply(profile, answer_to_built(got))
    assert built.dsa_backend == "cudnn" and built.cp == 1
    assert built.job is not None and built.job.decisions is not None
    assert built.job.decisions.dsa_backend_decided.startswith(BUILT_BY)
    # Built in the direct mode (Megatron-Bridge does not import on this CPU): Megatron's config accepts it, the
    # bridge's provider did not run, so its part is not known and nothing passes on it.
    row = run_check(job_checks.job_stack_config, StubContext(profile=built))
    assert row.status is Status.WARN and "not known whether Megatron-Bridge's provider accepts" in row.summary, row
    assert "dsa_kernel_backend=cudnn" in row.details
    # Where the stack builds settings other than those the rows were judged on, the row fails naming each.
    readers = replace(profile, dsa_backend="none", job=replace(profile.job, decisions=replace(
        profile.job.decisions, dsa_backend_known=True)))
    stated = ["dsa_kernel_backend: the stack built cudnn, the doctor's readers said none"]
    assert differs(readers, built) == (stated, [])
    unknown = replace(readers, job=replace(profile.job, decisions=replace(profile.job.decisions,
                                                                          dsa_backend_known=False)))
    assert differs(unknown, built) == ([], ["dsa_kernel_backend: the stack built cudnn, the doctor's readers did "
                                            "not know it and checked none"])
    told = replace(built, job=replace(built.job, built=dict(built.job.built, differs=stated)))
    row = run_check(job_checks.job_stack_config, StubContext(profile=told))
    assert row.status is Status.FAIL and "the stack built cudnn, the doctor's readers said none" in row.summary


def test_the_row_fails_with_the_upstream_message_and_its_place(answers):
    from dsv4_doctor.checks.job import job_checks
    from dsv4_doctor.job.profile import job_profile
    from dsv4_doctor.job.stackbuild import answer_to_built, apply
    from dsv4_doctor.model.core import Profile, Status
    from dsv4_doctor.testing import StubContext, run_check

    command = ["python3", "-m", "verl.trainer.main_ppo", OTC + "dsa_kernel_backend=cudnn"]
    profile = job_profile(Profile(gpu_arch="9.0", gpu_arch_source="option"), command, None, None)
    row = run_check(job_checks.job_stack_config,
                    StubContext(profile=apply(profile, answer_to_built(answers["conflict_h100"]))))
    assert row.status is Status.FAIL
    assert "Conflicting DSA kernel controls" in row.summary
    assert "megatron/core/transformer/transformer_config.py:" in row.summary
    not_built = run_check(job_checks.job_stack_config,
                          StubContext(profile=apply(profile, answer_to_built(answers["not_local"]))))
    assert not_built.status is Status.WARN and "not local" in not_built.summary


@pytest.mark.slow
def test_the_cli_runs_the_probe_beside_the_checks_and_judges_its_row_after_them(tmp_path):
    """`check` with a verl command: the settings probe starts when the profile is resolved and runs beside the
    checks (it is not waited for before them); its row is judged after them. Megatron-Bridge is not installed here,
    so the doctor's readers do not know the bridge's switch and check cudnn, the stricter; the probe builds the
    config in its direct mode, so its row is a warning (the bridge's part is not known), never a pass."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DSV4_CONFIG))
    command = " ".join(["python3 -m verl.trainer.main_ppo model_engine=megatron",
                        f"actor_rollout_ref.model.path={model}", *BATCH_SIZES, OTC + "dsa_kernel_backend=none"])
    env = dict(os.environ, PYTHONPATH=stack_path(), HF_HOME=str(tmp_path / "hf-home"), COLUMNS="200")
    run = subprocess.run([sys.executable, "-m", "dsv4_doctor", "check", "--only", "job.*", "--gpu-arch", "10.0",
                          "-f", "json", "--job-args", command], env=env, capture_output=True, text=True, timeout=240)
    report = json.loads(run.stdout)
    rows = {c["id"]: c for c in report["checks"]}
    stack = rows["job.stack-config"]
    assert stack["status"] == "warn", stack
    assert stack["summary"].startswith("not known whether Megatron-Bridge's provider accepts the job"), stack
    assert rows["job.dsa-backend"]["status"] == "warn"  # the readers: the bridge's rule is not readable
    assert report["profile"]["dsa_backend"] == "cudnn"  # what the rows were checked for, the stricter
    timeline = report["summary"]["critical_path"]
    assert timeline["probe"] == "stack-settings" and timeline["probes"] > 1, timeline
