"""Tier 2's fused-vs-unfused comparison: the tolerance, the comparison and its control in-process, and the two
builds as real processes against the fake Megatron (its DSv4 layer API, differentiable, on the CPU)."""

import time

import pytest

from conftest import has_torch
from fakes import Env, fake_flash_mla, fake_megatron_importable, fake_te
import probe_modules

pytestmark = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")


def probe_module():
    return probe_modules.load("dsv4probe_smoke_tolerances")


def saved(torch, scale=1.0, grad_scale=1.0, control=1.5, weights=None):
    gen = torch.Generator().manual_seed(7)
    out = torch.randn(64, 1, 32, generator=gen)
    grads = {"grad.input": torch.randn(64, 1, 32, generator=gen), "grad.w": torch.randn(32, 32, generator=gen)}
    return {"tensors": {"output": out * scale, **{k: v * grad_scale for k, v in grads.items()}},
            "weights": weights or {"w": "1.0"}, "control": {"output": out * control, "perturbed": "w x 1.25"}}


def test_the_tolerance_is_derived_from_bf16_and_stated():
    sm = probe_module()
    tol = sm.fused_tolerances()
    # 8 bf16 roundings (u = 2^-8) on the longest path, in each of two builds; gradients twice that
    assert tol["forward"] == 2 * 8 * 2.0 ** -8 == 0.0625 and tol["backward"] == 0.125
    assert "u = 2^-8" in tol["derivation"] and "%.4g" % tol["forward"] in tol["derivation"]


def test_same_builds_pass_and_the_control_separates():
    import torch

    sm = probe_module()
    cmp_ = sm.compare_builds(torch, saved(torch), saved(torch))
    assert cmp_["ok"] and cmp_["control"]["separates"] and cmp_["worst"]["rel_l2"] == 0.0
    assert set(cmp_["tensors"]) == {"output", "grad.input", "grad.w"}


@pytest.mark.parametrize("change, key", [
    (dict(scale=1.0 + 2 * 0.0625), "over_tolerance"),  # the output off by twice the forward tolerance
    (dict(grad_scale=1.0 + 2 * 0.125), "over_tolerance"),  # gradients off by twice the backward tolerance
    (dict(grad_scale=float("nan")), "nonfinite"),
])
def test_a_difference_beyond_the_tolerance_or_a_nan_fails(change, key):
    import torch

    sm = probe_module()
    cmp_ = sm.compare_builds(torch, saved(torch, **change), saved(torch))
    assert not cmp_["ok"] and cmp_[key]


def test_just_inside_the_tolerance_passes():
    import torch

    sm = probe_module()
    tol = sm.fused_tolerances()
    cmp_ = sm.compare_builds(torch, saved(torch, scale=1 + 0.9 * tol["forward"], grad_scale=1 + 0.9 * tol["backward"]),
                             saved(torch))
    assert cmp_["ok"], cmp_["over_tolerance"]


def test_a_control_that_does_not_separate_or_other_weights_make_the_comparison_invalid():
    import torch

    sm = probe_module()
    assert not sm.compare_builds(torch, saved(torch, control=1.0), saved(torch))["ok"]
    other = sm.compare_builds(torch, saved(torch, weights={"w": "2.0"}), saved(torch))
    assert not other["ok"] and "same weights" in other["problems"][0]
    missing = saved(torch)
    del missing["tensors"]["grad.w"]
    assert "grad.w exists only in the unfused build" in sm.compare_builds(torch, missing, saved(torch))["problems"]


def run_builds(tmp_path, mode, timeout_s=60.0, te=True, deadline_s=120.0):
    import os

    import torch

    from dsv4_doctor.engine.probes import PROBE_DIR

    sm = probe_modules.load("dsv4probe_smoke_fused")
    env = Env(tmp_path / "env").fake("megatron", fake_megatron_importable, mode=mode)
    if te:
        env.fake("te", fake_te)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(p) for p in env.sites.values()] + [str(PROBE_DIR)])
    try:
        outdir = tmp_path / "out"
        outdir.mkdir()
        t0 = time.monotonic()
        builds = sm.start_fused_builds({"build_device": "cpu", "build_timeout_s": timeout_s}, str(outdir))
        result = sm.finish_fused_builds(torch, builds, t0 + deadline_s, timeout_s=timeout_s)
        return result, time.monotonic() - t0
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old


def test_the_cudnn_layer_has_a_head_count_flashmla_accepts(tmp_path):
    """FlashMLA's sparse forward has only 64- and 128-head tiles (b7643bd5 csrc/api/sparse_fwd.h): tier 2's cudnn
    layer (the fused build and the packed-vs-alone runs) must use one, or every complete stack fails on the doctor's
    own test shape. The fake refuses other counts as upstream does, and takes the layer's q/k and v head dims."""
    import importlib.util

    import torch

    sm = probe_module()
    Env(tmp_path).fake("flash_mla", fake_flash_mla)
    path = tmp_path / "flash_mla" / "flash_mla" / "flash_mla_interface.py"
    spec = importlib.util.spec_from_file_location("fake_flash_mla_interface", path)
    assert spec and spec.loader
    iface = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(iface)
    settings = sm.FUSED_SETTINGS
    d_qk = 448 + 64  # the layer's qk_head_dim + qk_pos_emb_head_dim: FlashMLA's 512

    def call(heads):
        q = torch.randn(4, heads, d_qk).to(torch.bfloat16)
        kv = torch.randn(8, 1, d_qk).to(torch.bfloat16)
        indices = torch.arange(4, dtype=torch.int32).expand(4, 1, 4).contiguous()
        return iface.flash_mla_sparse_fwd(q, kv, indices, d_qk ** -0.5, d_v=settings["v_head_dim"])

    out = call(settings["num_attention_heads"])
    assert list(out[0].shape) == [4, settings["num_attention_heads"], settings["v_head_dim"]]
    with pytest.raises(RuntimeError, match="Unsupported h_q: 16"):
        call(16)


@pytest.mark.slow
def test_two_real_build_processes_agree_and_their_control_separates(tmp_path):
    result, _ = run_builds(tmp_path, "ok")
    assert result["ok"], result
    fused = result["builds"]["fused"]
    assert fused["settings"]["dsa_kernel_backend"] == "cudnn" and result["builds"]["unfused"]["settings"][
        "dsa_kernel_backend"] == "none"
    assert fused["settings"]["dsa_indexer_topk"] >= fused["settings"]["max_compressed_length"]
    assert {"first_forward_s", "first_backward_s", "steady_forward_s", "steady_backward_s"} <= set(fused)
    # no CuTe DSL kernel in the CPU stand-in: counted, and none
    assert fused["cute_dsl_cache"]["first_step"] == {"read_from_cache": 0, "compiled_and_written": 0, "lookups": 0,
                                                "compiled_cache_bypassed": 0, "served_by_store": 0, "stored": 0}
    cmp_ = result["comparison"]
    assert {"output", "grad.input", "grad.proj.weight"} <= set(cmp_["tensors"])
    assert cmp_["control"]["separates"] and cmp_["control"]["rel_l2"] > cmp_["tolerances"]["forward"]


@pytest.mark.slow
@pytest.mark.parametrize("mode, key", [("fused-drift", "over_tolerance"), ("fused-nan-grad", "nonfinite")])
def test_a_fused_build_that_drifts_or_gives_nan_gradients_fails(tmp_path, mode, key):
    result, _ = run_builds(tmp_path, mode)
    assert not result["ok"] and result["comparison"][key], result["comparison"]
    if mode == "fused-nan-grad":
        assert result["comparison"]["tensors"]["output"]["ok"]  # the forward agrees; only the backward is wrong
        assert not result["comparison"]["tensors"]["grad.input"]["finite"]


@pytest.mark.slow
def test_a_hung_fused_backward_is_killed_at_its_timeout_and_is_a_finding(tmp_path, monkeypatch):
    from dsv4_doctor.checks.smoke._tier2 import fused_result

    said: list[str] = []  # what the smoke probe says while it waits: the live display's row for smoke.thd-cp
    monkeypatch.setattr(probe_modules.load("dsv4probe_smoke_fused"), "stage", said.append)
    result, took = run_builds(tmp_path, "fused-hang", timeout_s=15.0)
    assert result["builds"]["fused"]["hang"] and result["builds"]["unfused"]["ok"]
    assert took < 30
    assert "tier 2: fused build at forward+backward, unfused build done" in said
    assert said[-1] == "tier 2: fused build stopped at its limit, unfused build done"
    row = fused_result(None, result, {})
    assert row.status.value == "fail" and "hung" in row.summary and "#676" in row.details
    # The unfused build runs no cuDNN kernel: a hang there is no #676 finding.
    swapped = dict(result, builds={"fused": result["builds"]["unfused"], "unfused": result["builds"]["fused"]})
    row = fused_result(None, swapped, {})
    assert row.status.value == "fail" and "unfused" in row.summary and "#676" not in row.details


@pytest.mark.slow
@pytest.mark.parametrize("mode, timeout_s, deadline_s", [("slow-start", 8.0, 120.0), ("fused-hang", 60.0, 10.0)])
def test_a_build_stopped_before_its_kernels_ran_or_by_the_probe_s_deadline_is_no_hang(tmp_path, mode, timeout_s,
                                                                                        deadline_s):
    """A build still importing at its limit (a cold TE + megatron.core), or one cut short by the probe's own
    deadline, proves nothing about the kernels: no hang finding, and the row says the comparison was not made."""
    from dsv4_doctor.checks.smoke._tier2 import fused_result

    result, took = run_builds(tmp_path, mode, timeout_s=timeout_s, deadline_s=deadline_s)
    fused = result["builds"]["fused"]
    assert not fused["hang"] and fused.get("timed_out"), fused
    if mode == "slow-start":
        assert fused["stage"] == "import" and not result["builds"]["unfused"]["hang"]
    assert took < 30
    row = fused_result(None, result, {})
    assert row.status.value == "error" and "no proven hang" in row.summary and "#676" not in row.details


@pytest.mark.slow
def test_without_te_the_builds_are_skipped_and_left_to_the_te_rules(tmp_path):
    result, _ = run_builds(tmp_path, "ok", te=False)
    assert result["skipped"].startswith("needs Transformer Engine (see te.version and te.import)")
    assert "comparison" not in result and "ok" not in result


def _stand_in(monkeypatch, *sites):
    """hadamard_stand_in() with only `sites` besides the test environment on sys.path, and what
    `fast_hadamard_transform` then computes on a 4-element vector; whatever it registered is gone afterwards."""
    import importlib
    import sys

    for site in sites:
        monkeypatch.syspath_prepend(str(site))
    for name in ("fast_hadamard_transform", "dsv4doctor_verl_mcore_patch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()
    out = probe_module_tier2().hadamard_stand_in()
    try:
        import torch

        module = importlib.import_module("fast_hadamard_transform")
        out["h"] = module.hadamard_transform(torch.tensor([[1.0, 2.0, 3.0, 4.0]])).tolist()
    except ImportError as exc:
        out["h"] = type(exc).__name__
    finally:
        for name in ("fast_hadamard_transform", "dsv4doctor_verl_mcore_patch"):
            sys.modules.pop(name, None)
    return out


def probe_module_tier2():
    probe_modules.common()
    return probe_modules.load("dsv4probe_smoke_tier2")


@pytest.mark.skipif(not has_torch(), reason="needs torch")
def test_without_fast_hadamard_tier2_runs_on_verls_own_shim_as_a_verl_job_does(monkeypatch):
    """verl's apply_patch installs a pure-torch fast_hadamard_transform before it builds the model: the tier-2 layer
    gets the same (from the real verl 0.9.0 file, loaded by path), and says so; without verl, nothing stands in."""
    from wheels import ensure

    alone = _stand_in(monkeypatch)
    assert alone == {"fast_hadamard_transform": "missing", "h": "ModuleNotFoundError"}
    with_verl = _stand_in(monkeypatch, ensure("verl-0.9.0"))
    assert with_verl["fast_hadamard_transform"] == "verl shim", with_verl
    assert with_verl["verl_patch"].endswith("verl/models/mcore/patch.py")
    assert with_verl["h"] == [[10.0, -2.0, -4.0, 0.0]]  # H4 @ [1, 2, 3, 4], unscaled


def test_the_smoke_summary_says_when_a_build_ran_on_verls_shim():
    from dsv4_doctor.checks.smoke._tier2 import describe_tier2

    installed = {"fast_hadamard_transform": "installed"}
    t2 = {"cp1": {"layouts": {"max_abs_diff_packed_vs_alone": 0.0}, "hadamard": installed}}
    assert "shim" not in describe_tier2(t2)
    t2["fused"] = {"skipped": "x", "builds": {"fused": {"hadamard": {"fast_hadamard_transform": "verl shim"}}}}
    assert "verl's pure-torch shim, as verl's apply_patch installs it" in describe_tier2(t2)


def test_the_smoke_summary_says_which_level_ran_and_what_it_did_not_compare():
    """The default level says that the fused layer was not compared and that --deep compares it; --deep on a stack
    without the DSv4 layer or the fused path says what it could not compare, and why."""
    from dsv4_doctor.checks.smoke._tier2 import deep_not_compared, describe_tier2

    default = describe_tier2({}, deep=False, found=True)
    assert "tier 2 not run (default level)" in default and "fused build (cuDNN indexer + FlashMLA)" in default
    assert default.endswith("were not compared: --deep compares them")
    assert describe_tier2({}, deep=False, found=False).endswith(
        "--deep compares them where Megatron-core's dsv4_hybrid is installed (it is not here)")
    assert deep_not_compared(False, {}) == {"tier2": "the default level runs no tier 2: --deep runs it"}
    assert "no DSv4 layer built" in describe_tier2({}) and "not installed" in describe_tier2({})
    t2 = {"cp1": {"layouts": {"max_abs_diff_packed_vs_alone": 0.0}},
          "fused": {"skipped": "dsa_kernel_backend=none: the job does not run the fused DSA kernels"}}
    assert ("fused (cuDNN indexer + FlashMLA) vs unfused not compared: dsa_kernel_backend=none: the job does not run "
            "the fused DSA kernels") in describe_tier2(t2)
    assert deep_not_compared(True, {"tier2": t2}) == {"fused_vs_unfused": t2["fused"]["skipped"]}
    assert deep_not_compared(True, {"tier2": {"cp1": {"ok": True}, "fused": {"comparison": {}}}}) == {}


def test_across_fleet_ranks_the_cp_n_words_are_the_same_whatever_each_rank_measured():
    """Each fleet rank compares its own rows of the CP=N output, so the figures differ by rank (they did on CI's
    CPU): the summary says the bound they met, so that the fleet merge gives one group, not one per figure."""
    from dsv4_doctor.checks.smoke._tier2 import describe_tier2

    def on_rank(diff: float) -> dict:
        return {"cp1": {"layouts": {"max_abs_diff_packed_vs_alone": 2e-3}},
                "cpN": {"cp": 2, "max_abs_diff_vs_cp1": diff, "parity_tolerance": 2e-2}}

    assert describe_tier2(on_rank(0.0), fleet=True) == describe_tier2(on_rank(3.1e-7), fleet=True)
    assert "CP=2 = CP=1 (max |diff| <= 0.02 on each rank's own rows)" in describe_tier2(on_rank(0.0), fleet=True)
    # One process group on one host: its own figure, as before.
    assert "CP=2 = CP=1 (max |diff| 3.1e-07)" in describe_tier2(on_rank(3.1e-7))
