"""The kernel smoke's fused MLA RoPE sub-run (checks/smoke/dsv4probe_kernels_rope.py): when it runs (the job's
apply_rope_fusion as the command or the bridge decides), its comparison and control with the real torch on the CPU,
and the row and fix it feeds. The real kernel is triton on a GPU: here a Megatron tree whose RoPE modules compute the
kernel's arithmetic on CPU tensors with the upstream signatures (tests/fakes_rope.py) stands in; the GPU run is
docs/gpu-runs/2026-12-07-gpu-v3/cases-rope.sh."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import has_torch
from dsv4_doctor.api import Phase, rope_fusion
from dsv4_doctor.job.command import parse
from fakes import Env
from fakes_rope import fake_megatron_rope
from probed import judge

VERL = ["python3", "-m", "verl.trainer.main_ppo"]
OFF_VERL = "++actor_rollout_ref.actor.megatron.override_transformer_config.apply_rope_fusion=False"

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")


def kernels(env: Env, **options) -> dict:
    """smoke.dsv4-kernels' row on the CPU, judged in this process; --dsa-backend none: only the RoPE sub-run (and
    the layout one at CP > 1) applies."""
    return judge(env, sys.executable, "smoke.dsv4-kernels", device="cpu", dsa_backend="none", **options)


def rope_env(tmp_path, mode="ok") -> Env:
    return Env(tmp_path).fake("megatron", fake_megatron_rope, mode)


# ------------------------------------------------------------------------------------------- when it runs

@pytest.mark.parametrize("argv, on, source", [
    (None, True, "no job"),
    (VERL + ["data.max_prompt_length=512"], True, "default"),
    (VERL + [OFF_VERL], False, "command"),
    (VERL + [OFF_VERL.replace("False", "True")], True, "command"),
    (VERL + [OFF_VERL.replace("False", "${oc.env:ROPE}")], None, "not known"),
    (["pretrain_gpt.py", "--no-rope-fusion"], False, "command"),
    (["pretrain_gpt.py", "--context-parallel-size", "2"], True, "default"),
])
def test_apply_rope_fusion_as_the_command_or_the_bridge_decides(argv, on, source):
    decided = rope_fusion(parse(argv) if argv else None)
    assert (decided.on, decided.source) == (on, source), decided
    if source == "command":
        assert "apply_rope_fusion=" in decided.why or "--no-rope-fusion" in decided.why
    assert decided.runs is (on is not False)
    if source in ("no job", "default") and argv and argv[0] != "pretrain_gpt.py" or source == "no job":
        assert "deepseek_v4_bridge.py L428" in decided.why


def test_the_stack_settings_probe_decides_where_it_built_the_config():
    job = parse(VERL)
    job.built = {"status": "built", "roles": {"actor": {"settings": {"apply_rope_fusion": False}}}}
    decided = rope_fusion(job)
    assert (decided.on, decided.source) == (False, "stack") and "as Megatron-Core built" in decided.why


def test_job_stack_config_names_a_rope_fusion_the_stack_built_otherwise():
    """The sub-run is decided from the command before the settings probe answers: where the stack built another
    apply_rope_fusion, job.stack-config says so (a stated value: a difference; a default: checked as the stricter)."""
    from dsv4_doctor.job.rope import rope_differs

    built = {"status": "built", "roles": {"actor": {"settings": {"apply_rope_fusion": False}}}}
    readers = parse(VERL)
    stack = parse(VERL)
    stack.built = built
    stated, unknown = rope_differs(readers, stack)
    assert stated == [] and len(unknown) == 1 and "the stack built False" in unknown[0]
    readers = parse(VERL + [OFF_VERL.replace("False", "True")])
    stack = parse(VERL + [OFF_VERL.replace("False", "True")])
    stack.built = built
    assert len(rope_differs(readers, stack)[0]) == 1
    stack.built = {"status": "built", "roles": {"actor": {"settings": {"apply_rope_fusion": True}}}}
    assert rope_differs(readers, stack) == ([], [])


@pytest.mark.parametrize("argv, line", [
    (VERL, OFF_VERL),
    (["pretrain_gpt.py", "--context-parallel-size", "2"], "--no-rope-fusion"),
    (None, None),
])
def test_the_fix_is_the_workaround_in_the_commands_own_syntax(argv, line):
    from dsv4_doctor.checks.smoke.rope import rope_off_fix

    fix = rope_off_fix(parse(argv) if argv else None)
    assert fix.phase == Phase.SETTING and not fix.commands and "Megatron-Bridge #4321" in fix.description
    if line:
        assert fix.description.endswith("\n  " + line) and fix.key == "job:" + line
    else:  # no command: every syntax's line, in prose
        assert "model.apply_rope_fusion=False" in fix.description and "--no-rope-fusion" in fix.description


# ------------------------------------------------------------------------------ comparison, verdict, control

@needs_torch
def test_the_comparison_detects_a_nan_an_inf_and_a_mismatch_and_the_control_must_fail_it():
    import torch

    import probe_modules

    rope = probe_modules.load("dsv4probe_kernels_rope")
    want = torch.randn(64, 4, 512).to(torch.bfloat16)
    same = rope.difference(torch, want.clone(), want)
    assert same["ok"] and same["max_abs"] == 0.0 and same["rel_l2"] == 0.0
    for bad in (float("nan"), float("inf")):
        got = want.clone()
        got[3, 1, 500] = bad
        d = rope.difference(torch, got, want)
        assert not d["ok"] and not d["finite"] and "non-finite" in d["why"]
    off = rope.difference(torch, want + 0.5, want)
    assert not off["ok"] and off["max_abs"] == pytest.approx(0.5, abs=0.02) and "tolerance" in off["why"]
    ok = [dict(same, rope="window", tensor="query", direction="forward")]
    status, summary, ev = rope.verdict(ok, dict(off), {})
    assert status == "pass" and ev["control_failed_comparison"] is True, summary
    status, summary, ev = rope.verdict(ok, dict(same), {})  # a control that passes: the comparison proves nothing
    assert status == "error" and "negative control did not separate" in summary
    status, summary, _ = rope.verdict(ok + [dict(d, rope="compressed", tensor="key", direction="backward",
                                                 cp_rank=1)], dict(off), {})
    assert status == "fail" and "NaN/inf" in summary and "key backward (compressed rope, CP rank 1)" in summary


@needs_torch
@pytest.mark.parametrize("cp", [1, 3])
def test_the_batch_fills_whole_ranks_and_crosses_a_boundary(cp):
    import probe_modules

    rope = probe_modules.load("dsv4probe_kernels_rope")
    lens, cu, total = rope.batch_layout(cp)
    assert cu[-1] == total == sum(lens) and total % cp == 0 and total >= rope.MIN_ROWS and min(lens) > 0
    rows = total // cp
    assert cp == 1 or any(cu[i] < rows < cu[i + 1] for i in range(len(lens)))


# ------------------------------------------------------------------------------ the sub-run through the doctor

@needs_torch
@pytest.mark.slow  # a torch probe in a subprocess
@pytest.mark.parametrize("cp", [1, 2])
def test_the_rope_subrun_passes_with_its_control(tmp_path, cp):
    row = kernels(rope_env(tmp_path), cp=cp)
    rope = row["evidence"]["subruns"]["rope"]
    assert rope["status"] == "pass", rope["summary"]
    ev = rope["evidence"]
    assert len(ev["comparisons"]) == 2 * 2 * 2 * cp  # 2 rotary tables x query/key x forward/backward x ranks
    assert all(c["ok"] and c["max_abs"] <= ev["tolerances"]["max_abs"] for c in ev["comparisons"])
    assert ev["control_failed_comparison"] and not ev["control"]["ok"] and ev["control"]["max_abs"] > 1
    assert ev["rotary_percent"] == 1.0 and "#4271" in ev["rotary_percent_from"]
    assert ev["shapes"]["query"] == [1024 // cp, 64, 512] and ev["shapes"]["nope_dim"] == 448
    assert ("cp_rank" in ev["comparisons"][0]) is (cp > 1)
    assert row["evidence"]["rope_fusion"]["source"] == "no job"
    assert "fused MLA RoPE: pass" in row["details"]
    json.dumps(row)  # the report carries it as plain data


@needs_torch
@pytest.mark.slow  # a torch probe in a subprocess
@pytest.mark.parametrize("mode, said", [("nan", "NaN/inf"), ("off-by-one", "a mismatch")])
def test_a_nan_or_a_mismatch_fails_with_the_workaround(tmp_path, mode, said):
    row = kernels(rope_env(tmp_path, mode), cp=1)
    assert row["status"] == "fail", row["summary"]
    assert row["summary"].startswith("fused MLA RoPE (kernels.triton): the fused MLA RoPE gives " + said)
    assert "Megatron-Bridge #4321" in row["details"]
    fix = row["fixes"][0]
    assert fix["phase"] == Phase.SETTING.value and "apply_rope_fusion=False" in fix["description"]
    assert "--no-rope-fusion" in fix["description"] and "Megatron-Bridge #4321" in fix["description"]


@needs_torch
@pytest.mark.slow  # a torch probe in a subprocess
def test_a_verl_job_gets_its_own_line_and_a_job_that_turns_it_off_runs_no_rope(tmp_path):
    env = rope_env(tmp_path, "nan")
    row = kernels(env, cp=1, job_args=VERL)
    assert row["status"] == "fail" and row["fixes"][0]["description"].endswith("\n  " + OFF_VERL)
    row = kernels(env, cp=1, job_args=VERL + [OFF_VERL])  # and with --dsa-backend none at CP 1 no other sub-run
    assert row["status"] == "skip", row
    assert ("fused MLA RoPE: apply_rope_fusion=False: the command turns it off (apply_rope_fusion=False); the fused "
            "MLA RoPE is not used") in row["summary"]


@needs_torch
@pytest.mark.slow  # a torch probe in a subprocess
def test_no_triton_behind_the_kernel_is_a_skip_to_kernels_triton(tmp_path):
    rope = kernels(rope_env(tmp_path, "no-triton"), cp=1)["evidence"]["subruns"]["rope"]
    assert rope["status"] == "skip" and rope["rule"] == "kernels.triton", rope
    assert rope["summary"].endswith(": see kernels.triton")
