"""Rulebook v3, the installed gates: the fused CSA compressor's CC gate read from the installed Megatron file (both
styles upstream has shipped), the cuDNN frontend's accepted CCs read from its installed cudnn/csa/compressor files
(real 1.27.0 and 1.28.0 wheels), and cudnn.csa judged on every profile. Judged in this process over real probe
answers (probed); the gates read end to end and the hostile gate through the CLI."""

from __future__ import annotations

import pytest

from fakes import Env, fake_megatron_dev, healthy
from probed import judge, judge_in_run
from test_rules import assert_moved_aside, commands, fix_turns_green, reaching, run

FE_128_FIX = "pip install --force-reinstall --no-deps nvidia-cudnn-frontend==1.28.0"
RAISES_103 = ("RuntimeError: CSA compressor requires compute capability (10, 0) (the only validated architecture so "
              "far), found SM10.3 on cuda:0")


def newer_gate(site):  # Megatron-LM 88a285f0: major >= 10, CP pre-grouped buffers too
    fake_megatron_dev(site, compressor_gate="88a285f0")


def csa(env: Env, python: str, **options) -> dict:
    return judge(env, python, "cudnn-fe.csa", **options)


def test_the_gates_are_read_from_the_installed_files(tmp_path, bare_python):
    """End to end: both gates read from the installed files, through the CLI."""
    row = run(healthy(tmp_path), bare_python, "--only", "cudnn-fe.csa", "--gpu-arch", "10.0").check("cudnn-fe.csa")
    assert row["status"] == "pass", row
    gate = row["evidence"]["megatron_gate"]
    assert gate["rule"] == "compute capability == 10.0" and gate["where"].endswith("fused_compressor.py:12")
    fe = row["evidence"]["frontend_gate"]
    assert fe["rule"] == "compute capability == 10.0" and fe["where"].endswith("cudnn/csa/compressor/api.py:324")
    env = healthy(tmp_path).fake("megatron", newer_gate).wheel("fe", "nvidia-cudnn-frontend-1.28.0")
    row = csa(env, bare_python, gpu_arch="10.3")
    assert row["status"] == "pass", row
    assert row["evidence"]["megatron_gate"]["rule"] == "compute capability major >= 10"
    assert row["evidence"]["frontend_gate"]["rule"] == "compute capability major >= 10"


def test_cc_10_3_with_the_newer_gate_fails_on_frontend_1_27_with_its_exception_and_pins_1_28(tmp_path, bare_python):
    env = healthy(tmp_path).fake("megatron", newer_gate)
    row = csa(env, bare_python, gpu_arch="10.3")
    assert row["status"] == "fail", row
    assert RAISES_103 in row["summary"]
    # The job imports 1.27.0 from its `pip install --target` folder on PYTHONPATH: the pin is installed into it.
    fe = env.sites["fe"]
    assert reaching(FE_128_FIX, fe) in commands(row)
    assert_moved_aside(row, "cudnn", fe / "nvidia_cudnn_frontend-1.27.0.dist-info")
    assert "1.28.0 is the first release" in row["details"]


def test_cc_10_3_with_d48bd6bes_gate_is_a_note_not_a_pass(tmp_path, bare_python):
    row = csa(healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0"), bare_python, gpu_arch="10.3")
    assert row["status"] == "skip"
    assert "compute capability == 10.0" in row["summary"] and "rejects it" in row["summary"]
    assert "nvidia-cudnn-frontend 1.26.0 has no cudnn.csa" in row["summary"]


def test_frontend_1_26_with_the_cc_not_known_warns_naming_the_gpus(tmp_path, bare_python):
    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    row = csa(env, bare_python)
    assert row["status"] == "warn", row
    assert row["summary"].startswith("GPU arch not known")
    assert "at CP 1 on B200/GB200 (10.0)" in row["summary"] and "has no cudnn.csa" in row["summary"]
    row = csa(env.fake("megatron", newer_gate), bare_python, cp=2)
    assert row["status"] == "warn" and "B200/GB200 (10.0) and B300/GB300 (10.3)" in row["summary"]
    assert "at CP 1" not in row["summary"]


def test_frontend_1_27_with_the_cc_not_known_warns_where_its_gate_is_narrower(tmp_path, bare_python):
    env = healthy(tmp_path).fake("megatron", newer_gate)
    row = csa(env, bare_python)
    assert row["status"] == "warn", row
    assert "on compute capability 10.3" in row["summary"] and RAISES_103 in row["summary"]
    fe = env.sites["fe"]  # 1.27.0 in its `pip install --target` folder on PYTHONPATH: the pin goes there
    assert reaching(FE_128_FIX, fe) in commands(row)
    assert_moved_aside(row, "cudnn", fe / "nvidia_cudnn_frontend-1.27.0.dist-info")
    assert csa(healthy(tmp_path), bare_python)["status"] == "pass"  # d48bd6be: 10.0 only, which 1.27.0 accepts


@pytest.mark.parametrize("gate, status", [("d48bd6be", "skip"), ("88a285f0", "fail")])
def test_cp_2_on_b200_follows_the_installed_dispatch(tmp_path, bare_python, gate, status):
    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    env.fake("megatron", lambda s: fake_megatron_dev(s, compressor_gate=gate))
    row = csa(env, bare_python, gpu_arch="10.0", cp=2)
    assert row["status"] == status, row
    if status == "fail":
        assert "has no cudnn.csa" in row["summary"]


def test_with_the_cc_not_known_the_fix_pins_a_frontend_every_gpu_the_installed_gate_admits_accepts(tmp_path,
                                                                                                     bare_python):
    # An image built once for B200 and B300 under Megatron 88a285f0's gate: 1.27.0 would raise on 10.3.
    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0").drop("tvm").fake("megatron", newer_gate)
    row = csa(env, bare_python)
    assert row["status"] == "warn", row
    fe = env.sites["fe"]  # 1.26.0 in its `pip install --target` folder on PYTHONPATH: the pin goes there
    assert reaching(FE_128_FIX, fe) in commands(row)
    assert not any("nvidia-cudnn-frontend==1.27.0" in c for c in commands(row)), commands(row)
    assert_moved_aside(row, "cudnn", fe / "nvidia_cudnn_frontend-1.26.0.dist-info")
    fix_turns_green(env, bare_python, "cudnn-fe.csa")
    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0").drop("tvm").fake("megatron", newer_gate)
    assert reaching(FE_128_FIX, env.sites["fe"]) in commands(judge_in_run(env, bare_python, "deps.consistency"))


def test_gpu_arch_does_not_state_d48bd6bes_cp_rule_as_every_megatrons(tmp_path, bare_python):
    row = judge(healthy(tmp_path).fake("megatron", newer_gate), bare_python, "gpu.arch", gpu_arch="10.0", cp=2)
    assert "at any CP with a Megatron whose gate admits CC major >= 10" in row["summary"], row


HOSTILE_GATE = '''import torch

_SUPPORTED_COMPUTE_CAPABILITY = ("\\x1b]52;c;ZXZpbA==\\x07", "::error::pwned $(touch /tmp/dsv4-pwned)")


def fused_compressor_available(device=None):
    index = torch.cuda.current_device()
    return torch.cuda.get_device_capability(index) == _SUPPORTED_COMPUTE_CAPABILITY
'''


def hostile_gate(site):
    fake_megatron_dev(site)
    site.file("megatron/core/transformer/experimental_attention_variant/csa_utils/fused_compressor.py", HOSTILE_GATE)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_gate_that_is_no_capability_is_not_known_and_never_reaches_the_output_raw(tmp_path, bare_python, fmt):
    env = healthy(tmp_path).fake("megatron", hostile_gate)
    out = env.doctor("check", "-f", fmt, "--only", "cudnn-fe.csa", "--gpu-arch", "10.3", python=bare_python).stdout
    assert "\x1b" not in out and not any(line.startswith("::error::") for line in out.splitlines())
    row = csa(env, bare_python, gpu_arch="10.3")
    assert row["evidence"]["megatron_gate"] == "not known (its comparison could not be read)"
    # Where the known gates differ (10.3: d48bd6be rejects, 88a285f0 admits), a gate not read is no pass.
    assert row["status"] == "warn" and "is not known (its gate could not be read)" in row["summary"], row
