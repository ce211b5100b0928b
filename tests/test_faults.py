"""Fault injection: whatever the inspected environment does, the doctor answers with a finding, valid JSON and the
documented exit code, within its time budget. Each fault runs the CLI end to end; an import that raises is a
verdict, judged in this process over the real probes (probed)."""

from __future__ import annotations

import pytest

from conftest import run_doctor
from probed import RUN_IDS, run_in_process

FAULTY_TORCH = {
    "segfault": ("import ctypes\nctypes.string_at(0)\n", "SIGSEGV"),
    "abort": ("import os\nos.abort()\n", "SIGABRT"),
    "exit": ("import os\nos._exit(7)\n", "exited with code 7"),
}


@pytest.mark.parametrize("kind", sorted(FAULTY_TORCH))
def test_crashing_import_becomes_an_error_finding(kind, site, bare_python):
    code, expected = FAULTY_TORCH[kind]
    site.file("torch/__init__.py", code)
    run = run_doctor("check", "-f", "json", sites=(site.root,), python=bare_python)
    assert run.returncode == 1, run.stderr
    torch = run.check("torch.install")
    assert torch["status"] == "error"
    assert expected in torch["summary"]
    assert not torch["internal_error"]
    # The crash did not hide the other checks.
    assert run.check("python.version")["status"] == "pass"
    if kind == "segfault":
        # faulthandler's stack in the stderr tail says where it crashed.
        assert "torch/__init__.py" in torch["evidence"]["stderr_tail"]
        assert torch["evidence"]["signal"] == "SIGSEGV"


@pytest.mark.slow
def test_hanging_import_is_killed_at_the_timeout(site, bare_python):
    site.file("torch/__init__.py", "import time\ntime.sleep(600)\n")
    run = run_doctor("check", "-f", "json", "--timeout", "3", sites=(site.root,), python=bare_python, timeout=60)
    assert run.returncode == 1
    torch = run.check("torch.install")
    assert torch["status"] == "error"
    assert "timed out after 3 s" in torch["summary"]
    assert torch["evidence"]["timed_out"] is True
    assert run.seconds < 20
    # faulthandler dumped where it hangs just before the kill.
    assert "sleep" in torch["evidence"]["stderr_tail"] or "torch/__init__.py" in torch["evidence"]["stderr_tail"]


@pytest.mark.slow
def test_hang_that_forks_a_pipe_holding_grandchild_does_not_hang_the_doctor(site, bare_python):
    site.file("torch/__init__.py", """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        time.sleep(600)
    """)
    run = run_doctor("check", "-f", "json", "--timeout", "2", sites=(site.root,), python=bare_python, timeout=60)
    assert run.returncode == 1
    assert run.check("torch.install")["status"] == "error"
    assert run.seconds < 20


def _run(sites, python):
    """The report of a run of every check, judged in this process; its rows by id."""
    report = run_in_process(sites, python, RUN_IDS)
    return report, {c["id"]: c for c in report.to_dict()["checks"]}


def test_raising_import_is_a_failure_with_the_message(site, bare_python):
    site.file("torch/__init__.py", "raise RuntimeError('libcudnn.so.9: cannot open shared object file')\n")
    report, rows = _run([site.root], bare_python)
    assert report.exit_code == 1
    torch = rows["torch.install"]
    assert torch["status"] == "fail"
    assert "RuntimeError: libcudnn.so.9: cannot open shared object file" in torch["summary"]
    assert torch["fixes"] and torch["fixes"][0]["commands"]


def test_system_exit_during_import_is_a_finding(site, bare_python):
    site.file("torch/__init__.py", "raise SystemExit(3)\n")
    _, rows = _run([site.root], bare_python)
    assert rows["torch.install"]["status"] == "fail"
    assert "SystemExit" in rows["torch.install"]["summary"]


def test_missing_torch_is_a_failure_with_a_fix(bare_python):
    report, rows = _run([], bare_python)
    assert report.exit_code == 1
    torch = rows["torch.install"]
    assert torch["status"] == "fail"
    assert torch["summary"] == "torch is not installed"
    assert torch["fixes"][0]["commands"] == [
        "pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130"]
    assert rows["gpu.devices"]["status"] == "skip"
    assert rows["gpu.devices"]["summary"].startswith("no GPU visible")


def test_broken_plugin_is_an_error_naming_its_distribution(site, bare_python):
    site.dist("broken-plugin", "1.2", entry_points="""
        [dsv4_doctor.checks]
        broken = broken_plugin_module_that_does_not_exist
        raising = broken_plugin_raising
    """)
    site.file("broken_plugin_raising.py", "raise ImportError('plugin dependency missing')\n")
    run = run_doctor("check", "-f", "json", sites=(site.root,), python=bare_python)
    assert run.returncode == 3
    report = run.report
    broken = run.check("plugin.broken")
    assert broken["status"] == "error" and broken["internal_error"]
    assert "broken-plugin" in broken["summary"]
    assert "ModuleNotFoundError" in broken["summary"]
    assert "plugin dependency missing" in run.check("plugin.raising")["summary"]
    assert set(report["summary"]["internal_errors"]) == {"plugin.broken", "plugin.raising"}
    # Built-in checks still ran.
    assert run.check("python.version")["status"] == "pass"
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["broken"]["loaded"] is False and plugins["broken"]["distribution"] == "broken-plugin"


def test_plugin_check_that_raises_or_hangs_is_an_internal_error(site, bare_python):
    site.dist("odd-plugin", "0.1", entry_points="""
        [dsv4_doctor.checks]
        odd = odd_plugin
    """)
    site.file("odd_plugin.py", """
        from dsv4_doctor.model.core import Check

        def _boom(ctx):
            return {}["missing"]

        boom = Check(id="odd.boom", title="raises", explanation="x", applies_when="always", detects="x", run=_boom)
    """)
    run = run_doctor("check", "-f", "json", sites=(site.root,), python=bare_python)
    assert run.returncode == 3
    boom = run.check("odd.boom")
    assert boom["status"] == "error" and boom["internal_error"]
    assert "KeyError" in boom["summary"]
    assert boom["origin"] == "odd-plugin"
