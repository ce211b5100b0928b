"""A value the training command writes as an unexpanded shell variable (`$NAME`, `${NAME}`) or an interpolation the
doctor cannot resolve is not known: the job checks say so (a warning naming the setting and how to state it), never
judge it as a default or a guess, never pass on it, and give it no fix. Judged in process, on the profile
`--job-args` makes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dsv4_doctor.checks.job import job_checks
from dsv4_doctor.checks.verl_checks import ENGINE as VERL_ENGINE
from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.model.core import Profile, Result, Status
from dsv4_doctor.engine.registry import collect
from dsv4_doctor.testing import StubContext, dist, module, run_check, static_answer

OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"
ENGINE = "actor_rollout_ref.actor.megatron"
VERL = ["python3", "-m", "verl.trainer.main_ppo", "data.max_prompt_length=2048", "data.max_response_length=10240",
        f"{ENGINE}.tensor_model_parallel_size=1", f"{ENGINE}.context_parallel_size=2",
        "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]
# 2 nodes x 8 GPUs, TP 1, PP 2, --seq-length 8192.
MEGATRON = ["torchrun", "--nnodes", "2", "--nproc-per-node=8", "pretrain_gpt.py", "--tensor-model-parallel-size", "1",
            "--pipeline-model-parallel-size", "2", "--seq-length", "8192", "--moe-token-dispatcher-type", "alltoall"]
CP2 = ["--context-parallel-size", "2"]
LAYOUT = ["--cp-partition-mode", "contiguous", "--sequence-packing-scheduler", "dp_balanced"]
# verl 0.9.0 as the static probe reads it: PR #6555 (default_dynamic_cp in MegatronEngine) sets the CP settings.
VERL_6555 = static_answer(distributions={"verl": dist("verl", "0.9.0")},
                          modules={"verl": module("/s/verl/__init__.py")},
                          sources={VERL_ENGINE: {"found": True, "classes": {}, "functions": {},
                                                 "contains": {"default_dynamic_cp": True}}})


def judged(check_id: str, argv: list[str], facts: dict | None = None, gpu_arch: str | None = None) -> Result:
    profile = job_profile(Profile(), argv, None, None)
    if gpu_arch:
        profile = replace(profile, gpu_arch=gpu_arch)
    check = next(c for c in collect(job_checks) if c.id == check_id)
    return run_check(check, StubContext(profile=profile, facts=facts or {}))


def lines(result: Result) -> list[str]:
    """The setting lines the fixes give (each fix's indented last line)."""
    return [f.description.splitlines()[-1].strip() for f in result.fixes]


def assert_not_known(result: Result, sentence: str) -> None:
    assert result.status is Status.WARN and result.summary.startswith("not known: "), (result.status, result.summary)
    assert sentence in result.summary and "pass the expanded command or state it" in result.summary, result.summary


@pytest.mark.parametrize("value", ["$MODE", "${MODE}"])
def test_a_partition_mode_written_as_a_variable_is_not_known_and_gets_no_line(value):
    result = judged("job.cp-args", MEGATRON + CP2 + ["--cp-partition-mode", value, "--sequence-packing-scheduler",
                                                     "dp_balanced", "--max-seqlen-per-dp-cp-rank", "4096"])
    assert_not_known(result, f"cp_partition_mode is `{value}` in the command: not known here")
    assert not result.fixes and "Megatron stops" not in result.summary
    # The same command with a known bad mode still fails with its line: the rule itself is unchanged.
    zigzag = judged("job.cp-args", MEGATRON + CP2 + ["--cp-partition-mode", "zigzag", "--sequence-packing-scheduler",
                                                     "dp_balanced", "--max-seqlen-per-dp-cp-rank", "4096"])
    assert zigzag.status is Status.FAIL and lines(zigzag) == ["--cp-partition-mode contiguous"]


def test_an_override_verl_replaces_is_not_called_overridden_when_its_value_is_not_known():
    """verl with #6555 sets contiguous after the overrides; whether `$MODE` said otherwise is not known."""
    result = judged("job.cp-args", VERL + [f"++{OTC}.cp_partition_mode=$MODE",
                                           f"++{OTC}.max_seqlen_per_dp_cp_rank=6144"], VERL_6555)
    assert_not_known(result, "actor: cp_partition_mode is `$MODE` in the command: not known here")
    assert "overridden by verl" not in result.summary + result.details
    stated = judged("job.cp-args", VERL + [f"++{OTC}.cp_partition_mode=zigzag",
                                           f"++{OTC}.max_seqlen_per_dp_cp_rank=6144"], VERL_6555)
    assert stated.status is Status.WARN and "overridden by verl" in stated.summary


def test_a_scheduler_written_as_a_variable_is_not_known_to_cp_args_and_moe_dispatch():
    argv = MEGATRON + CP2 + ["--cp-partition-mode", "contiguous", "--sequence-packing-scheduler", "${SCHED}",
                             "--max-seqlen-per-dp-cp-rank", "4096"]
    cp_args = judged("job.cp-args", argv)
    assert_not_known(cp_args, "sequence_packing_scheduler is `${SCHED}` in the command: not known here")
    assert not cp_args.fixes and "Unsupported scheduler" not in cp_args.summary
    # At CP 2 some scheduler packs the batch, and every one needs alltoall or flex: the dispatcher is judged, and
    # the row never claims that job.cp-args rejects the scheduler.
    dispatch = judged("job.moe-dispatch", argv)
    assert dispatch.status is Status.PASS and "rejects" not in dispatch.summary, dispatch.summary
    assert "`${SCHED}`" in dispatch.summary and "not known here" in dispatch.summary
    allgather = judged("job.moe-dispatch", [a if a != "alltoall" else "allgather" for a in argv])
    assert allgather.status is Status.FAIL and lines(allgather) == ["--moe-token-dispatcher-type alltoall"]


def test_max_seqlen_short_of_cp_ranks_under_a_scheduler_not_known_is_not_failed():
    """2048 x CP 2 < 8192: dp_balanced would fail it, default_dynamic_cp counts DP x CP and may not."""
    argv = MEGATRON + CP2 + ["--cp-partition-mode", "contiguous", "--sequence-packing-scheduler", "$SCHED",
                             "--max-seqlen-per-dp-cp-rank", "2048"]
    result = judged("job.cp-args", argv)
    assert result.status is Status.WARN and "4096 < 8192" in result.summary, result.summary
    assert not result.fixes and "does not fit" not in result.summary


@pytest.mark.parametrize("value", ["$DISPATCHER", "${oc.env:NOT_SET_ANYWHERE}"])
def test_a_dispatcher_written_as_a_variable_is_not_known_under_packing(value):
    argv = MEGATRON[:-2] + CP2 + LAYOUT + ["--moe-token-dispatcher-type", value]
    if value.startswith("${oc"):
        argv = VERL + [f"++{OTC}.cp_partition_mode=contiguous", f"++{OTC}.sequence_packing_scheduler=dp_balanced",
                       f"++{OTC}.moe_token_dispatcher_type={value}"]
    result = judged("job.moe-dispatch", argv)
    assert_not_known(result, f"moe_token_dispatcher_type is `{value}` in the command: not known here")
    assert not result.fixes and "Megatron asserts" not in result.summary
    # Without a packing scheduler no dispatcher is wrong, whatever it is.
    unpacked = judged("job.moe-dispatch", MEGATRON[:-2] + ["--moe-token-dispatcher-type", "$DISPATCHER"])
    assert unpacked.status is Status.SKIP and "no packing scheduler" in unpacked.summary


def test_a_sparse_loss_switch_written_as_a_variable_is_not_known_on_sm90():
    argv = VERL + [f"++{OTC}.dsa_indexer_loss_coeff=0.1", f"++{OTC}.dsa_indexer_use_sparse_loss=$SPARSE"]
    result = judged("job.indexer-loss", argv, gpu_arch="9.0")
    assert_not_known(result, "dsa_indexer_use_sparse_loss is `$SPARSE` in the command: not known here")
    assert not result.fixes and "Megatron stops" not in result.summary
    # The profile does not call the dense loss on either (cudnn-fe.dsa reads it): not known.
    profile = job_profile(Profile(), argv, None, None)
    assert profile.job is not None and profile.job.decisions is not None
    assert profile.job.decisions.dense_indexer_loss is None
    dense = judged("job.indexer-loss", VERL + [f"++{OTC}.dsa_indexer_loss_coeff=0.1",
                                               f"++{OTC}.dsa_indexer_use_sparse_loss=False"], gpu_arch="9.0")
    assert dense.status is Status.FAIL and lines(dense) == [f"++{OTC}.dsa_indexer_use_sparse_loss=True"]


DYNAMIC = MEGATRON + CP2 + ["--cp-partition-mode", "contiguous", "--sequence-packing-scheduler", "default_dynamic_cp",
                            "--max-seqlen-per-dp-cp-rank", "2048"]


@pytest.mark.parametrize("change, why", [
    (("--pipeline-model-parallel-size", "$PP"), "pipeline_model_parallel_size is `$PP` in the command"),
    (("--tensor-model-parallel-size", None), "TP not stated"),
])
def test_default_dynamic_cp_is_not_judged_against_a_dp_that_is_not_known(change, why):
    """default_dynamic_cp counts DP x CP ranks: 2048 x CP 2 covers 8192 only with DP >= 2, and DP is world /
    (TP x PP x CP), so a TP, PP or world size not known leaves it not known (PP 8 would make DP 1)."""
    flag, value = change
    at = DYNAMIC.index(flag)
    argv = DYNAMIC[:at] + DYNAMIC[at + 2:] if value is None else [*DYNAMIC[:at + 1], value, *DYNAMIC[at + 2:]]
    result = judged("job.cp-args", argv)
    assert result.status is Status.WARN and result.summary.startswith("not known: "), (result.status, result.summary)
    assert "DP is not known" in result.summary and why in result.summary, result.summary
    assert "DP x CP = " not in result.summary and not result.fixes
    known = judged("job.cp-args", DYNAMIC)  # PP 2 on 16 GPUs: DP 4, 8 ranks
    assert known.status is Status.PASS and "DP x CP = 8 ranks" in known.summary


def test_a_max_seqlen_written_as_a_variable_is_no_pass():
    result = judged("job.cp-args", MEGATRON + CP2 + LAYOUT + ["--max-seqlen-per-dp-cp-rank", "$MAX_SEQLEN"])
    assert_not_known(result, "max_seqlen_per_dp_cp_rank is `$MAX_SEQLEN` in the command: not known here")


def test_a_backend_written_as_a_variable_is_not_known_and_never_one_megatron_rejects():
    argv = VERL + ["critic.megatron.context_parallel_size=2", f"++{OTC}.dsa_kernel_backend=cudnn",
                   "++critic.megatron.override_transformer_config.dsa_kernel_backend=$BACKEND"]
    result = judged("job.dsa-backend", argv)
    assert_not_known(result, "critic: dsa_kernel_backend is `$BACKEND` in the command: not known here")
    alone = VERL + [f"++{OTC}.dsa_kernel_backend=$BACKEND"]
    decided = job_profile(Profile(), alone, None, None).to_dict()["job"]["dsa_backend_decided"]
    assert "Megatron rejects" not in decided and "not known" in decided, decided


def test_cudnn_fe_dsa_does_not_take_a_sparse_switch_written_as_a_variable_for_the_dense_loss():
    """With CP > 1 Megatron requires q_causal_offsets on the three dense wrappers only when the dense indexer loss is
    on: a frontend lacking it there fails a job that trains it, and is a warning where that is not known."""
    from dsv4_doctor.checks import cudnn_fe_checks
    from dsv4_doctor.checks._dsa_wrappers import DSA_PROBE, KNOWN_WRAPPERS
    from dsv4_doctor.testing import outcome

    facts = static_answer(distributions={"nvidia-cudnn-frontend": dist("nvidia-cudnn-frontend", "1.27.0")},
                          modules={"cudnn": module("/s/cudnn/__init__.py")})
    # Every wrapper loads; only indexer_forward_wrapper names q_causal_offsets (a frontend before 1.26.0's dense ones).
    results = [{"target": "cudnn:DSA", "ok": True}] + [
        {"target": f"cudnn:DSA.{w}", "ok": True,
         "params": ["q", "q_causal_offsets"] if w == "indexer_forward_wrapper" else ["q"]} for w in KNOWN_WRAPPERS]

    def dsa(sparse: str) -> Result:
        argv = VERL + [f"++{OTC}.dsa_indexer_loss_coeff=0.1", f"++{OTC}.dsa_indexer_use_sparse_loss={sparse}"]
        ctx = StubContext(profile=job_profile(Profile(), argv, None, None), facts=facts,
                          answers={DSA_PROBE.key: {"results": results}},
                          outcomes={"cudnn-fe.version": outcome("cudnn-fe.version", Status.PASS)})
        return run_check(cudnn_fe_checks.cudnn_fe_dsa, ctx)

    unknown = dsa("$SPARSE")
    assert unknown.status is Status.WARN, (unknown.status, unknown.summary)
    assert "the job's command leaves it not known" in unknown.summary
    assert dsa("False").status is Status.FAIL and dsa("True").status is Status.PASS


def test_a_fusion_switch_written_as_a_variable_leaves_the_backend_not_known():
    """TransformerConfig folds apply_dsa_kernel_fusion into an unset or "none" backend, and raises on a conflict
    with a stated one: written as a variable, neither is known."""
    alone = VERL + [f"++{OTC}.apply_dsa_kernel_fusion=$FUSION"]
    assert_not_known(judged("job.dsa-backend", alone),
                     "apply_dsa_kernel_fusion is `$FUSION` in the command: not known here, so the DSA backend")
    decided = job_profile(Profile(), alone, None, None).to_dict()["job"]["dsa_backend_decided"]
    assert decided.startswith("not known: the command writes apply_dsa_kernel_fusion"), decided
    beside = judged("job.dsa-backend", alone + [f"++{OTC}.dsa_kernel_backend=cudnn"])
    assert_not_known(beside, "whether it conflicts with dsa_kernel_backend=cudnn is not known")
    known = judged("job.dsa-backend", VERL + [f"++{OTC}.apply_dsa_kernel_fusion=False",
                                              f"++{OTC}.dsa_kernel_backend=cudnn"])
    assert known.status is Status.FAIL and "Conflicting DSA kernel controls" in known.summary


def test_dynamic_cp_written_as_a_variable_is_not_known_and_fails_nothing_at_cp_1():
    """At CP 1, dynamic CP alone decides whether the CP settings and a packing scheduler apply."""
    cp1 = [a if not a.endswith("context_parallel_size=2") else a[:-1] + "1" for a in VERL]
    argv = cp1 + [f"{ENGINE}.dynamic_context_parallel=$DYNAMIC", f"++{OTC}.moe_token_dispatcher_type=allgather"]
    cp_args = judged("job.cp-args", argv)
    assert_not_known(cp_args, "dynamic_context_parallel is `$DYNAMIC` in the command: not known here")
    assert not cp_args.fixes and "Megatron stops" not in cp_args.summary
    dispatch = judged("job.moe-dispatch", argv)
    assert_not_known(dispatch, "whether the batch is packed (and the dispatcher rule applies to allgather)")
    assert not dispatch.fixes
    on = judged("job.moe-dispatch", cp1 + [f"{ENGINE}.dynamic_context_parallel=True",
                                           f"++{OTC}.moe_token_dispatcher_type=allgather"])
    assert on.status is Status.FAIL and "got 'allgather'" in on.summary


def test_job_env_does_not_pass_one_connection_beside_an_overlap_switch_it_cannot_read():
    argv = ["env", "NCCL_NVLS_ENABLE=0", "CUDA_DEVICE_MAX_CONNECTIONS=1", *VERL]
    unknown = judged("job.env", argv + [f"++{OTC}.overlap_moe_expert_parallel_comm=$OVERLAP"])
    assert_not_known(unknown, "overlap_moe_expert_parallel_comm is `$OVERLAP` in the command: not known here")
    assert judged("job.env", argv).status is Status.PASS
    on = judged("job.env", argv + [f"++{OTC}.overlap_moe_expert_parallel_comm=True"])
    assert on.status is Status.WARN and "needs more than one connection" in on.summary


def test_a_world_size_or_a_length_written_as_a_variable_is_not_known():
    world = MEGATRON[:1] + ["--nnodes", "$NNODES"] + MEGATRON[3:] + CP2
    parallelism = judged("job.parallelism", world)
    assert_not_known(parallelism, "nnodes is `$NNODES` in the command: not known here, so whether TP x PP x CP = 4")
    one_node = judged("job.parallelism", MEGATRON[:1] + MEGATRON[3:] + CP2)  # torchrun's --nnodes defaults to 1
    assert one_node.status is Status.PASS and "divides the 8 GPUs" in one_node.summary, one_node.summary
    unstated = judged("job.parallelism", MEGATRON[:1] + MEGATRON[4:] + CP2)  # no --nproc-per-node: said, TP 1 passes
    assert unstated.status is Status.PASS and "states no node and GPU counts" in unstated.summary, unstated.summary
    dynamic = judged("job.cp-args", [a if a != "2" or i != 2 else "$NNODES" for i, a in enumerate(DYNAMIC)])
    assert dynamic.status is Status.WARN and "DP is not known (nnodes is `$NNODES` in the command)" in \
        dynamic.summary, dynamic.summary
    lengths = VERL + [f"++{OTC}.cp_partition_mode=contiguous", f"++{OTC}.sequence_packing_scheduler=dp_balanced",
                      f"++{OTC}.max_seqlen_per_dp_cp_rank=6144"]
    prompt = judged("job.cp-args", [a if not a.startswith("data.max_prompt") else "data.max_prompt_length=$P"
                                    for a in lengths])
    assert_not_known(prompt, "max_prompt_length is `$P` in the command: not known here, so whether "
                             "max_seqlen_per_dp_cp_rank=6144 covers the longest sample is not known")
    assert judged("job.cp-args", lengths).status is Status.PASS


def test_the_cp_args_block_does_not_count_a_setting_written_as_a_variable_as_lacking():
    from dsv4_doctor.job.settings import comment_lines, section

    profile = job_profile(Profile(), MEGATRON + CP2 + ["--cp-partition-mode", "$MODE"], None, None)
    settings = section(profile.job, profile.cp, [])
    assert settings is not None
    block = settings["cp_args"]
    assert block["not_known"] == ["--cp-partition-mode contiguous"]
    assert block["missing"] == ["--sequence-packing-scheduler dp_balanced"]
    assert ("the command lacks 1 of them; it writes 1 as a variable the doctor cannot resolve (not known: pass the "
            "expanded command)") in comment_lines(settings)
    plain = section(job_profile(Profile(), MEGATRON + CP2 + LAYOUT, None, None).job, 2, [])
    assert plain is not None and "not_known" not in plain["cp_args"]  # absent unless a value is not known
