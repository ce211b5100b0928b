"""The smoke forward on the CPU with the real torch wheel: tier 1 (simulated and 2-process gloo), the negative
control, injected kernel faults, tier 2 against a fake Megatron that mimics the upstream DSv4 layer API, and the
kernel smoke (smoke.dsv4-kernels) against CPU stand-ins of the stack's own CP kernels and the real frontend wheel.

The smoke probes run for real in every test; most judge their answers in this process (probed), and the smoke's
end-to-end cases start the CLI: the two-process gloo run, CP 1 in the default suite, a hang killed at --timeout,
the `check` command's smoke options."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from conftest import has_torch, run_doctor
from fakes import (Env, fake_cudnn_dsa, fake_cutedsl, fake_flash_mla, fake_layout_kernels, fake_megatron_dev,
                   fake_megatron_importable, fake_te)
from probed import judge, judge_all, run_in_process

pytestmark = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")


def smoke(*args: str, sites=(), env=None):
    """`dsv4-doctor smoke` through the CLI."""
    return run_doctor("smoke", "-f", "json", *args, sites=sites, env=env, python=sys.executable, timeout=180)


def thd_cp(sites=(), **options) -> dict:
    """smoke.thd-cp's row as `dsv4-doctor smoke --device cpu` gives it, judged in this process."""
    return judge(list(sites), sys.executable, "smoke.thd-cp", smoke="on", device="cpu", **options)


def deep_thd_cp(sites=(), **options) -> dict:
    """smoke.thd-cp's row as `dsv4-doctor smoke --device cpu --deep` gives it (tier 2 included)."""
    return thd_cp(sites, deep=True, **options)


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
    assert "tier 2 not run (default level)" in row["summary"] and "--deep compares them" in row["summary"]


def test_cpu_smoke_at_cp_1_end_to_end():
    """The default suite's smoke case: the CLI, its probe and the real torch at CP 1, at the default level: no tier 2,
    and the row says what it did not compare and how to ask for it."""
    run = smoke("--cp", "1", "--device", "cpu")
    row = run.check("smoke.thd-cp")
    assert row["status"] == "pass", row["summary"]
    assert row["evidence"]["shape"]["total_rows"] % 1 == 0
    assert run.report["profile"]["deep"] is False and row["evidence"]["level"] == "default"
    assert row["evidence"]["tier2"] is None and "tier2" in row["evidence"]["not_compared"]
    assert ("tier 2 not run (default level): the DSv4 layer and its fused build (cuDNN indexer + FlashMLA) against "
            "the unfused one (forward and backward) were not compared: --deep compares them") in row["summary"]


@pytest.mark.slow
def test_cpu_smoke_at_cp_4():
    row = thd_cp(cp=4)
    assert row["status"] == "pass", row["summary"]
    assert row["evidence"]["shape"]["total_rows"] % 4 == 0


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

    import probe_modules

    sm = probe_modules.load("dsv4probe_smoke_batch")

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
    report = run_in_process([site], sys.executable, ["smoke.thd-cp"], smoke="on", device="cpu", cp=2)
    row = report.to_dict()["checks"][0]
    assert row["status"] == "fail" and expected in row["summary"]
    assert report.exit_code == 1


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
    row = deep_thd_cp(env.sites.values())
    assert row["status"] == "pass", row["summary"]
    assert "DSv4 layer CP=1 packed output = each sequence alone" in row["summary"]
    t2 = row["evidence"]["tier2"]["cp1"]
    # dsa_kernel_backend=cudnn (the default): the shapes the fused kernels take (hidden 512, d_v 512)
    assert t2["ok"] and t2["shape"] == [t2["shape"][0], 1, 512] and t2["settings"]["cp_partition_mode"] == "contiguous"
    assert t2["settings"]["v_head_dim"] == 512 and t2["settings"]["dsa_kernel_backend"] == "cudnn"
    layouts = t2["layouts"]  # the control: two sequences merged into one change the second one's output
    assert layouts["control_separates"] and layouts["control_merged_diff"] > 10 * layouts["tolerance"]
    row = deep_thd_cp(env.sites.values(), cp=2)
    assert row["status"] == "pass", row["summary"]
    cpn = row["evidence"]["tier2"]["cpN"]
    assert cpn["cp"] == 2 and cpn["max_abs_diff_vs_cp1"] == 0.0


@pytest.mark.slow
def test_the_default_level_builds_no_dsv4_layer_even_where_megatron_has_one(tmp_path):
    """Tier 2 is the deep level's: the default smoke finds Megatron's DSv4 layer, builds nothing, and says that
    --deep compares it (no 'not installed' remark, since it is)."""
    env = tier2_env(tmp_path)
    row = thd_cp(env.sites.values(), cp=2)
    assert row["status"] == "pass", row["summary"]
    assert row["evidence"]["tier2"] is None and row["evidence"]["level"] == "default"
    assert row["summary"].endswith("were not compared: --deep compares them"), row["summary"]
    assert "DSv4 layer CP=" not in row["summary"]


@pytest.mark.slow
def test_deep_on_a_stack_without_the_fused_path_says_what_it_could_not_compare(tmp_path):
    """--deep on the CPU (no fused kernels run there) and --deep without Megatron's DSv4 layer: each names the
    comparison it could not make, and why, in the summary and in evidence.not_compared."""
    env = tier2_env(tmp_path)
    row = deep_thd_cp(env.sites.values())
    assert row["status"] == "pass", row["summary"]
    assert row["evidence"]["level"] == "deep" and row["evidence"]["tier2"]["cp1"]["ok"]
    assert ("fused (cuDNN indexer + FlashMLA) vs unfused not compared: the fused DSA kernels (cuDNN indexer, "
            "FlashMLA) run on a CUDA GPU only") in row["summary"], row["summary"]
    assert row["evidence"]["not_compared"] == {"fused_vs_unfused": "the fused DSA kernels (cuDNN indexer, FlashMLA) "
                                                                   "run on a CUDA GPU only"}
    bare = deep_thd_cp()
    assert bare["status"] == "pass", bare["summary"]
    assert ("--deep: no DSv4 layer built, so neither its CP parity nor its fused build (cuDNN indexer + FlashMLA) "
            "against the unfused one (forward and backward) was compared: Megatron-core's DSv4 hybrid attention "
            "(dsv4_hybrid) is not installed") in bare["summary"], bare["summary"]
    assert set(bare["evidence"]["not_compared"]) == {"dsv4_layer", "fused_vs_unfused"}


@pytest.mark.parametrize("mode, text, fix", [
    ("nan", "produced non-finite output", None),
    ("leaky", "packing leaks across sequence boundaries", None),
    ("zigzag-only", "requires cp_partition_mode='contiguous'", "megatron-core @ git+"),
    ("no-te", "No module named 'transformer_engine_missing_in_this_image'", None),
])
@pytest.mark.slow
def test_tier2_failures_become_findings_with_fixes(tmp_path, mode, text, fix):
    env = tier2_env(tmp_path, mode)
    row = deep_thd_cp(env.sites.values(), cp=2)
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
    rows = judge_all(env, sys.executable, ["smoke.thd-cp", "mcore.cp-partition-mode"], cp=2, device="cpu", deep=True)
    assert rows["mcore.cp-partition-mode"]["status"] == "fail"
    row = rows["smoke.thd-cp"]
    assert row["status"] == "pass" and "stopped at" in row["summary"]
    assert "see mcore.cp-partition-mode" in row["summary"]
    alone = judge(env, sys.executable, "smoke.thd-cp", cp=2, device="cpu", deep=True)
    assert alone["status"] == "fail" and "cp_partition_mode" in alone["summary"]  # nobody else reports it


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_tier2_without_te_is_skipped_and_left_to_the_te_rules(tmp_path):
    """Without TE, Megatron swaps its TE classes for Mock stand-ins and the layer fails far from the cause: tier 2
    says it did not run, and te.version carries the finding and its fix."""
    env = Env(tmp_path).fake("megatron", fake_megatron_importable)  # imports transformer_engine, not installed
    rows = judge_all(env, sys.executable, ["smoke.thd-cp", "te.version"], device="cpu", deep=True)
    row = rows["smoke.thd-cp"]
    assert row["status"] == "pass" and "CP=1 skipped: needs Transformer Engine" in row["summary"], row["summary"]
    te = rows["te.version"]
    assert te["status"] == "fail"
    assert any("transformer-engine[pytorch,core_cu13]" in cmd for f in te["fixes"] for cmd in f["commands"])


@pytest.mark.slow
def test_a_large_cp_runs_in_as_many_processes_as_the_machine_holds():
    """CP 16 is a legitimate profile; on a small machine its ranks share a few processes (here at most the CPUs)."""
    import os

    row = thd_cp(cp=16)
    assert row["status"] == "pass", row["summary"]
    dist = row["evidence"]["distributed"]
    assert dist["ran"] and 2 <= dist["processes"] <= max(2, min(os.cpu_count() or 2, 8))
    assert dist["processes"] * dist["ranks_per_process"] == 16
    for kind in ("causal", "window"):
        assert dist["comparisons"][kind]["ok"]


# --- smoke.dsv4-kernels: the stack's own CP kernels, against CPU stand-ins with the upstream signatures ---------------

def kernels(env: Env, **options) -> dict:
    """smoke.dsv4-kernels' row as `check --device cpu --only smoke.dsv4-kernels` gives it, judged in this process."""
    return judge(env, sys.executable, "smoke.dsv4-kernels", device="cpu", **options)


def stack(tmp_path, dsa="ok", layout="ok", **kw) -> Env:
    env = Env(tmp_path)
    if dsa:
        env.fake("fe", fake_cudnn_dsa, dsa)
    if layout:
        env.fake("megatron", fake_layout_kernels, layout, **kw)
    return env


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_the_right_kernels_pass_with_their_controls(tmp_path):
    row = kernels(stack(tmp_path), cp=2)
    assert row["status"] == "pass", row["summary"]
    runs = row["evidence"]["subruns"]
    dsa, layout = runs["dsa"], runs["layout"]
    assert dsa["status"] == "pass" and layout["status"] == "pass"
    ev = dsa["evidence"]
    assert ev["ranks_simulated"] == 2
    assert all(r["masks_identical"] and not r["nan"] for r in ev["ranks"])
    crossing = [r for r in ev["ranks"] if any(o > 0 for o in r["q_causal_offsets"])]
    assert crossing and ev["control"]["masks_differ"]  # zero offsets on a crossing sequence change the mask
    assert ev["control"]["finite_with_zero_offsets"] < ev["control"]["finite_with_offsets"]
    assert layout["evidence"]["control_separates"] and len(layout["evidence"]["ranks"]) == 2
    assert all(r["compact_forward_exact"] and r["compact_backward_exact"] for r in layout["evidence"]["ranks"])
    assert runs["csa"]["status"] == "skip" and runs["flashmla"]["status"] == "skip"
    assert "see kernels.flash-mla" in runs["flashmla"]["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
def test_the_evidence_names_the_seed_incidents_packages_the_megatron_commit_and_each_first_call(tmp_path):
    env = stack(tmp_path).wheel("tvm", "apache-tvm-ffi-0.1.11").fake("cutedsl", fake_cutedsl, "4.5.2")
    runs = kernels(env, cp=2)["evidence"]["subruns"]
    for name in ("dsa", "layout"):
        assert runs[name]["status"] == "pass", runs[name]
        assert runs[name]["evidence"]["packages"] == {"apache-tvm-ffi": "0.1.11", "nvidia-cutlass-dsl": "4.5.2"}
    layout = runs["layout"]["evidence"]
    # fake_megatron_dev's direct_url.json, read because that distribution is the tree the file came from
    assert layout["megatron_commit"] == "fd1121b8ff7e3a4f83a28d35aed172d7bc0260e1"
    assert layout["megatron_commit_from"] == "direct_url.json"
    first = layout["first_call_s"]
    assert set(first) == {"compact_forward", "compact_backward", "indices all visible", "indices top-k"}
    assert all(isinstance(v, float) and v >= 0 for v in first.values()) and layout["jit_s"] == first["compact_forward"]
    assert all(set(r["call_s"]) == set(first) for r in layout["ranks"])


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
def test_the_megatron_commit_comes_from_the_trees_git_head_without_running_git(tmp_path):
    """A submodule checkout (Megatron-Bridge's 3rdparty/Megatron-LM): .git is a `gitdir:` file, HEAD names a branch
    whose commit is only in packed-refs; the tree's HEAD wins over a distribution's direct_url.json. Without either,
    "unknown"."""
    env = stack(tmp_path, dsa=None)
    tree = env.sites["megatron"]
    sha = "d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1"
    (tree / ".git").write_text("gitdir: ../modules/Megatron-LM\n")
    gitdir = tmp_path / "modules" / "Megatron-LM"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/dev\n")
    (gitdir / "packed-refs").write_text(f"# pack-refs with: peeled\n{'0' * 40} refs/heads/main\n{sha} refs/heads/dev\n")
    layout = kernels(env, cp=2)["evidence"]["subruns"]["layout"]["evidence"]
    assert layout["megatron_commit"] == sha and layout["megatron_commit_from"] == str(tree / ".git")
    (tree / ".git").unlink()
    for d in tree.glob("megatron_core-*.dist-info"):
        (d / "direct_url.json").unlink()
    layout = kernels(env, cp=2)["evidence"]["subruns"]["layout"]["evidence"]
    assert layout["megatron_commit"] == "unknown" and layout["megatron_commit_from"] is None


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_at_cp1_the_indexer_still_sees_two_ranks_and_the_layout_kernels_skip(tmp_path):
    row = kernels(stack(tmp_path), cp=1)
    assert row["status"] == "pass", row["summary"]
    runs = row["evidence"]["subruns"]
    assert runs["dsa"]["evidence"]["ranks_simulated"] == 2
    assert runs["layout"]["status"] == "skip" and "not used at CP 1" in runs["layout"]["summary"]
    # the summary (what the text report prints) says what ran and why the rest did not
    assert row["summary"].startswith("ran cuDNN-FE DSA indexer forward: "), row["summary"]
    assert "Megatron CP layout kernels did not run: not used at CP 1" in row["summary"], row["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
@pytest.mark.parametrize("mode, text", [("no-offsets", "a different -inf mask"), ("nan", "NaN scores")])
def test_a_wrong_indexer_fails_and_points_at_the_frontend_reinstall(tmp_path, mode, text):
    row = kernels(stack(tmp_path, dsa=mode, layout=None), cp=2)
    assert row["status"] == "fail" and text in row["summary"] and "cudnn-fe.dsa" in row["summary"], row["summary"]
    assert "seed incident" in row["details"]
    commands = [c for f in row["fixes"] for c in f["commands"]]
    assert any("nvidia-cudnn-frontend" in c and "--force-reinstall" in c for c in commands), commands


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
@pytest.mark.parametrize("mode", ["sm90-1.26", "none-recompiles"])
def test_the_indexer_call_fits_every_frontend_and_never_passes_none_offsets(tmp_path, mode):
    """sm90-1.26: frontend 1.26.0's SM90 indexer takes 32 or 64 query heads, not 16 (H200, 2026-12-01); the smoke uses
    DSv4's 64. none-recompiles: the control passes zeros, never None (None compiles a second kernel on the real
    frontend): a regression to None raises here."""
    row = kernels(stack(tmp_path, dsa=mode, layout=None), cp=2)
    dsa = row["evidence"]["subruns"]["dsa"]
    assert dsa["status"] == "pass", dsa["summary"]
    assert dsa["evidence"]["shapes"]["q"][1] == 64 and dsa["evidence"]["control"]["masks_differ"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
@pytest.mark.parametrize("branch", ["nv_dev", "main"])
def test_flashmla_is_called_as_megatron_calls_it(tmp_path, branch):
    """Megatron d48bd6be passes indexer_topk=0 on its training paths and unpacks (out, max_logits, lse): an nv_dev
    FlashMLA passes; one built from main has no indexer_topk, a skip pointing at kernels.flash-mla (which fails on
    it), not a second finding."""
    env = stack(tmp_path, dsa="ok", layout=None).fake("flash_mla", fake_flash_mla, branch)
    row = kernels(env, cp=1)
    fm = row["evidence"]["subruns"]["flashmla"]
    if branch == "nv_dev":
        assert fm["status"] == "pass", fm["summary"]
        ev = fm["evidence"]
        assert ev["returned"] == 3 and ev["indexer_topk"] == 0
        assert ev["shape"] == ev["expected_shape"] == [4, 64, 512] and ev["lse_shape"] == [4, 64]
        assert row["status"] == "pass" and "flash_mla_sparse_fwd(indexer_topk=0)" in row["summary"]
    else:
        assert fm["status"] == "skip" and fm["rule"] == "kernels.flash-mla", fm
        assert "takes no indexer_topk" in fm["summary"] and fm["summary"].endswith(": see kernels.flash-mla")
        assert row["status"] == "pass"  # the DSA indexer passed; FlashMLA's finding is kernels.flash-mla's


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_a_layout_kernel_off_by_one_at_a_rank_boundary_fails(tmp_path):
    row = kernels(stack(tmp_path, dsa=None, layout="off-by-one"), cp=2)
    assert row["status"] == "fail", row["summary"]
    assert "CP layout kernels differ from the reference on CP rank 1 of 2" in row["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_an_indexer_whose_output_equals_the_control_is_an_error(tmp_path):
    row = kernels(stack(tmp_path, dsa="sticky-offsets", layout=None), cp=2)
    assert row["status"] == "error" and "negative control did not separate" in row["summary"], row["summary"]


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays within 120 s on 2 cores
def test_missing_packages_skip_to_their_rules_and_a_raising_call_fails(tmp_path):
    row = kernels(Env(tmp_path), cp=2)
    # no DSv4 kernel ran: not a pass of the smoke, and the summary says why each did not run
    assert row["status"] == "warn" and row["summary"].startswith("no DSv4 kernel ran"), row["summary"]
    assert "DSA indexer forward did not run:" in row["summary"], row["summary"]
    runs = row["evidence"]["subruns"]
    assert "see cudnn-fe.version" in runs["dsa"]["summary"] and "see mcore.dsv4" in runs["layout"]["summary"]
    assert runs["csa"]["rule"] is None and runs["flashmla"]["rule"] == "kernels.flash-mla"
    # each skip's pointer is in the details line too (what the text renderer shows)
    assert row["details"] == ("Sub-runs: cuDNN-FE DSA indexer forward: skip (see cudnn-fe.version); Megatron CP layout "
                              "kernels: skip (see mcore.dsv4); fused CSA compressor: skip; FlashMLA sparse forward: "
                              "skip (see kernels.flash-mla); fused MLA RoPE: skip (see mcore.dsv4)"), row["details"]
    raising = kernels(stack(tmp_path / "t", dsa="tvm", layout=None), cp=2)
    assert raising["status"] == "fail" and "ModuleNotFoundError" in raising["summary"]
    assert "tvm_ffi" in raising["summary"]
    assert any("apache-tvm-ffi" in c for f in raising["fixes"] for c in f["commands"])


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
def test_layout_kernels_without_tvm_ffi_fail_with_the_tvm_ffi_fix_not_cutlass_or_megatron(tmp_path):
    """H200, 2026-12-01: the layout kernels (compiled with --enable-tvm-ffi) raised ModuleNotFoundError for tvm_ffi at
    the first call. The rule and fix follow the missing module (tier 2's mapping), not the sub-run's default."""
    row = kernels(stack(tmp_path, dsa=None, layout="tvm"), cp=2)
    assert row["status"] == "fail", row["summary"]
    assert row["summary"].startswith("Megatron CP layout kernels (tvm-ffi.version): "), row["summary"]
    assert "No module named 'tvm_ffi'" in row["summary"]
    assert row["evidence"]["subruns"]["layout"]["rule"] == "tvm-ffi.version"
    commands = [c for f in row["fixes"] for c in f["commands"]]
    assert commands and all("apache-tvm-ffi" in c for c in commands), commands
    assert not any("nvidia-cutlass-dsl" in c or "megatron-core" in c for c in commands), commands
    assert "seed incident" not in row["details"]


@pytest.mark.parametrize("mode, status, text", [
    ("ok", "pass", "the fused CSA compressor matches the eager reference"),
    ("no-overlap", "fail", "the fused CSA compressor differs from the eager reference by"),
    ("sticky-ape", "error", "the negative control did not separate"),
])
@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
def test_the_csa_compressor_runs_for_a_b200_profile_at_cp1(tmp_path, mode, status, text):
    """--gpu-arch 10.0 --cp 1 (backend cudnn) is the profile Megatron uses the fused compressor for; on the CPU the
    stand-in of frontend 1.27.0's cudnn.csa.compressor.csa_compressor_forward_wrapper runs in its place."""
    env = Env(tmp_path).fake("fe", fake_cudnn_dsa, "ok", csa=mode)
    row = kernels(env, cp=1, gpu_arch="10.0")
    csa = row["evidence"]["subruns"]["csa"]
    assert csa["status"] == status and text in csa["summary"], csa
    assert row["status"] == status and text in row["summary"], row["summary"]
    ev = csa["evidence"]
    assert ev["kernel"] == "cudnn.csa.compressor.csa_compressor_forward_wrapper" and ev["coff"] == 2
    if mode == "ok":
        assert ev["max_abs_error"] <= ev["tolerance"] < ev["control_error"]
    if mode == "no-overlap":
        assert "(cudnn-fe.csa)" in row["summary"]
        assert any("nvidia-cudnn-frontend" in c for f in row["fixes"] for c in f["commands"])
    if mode == "sticky-ape":
        assert ev["control_error"] == 0.0


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
@pytest.mark.parametrize("gate, status", [("d48bd6be", "skip"), ("88a285f0", "pass")])
def test_the_csa_compressor_sub_run_follows_the_installed_megatron_gate_on_b300(tmp_path, gate, status):
    """CC 10.3: d48bd6be's gate (== 10.0) keeps the eager compressor, so the sub-run says so; 88a285f0's (major >= 10)
    uses the fused one, so it runs."""
    env = Env(tmp_path).fake("fe", fake_cudnn_dsa, "ok", csa="ok")
    env.fake("megatron", lambda s: fake_megatron_dev(s, compressor_gate=gate))
    csa = kernels(env, cp=1, gpu_arch="10.3")["evidence"]["subruns"]["csa"]
    assert csa["status"] == status, csa
    if status == "skip":
        assert "(compute capability == 10.0) rejects compute capability 10.3" in csa["summary"], csa


def test_the_csa_stand_in_has_the_real_wheels_signature(tmp_path):
    """The stand-in's parameters (names, order, defaults) are those of the published frontend 1.27.0's wrapper."""
    import ast

    from wheels import ensure

    def params(path):
        tree = ast.parse(path.read_text())
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                  and n.name == "csa_compressor_forward_wrapper")
        defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
        return [(a.arg, d) for a, d in zip(fn.args.args, defaults, strict=True)]

    real = ensure("nvidia-cudnn-frontend-1.27.0") / "cudnn" / "csa" / "compressor" / "api.py"
    fake = Env(tmp_path).fake("fe", fake_cudnn_dsa, csa="ok").sites["fe"] / "cudnn" / "csa" / "compressor" / "api.py"
    assert params(fake) == params(real) and params(real)[0] == ("kv", None)


def shadowed(env: Env, component: str = "megatron") -> Path:
    """verl's image: megatron.core imports from a PYTHONPATH tree while pip's megatron-core sits elsewhere. Moves the
    component's megatron-core dist-info to a site-packages of its own; returns the tree."""
    tree = env.sites[component]
    site = env.root / "installed" / "site-packages"
    site.mkdir(parents=True)
    for d in tree.glob("megatron_core-*.dist-info"):
        shutil.move(str(d), str(site / d.name))
    env.sites["installed"] = site
    return tree


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
def test_a_layout_fix_names_the_pythonpath_copy_that_shadows_the_installed_megatron(tmp_path):
    env = stack(tmp_path, dsa=None, layout="off-by-one")
    tree = shadowed(env)
    row = kernels(env, cp=2)
    assert row["status"] == "fail", row["summary"]
    ids = [f["id"] for f in row["fixes"]]
    assert any(i.startswith("mcore-shadowed:") for i in ids) and "mcore" not in ids, ids
    fix = next(f for f in row["fixes"] if f["id"].startswith("mcore-shadowed:"))
    # pip cannot reach the copy the job imports: a typed path step naming it, and no pip command
    assert str(tree) in fix["description"] and not fix["commands"], fix
    assert fix["action"]["kind"] == "replace-copy" and fix["action"]["path"].startswith(str(tree)), fix
    # the installed distribution's direct_url.json is not the commit of the tree that ran
    assert row["evidence"]["subruns"]["layout"]["evidence"]["megatron_commit"] == "unknown"


@pytest.mark.slow
def test_a_tier2_megatron_fix_names_the_shadowing_copy(tmp_path):
    env = tier2_env(tmp_path, "zigzag-only")
    tree = shadowed(env)
    row = deep_thd_cp(env.sites.values(), cp=2)
    assert row["status"] == "fail" and "requires cp_partition_mode='contiguous'" in row["summary"], row["summary"]
    fix = next(f for f in row["fixes"] if f["id"].startswith("mcore-shadowed:"))
    assert str(tree) in fix["description"] and fix["action"]["kind"] == "replace-copy", fix


@pytest.mark.slow
def test_the_older_layout_kernel_path_is_found(tmp_path):
    row = kernels(stack(tmp_path, dsa=None, old_path=True), cp=2)
    layout = row["evidence"]["subruns"]["layout"]
    assert layout["status"] == "pass" and layout["evidence"]["megatron_file"].endswith("csa_cp_layout_kernels.py")


@pytest.mark.slow
def test_the_real_frontend_wheel_on_the_cpu_is_a_skip_never_a_pass(tmp_path):
    """The published frontend 1.27.0 (with tvm-ffi and the CuTe DSL meta wheel, no GPU): its DSA kernels cannot run
    here, which is a skip that says why, not a pass and not a doctor error. What happens: indexer_forward's api.py
    imports cuda.bindings.driver, and cuda-python is absent (the meta wheel's libraries, which would bring it, are not
    cached: 79 MB), so the wrapper does not resolve; a missing cuda-python is cutlass-dsl.import's finding, not a CUDA
    refusal ("needs CUDA") and not cudnn-fe.dsa's."""
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("cutedsl", "nvidia-cutlass-dsl-4.5.2")
    row = kernels(env, cp=2)
    dsa = row["evidence"]["subruns"]["dsa"]
    assert dsa["status"] == "skip", dsa
    assert dsa["summary"] == ("cudnn.DSA.indexer_forward_wrapper does not resolve (ModuleNotFoundError: No module "
                              "named 'cuda'): see cutlass-dsl.import"), dsa["summary"]
    assert dsa["rule"] == "cutlass-dsl.import" and dsa["error"]["missing_module"] == "cuda"


def test_a_missing_module_named_cuda_is_not_read_as_a_cuda_refusal():
    """In-process: the probe's CPU "needs CUDA" skip is for a kernel refusing CPU tensors, never for an ImportError."""
    import probe_modules

    pk = probe_modules.load("dsv4probe_kernels_dispatch")

    assert not pk._needs_cuda(ModuleNotFoundError("No module named 'cuda'", name="cuda"))
    assert not pk._needs_cuda(ImportError("cannot import name 'driver' from 'cuda.bindings'"))
    assert pk._needs_cuda(RuntimeError("Expected all tensors to be on CUDA"))
    assert pk._needs_cuda(AssertionError("q must be a cuda tensor"))


def test_megatrons_dependency_message_maps_to_the_rule_of_the_package_it_names():
    """H200, 2026-12-01: tier 2 with the cudnn backend stopped at Megatron's dependency check naming flash_mla; the
    finding is kernels.flash-mla's, not cudnn-fe.dsa's (which passed there)."""
    from dsv4_doctor.checks.smoke._causes import tier2_rules

    m8 = ("dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: "
          "flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev). Install them or set "
          "dsa_kernel_backend=none to use the PyTorch fallback.")
    assert tier2_rules({"type": "ValueError", "message": m8}) == ["kernels.flash-mla", "cudnn-fe.dsa"]
    both = m8.replace("flash_mla (", "cudnn-frontend DSA (nvidia-cudnn-frontend[cutedsl]), flash_mla (")
    assert set(tier2_rules({"type": "ValueError", "message": both})) == {"kernels.flash-mla", "cudnn-fe.dsa"}
