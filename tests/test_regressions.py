"""Regressions in failure paths and in the engine: misleading verdicts and reports that break their contract. The
verdicts are judged in this process over real probe answers (probed); the report's contract through the CLI."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import FakeSite, has_torch, run_doctor, validate
from fakes import Env, fake_megatron_dev, fake_te, fake_torch
from probed import judge, run_in_process

torch_only = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch")


def strict_json(text: str) -> dict:
    """JSON as strict parsers read it: NaN and Infinity are not JSON."""
    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")
    return validate(json.loads(text, parse_constant=reject))


@pytest.fixture
def fake_gpu_host(tmp_path):
    """An nvidia-smi on PATH that lists one H100 (CC 9.0), on a machine whose torch has no CUDA."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 9.0, 81559, 580.159.04'\n")
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


# --- verdicts that must not pass ----------------------------------------------------------------------------------

@pytest.mark.slow
@torch_only
def test_a_crashed_distributed_rank_fails_the_smoke():
    run = run_doctor("smoke", "-f", "json", "--cp", "2", "--device", "cpu", python=sys.executable,
                     env={"GLOO_SOCKET_IFNAME": "nonexistent0"}, timeout=180)
    row = run.check("smoke.thd-cp")
    assert row["status"] == "fail" and "2-process gloo run failed" in row["summary"], row["summary"]
    assert run.returncode == 1


@pytest.mark.slow  # a torch smoke in a subprocess: the default suite stays near 120 s on 2 cores
@torch_only
def test_gpu_host_whose_torch_cannot_use_cuda_fails_the_smoke(fake_gpu_host):
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp,gpu.*", python=sys.executable,
                     env=fake_gpu_host)
    row = run.check("smoke.thd-cp")
    assert row["status"] == "fail" and "so the GPU was not tested" in row["summary"], row["summary"]
    assert "nvidia-smi lists 1 GPU(s) but torch" in row["details"]
    assert run.check("gpu.devices")["status"] == "fail"
    assert run.report["profile"]["gpus"] == 1 and run.report["profile"]["gpu_arch"] == "9.0"


def test_gpu_arch_mismatch_never_hides_a_failure(tmp_path, bare_python, fake_gpu_host):
    assert judge(None, bare_python, "gpu.arch", gpu_arch="8.0", cp=2, probe_env=fake_gpu_host)["status"] == "fail"
    row = judge(None, bare_python, "gpu.arch", gpu_arch="10.0", probe_env=fake_gpu_host)
    assert row["status"] == "warn" and "GPU 0 is CC 9.0" in row["summary"]


def test_te_duplicates_never_hide_the_packing_gate(tmp_path, bare_python):
    env = Env(tmp_path).fake("te", fake_te, "2.8.0").fake("te2", lambda s: s.dist("transformer-engine", "2.8.0"))
    row = judge(env, bare_python, "te.version", cp=2)
    assert row["status"] == "fail" and "got 2.8.0" in row["summary"]


def test_leftover_torch_directory_is_a_clear_failure(site, bare_python):
    (site.root / "torch" / "lib").mkdir(parents=True)  # what a bad uninstall leaves: no __init__.py
    row = judge([site.root], bare_python, "torch.install")
    assert row["status"] == "fail" and "directory without __init__.py" in row["summary"]


def test_ngc_prerelease_torch_is_not_called_too_old(tmp_path, bare_python):
    env = Env(tmp_path).fake("torch", fake_torch, "2.6.0a0+ecf3bae40a.nv25.01", "12.8")
    row = judge(env, bare_python, "torch.install")
    assert row["status"] == "pass", row["summary"]


def test_probes_work_under_pythonsafepath(bare_python):
    """End to end for python: the CLI and its probes with PYTHONSAFEPATH set."""
    run = run_doctor("check", "-f", "json", "--only", "python.version,torch.install", python=bare_python,
                     env={"PYTHONSAFEPATH": "1"})
    assert run.check("python.version")["status"] == "pass"
    assert run.check("torch.install")["summary"] == "torch is not installed"


def test_editable_megatron_is_not_reported_as_shadowed(tmp_path, bare_python):
    def editable(site: FakeSite):
        fake_megatron_dev(site)
        # An editable install: the dist-info lives in site-packages, the source tree elsewhere.
        for d in site.root.glob("megatron_core-*.dist-info"):
            (d / "direct_url.json").write_text('{"url": "file:///src/Megatron-LM", "dir_info": {"editable": true}}')
    row = judge(Env(tmp_path).fake("megatron", editable), bare_python, "mcore.dsv4")
    assert row["status"] == "pass" and "shadows" not in row["details"]


def test_malformed_direct_url_is_not_a_doctor_crash(tmp_path, bare_python):
    def odd(site: FakeSite):
        fake_megatron_dev(site)
        for d in site.root.glob("megatron_core-*.dist-info"):
            (d / "direct_url.json").write_text('["not", "an", "object"]')
    report = run_in_process(Env(tmp_path).fake("megatron", odd), bare_python, ["mcore.*"], cp=2)
    assert report.exit_code == 0 and report.to_dict()["summary"]["internal_errors"] == []


def test_symlinked_site_entry_is_one_copy(tmp_path, bare_python):
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0")
    link = tmp_path / "fe-link"
    link.symlink_to(env.sites["fe"])
    env.sites["fe-again"] = link
    row = judge(env, bare_python, "cudnn-fe.version")
    assert row["status"] == "pass", row["summary"]


# --- the report's contract ------------------------------------------------------------------------------------------

def test_non_utf8_environment_values_and_output_files(tmp_path, bare_python):
    out = tmp_path / "r.json"
    env = dict(os.environ)
    env_bytes = {k.encode(): v.encode() for k, v in env.items()}
    env_bytes[b"CUDA_CACHE_PATH"] = b"/scratch/caf\xe9"
    import subprocess

    from conftest import doctor_command
    done = subprocess.run(doctor_command() + ["check", "-f", "json", "--only", "python.version", "-o", str(out),
                                              "--python", bare_python], env=env_bytes, capture_output=True)
    assert done.returncode == 0, done.stderr
    report = strict_json(out.read_text(encoding="utf-8"))
    assert report["environment"]["variables"]["CUDA_CACHE_PATH"] == "/scratch/caf\\xe9"


def test_static_only_skips_every_import_probe_even_on_a_gpu_host(bare_python, fake_gpu_host):
    """Checks are selected after the profile knows of the GPU: selected before, the smoke would run under
    --static-only."""
    run = run_doctor("check", "-f", "json", "--static-only", python=bare_python, env=fake_gpu_host)
    rows = {c["id"]: c for c in run.report["checks"]}
    assert run.report["profile"]["static_only"] is True and run.report["profile"]["gpus"] == 1
    for check_id in ("smoke.thd-cp", "torch.install", "gpu.devices", "te.import"):
        assert rows[check_id]["status"] == "skip" and rows[check_id]["summary"].startswith("static-only"), check_id
    assert rows["gpu.arch"]["status"] != "skip"  # nvidia-smi is no import: static checks still use it
