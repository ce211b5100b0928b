"""torch.install and gpu.devices against the real torch wheel installed in the test environment (a CPU build)."""

from __future__ import annotations

import sys

import pytest

from conftest import has_torch, run_doctor

pytestmark = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")


@pytest.mark.slow  # real torch in probes: the default suite stays near 120 s on 2 cores
def test_real_cpu_torch_is_reported_as_cpu_only():
    import torch

    run = run_doctor("check", "-f", "json", "--only", "torch.install,gpu.devices", python=sys.executable)
    torch_row = run.check("torch.install")
    assert torch_row["evidence"]["version"] == torch.__version__
    assert torch_row["evidence"]["cuda_build"] == torch.version.cuda
    if torch.version.cuda is None:
        assert torch_row["status"] == "fail"
        assert "CPU-only build" in torch_row["summary"]
        assert run.returncode == 1
    gpu = run.check("gpu.devices")
    if not torch.cuda.is_available():
        assert gpu["status"] == "skip"
        assert "torch sees no CUDA device" in gpu["summary"]
