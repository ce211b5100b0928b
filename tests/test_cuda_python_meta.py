"""cuda-python 13 is a meta distribution: `cuda` is a namespace package that cuda-bindings, cuda-core and
cuda-pathfinder fill, and none of its files is cuda-python's. Its version is its metadata's, so a fix plan that
installs it converges: with the published wheels in place, the plan no longer asks for `pip install cuda-python`
(before, the version read as not known and every re-check planned it again)."""

from __future__ import annotations

from conftest import run_doctor
from test_cutlass_copies import venv_with

STACK = ("cuda-python-13.4.4", "cuda-bindings-13.4.4", "cuda-pathfinder-1.9.1", "nvidia-cudnn-frontend-1.27.0")


def test_an_installed_cuda_python_is_read_from_its_metadata_and_not_planned_again(tmp_path):
    python = venv_with(tmp_path / "venv", STACK)  # installed as pip lays them out (a --target folder hid the bug)
    run = run_doctor("check", "--only", "cudnn-fe.*", "-f", "json", python=python, timeout=180)
    assert run.returncode in (0, 1), run.stderr
    versions = {k: v for c in run.report["checks"]
                for k, v in (c.get("evidence") or {}).get("distributions", {}).items() if isinstance(v, str)}
    fix = run_doctor("fix", "--only", "cudnn-fe.*", python=python, timeout=180)
    commands = [line for line in fix.stdout.splitlines() if "-m pip install" in line]
    assert commands, fix.stdout  # the frontend lacks the rest of its stack (torch, the CuTe DSL): a plan exists
    assert not any("cuda-python" in line for line in commands), commands
    assert versions.get("cuda-python", "13.4.4") == "13.4.4", versions
