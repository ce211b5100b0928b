"""The benchmarks the documentation quotes still run against the code as it is (a refactor that moves what they
import breaks them, and only a run shows it): each in its smallest mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import has_torch

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*argv: str, timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_bench_hostile_times_every_shape_and_path():
    out = run_bench("benchmarks/bench_hostile.py", "--repeat", "1", "--sizes", "1000,8000")
    assert "URL userinfo with many @" in out and "METADATA headers, cut description" in out


@pytest.mark.slow
def test_bench_hostile_times_the_static_check_of_large_sources():
    out = run_bench("benchmarks/bench_hostile.py", "--sources", "--repeat", "1", timeout=600)
    assert out.count("error:") == 3 and "source truncated" in out  # the cut files are said not to be judged


@pytest.mark.slow
@pytest.mark.skipif(not has_torch(), reason="the exchange helper needs torch's TCPStore")
def test_bench_fleet_exchanges_and_merges_two_ranks():
    out = run_bench("benchmarks/bench_fleet.py", "--ranks", "2", "--repeat", "1")
    assert '"2": {"wall_s"' in out


def test_bench_kernel_store_parses_its_options():
    """Its runs need a GPU (docs/gpu-runs/2026-12-06-h200-speed); here: that it loads and says what it does."""
    assert "--no-tier2" in run_bench("benchmarks/bench_kernel_store.py", "--help")
