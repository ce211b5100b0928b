"""The job settings' one typed path, in process: a command is parsed once into a `Job`, the profile carries that
`Job` (a dict only in its JSON), and the job checks judge it through the check API's findings."""

from __future__ import annotations

import types

import pytest

from dsv4_doctor.model.facts import StaticFacts
from dsv4_doctor.job.command import parse
from dsv4_doctor.job.model import Decisions, Job, Setting, is_interpolation
from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.job.settings import section
from dsv4_doctor.model.core import Profile, Result, Status, result_of
from dsv4_doctor.checks.job import job_checks

OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"
VERL = ["python3", "-m", "verl.trainer.main_ppo"]
MEGATRON = ["torchrun", "--nnodes", "1", "--nproc-per-node", "8", "pretrain_gpt.py"]


def judge(check, profile: Profile, gpus=()) -> Result:
    """A job check run in process on a profile, its findings made into the result the runner reports."""
    ctx = types.SimpleNamespace(profile=profile, static=StaticFacts({}), gpus=lambda: list(gpus))
    out = check.run(ctx)
    return out if isinstance(out, Result) else result_of(out)


def test_a_command_is_parsed_once_into_typed_settings():
    job = parse([*VERL, "actor_rollout_ref.actor.megatron.context_parallel_size=2",
                 f"++{OTC}.cp_partition_mode=contiguous",
                 "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=1"])
    assert isinstance(job, Job) and job.kind == "verl" and job.checked_roles() == ["actor", "ref"]
    ref = job.effective("ref")  # verl's ref inherits the actor's megatron settings
    assert ref["cp"] == Setting(2, "2") and ref["cp_partition_mode"].value == "contiguous" and ref["tp"].value == 1
    assert job.cp() == 2 and job.decisions is None


def test_the_profile_carries_the_typed_job_and_its_decisions():
    profile = job_profile(Profile(), [*MEGATRON, "--context-parallel-size", "4"], None, None)
    job = profile.job
    assert isinstance(job, Job) and isinstance(job.decisions, Decisions)
    assert profile.cp == 4 and profile.dsa_backend == "cudnn" and job.decisions.dense_indexer_loss is False
    wire = profile.to_dict()["job"]  # a dict only at the JSON boundary, with the keys the report always had
    assert wire["kind"] == "megatron" and wire["roles"]["model"]["cp"] == {"value": 4, "raw": "4", "type": "int",
                                                                                   "source": "flag"}
    assert wire["dsa_backend_decided"].startswith("not stated: the Megatron-LM CLI")
    assert "cp_known" not in wire and "cp_given" not in wire and wire["dense_indexer_loss"] is False
    unknown = job_profile(Profile(), ["bash", "train.sh"], None, None)
    assert unknown.cp == 2 and unknown.job is not None and unknown.job.to_dict()["cp_known"] is False


def test_the_cp_rules_fail_with_the_line_in_the_commands_own_syntax():
    profile = job_profile(Profile(), [*MEGATRON, "--context-parallel-size", "2", "--seq-length", "8192"], None, None)
    result = judge(job_checks.job_cp_args, profile)
    assert result.status is Status.FAIL and result.summary.startswith("cp_partition_mode is not stated")
    assert [f.description.rsplit("\n", 1)[1].strip() for f in result.fixes] == [
        "--cp-partition-mode contiguous", "--sequence-packing-scheduler dp_balanced"]
    # the failures lead, what ranks below them is the details, and the settings section agrees on what is missing
    assert "max_seqlen_per_dp_cp_rank not stated" in result.details
    settings = section(profile.job, profile.cp, [])
    assert settings is not None and settings["cp_args"]["missing"][:2] == [
        "--cp-partition-mode contiguous", "--sequence-packing-scheduler dp_balanced"]
    fixed = job_profile(Profile(), [*MEGATRON, "--context-parallel-size", "2", "--cp-partition-mode", "contiguous",
                                    "--sequence-packing-scheduler", "dp_balanced"], None, None)
    assert judge(job_checks.job_cp_args, fixed).status is Status.PASS


@pytest.mark.parametrize("value", ["$PP", "${PP}"])
def test_an_unresolved_variable_is_not_known_never_a_default(value):
    """A PP the shell did not expand is not PP 1: the divisibility is not known, so the row is no pass."""
    argv = [*MEGATRON, "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", value]
    assert is_interpolation(value)
    result = judge(job_checks.job_parallelism, job_profile(Profile(), argv, None, None))
    assert result.status is Status.WARN and result.summary.startswith("not known: "), result.summary
    stated = [*MEGATRON, "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "3"]
    assert judge(job_checks.job_parallelism, job_profile(Profile(), stated, None, None)).status is Status.FAIL
    hidden = job_profile(Profile(), [*MEGATRON, "--context-parallel-size", "$CP"], None, None)
    assert hidden.cp == 2 and hidden.cp_source == "default"  # not known: checked as CP > 1, never a usage error
    assert hidden.job is not None and hidden.job.decisions is not None
    assert "cannot resolve" in (hidden.job.decisions.not_known or "")
    given = job_profile(Profile(), [*MEGATRON, "--context-parallel-size", "$CP"], 4, None)
    assert given.cp == 4 and given.job is not None and given.job.decisions is not None
    assert given.job.decisions.cp_given == 4


def test_the_job_checks_are_documented_functions_of_the_check_api():
    for check in job_checks.CHECKS:
        assert check.id.startswith("job.") and check.explanation and check.run.__doc__
        assert check.only_with == "job" and check.skip_if(Profile()) is not None  # no job: not part of the run
