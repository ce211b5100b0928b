"""The smoke forward on the CPU with the real torch wheel: tier 1 (simulated and 2-process gloo), the negative
control, injected kernel faults, tier 2 against a fake Megatron that mimics the upstream DSv4 layer API, and the
kernel smoke (smoke.dsv4-kernels) against CPU stand-ins of the stack's own CP kernels and the real frontend wheel."""

from __future__ import annotations

import sys

import pytest

from conftest import has_torch, run_doctor
from fakes import Env, fake_cudnn_dsa, fake_layout_kernels, fake_megatron_importable, fake_te

pytestmark = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")


def smoke(*args: str, sites=(), env=None):
    return run_doctor("smoke", "-f", "json", *args, sites=sites, env=env, python=sys.executable, timeout=180)


@pytest.mark.slow
def test_cpu_smoke_two_gloo_processes():
    result = smoke("--cp", "2", "--device", "cpu")
    row = result.check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    assert result.returncode == 0
    ev = row["evidence"]
    assert ev["device"]["type"] == "cpu" and ev["cp"] == 2
    lens, rows = ev["shape"]["sequence_lengths"], ev["shape"]["rows_per_rank"]
    assert min(lens) < ev["shape"]["window"]  # one sequence shorter than the window
    assert max(lens) > rows  # one spans more than one rank
    assert ev["shape"]["total_rows"] % 2 == 0 and ev["shape"]["total_rows"] > ev["shape"]["real_rows"]
    for kind in ("causal", "window"):
        cmp_ = ev["comparisons"][kind]
        assert cmp_["finite"] and cmp_["max_abs_error"] <= cmp_["tolerance"] == 2e-2
        assert cmp_["negative_control_zigzag_error"] > 10 * cmp_["tolerance"]
        assert "sdpa per segment" in ev["backend"][kind]
    assert ev["comparisons"]["window"]["reference_window_vs_causal"] > 0.2  # the window really masks
    dist = ev["distributed"]
    assert dist["ran"] and dist["process_backend"] == "gloo" and dist["exit_codes"] == [0, 0]
    for kind in ("causal", "window"):
        assert dist["comparisons"][kind]["ok"]
        assert dist["comparisons"][kind]["max_abs_diff_vs_single_device"] <= 2e-2
    assert set(ev["timing"]) >= {"library_load_s", "first_kernel_call_s", "compute_s", "total_s"}
    assert "tier 2 (DSv4 layer) not run" in row["summary"]


@pytest.mark.parametrize("cp", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_cpu_smoke_other_cp_sizes(cp):
    row = smoke("--cp", str(cp), "--device", "cpu").check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    assert row["evidence"]["shape"]["total_rows"] % cp == 0


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_check_skips_the_smoke_without_a_gpu_and_runs_it_with_device_cpu():
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", python=sys.executable)
    row = run.check("smoke.thd-cp")
    assert row["status"] == "skip" and "--device cpu runs it on the CPU" in row["summary"]
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", "--no-smoke", "--device", "cpu",
                     python=sys.executable)
    assert run.check("smoke.thd-cp")["summary"] == "--no-smoke"
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", "--device", "cpu", python=sys.executable)
    assert run.check("smoke.thd-cp")["status"] == "pass"


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_negative_control_and_a_wrong_layout_are_detected():
    """In-process: keys cut to the rank's own rows (no all-gather) must fail the comparison."""
    import torch

    from pathlib import Path

    import dsv4_doctor.checks.smoke as smoke_pkg
    from dsv4_doctor.probes import PROBE_DIR

    sys.path[:0] = [str(PROBE_DIR), str(Path(smoke_pkg.__file__).parent)]
    import dsv4probe_smoke as sm

    device = torch.device("cpu")
    batch = sm.make_batch(torch, 2, device)
    attention = sm.Attention(torch, device)
    rows = batch["total"] // 2
    ref = sm.reference(torch, batch, "causal")
    right = torch.cat([sm.rank_forward(torch, attention, batch, "causal", r, rows, batch["k"], batch["v"], 0)
                       for r in range(2)])
    assert sm.compare(torch, right, ref, batch["real"])["max_abs_error"] <= sm.TOLERANCE
    wrong = []
    for r in range(2):  # each rank sees only its own keys: what a missing all-gather would compute
        lo, hi = r * rows, (r + 1) * rows
        local_k = torch.zeros_like(batch["k"])
        local_v = torch.zeros_like(batch["v"])
        local_k[lo:hi], local_v[lo:hi] = batch["k"][lo:hi], batch["v"][lo:hi]
        wrong.append(sm.rank_forward(torch, attention, batch, "causal", r, rows, local_k, local_v, 0))
    assert sm.compare(torch, torch.cat(wrong), ref, batch["real"])["max_abs_error"] > 10 * sm.TOLERANCE
    zig = sm.compare(torch, sm.zigzag_reassembly(torch, right, 2), ref, batch["real"])["max_abs_error"]
    assert zig > 10 * sm.TOLERANCE


PATCH_SDPA = """
import torch.nn.functional as F
_real = F.scaled_dot_product_attention
def _patched(*args, **kwargs):
    return _real(*args, **kwargs) {op}
F.scaled_dot_product_attention = _patched
"""


@pytest.mark.parametrize("op, expected", [("* float('nan')", "produced non-finite values"),
                                          ("+ 0.25", "differs from the float32 reference by")])
@pytest.mark.slow
def test_a_broken_kernel_fails_the_smoke(tmp_path, op, expected):
    """sitecustomize patches SDPA in the probe's interpreter: a NaN-producing or inaccurate kernel."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import torch\n" + PATCH_SDPA.format(op=op))
    result = smoke("--cp", "2", "--device", "cpu", sites=(site,))
    row = result.check("smoke.thd-cp")
    assert row["status"] == "fail" and expected in row["summary"]
    assert result.returncode == 1


@pytest.mark.slow
def test_smoke_that_hangs_is_killed_at_the_timeout(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import torch, time\n" + PATCH_SDPA.format(op="").replace(
        "return _real", "time.sleep(600); return _real"))
    result = run_doctor("smoke", "-f", "json", "--device", "cpu", "--timeout", "8", sites=(site,),
                        python=sys.executable, timeout=120)
    row = result.check("smoke.thd-cp")
    assert row["status"] == "error" and "timed out after 8 s" in row["summary"]
    assert result.seconds < 40


# --- tier 2: the DSv4 layer, against a fake that mimics Megatron's API -----------------------------------------------

def tier2_env(tmp_path, mode="ok"):
    return Env(tmp_path).fake("megatron", fake_megatron_importable, mode=mode).fake("te", fake_te)


@pytest.mark.slow
def test_tier2_layer_runs_at_cp1_and_cp2_with_parity(tmp_path):
    env = tier2_env(tmp_path)
    row = smoke("--device", "cpu", sites=tuple(env.sites.values())).check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    assert "DSv4 layer CP=1 packed output = each sequence alone" in row["summary"]
    t2 = row["evidence"]["tier2"]["cp1"]
    assert t2["ok"] and t2["shape"] == [t2["shape"][0], 1, 256] and t2["settings"]["cp_partition_mode"] == "contiguous"
    layouts = t2["layouts"]  # the control: two sequences merged into one change the second one's output
    assert layouts["control_separates"] and layouts["control_merged_diff"] > 10 * layouts["tolerance"]
    row = smoke("--cp", "2", "--device", "cpu", sites=tuple(env.sites.values())).check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    cpn = row["evidence"]["tier2"]["cpN"]
    assert cpn["cp"] == 2 and cpn["max_abs_diff_vs_cp1"] == 0.0


@pytest.mark.parametrize("mode, text, fix", [
    ("nan", "produced non-finite output", None),
    ("leaky", "packing leaks across sequence boundaries", None),
    ("zigzag-only", "requires cp_partition_mode='contiguous'", "megatron-core @ git+"),
    ("no-te", "No module named 'transformer_engine_missing_in_this_image'", None),
])
@pytest.mark.slow
def test_tier2_failures_become_findings_with_fixes(tmp_path, mode, text, fix):
    env = tier2_env(tmp_path, mode)
    row = smoke("--cp", "2", "--device", "cpu", sites=tuple(env.sites.values())).check("smoke.thd-cp")
    assert row["status"] == "fail" and text in row["summary"], row["summary"]
    if mode == "nan":
        assert "dsa_kernel_backend=cudnn" in row["details"]
    if fix:
        assert any(fix in cmd for f in row["fixes"] for cmd in f["commands"])


@pytest.mark.slow
def test_a_tier2_failure_a_static_rule_already_reports_is_left_to_it(tmp_path):
    """A release's PackedSeqParams has no cp_partition_mode: mcore.cp-partition-mode fails with its fix, and the smoke
    says where the layer stopped instead of repeating the finding."""
    env = tier2_env(tmp_path, "no-field")
    report = run_doctor("check", "-f", "json", "--cp", "2", "--device", "cpu", "--only",
                        "smoke.thd-cp,mcore.cp-partition-mode", sites=tuple(env.sites.values()),
                        python=sys.executable, timeout=180)
    assert report.check("mcore.cp-partition-mode")["status"] == "fail"
    row = report.check("smoke.thd-cp")
    assert row["status"] == "pass" and "stopped at" in row["summary"]
    assert "see mcore.cp-partition-mode" in row["summary"]
    alone = run_doctor("check", "-f", "json", "--cp", "2", "--device", "cpu", "--only", "smoke.thd-cp",
                       sites=tuple(env.sites.values()), python=sys.executable, timeout=180).check("smoke.thd-cp")
    assert alone["status"] == "fail" and "cp_partition_mode" in alone["summary"]  # nobody else reports it


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_tier2_without_te_is_skipped_and_left_to_the_te_rules(tmp_path):
    """Without TE, Megatron swaps its TE classes for Mock stand-ins and the layer fails far from the cause: tier 2
    says it did not run, and te.version carries the finding and its fix."""
    env = Env(tmp_path).fake("megatron", fake_megatron_importable)  # imports transformer_engine, not installed
    report = run_doctor("check", "-f", "json", "--device", "cpu", "--only", "smoke.thd-cp", "--only", "te.version",
                        sites=tuple(env.sites.values()), python=sys.executable, timeout=180)
    row = report.check("smoke.thd-cp")
    assert row["status"] == "pass" and "CP=1 skipped: needs Transformer Engine" in row["summary"], row["summary"]
    te = report.check("te.version")
    assert te["status"] == "fail"
    assert any("transformer-engine[pytorch,core_cu13]" in cmd for f in te["fixes"] for cmd in f["commands"])


@pytest.mark.slow
def test_a_large_cp_runs_in_as_many_processes_as_the_machine_holds():
    """CP 16 is a legitimate profile; on a small machine its ranks share a few processes (here at most the CPUs)."""
    import os

    row = smoke("--cp", "16", "--device", "cpu").check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    dist = row["evidence"]["distributed"]
    assert dist["ran"] and 2 <= dist["processes"] <= max(2, min(os.cpu_count() or 2, 8))
    assert dist["processes"] * dist["ranks_per_process"] == 16
    for kind in ("causal", "window"):
        assert dist["comparisons"][kind]["ok"]


# --- smoke.dsv4-kernels: the stack's own CP kernels, against CPU stand-ins with the upstream signatures ---------------

def kernels(env: Env, *args: str) -> dict:
    run = run_doctor("check", "-f", "json", "--device", "cpu", "--only", "smoke.dsv4-kernels", *args,
                     sites=tuple(env.sites.values()), python=sys.executable, timeout=180)
    row = run.check("smoke.dsv4-kernels")
    return row


def stack(tmp_path, dsa="ok", layout="ok", **kw) -> Env:
    env = Env(tmp_path)
    if dsa:
        env.fake("fe", fake_cudnn_dsa, dsa)
    if layout:
        env.fake("megatron", fake_layout_kernels, layout, **kw)
    return env


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_the_right_kernels_pass_with_their_controls(tmp_path):
    row = kernels(stack(tmp_path), "--cp", "2")
    assert row["status"] == "pass", row["summary"]
    runs = row["evidence"]["subruns"]
    dsa, layout = runs["dsa"], runs["layout"]
    assert dsa["status"] == "pass" and layout["status"] == "pass"
    ev = dsa["evidence"]
    assert ev["ranks_simulated"] == 2 and ev["masks_identical"] if "masks_identical" in ev else True
    assert all(r["masks_identical"] and not r["nan"] for r in ev["ranks"])
    crossing = [r for r in ev["ranks"] if any(o > 0 for o in r["q_causal_offsets"])]
    assert crossing and ev["control"]["masks_differ"]  # zero offsets on a crossing sequence change the mask
    assert ev["control"]["finite_with_zero_offsets"] < ev["control"]["finite_with_offsets"]
    assert layout["evidence"]["control_separates"] and len(layout["evidence"]["ranks"]) == 2
    assert all(r["compact_forward_exact"] and r["compact_backward_exact"] for r in layout["evidence"]["ranks"])
    assert runs["csa"]["status"] == "skip" and runs["flashmla"]["status"] == "skip"
    assert "see kernels.flash-mla" in runs["flashmla"]["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_at_cp1_the_indexer_still_sees_two_ranks_and_the_layout_kernels_skip(tmp_path):
    row = kernels(stack(tmp_path), "--cp", "1")
    assert row["status"] == "pass", row["summary"]
    runs = row["evidence"]["subruns"]
    assert runs["dsa"]["evidence"]["ranks_simulated"] == 2
    assert runs["layout"]["status"] == "skip" and "not used at CP 1" in runs["layout"]["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
@pytest.mark.parametrize("mode, text", [("no-offsets", "a different -inf mask"), ("nan", "NaN scores")])
def test_a_wrong_indexer_fails_and_points_at_the_frontend_reinstall(tmp_path, mode, text):
    row = kernels(stack(tmp_path, dsa=mode, layout=None), "--cp", "2")
    assert row["status"] == "fail" and text in row["summary"] and "cudnn-fe.dsa" in row["summary"], row["summary"]
    assert "seed incident" in row["details"]
    commands = [c for f in row["fixes"] for c in f["commands"]]
    assert any("nvidia-cudnn-frontend" in c and "--force-reinstall" in c for c in commands), commands


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_a_layout_kernel_off_by_one_at_a_rank_boundary_fails(tmp_path):
    row = kernels(stack(tmp_path, dsa=None, layout="off-by-one"), "--cp", "2")
    assert row["status"] == "fail", row["summary"]
    assert "CP layout kernels differ from the reference on CP rank 1 of 2" in row["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_an_indexer_whose_output_equals_the_control_is_an_error(tmp_path):
    row = kernels(stack(tmp_path, dsa="sticky-offsets", layout=None), "--cp", "2")
    assert row["status"] == "error" and "negative control did not separate" in row["summary"], row["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_missing_packages_skip_to_their_rules_and_a_raising_call_fails(tmp_path):
    row = kernels(Env(tmp_path), "--cp", "2")
    assert row["status"] == "skip", row["summary"]
    runs = row["evidence"]["subruns"]
    assert "see cudnn-fe.version" in runs["dsa"]["summary"] and "see mcore.dsv4" in runs["layout"]["summary"]
    raising = kernels(stack(tmp_path / "t", dsa="tvm", layout=None), "--cp", "2")
    assert raising["status"] == "fail" and "ModuleNotFoundError" in raising["summary"]
    assert "tvm_ffi" in raising["summary"]
    assert any("apache-tvm-ffi" in c for f in raising["fixes"] for c in f["commands"])


@pytest.mark.slow
def test_the_older_layout_kernel_path_is_found(tmp_path):
    row = kernels(stack(tmp_path, dsa=None, old_path=True), "--cp", "2")
    layout = row["evidence"]["subruns"]["layout"]
    assert layout["status"] == "pass" and layout["evidence"]["megatron_file"].endswith("csa_cp_layout_kernels.py")


@pytest.mark.slow
def test_the_real_frontend_wheel_on_the_cpu_is_a_skip_never_a_pass(tmp_path):
    """The published frontend 1.27.0 (with tvm-ffi and the CuTe DSL meta wheel, no GPU): its DSA kernels cannot run
    here, which is a skip that says why, not a pass and not a doctor error."""
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("cutedsl", "nvidia-cutlass-dsl-4.5.2")
    row = kernels(env, "--cp", "2")
    dsa = row["evidence"]["subruns"]["dsa"]
    assert dsa["status"] == "skip", dsa
    assert "needs CUDA" in dsa["summary"] or "see cudnn-fe" in dsa["summary"], dsa["summary"]


def test_megatrons_dependency_message_maps_to_the_rule_of_the_package_it_names():
    """H200, 2026-12-01: tier 2 with the cudnn backend stopped at Megatron's dependency check naming flash_mla; the
    finding is kernels.flash-mla's, not cudnn-fe.dsa's (which passed there)."""
    from dsv4_doctor.checks.smoke.thd_cp import tier2_rules

    m8 = ("dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: "
          "flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev). Install them or set "
          "dsa_kernel_backend=none to use the PyTorch fallback.")
    assert tier2_rules({"type": "ValueError", "message": m8}) == ["kernels.flash-mla", "cudnn-fe.dsa"]
    both = m8.replace("flash_mla (", "cudnn-frontend DSA (nvidia-cudnn-frontend[cutedsl]), flash_mla (")
    assert set(tier2_rules({"type": "ValueError", "message": both})) == {"kernels.flash-mla", "cudnn-fe.dsa"}
