"""Preflight and --job-args: reading a training command (verl/Hydra overrides, Megatron-LM flags, wrappers), the
job.* checks against real verl releases and fakes, and exec: the doctor really becomes the job."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, doctor_command, run_doctor
from fakes import Env, fake_old_verl

from dsv4_doctor.checks.job import job_checks
from dsv4_doctor.job.command import parse, split_job_args
from dsv4_doctor.job.keys import line_to_add
from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.model.core import Profile, UsageError
from dsv4_doctor.engine.registry import collect
from dsv4_doctor.testing import StubContext, run_check
from probed import profile, run_in_process

OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"


def verl_example(actor_cp: int, cp_args: bool = True, prompt: int = 2048, response: int = 10240) -> list[str]:
    """verl's examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh (@1dda039b), as bash hands it to python:
    the ACTOR block, and CP_ARGS only `if [ "${ACTOR_CP}" -gt 1 ]` (and here only when asked)."""
    argv = ["python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo", "model_engine=megatron",
            f"data.max_prompt_length={prompt}", f"data.max_response_length={response}",
            "actor_rollout_ref.model.use_fused_kernels=True", "actor_rollout_ref.model.use_remove_padding=True",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1",
            "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=8",
            "actor_rollout_ref.actor.megatron.expert_model_parallel_size=8",
            f"actor_rollout_ref.actor.megatron.context_parallel_size={actor_cp}",
            "actor_rollout_ref.actor.megatron.router_replay.mode=R3",
            f"++{OTC}.apply_dsa_kernel_fusion=True",
            f"++{OTC}.dsa_indexer_use_sparse_loss=True",
            f"++{OTC}.dsa_indexer_loss_coeff=0.0",
            f"++{OTC}.recompute_method=uniform",
            f"++{OTC}.recompute_granularity=full",
            f"++{OTC}.recompute_num_layers=1",
            f"++{OTC}.use_fused_mhc=False",
            f"++{OTC}.pipeline_model_parallel_layout='Et*6|t*6|t*6|t*5|t*5|t*5|t*5|t*5L'",
            "actor_rollout_ref.ref.megatron.context_parallel_size=" + str(actor_cp),
            "trainer.nnodes=8", "trainer.n_gpus_per_node=8", "actor_rollout_ref.nccl_timeout=3600"]
    if cp_args and actor_cp > 1:
        argv += [f"++{OTC}.cp_partition_mode=contiguous",
                 f"++{OTC}.sequence_packing_scheduler=dp_balanced",
                 f"++{OTC}.max_seqlen_per_dp_cp_rank={(prompt + response) // actor_cp}"]
    return argv


MEGATRON = ["torchrun", "--nnodes", "2", "--nproc-per-node=8", "pretrain_gpt.py", "--tensor-model-parallel-size", "1",
            "--pipeline-model-parallel-size", "2", "--experimental-attention-variant", "dsv4_hybrid",
            "--seq-length", "8192", "--moe-token-dispatcher-type", "alltoall", "--use-mcore-models"]


# --- parsing --------------------------------------------------------------------------------------------------------

# CP 1 takes no CP_ARGS either way (the script adds them only `-gt 1`): one case; CP 4 checks the division.
@pytest.mark.parametrize("cp, cp_args", [(1, True), (2, True), (2, False), (4, True)])
def test_the_verl_dsv4_example_is_read_as_written(cp, cp_args):
    job = parse(verl_example(cp, cp_args))
    assert job.kind == "verl" and job.entry == "verl.trainer.main_ppo" and job.launcher == ["python3"]
    assert job.cp() == cp
    actor = job.roles["actor"]
    assert actor["tp"].value == 1 and actor["pp"].value == 8 and actor["apply_dsa_kernel_fusion"].value is True
    assert actor["dsa_indexer_loss_coeff"].value == 0.0 and actor["dsa_indexer_use_sparse_loss"].value is True
    assert job.dsa_backend()[0] == "cudnn"  # apply_dsa_kernel_fusion=True, the deprecated switch
    assert ("cp_partition_mode" in actor) == (cp_args and cp > 1)
    if cp_args and cp > 1:
        assert actor["max_seqlen_per_dp_cp_rank"].value == 12288 // cp
    assert job.common["max_prompt_length"].value == 2048 and job.common["nnodes"].value == 8
    # Keys no check reads are listed by name only.
    assert f"{OTC}.recompute_method" in job.unknown and "algorithm.adv_estimator" in job.unknown
    assert not any("uniform" in u or "=" in u for u in job.unknown)


def test_megatron_flags_behind_torchrun_in_both_forms():
    job = parse(MEGATRON + ["--context-parallel-size", "4", "--cp-partition-mode=contiguous",
                            "--sequence-packing-scheduler", "dp_balanced", "--max-seqlen-per-dp-cp-rank=2048",
                            "--dsa-indexer-use-sparse-loss"])
    assert job.kind == "megatron" and job.launcher == ["torchrun"] and job.entry == "pretrain_gpt.py"
    model = job.roles["model"]
    assert job.cp() == 4 and model["cp_partition_mode"].value == "contiguous"
    assert model["max_seqlen_per_dp_cp_rank"].value == 2048 and model["dsa_indexer_use_sparse_loss"].value is True
    assert job.common["seq_length"].value == 8192 and job.common["nnodes"].value == 2
    assert job.common["gpus_per_node"].value == 8
    assert job.dsa_backend() == ("cudnn", job.dsa_backend()[1]) and "Megatron-LM CLI" in job.dsa_backend()[1]
    assert "--use-mcore-models" in job.unknown
    assert parse(MEGATRON + ["--no-dsa-kernel-fusion"]).dsa_backend()[0] == "none"


def test_wrappers_env_python_options_and_module_torchrun():
    job = parse(["env", "NCCL_NVLS_ENABLE=0", "CUDA_DEVICE_MAX_CONNECTIONS=1", "python", "-u", "-X", "dev", "-m",
                 "torch.distributed.run", "--nproc_per_node", "8", "--nnodes=1", "-m", "verl.trainer.main_ppo",
                 "actor_rollout_ref.actor.megatron.context_parallel_size=2"])
    assert job.env == {"NCCL_NVLS_ENABLE": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert job.launcher == ["env", "python", "torch.distributed.run"] and job.entry == "verl.trainer.main_ppo"
    assert job.cp() == 2 and job.common["gpus_per_node"].value == 8


def test_quoting_equals_signs_deletions_and_twins():
    job = parse(["python3", "-m", "verl.trainer.main_ppo",
                 f"++{OTC}.cp_partition_mode=\"contiguous\"",
                 "+actor_rollout_ref.actor.megatron.override_transformer_config.moe_token_dispatcher_type='flex'",
                 "actor_rollout_ref.model.path=/m/a=b",  # `=` inside a value
                 f"~{OTC}.dsa_kernel_backend",
                 "critic.megatron.context_parallel_size=8",
                 "actor_rollout_ref.ref.megatron.override_transformer_config.cp_partition_mode=zigzag",
                 "trainer.logger.wandb.key=s3cr3t"])
    actor = job.roles["actor"]
    assert actor["cp_partition_mode"].value == "contiguous" and actor["moe_token_dispatcher_type"].value == "flex"
    assert "dsa_kernel_backend" not in actor  # deleted: the default applies, which is "not stated"
    assert job.cp() == 8  # the critic's
    assert job.effective("ref")["cp_partition_mode"].value == "zigzag"  # its own value wins over the actor's
    assert "trainer.logger.wandb.key" in job.unknown and not any("s3cr3t" in u for u in job.unknown)
    assert "s3cr3t" not in json.dumps(job.to_dict())
    # A flag's value in its own word is no key either (otherwise: `--hf-token hf...` listed the token).
    flagged = parse(["python3", "-m", "verl.trainer.main_ppo", "--hf-token", "hfsekrit22", "--password=pwsekrit33"])
    assert flagged.unknown == ["--hf-token", "--password"]
    assert "sekrit" not in json.dumps(flagged.to_dict())


@pytest.mark.parametrize("argv, message", [
    ([], "no training command"),
    (MEGATRON + ["--context-parallel-size"], "needs a value"),
    (MEGATRON + ["--dynamic-context-parallel=1"], "takes no value"),
    (["torchrun", "--nnodes"], "has no value"),
    (["python", "-m"], "without a module"),
])
def test_malformed_commands_are_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message):
        parse(argv)


def test_an_unexpanded_variable_is_not_known_never_a_guess():
    """The job's config, not the doctor's usage: a CP the command writes as a variable the doctor cannot resolve is
    not known (checked as CP > 1, and said with how to state it); --cp gives it."""
    argv = ["python3", "-m", "verl.trainer.main_ppo",
            "actor_rollout_ref.actor.megatron.context_parallel_size=${ACTOR_CP}"]
    assert parse(argv).cp() is None  # not known, never guessed
    run = run_doctor("check", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv))
    text = " ".join(run.stdout.split())
    assert run.returncode == 0 and "cannot resolve" in text and "cp=2 (not known: checked as CP > 1)" in text
    assert "--cp N" in text
    pre = run_doctor("preflight", "--dry-run", "--no-smoke", "--only", "job.*", "--", *argv)
    assert pre.returncode == 0 and "cannot resolve" in " ".join(pre.stderr.split())
    assert "Traceback" not in pre.stderr
    # preflight's --cp states what the command hides, as check's does.
    given = run_doctor("preflight", "--dry-run", "--no-smoke", "--only", "job.*", "--cp", "4", "--", *argv)
    assert given.returncode in (0, 1) and "cp 4 from --cp" in " ".join(given.stderr.split())
    given = run_doctor("check", "--no-smoke", "--only", "job.cp-args", "--cp", "2", "--job-args", shlex.join(argv))
    # --cp fills in what the command cannot say
    assert given.returncode == 1 and "cp 2 from --cp" in " ".join(given.stdout.split())
    assert "cp_partition_mode is not stated" in given.stdout  # and the CP > 1 rules apply to it
    with pytest.raises(UsageError, match="not a positive whole number"):
        parse(["pretrain_gpt.py", "--context-parallel-size", "two"]).cp()
    with pytest.raises(UsageError, match="unbalanced quotes"):
        split_job_args("python3 -m x 'open")


def test_interpolations_resolve_as_verl_resolves_them(monkeypatch):
    monkeypatch.setenv("DOCTOR_TEST_TP", "1")
    monkeypatch.delenv("DOCTOR_TEST_UNSET", raising=False)
    job = parse(["env", "DOCTOR_TEST_CP=4", "python3", "-m", "verl.trainer.main_ppo",
                 "actor_rollout_ref.actor.megatron.context_parallel_size=${oc.env:DOCTOR_TEST_CP}",
                 "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=${oc.env:DOCTOR_TEST_TP}",
                 "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=${oc.env:DOCTOR_TEST_UNSET,2}",
                 "actor_rollout_ref.ref.megatron.context_parallel_size="
                 "${actor_rollout_ref.actor.megatron.context_parallel_size}"])
    actor, ref = job.roles["actor"], job.roles["ref"]
    # OmegaConf's oc.env gives text, with or without a default (job.config fails a CP given so: test_job_config).
    assert (actor["cp"].value, actor["tp"].value, actor["pp"].value, ref["cp"].value) == ("4", "1", "2", "4")
    assert actor["cp"].raw == "${oc.env:DOCTOR_TEST_CP}" and "environment" in (actor["cp"].resolved or "")
    assert job.cp() == 4  # the environment is judged for the number the text spells
    row = job_rows(None, ["python3", "-m", "verl.trainer.main_ppo",
                          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=${oc.env:DOCTOR_TEST_UNSET}"]
                   )["job.parallelism"]
    assert row["status"] == "warn" and "not known" in row["summary"]  # not "not a number": verl may resolve it


def test_a_dict_override_and_env_options_are_read():
    job = parse(["env", "-u", "NCCL_NVLS_ENABLE", "-S", "CUDA_DEVICE_MAX_CONNECTIONS=1", "python3", "-m",
                 "verl.trainer.main_ppo", "actor_rollout_ref.actor.megatron.context_parallel_size=2",
                 f"++{OTC}={{cp_partition_mode:contiguous,sequence_packing_scheduler:'dp_balanced',recompute_method:x}}"])
    assert job.unset == ["NCCL_NVLS_ENABLE"] and job.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert job.entry == "verl.trainer.main_ppo"
    actor = job.roles["actor"]
    assert actor["cp_partition_mode"].value == "contiguous"
    assert actor["sequence_packing_scheduler"].value == "dp_balanced"
    assert f"{OTC}.recompute_method" in job.unknown


def test_the_dsa_backend_as_stated():
    none_h = parse(["python3", "-m", "verl.trainer.main_ppo", f"++{OTC}.dsa_kernel_backend=none"]).dsa_backend()
    none_m = parse(["pretrain_gpt.py", "--dsa-kernel-backend", "none"]).dsa_backend()
    assert none_h[0] == none_m[0] == "none"  # "none" is text, not null, in Hydra's grammar and in argparse
    folded = parse(["python3", "-m", "verl.trainer.main_ppo", f"++{OTC}.dsa_kernel_backend=none",
                    f"++{OTC}.apply_dsa_kernel_fusion=True"]).dsa_backend()
    assert folded[0] == "cudnn" and "over dsa_kernel_backend=none" in folded[1]  # TransformerConfig folds it in
    # Through verl the bridge writes the switch: a stated none is what runs only beside a null switch.
    rows = job_rows_in_process(["python3", "-m", "verl.trainer.main_ppo", f"++{OTC}.dsa_kernel_backend=none",
                                f"++{OTC}.apply_dsa_kernel_fusion=null",
                                "actor_rollout_ref.actor.megatron.context_parallel_size=2"], gpu_arch="9.0")
    assert rows["_profile"]["dsa_backend"] == "none" and rows["job.dsa-backend"]["status"] == "pass"
    assert rows["job.indexer-loss"]["status"] == "skip"
    tile = job_rows_in_process(MEGATRON + ["--dsa-kernel-backend", "tilelang"])
    assert tile["job.dsa-backend"]["status"] == "fail" and "does not support dsa_kernel_backend='tilelang'" in \
        tile["job.dsa-backend"]["summary"]
    assert any("from 'tilelang' to:\n  --dsa-kernel-backend cudnn" in f for f in _commands(tile["job.dsa-backend"]))
    assert tile["_profile"]["dsa_backend"] == "cudnn" and "Megatron rejects" in \
        tile["_profile"]["job"]["dsa_backend_decided"]
    upper = job_rows_in_process(MEGATRON + ["--dsa-kernel-backend", "CUDNN"])["job.dsa-backend"]
    assert upper["status"] == "fail" and "accepts only 'none' and 'cudnn'" in upper["summary"]
    clash = job_rows_in_process(["python3", "-m", "verl.trainer.main_ppo", f"++{OTC}.dsa_kernel_backend=cudnn",
                                 f"++{OTC}.apply_dsa_kernel_fusion=False"])["job.dsa-backend"]
    assert clash["status"] == "fail" and "Conflicting DSA kernel controls" in clash["summary"]
    # The fixes keep the switch (Megatron-Bridge writes it again where the command drops it): null, or the switch
    # that selects the stated backend (tests/test_dsa_fold.py runs Megatron's config class on each).
    null = f"++{OTC}.apply_dsa_kernel_fusion=null"
    assert _lines(clash) == [null, f"++{OTC}.apply_dsa_kernel_fusion=True"]
    fixed = job_rows_in_process(["python3", "-m", "verl.trainer.main_ppo", f"++{OTC}.dsa_kernel_backend=cudnn",
                                 f"++{OTC}.apply_dsa_kernel_fusion=False", null])["job.dsa-backend"]
    assert fixed["status"] == "pass", fixed["summary"]  # Hydra: the last override wins
    flags = job_rows_in_process(MEGATRON + ["--no-dsa-kernel-fusion", "--dsa-kernel-backend",
                                            "cudnn"])["job.dsa-backend"]
    assert flags["status"] == "fail" and "Conflicting DSA kernel controls" in flags["summary"]
    assert [f["description"].split(" (")[0] for f in flags["fixes"]] == [
        "Remove --no-dsa-kernel-fusion from the training command"]
    assert job_rows_in_process(MEGATRON + ["--dsa-kernel-backend", "cudnn"])["job.dsa-backend"]["status"] == "pass"
    # No DSA setting in a verl command: the session asks the installed Megatron-Bridge, so through the CLI.
    quiet = job_rows(None, ["python3", "-m", "verl.trainer.main_ppo", "x.y=1"])["job.dsa-backend"]
    assert quiet["status"] == "warn" and "not stated" in quiet["summary"] and quiet["summary"].startswith("not known")


def test_lines_to_add_use_the_commands_own_syntax():
    hydra, megatron = {"syntax": "hydra"}, {"syntax": "megatron"}
    assert line_to_add(hydra, "actor", "cp_partition_mode", "contiguous") == f"++{OTC}.cp_partition_mode=contiguous"
    assert line_to_add(hydra, "ref", "tp", 1) == "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=1"
    assert line_to_add(megatron, "model", "cp_partition_mode", "contiguous") == "--cp-partition-mode contiguous"
    assert line_to_add(megatron, "model", "dsa_indexer_use_sparse_loss", True) == "--dsa-indexer-use-sparse-loss"


# --- the job checks ---------------------------------------------------------------------------------------------------

def job_rows(env: Env | None, argv: list[str], *extra: str, python: str = sys.executable) -> dict:
    sites = tuple(env.sites.values()) if env else ()
    run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv), *extra,
                     sites=sites, python=python)
    assert run.returncode in (0, 1), run.stderr
    return {c["id"]: c for c in run.report["checks"]} | {"_profile": run.report["profile"]}


def job_rows_in_process(argv: list[str], cp: int | None = None, gpu_arch: str | None = None) -> dict:
    """job_rows' rows without a subprocess: the profile as `--job-args` (and `--cp`, `--gpu-arch`) make it, and every
    job check run on it by the runner, with nothing installed."""
    base = Profile(gpu_arch=gpu_arch, gpu_arch_source="option" if gpu_arch else "unknown")
    profile = job_profile(base, argv, cp, None)
    rows: dict = {"_profile": profile.to_dict()}
    for job_check in collect(job_checks):
        result = run_check(job_check, StubContext(profile=profile))
        rows[job_check.id] = {"status": result.status.value, "summary": result.summary, "details": result.details,
                              "fixes": [fix.to_dict() for fix in result.fixes]}
    return rows


def job_rows_probed(env: Env, argv: list[str], python: str = sys.executable, **options) -> dict:
    """job_rows' rows judged in this process over real probes of `env` (what verl release is installed, DeepEP):
    the job checks of `check --no-smoke --only 'job.*' --job-args ARGV`."""
    report = run_in_process(env, python, ["job.*"], prof=profile(job_args=argv, smoke="off", **options))
    wire = report.to_dict()
    return {c["id"]: c for c in wire["checks"]} | {"_profile": wire["profile"]}


def _commands(row: dict) -> list[str]:
    return [f["description"] for f in row["fixes"]]


def _lines(row: dict) -> list[str]:
    """The lines to add: each fix's indented last line."""
    return [f["description"].splitlines()[-1].strip() for f in row["fixes"]]


def test_verl_with_6555_sets_the_cp_settings_itself(tmp_path):
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")  # the published release: it has #6555
    rows = job_rows_probed(env, verl_example(2, cp_args=False))
    row = rows["job.cp-args"]
    # verl sets the layout and the scheduler, not max_seqlen_per_dp_cp_rank: the example's line, rounded up.
    assert row["status"] == "warn", row["summary"]
    assert "max_seqlen_per_dp_cp_rank not stated" in row["summary"]
    assert f"++{OTC}.max_seqlen_per_dp_cp_rank=6144" in _lines(row)
    assert "verl will use cp_partition_mode=contiguous and sequence_packing_scheduler=default_dynamic_cp" in \
        row["details"] and "PR #6555" in row["details"]
    assert rows["_profile"]["job"]["kind"] == "verl" and rows["_profile"]["cp"] == 2
    # The example's explicit dp_balanced is replaced by verl: a warning that says so.
    row = job_rows_probed(env, verl_example(2))["job.cp-args"]
    assert row["status"] == "warn" and "replaced by verl's default_dynamic_cp" in row["summary"]


def test_verl_without_6555_needs_the_lines_and_gets_them(tmp_path):
    cp = 2
    env = Env(tmp_path).fake("verl", fake_old_verl)
    row = job_rows_probed(env, verl_example(cp, cp_args=False))["job.cp-args"]
    assert row["status"] == "fail"
    assert "DSv4 Hybrid with context parallelism requires cp_partition_mode='contiguous'." in row["summary"]
    fixes = _commands(row)
    assert any(f"++{OTC}.cp_partition_mode=contiguous" in f for f in fixes)
    assert any(f"++{OTC}.sequence_packing_scheduler=dp_balanced" in f for f in fixes)
    ok = job_rows_probed(env, verl_example(cp))["job.cp-args"]
    assert ok["status"] == "pass" and f"= {12288 // cp * cp} >= 12288" in ok["summary"]


ENGINE = "actor_rollout_ref.actor.megatron"


def _verl_engine_validation(env_root: Path):
    """verl 0.9.0's own McoreEngineConfig check on max_seqlen_per_dp_cp_rank (engine.py, the `if
    self.dynamic_context_parallel and ...: raise ValueError(...)` statement of __post_init__), taken from the
    published wheel with ast and run as written: whether verl accepts (dynamic, value)."""
    import ast
    from types import SimpleNamespace

    tree = ast.parse((env_root / "verl" / "workers" / "config" / "engine.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "McoreEngineConfig")
    post = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__")
    stmt = next(n for n in post.body if isinstance(n, ast.If) and "max_seqlen_per_dp_cp_rank" in ast.unparse(n.test))
    code = compile(ast.Module([stmt], []), "engine.py", "exec")

    def accepts(dynamic: bool, value) -> bool:
        try:
            exec(code, {}, {"self": SimpleNamespace(dynamic_context_parallel=dynamic, max_seqlen_per_dp_cp_rank=value)})
        except ValueError as exc:
            assert str(exc) == "max_seqlen_per_dp_cp_rank must be a positive integer when dynamic_context_parallel " \
                "is enabled"
            return False
        return True
    return accepts


def test_verl_dynamic_cp_needs_the_engine_key_as_verl_does(tmp_path):
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")
    accepts = _verl_engine_validation(env.sites["verl"])
    # verl writes the engine's value over the transformer config's with dynamic CP (transformer_impl.py L303-311).
    impl = (env.sites["verl"] / "verl/workers/engine/megatron/transformer_impl.py").read_text()
    assert '"max_seqlen_per_dp_cp_rank": self.engine_config.max_seqlen_per_dp_cp_rank' in impl
    base = verl_example(2, cp_args=False) + [f"{ENGINE}.dynamic_context_parallel=True"]
    otc = f"++{OTC}.max_seqlen_per_dp_cp_rank=6144"
    cases = [  # (extra arguments, the engine's value verl sees)
        ([], None), ([otc], None), ([f"{ENGINE}.max_seqlen_per_dp_cp_rank=0"], 0),
        ([f"{ENGINE}.max_seqlen_per_dp_cp_rank=True"], True), ([f"{ENGINE}.max_seqlen_per_dp_cp_rank=6144"], 6144),
        ([otc, f"{ENGINE}.max_seqlen_per_dp_cp_rank=6144"], 6144),
    ]
    for extra, engine_value in cases:
        row = job_rows_probed(env, base + extra)["job.cp-args"]
        verl_ok = accepts(True, engine_value)
        assert (row["status"] != "fail") == verl_ok, (extra, row["summary"])
        if not verl_ok:
            assert "verl stops with \"max_seqlen_per_dp_cp_rank must be a positive integer" in row["summary"]
            assert any(f"{ENGINE}.max_seqlen_per_dp_cp_rank=6144" in f for f in _commands(row)), row["fixes"]
            assert not any("override_transformer_config.max_seqlen" in f for f in _commands(row))
    # The line the doctor gives, added as written, is what verl accepts.
    first = job_rows_probed(env, base)["job.cp-args"]
    line = _lines(first)[0]
    assert line == f"{ENGINE}.max_seqlen_per_dp_cp_rank=6144" and accepts(True, 6144)
    assert job_rows_probed(env, base + [line])["job.cp-args"]["status"] == "pass"
    # The transformer config's value with dynamic CP: replaced by verl, and said so.
    both = job_rows_probed(env, base + [otc, f"{ENGINE}.max_seqlen_per_dp_cp_rank=6144"])["job.cp-args"]
    assert "replaced by verl with" in both["summary"] + both["details"]
    # Without dynamic CP verl never reads the engine key (accepts anything) and Megatron gets the transformer
    # config's: the engine key alone is a warning, not a requirement.
    assert accepts(False, None)
    alone = job_rows_probed(env, verl_example(2, cp_args=False)
                            + [f"{ENGINE}.max_seqlen_per_dp_cp_rank=6144"])["job.cp-args"]
    assert alone["status"] == "warn" and "read by verl only with dynamic_context_parallel" in alone["summary"]


def test_cp1_needs_nothing_and_job_rows_stay_out_of_a_plain_check(tmp_path):
    rows = job_rows_in_process(verl_example(1))
    assert rows["job.cp-args"]["status"] == "skip" and "CP = 1" in rows["job.cp-args"]["summary"]
    plain = run_doctor("check", "-f", "json", "--no-smoke", "--only", "python.version")
    assert not any(c["id"].startswith("job.") for c in plain.report["checks"])
    only_job = run_doctor("check", "--only", "job.cp-args")
    assert only_job.returncode == 2 and "--job-args" in only_job.stderr


def test_megatron_command_without_cp_settings_fails_with_the_flags_to_add():
    rows = job_rows_in_process(MEGATRON + ["--context-parallel-size", "2"])
    row = rows["job.cp-args"]
    assert row["status"] == "fail" and "Megatron stops with" in row["summary"]
    assert any("--cp-partition-mode contiguous" in f for f in _commands(row))
    assert any("--sequence-packing-scheduler dp_balanced" in f for f in _commands(row))
    assert "not stated: the Megatron-LM CLI" in rows["_profile"]["job"]["dsa_backend_decided"]


def test_max_seqlen_that_does_not_cover_the_longest_sample_fails():
    argv = MEGATRON + ["--context-parallel-size", "2", "--cp-partition-mode", "contiguous",
                       "--sequence-packing-scheduler", "dp_balanced", "--max-seqlen-per-dp-cp-rank", "2048"]
    row = job_rows_in_process(argv)["job.cp-args"]
    assert row["status"] == "fail" and "2048 x CP = 2 ranks (dp_balanced) = 4096 < 8192" in row["summary"]
    assert any("--max-seqlen-per-dp-cp-rank 4096" in f for f in _commands(row))
    # default_dynamic_cp counts DP x CP: 2 nodes x 8 GPUs / (TP 1 x PP 2 x CP 2) = DP 4, 2048 x 8 ranks covers it.
    dyn = [a if a != "dp_balanced" else "default_dynamic_cp" for a in argv]
    row = job_rows_in_process(dyn)["job.cp-args"]
    assert row["status"] == "pass" and "DP x CP = 8 ranks" in row["summary"]


def test_a_max_seqlen_that_is_no_positive_integer_gets_its_line(tmp_path):
    base = MEGATRON + ["--context-parallel-size", "2", "--cp-partition-mode", "contiguous",
                       "--sequence-packing-scheduler", "dp_balanced"]
    row = job_rows_in_process(base + ["--max-seqlen-per-dp-cp-rank", "0"])["job.cp-args"]
    assert row["status"] == "fail" and "is not a positive whole number" in row["summary"]
    assert _lines(row) == ["--max-seqlen-per-dp-cp-rank 4096"]  # 8192 / CP 2
    verl = verl_example(2, cp_args=False) + [f"++{OTC}.max_seqlen_per_dp_cp_rank=-1"]
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")  # sets the layout itself: only max_seqlen is wrong
    row = job_rows_probed(env, verl)["job.cp-args"]
    assert row["status"] == "fail" and f"++{OTC}.max_seqlen_per_dp_cp_rank=6144" in _lines(row), row["fixes"]
    assert all("max_seqlen_per_dp_cp_rank" in line for line in _lines(row))
    # Not computable (no lengths stated): the line says what N is.
    short = [a for a in verl if not a.startswith("data.max_")]
    row = job_rows_probed(env, short)["job.cp-args"]
    assert f"++{OTC}.max_seqlen_per_dp_cp_rank=N" in _lines(row) and "N = the longest sample / CP" in \
        _commands(row)[0]


def test_parallelism_tp_and_divisibility():
    rows = job_rows_in_process(verl_example(2) + ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"])
    row = rows["job.parallelism"]
    assert row["status"] == "fail" and "DSv4 Hybrid Attention only supports TP size 1." in row["summary"]
    assert any("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1" in f for f in _commands(row))
    odd = job_rows_in_process(verl_example(2) + ["trainer.n_gpus_per_node=6", "trainer.nnodes=1"])["job.parallelism"]
    assert odd["status"] == "fail" and "does not divide the 6 GPUs" in odd["summary"]


def test_dispatcher_with_packing(tmp_path):
    base = MEGATRON[:-3] + ["--context-parallel-size", "2", "--cp-partition-mode", "contiguous",
                            "--sequence-packing-scheduler", "dp_balanced"]
    row = job_rows_in_process(base)["job.moe-dispatch"]  # Megatron's default allgather
    assert row["status"] == "fail" and "got 'allgather'" in row["summary"]
    assert any("--moe-token-dispatcher-type alltoall" in f for f in _commands(row))
    flex = job_rows_in_process(base + ["--moe-token-dispatcher-type", "flex"])["job.moe-dispatch"]
    assert flex["status"] == "fail" and "DeepEP (deep_ep) is not installed" in flex["summary"]
    env = Env(tmp_path).fake("deepep", lambda s: s.file("deep_ep/__init__.py", ""))
    assert job_rows_probed(env, base + ["--moe-token-dispatcher-type", "flex"])["job.moe-dispatch"]["status"] == "warn"


def test_the_text_report_says_how_the_backend_was_decided_and_what_was_not_read():
    run = run_doctor("check", "--no-smoke", "--only", "job.dsa-backend", "--job-args",
                     shlex.join(["python3", "-m", "verl.trainer.main_ppo", "trainer.total_epochs=3"]))
    head = run.stdout.split("\n[")[0]  # before the first area
    # No Megatron-Bridge installed: its rule cannot be read, so the backend is not known, and checked as cudnn.
    assert "job: dsa-backend cudnn (not known: the Megatron-Bridge rule could not be read" in " ".join(head.split())
    assert "not read by any check: trainer.total_epochs" in " ".join(head.split())


def test_dense_indexer_loss_on_sm90():
    dense = [a for a in verl_example(2) if "dsa_indexer_use_sparse_loss" not in a and "loss_coeff" not in a]
    dense += [f"++{OTC}.dsa_indexer_loss_coeff=0.1"]
    row = job_rows_in_process(dense, gpu_arch="9.0")["job.indexer-loss"]
    assert row["status"] == "fail" and "not supported on SM90" in row["summary"]
    assert any(f"++{OTC}.dsa_indexer_use_sparse_loss=True" in f for f in _commands(row))
    assert job_rows_in_process(verl_example(2), gpu_arch="9.0")["job.indexer-loss"]["status"] == "pass"
    assert job_rows_in_process(dense, gpu_arch="10.0")["job.indexer-loss"]["status"] == "skip"
    # verl without a coefficient: Megatron-Bridge's provider decides, which the command does not say.
    unstated = [a for a in verl_example(2) if "loss_coeff" not in a]
    row = job_rows_in_process(unstated, gpu_arch="9.0")["job.indexer-loss"]
    assert row["status"] == "warn" and "not stated" in row["summary"]


def test_a_setting_stated_wrong_is_changed_not_added():
    argv = MEGATRON + ["--context-parallel-size", "2", "--cp-partition-mode", "zigzag",
                       "--sequence-packing-scheduler", "dp_balanced", "--max-seqlen-per-dp-cp-rank", "2048"]
    fixes = _commands(job_rows_in_process(argv)["job.cp-args"])
    assert any(f.startswith("Change in the training command (DSv4 CP needs the contiguous layout), from 'zigzag' to:"
                            "\n  --cp-partition-mode contiguous") for f in fixes)
    assert any("from '2048' to:\n  --max-seqlen-per-dp-cp-rank 4096" in f for f in fixes)
    verl = verl_example(2, prompt=4096, response=4096)
    verl = [a if "max_seqlen_per_dp_cp_rank" not in a else a.replace("=4096", "=1000") for a in verl]
    fixes = _commands(job_rows_in_process(verl)["job.cp-args"])
    assert any("(data.max_prompt_length + data.max_response_length) / CP" in f for f in fixes)

def test_lines_to_add_stay_whole_in_a_narrow_text_report(tmp_path):
    """At COLUMNS=60 the text report wraps its prose, never a line to add (otherwise: `...override_transformer_
    config.s` / `equence_packing_scheduler=dp_balanced`)."""
    for argv in (verl_example(2, cp_args=False), MEGATRON + ["--context-parallel-size", "2"]):
        run = run_doctor("preflight", "--no-smoke", "--only", "job.cp-args", "--", *argv, env={"COLUMNS": "60"})
        assert run.returncode == 1 and "not starting the job" in run.stderr, run.stderr
        lines = run.stderr.splitlines()
        report = lines[:next(i for i, line in enumerate(lines) if line.startswith("Verdict:")) + 1]
        assert max(len(line) for line in report if not line.startswith("    ")) <= 60  # the prose is wrapped
        wanted = ([f"++{OTC}.cp_partition_mode=contiguous", f"++{OTC}.sequence_packing_scheduler=dp_balanced"]
                  if argv[0] == "python3" else ["--cp-partition-mode contiguous",
                                                "--sequence-packing-scheduler dp_balanced"])
        for line in wanted:
            assert f"    {line}" in lines, (line, run.stderr)  # intact, on its own line


def test_a_config_file_makes_what_the_command_does_not_state_unknown():
    """Without it, `--config-name=dsv4_cp4` gave cp=1, "CP = 1" and "TP = 1 (not stated: the default)"."""
    argv = ["python3", "-m", "verl.trainer.main_ppo", "--config-path=/cfg", "--config-name=dsv4_cp4"]
    job = parse(argv)
    assert job.config_file == ["--config-path", "--config-name"] and job.cp() is None  # not known, never 1
    assert parse(["python3", "-m", "verl.trainer.main_ppo", "-cn", "dsv4"]).config_file == ["-cn"]
    # The CP the config may set is not known: checked as CP > 1, said with how to state it, never a usage error.
    run = run_doctor("check", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv))
    text = " ".join(run.stdout.split())
    assert run.returncode == 0 and "cp=2 (not known: checked as CP > 1)" in text, run.stdout + run.stderr
    assert "the config it names (--config-path, --config-name) may set it" in text
    assert "actor_rollout_ref.actor.megatron.context_parallel_size=N" in text
    pre = run_doctor("preflight", "--dry-run", "--no-smoke", "--only", "job.*", "--", *argv)
    assert pre.returncode == 0 and "may set it" in " ".join(pre.stderr.split()) and "Traceback" not in pre.stderr
    rows = job_rows_in_process(argv, cp=4)
    assert rows["_profile"]["cp"] == 4 and rows["_profile"]["job"]["cp_given"] == 4
    cp_args = rows["job.cp-args"]
    assert cp_args["status"] == "warn" and "not stated: the config the command names may set it" in \
        cp_args["summary"]
    assert "CP = 1" not in cp_args["summary"]
    par = rows["job.parallelism"]
    assert par["status"] == "warn" and "TP not stated: the config the command names may set it" in par["summary"]
    assert "the config the command names" in rows["_profile"]["job"]["dsa_backend_decided"]
    # Stated on the command line, a value is read as usual beside the file.
    stated = job_rows_in_process(argv + ["actor_rollout_ref.actor.megatron.context_parallel_size=2",
                                         "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"])
    assert stated["_profile"]["cp"] == 2 and stated["job.parallelism"]["status"] == "fail"
    # Megatron-LM's --yaml-cfg: the same.
    yaml_cfg = ["pretrain_gpt.py", "--yaml-cfg", "dsv4.yaml", "--context-parallel-size", "2"]
    rows = job_rows_in_process(yaml_cfg)
    assert rows["job.cp-args"]["status"] == "warn" and "--yaml-cfg" in rows["job.cp-args"]["summary"]
    assert rows["job.moe-dispatch"]["status"] == "warn" and "not stated" in rows["job.moe-dispatch"]["summary"]


def test_an_unstated_tp_is_not_known_and_a_bad_one_gets_a_line():
    unstated = [a for a in MEGATRON if a not in ("--tensor-model-parallel-size", "1")]
    row = job_rows_in_process(unstated)["job.parallelism"]
    assert row["status"] == "warn" and "TP not stated" in row["summary"] and "TP = 1" not in row["summary"]
    bad = job_rows_in_process(MEGATRON[:-1] + ["--tensor-model-parallel-size", "one"])["job.parallelism"]
    assert bad["status"] == "fail" and "is not a number" in bad["summary"]
    assert _lines(bad) == ["--tensor-model-parallel-size 1"]


def test_job_env_reads_the_command_and_the_environment():
    argv = ["env", "NCCL_NVLS_ENABLE=0", "CUDA_DEVICE_MAX_CONNECTIONS=1"] + verl_example(2)
    row = job_rows_in_process(argv)["job.env"]
    assert row["status"] == "pass", row["summary"]
    bare = job_rows_in_process(verl_example(2))["job.env"]
    assert bare["status"] == "warn" and "NCCL_NVLS_ENABLE is unset" in bare["summary"]


def test_job_env_of_a_wrapper_script_is_never_a_pass():
    """`env ... bash run.sh`: the script runs after the doctor looked and may export or override the variables (not
    known: a warning, never a skip)."""
    rows = job_rows_in_process(["env", "NCCL_NVLS_ENABLE=0", "CUDA_DEVICE_MAX_CONNECTIONS=1", "bash", "run.sh"])
    assert rows["job.env"]["status"] == "warn" and "not known" in rows["job.env"]["summary"], rows["job.env"]
    bare = job_rows_in_process(["bash", "run.sh"])["job.env"]
    assert bare["status"] == "warn" and "may set them itself" in bare["summary"]


def test_job_args_and_a_contradicting_cp_option_is_a_usage_error():
    run = run_doctor("check", "--cp", "4", "--job-args", shlex.join(verl_example(2)))
    assert run.returncode == 2 and "contradicts the job's context_parallel_size 2" in run.stderr


# --- preflight: exec -------------------------------------------------------------------------------------------------

JOB = """
import os, sys
open(sys.argv[1], "w").write("%d %s" % (os.getpid(), " ".join(sys.argv[2:])))
sys.exit(7)
"""


def _preflight(tmp_path: Path, *options: str, job_args: tuple[str, ...] = ("a b", "--c=d")):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    marker = tmp_path / "ran"
    argv = doctor_command() + ["preflight", "--no-smoke", *options, "--", sys.executable, str(script), str(marker),
                               *job_args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    return proc, out, err, marker


def test_preflight_execs_the_command_in_place(tmp_path):
    report = tmp_path / "report.json"
    proc, out, err, marker = _preflight(tmp_path, "--only", "python.version", "--report", str(report))
    assert proc.returncode == 7, err  # the job's own exit code
    pid, args = marker.read_text().split(" ", 1)
    assert int(pid) == proc.pid  # the same process: exec, not a child
    assert args == "a b --c=d"
    assert out == ""  # the report went to stderr; stdout is the job's
    assert re.search(r"\[.\] python  1 pass", err)
    assert json.loads(report.read_text())["summary"]["exit_code"] == 0


def test_a_failing_preflight_never_starts_the_command(tmp_path):
    proc, out, err, marker = _preflight(tmp_path, "--only", "torch.install", "--python", _bare(tmp_path))
    assert proc.returncode == 1 and not marker.exists()
    assert "not starting the job" in err and "Traceback" not in err


def test_dry_run_and_strict(tmp_path):
    proc, _, err, marker = _preflight(tmp_path, "--only", "python.version", "--dry-run")
    assert proc.returncode == 0 and not marker.exists() and "dry run" in err
    proc, _, err, marker = _preflight(tmp_path, "--only", "kernels.triton", "--strict", "--python", _bare(tmp_path))
    assert proc.returncode == 1 and not marker.exists()  # a warning blocks under --strict


def test_preflight_usage_errors(tmp_path):
    for args in (["preflight"], ["preflight", "python3", "x.py"], ["preflight", "--", "torchrun", "--nnodes"]):
        run = run_doctor(*args)
        assert run.returncode == 2 and "Traceback" not in run.stderr, (args, run.stderr)
    # Each names what the user gave, not an option of another command.
    run = run_doctor("preflight", "--report", str(tmp_path / "no" / "r.json"), "--", "true")
    assert run.returncode == 2 and "--report" in run.stderr and "--output" not in run.stderr
    # A CP no job runs with is job.config's failure, stating the range (the job is not started).
    run = run_doctor("preflight", "-v", "--", "pretrain_gpt.py", "--context-parallel-size", "99999")  # rows in full
    text = " ".join(run.stderr.split())  # the grouped report wraps at the terminal's width
    assert run.returncode == 1 and "cp = 99999 is out of range: it must be a whole number from 1 to 1024" in text \
        and "not starting the job" in text
    missing = run_doctor("preflight", "--only", "python.version", "--", "/no/such/program")
    assert missing.returncode == 127 and "could not start" in missing.stderr


@pytest.mark.skipif(not __import__("conftest").has_torch(), reason="the fleet exchange needs the test torch")
@pytest.mark.slow
def test_a_fleet_s_dry_run_is_said_once(tmp_path):
    """Every rank of a fleet printed "dry run, not starting"; rank 0 alone speaks for the fleet."""
    from test_fleet import _ranks_by_hand

    done = _ranks_by_hand(2, tmp_path, "preflight", "--no-smoke", "--only", "python.version", "--dry-run", "--",
                          "true", launcher="srun")
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-800:] for d in done]
    assert "dry run, not starting: true" in done[0].stderr and done[1].stderr == ""


def _bare(tmp_path: Path) -> str:
    import venv

    root = tmp_path / "bare"
    if not root.exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    return str(root / "bin" / "python")


def test_the_job_gets_default_signal_dispositions(tmp_path):
    """Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across exec. The job must not inherit
    that: `yes | head -n1` in it must end yes with SIGPIPE, not with a "Broken pipe" error."""
    listing = tmp_path / "sigign"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ngrep SigIgn /proc/self/status > \"$1\"\n")
    script.chmod(0o755)
    done = subprocess.run(doctor_command() + ["preflight", "--no-smoke", "--only", "python.version", "--",
                                              str(script), str(listing)],
                          capture_output=True, text=True, timeout=120, start_new_session=True)
    assert done.returncode == 0, done.stderr
    mask = int(listing.read_text().split()[1], 16)
    assert not mask & (1 << (13 - 1)) and not mask & (1 << (25 - 1)), hex(mask)  # SIGPIPE, SIGXFSZ


def test_exec_leaves_no_probe_or_temporary_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nls -A \"$TMPDIR\" > \"$1\"\n")
    script.chmod(0o755)
    listing = tmp_path / "listing"
    done = subprocess.run(doctor_command() + ["preflight", "--no-smoke", "--only", "python.version,gpu.devices", "--",
                                              str(script), str(listing)],
                          env=dict(os.environ, TMPDIR=str(tmp)), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert listing.read_text() == ""  # the doctor's temporary directories were gone before exec


# --- README "In job scripts" and docs/job-scripts.md's Slurm and Kubernetes: the examples work as written -----------

def _job_scripts_section() -> str:
    """The README's section (a verl script, CI) and docs/job-scripts.md's Slurm and Kubernetes sections."""
    readme = (REPO / "README.md").read_text()
    page = (REPO / "docs" / "job-scripts.md").read_text()
    return readme.split("\n## In job scripts\n", 1)[1].split("\n## ", 1)[0] + page.split("\n## Slurm\n", 1)[1]


def _doctor_words(line: str) -> list[str] | None:
    """The words after `dsv4-doctor` in a shell line (inside `bash -c '...'` too), up to a shell operator."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    if "dsv4-doctor" not in words:
        inner = next((w for w in words if w.startswith("dsv4-doctor ")), None)
        return _doctor_words(inner) if inner else None
    words = words[words.index("dsv4-doctor") + 1:]
    cut = next((i for i, w in enumerate(words) if w in ("||", "&&", "|", ";", ">", "&")), len(words))
    return words[:cut]


def readme_job_script_commands() -> list[list[str]]:
    """Every dsv4-doctor command line of the section's sh blocks (commented alternatives included) and the argv of
    its Kubernetes initContainer (a flow sequence of double-quoted strings: JSON)."""
    section = _job_scripts_section()
    found = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", section, re.S):
        for line in re.sub(r"\\\n#?\s*", " ", block).splitlines():
            line = line.strip().lstrip("#").strip()
            if "dsv4-doctor" in line and (words := _doctor_words(line)) is not None:
                found.append(words)
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        command = json.loads(re.search(r"command: (\[.*?\])", block, re.S).group(1))
        assert command[0] == "dsv4-doctor"
        found.append(command[1:])
    return found


def test_the_readme_job_script_examples_parse():
    """Examples that could not work as written. Each command line parses with the doctor's own
    argument parser, and each training command it names with the doctor's job parser."""
    from dsv4_doctor.cli.main import parser

    commands = readme_job_script_commands()
    assert len(commands) >= 7, commands  # preflight x4 (one commented), Kubernetes, CI x2
    root, _ = parser()
    for words in commands:
        try:
            args = root.parse_args(words)
        except SystemExit as exc:  # argparse's usage error is exit 2
            pytest.fail(f"`dsv4-doctor {shlex.join(words)}` does not parse (exit {exc.code})")
        if args.command == "preflight":
            assert args.job_command[:1] == ["--"] and len(args.job_command) > 1, words
            parse(args.job_command[1:])
            if args.report:
                assert args.report.startswith("logs/")  # the section's scripts create logs/ first
        else:
            assert args.command == "check" and args.job_args, f"no --job-args, so no job.* rows: {words}"
            if not args.job_args.startswith("$("):
                assert parse(split_job_args(args.job_args)).kind == "verl"
    section = _job_scripts_section()
    assert "mkdir -p logs" in section and re.search(r"^HEAD=", section, re.M)  # what the lines above use


def test_the_readme_kubernetes_init_container_passes_job_env_under_strict():
    """The initContainer runs `check --strict`: its env block must hold what job.env asks for, or the pod never
    starts."""
    yaml = pytest.importorskip("yaml")
    block = re.search(r"```yaml\n(.*?)```", _job_scripts_section(), re.S).group(1)
    container = yaml.safe_load(block)["initContainers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert all(isinstance(v, str) for v in env.values())  # Kubernetes takes strings only
    words = container["command"][1:]
    job_args = words[words.index("--job-args") + 1]
    run = run_doctor("check", "--no-smoke", "--strict", "--only", "job.env", "--job-args", job_args, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
