"""benchmarks/bench_check.py --full: which goals a stack is judged by, and where a check's time goes, read from the
reports the H200 runs wrote (docs/gpu-runs/2026-12-02-h200-b/bench/full, the complete stack)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H200_WARM = ROOT / "docs" / "gpu-runs" / "2026-12-02-h200-b" / "bench" / "full" / "warm-0.json"


def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_check
    finally:
        sys.path.pop(0)
    return bench_check


def test_each_stack_is_judged_by_its_own_goals_only():
    """The H200 complete-stack run of 2026-12-03 (--deep: 53.6 s cold, 58.4 s warm, floors 4.74 s and 16.83 s): the
    import-floor goals are judged, the torch floor's 2x goal (the partial stack's) is not; without TE the import
    floor fails, and only the torch-floor goal is judged."""
    b = bench()
    assert b.stack_of({}) == "complete"
    assert b.stack_of({"import floor": "exit 1: ModuleNotFoundError: transformer_engine"}) == "partial"
    ratios = {"deep_cold_vs_import_floor": 53.6 / 16.83, "deep_warm_vs_import_floor": 58.4 / 16.83,
              "default_warm_vs_import_floor": 19.08 / 17.76, "deep_warm_vs_torch_floor": 58.4 / 4.74}
    complete = {key: (goal, met) for key, _, goal, met in b.judge(ratios, "complete")}
    assert complete == {"deep_cold_vs_import_floor": (2.5, False), "deep_warm_vs_import_floor": (2.3, False),
                        "default_warm_vs_import_floor": (1.3, True), "deep_warm_vs_torch_floor": (None, None)}
    partial = {"default_warm_vs_torch_floor": 15.3 / 8.0, "default_cold_vs_import_floor": None,
               "deep_cold_vs_torch_floor": 18.5 / 8.0}
    assert {k: (g, m) for k, _, g, m in b.judge(partial, "partial")} == {
        "default_warm_vs_torch_floor": (2.0, True), "deep_cold_vs_torch_floor": (None, None)}
    assert set(b.ROWS) == {"torch_floor", "import_floor", "default_cold", "default_cold_warmed", "default_warm",
                           "deep_cold", "deep_cold_warmed", "deep_warm"}


def test_where_the_time_goes_names_every_check_tier_2s_builds_and_each_kernels_first_call(tmp_path):
    b = bench()
    where = b.where_time_goes(str(H200_WARM))
    assert len(where["checks"]) == 25 and where["checks"][0] == ("smoke.thd-cp", "pass", 36.556)
    text = "\n".join(b.where_lines(where))
    assert "  smoke.thd-cp                 pass  36.56s" in text
    assert "tier 2 fused build: 45.94s (import 16.14s, first forward 16.20s, first backward 12.45s" in text
    assert "kernel sub-run layout: pass 16.69s (import torch + CUDA set-up -)" in text
    assert "    its own process (top-k): part 11.29s wall" in text
    assert ("build_attention_indices (top-k): first call 2.00s, steady 0.00s [its own (top-k) process]: compiled "
            "in-process, every run: 1 module(s) by cute.compile") in text
    assert "flash_mla_sparse_fwd: first call 0.00s, steady -: not a CuTe DSL compile" in text
    # Reports from the current probes also carry each process's `import torch` and CUDA set-up.
    report = json.loads(H200_WARM.read_text())
    kernels = next(c for c in report["checks"] if c["id"] == "smoke.dsv4-kernels")
    layout = kernels["evidence"]["subruns"]["layout"]
    layout["torch_start_s"] = 4.1
    layout["evidence"]["index_mode_processes"]["top-k"]["torch_start_s"] = 4.4
    split = tmp_path / "split.json"
    split.write_text(json.dumps(report))
    text = "\n".join(b.where_lines(b.where_time_goes(str(split))))
    assert "kernel sub-run layout: pass 16.69s (import torch + CUDA set-up 4.10s)" in text
    assert "its own process (top-k): part 11.29s wall (import torch + CUDA set-up 4.40s)" in text
    assert b.where_lines(b.where_time_goes(str(tmp_path / "missing.json")))[0].startswith("no report")
