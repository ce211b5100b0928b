"""The smoke forward on the CPU with the real torch wheel: tier 1 (simulated and 2-process gloo), the negative
control, injected kernel faults, and tier 2 against a fake Megatron that mimics the upstream DSv4 layer API."""

from __future__ import annotations

import sys

import pytest

from conftest import has_torch, run_doctor
from fakes import Env, fake_megatron_importable, fake_te

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


@pytest.mark.parametrize("cp", [1, 4])
def test_cpu_smoke_other_cp_sizes(cp):
    row = smoke("--cp", str(cp), "--device", "cpu").check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    assert row["evidence"]["shape"]["total_rows"] % cp == 0


def test_check_skips_the_smoke_without_a_gpu_and_runs_it_with_device_cpu():
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", python=sys.executable)
    row = run.check("smoke.thd-cp")
    assert row["status"] == "skip" and "--device cpu runs it on the CPU" in row["summary"]
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", "--no-smoke", "--device", "cpu",
                     python=sys.executable)
    assert run.check("smoke.thd-cp")["summary"] == "--no-smoke"
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", "--device", "cpu", python=sys.executable)
    assert run.check("smoke.thd-cp")["status"] == "pass"


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
