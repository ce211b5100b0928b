"""The CLI: formats, exit codes, redaction, selection, explain/list, fix, GitHub Actions."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import run_doctor, validate

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"
BRACKETED = "pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.16.1'"


@pytest.fixture
def demo(site, tmp_path):
    """A plugin whose check fails until a marker file exists; its fix creates it. Installed via PYTHONPATH."""
    marker = tmp_path / "marker"
    site.dist("demo-plugin", "0.3", entry_points="""
        [dsv4_doctor.checks]
        demo = demo_plugin
    """)
    site.file("demo_plugin.py", f"""
        import os
        from dsv4_doctor.model.core import Check, Fix, Source, failed, passed

        MARK = {str(marker)!r}
        FIX = Fix("Create the marker", [["touch", MARK], {BRACKETED!r}])

        def _run(ctx):
            if os.path.exists(MARK):
                return passed("marker present")
            return failed("marker missing; token {SECRET} leaked into a message", "HF_TOKEN={SECRET}", fixes=[FIX],
                          api_key={SECRET!r}, path="/home/u/" + {SECRET!r})

        CHECKS = [Check(id="demo.marker", title="Marker exists", explanation="Why: a demo.",
                        applies_when="always", detects="a file", sources=(Source("demo", "https://x.invalid"),),
                        fixes=(FIX,), run=_run)]
    """)
    return site, marker


def test_json_report_is_valid_and_alone_on_stdout(demo, bare_python):
    site, _ = demo
    run = run_doctor("check", "-f", "json", sites=(site.root,), python=bare_python, env={"FORCE_COLOR": "1"})
    report = run.report  # schema-validated; json.loads fails on any stray byte
    assert report["schema"] == "dsv4-doctor.report/1"
    assert report["summary"]["exit_code"] == run.returncode == 1
    assert report["summary"]["counts"]["fail"] >= 1
    assert report["environment"]["target_python"]["executable"] == bare_python or \
        report["environment"]["target_python"]["executable"].endswith("python")
    assert report["profile"]["gpu_arch_source"] in ("unknown", "detected")
    assert "\x1b[" not in run.stdout


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_secrets_are_redacted_in_every_format(fmt, demo, bare_python):
    site, _ = demo
    run = run_doctor("check", "-f", fmt, sites=(site.root,), python=bare_python,
                     env={"HF_TOKEN": SECRET, "NCCL_IB_AUTH_TOKEN": "s3cr3t-value", "NCCL_DEBUG": "INFO"})
    assert SECRET not in run.stdout and SECRET not in run.stderr
    assert "s3cr3t-value" not in run.stdout
    assert "***REDACTED***" in run.stdout
    if fmt == "json":
        report = run.report
        assert report["environment"]["variables"]["NCCL_IB_AUTH_TOKEN"] == "***REDACTED***"
        assert report["environment"]["variables"]["NCCL_DEBUG"] == "INFO"
        assert report["redactions"]["count"] >= 3


@pytest.mark.parametrize("fmt", ["text", "markdown", "junit"])
def test_fix_commands_with_brackets_survive_rendering(fmt, demo, bare_python):
    site, _ = demo
    run = run_doctor("check", "-f", fmt, sites=(site.root,), python=bare_python, env={"FORCE_COLOR": "1"})
    assert BRACKETED in run.stdout


def test_text_report_has_a_verdict_and_no_colour_when_piped(demo, bare_python):
    site, _ = demo
    run = run_doctor("check", sites=(site.root,), python=bare_python, env={"NO_COLOR": "1"})
    assert run.returncode == 1
    assert "\x1b[" not in run.stdout
    assert "\nVerdict: FAIL" in "\n" + run.stdout.rstrip().split("\n\n")[-1]  # the verdict last
    assert re.search(r"FAIL\s+demo\.marker  ", run.stdout)


def test_junit_has_one_testcase_per_check_with_one_status_child(demo, bare_python):
    site, _ = demo
    run = run_doctor("check", "-f", "junit", sites=(site.root,), python=bare_python)
    suite = ET.fromstring(run.stdout.split("\n", 1)[1])
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert {"demo.marker", "python.version", "torch.install", "gpu.devices"} <= set(cases)
    for case in cases.values():
        assert len([ch for ch in case if ch.tag in ("failure", "error", "skipped")]) <= 1
    assert cases["demo.marker"].find("failure") is not None
    assert cases["gpu.devices"].find("skipped") is not None
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases.values()) >= 2
    assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases.values())


def test_exit_codes_are_the_same_for_every_format(demo, bare_python):
    site, _ = demo
    codes = {fmt: run_doctor("check", "-f", fmt, sites=(site.root,), python=bare_python).returncode
             for fmt in ("text", "json", "markdown", "junit")}
    assert set(codes.values()) == {1}


def test_output_file_and_github_actions(demo, bare_python, tmp_path):
    site, _ = demo
    out, summary = tmp_path / "report.json", tmp_path / "summary.md"
    run = run_doctor("check", "-f", "json", "-o", str(out), sites=(site.root,), python=bare_python,
                     env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert run.returncode == 1
    assert run.stdout == ""
    validate(json.loads(out.read_text()))
    assert "::error title=dsv4-doctor (demo.marker)::" in run.stderr
    assert "%0AFix: touch" in run.stderr  # newlines escaped for the workflow command
    assert "### dsv4-doctor report" in summary.read_text()


def test_only_skip_and_unknown_ids(demo, bare_python):
    site, _ = demo
    run = run_doctor("check", "-f", "json", "--only", "demo.*,python.version", sites=(site.root,), python=bare_python)
    assert [c["id"] for c in run.report["checks"]] == ["demo.marker", "python.version"]
    run = run_doctor("check", "-f", "json", "--only", "python.version,demo.*", "--skip", "demo.marker",
                     sites=(site.root,), python=bare_python)
    assert run.returncode == 0
    assert [c["id"] for c in run.report["checks"]] == ["python.version"]
    run = run_doctor("check", "-f", "json", "--skip", "demo.marker", "--skip", "torch.install",
                     sites=(site.root,), python=bare_python)
    assert {"demo.marker", "torch.install"}.isdisjoint(c["id"] for c in run.report["checks"])
    run = run_doctor("check", "--only", "no.such-check", sites=(site.root,), python=bare_python)
    assert run.returncode == 2
    assert "no check matches" in run.stderr


def test_strict_promotes_warnings(demo, bare_python):
    site, marker = demo
    site.file("warn_plugin.py", """
        from dsv4_doctor.model.core import Check, warned
        w = Check(id="demo.warn", title="w", explanation="x", applies_when="always", detects="x",
                  run=lambda ctx: warned("slower"))
    """)
    site.dist("warn-plugin", "1", entry_points="[dsv4_doctor.checks]\nw = warn_plugin\n")
    marker.write_text("")
    base = ("check", "-f", "json", "--only", "demo.*")
    assert run_doctor(*base, sites=(site.root,), python=bare_python).returncode == 0
    strict = run_doctor(*base, "--strict", sites=(site.root,), python=bare_python)
    assert strict.returncode == 1 and strict.report["summary"]["strict"] is True


@pytest.mark.parametrize("args, text", [
    (["check", "--gpu-arch", "hopper"], "compute capability"),
    (["check", "--cp", "0"], "between 1 and 1024"),
    (["check", "--cp", "2000"], "between 1 and 1024"),
    (["check", "--dsa-backend", "tilelang"], "is not one of"),
    (["check", "--format", "yaml"], "is not one of"),
    (["check", "--timeout", "inf"], "between 1 and 3600"),
    (["check", "--python", "/no/such/python"], "no executable interpreter"),
    (["check", "--python", "/bin/false"], "is not a Python interpreter"),
    (["check", "--only", "python.version", "--skip", "python.version"], "select no check"),
    (["check", "--only", "no.such-check"], "no check matches"),
    (["explain", "no.such"], "unknown check"),
    (["list", "-f", "junit"], "is not one of"),
    (["frobnicate"], ""),
])
def test_usage_errors_exit_2_with_a_clear_message(args, text):
    run = run_doctor(*args)
    assert run.returncode == 2, run.stderr
    assert text in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""


def test_help_shows_exit_codes_and_readable_metavars():
    help_text = " ".join(run_doctor("check", "--help").stdout.split())
    assert "Exit codes" in help_text and "3 the doctor itself" in help_text
    assert "--only ID[,ID...]" in help_text and "<list" not in help_text


def test_list_and_explain_every_check():
    from dsv4_doctor.engine.registry import load
    from dsv4_doctor.report.explain import explain_text

    listed = json.loads(run_doctor("list", "-f", "json").stdout)["checks"]
    checks = {c.id: c for c in load().checks}
    assert {c["id"] for c in listed} == set(checks) >= {"python.version", "torch.install", "gpu.devices"}
    for c in listed:
        text = explain_text(checks[c["id"]])
        assert f"applies when: {c['applies_when']}" in text
        assert "Sources:" in text and "https://" in text.split("Sources:")[1]
    cli = run_doctor("explain", "te.version", env={"COLUMNS": "100"})
    assert cli.returncode == 0 and cli.stdout == explain_text(checks["te.version"])


def test_explain_wraps_its_prose_to_the_output_width_but_never_a_command_or_a_url():
    """With COLUMNS=80, 13 lines of `explain te.version` were wider (the longest 226)."""
    from dsv4_doctor.engine.registry import load
    from dsv4_doctor.report.explain import explain_text

    cli = run_doctor("explain", "te.version", env={"COLUMNS": "80"})
    assert cli.returncode == 0
    commands = {"    " + cmd.shell() for c in load().checks for fix in c.fixes for cmd in fix.commands}
    for c in load().checks:
        text = explain_text(c, 80)
        assert text == cli.stdout or c.id != "te.version"
        for line in text.splitlines():
            if len(line) > 80:  # only a fix command or a URL on a line of its own
                assert line in commands or line.strip().startswith("https://") and " " not in line.strip(), line
        urls = {s.url for s in c.sources if s.url}
        assert all(url in text.split() for url in urls)  # whole, never broken
        assert " ".join(c.doc().split()) in " ".join(text.split())  # the reflowed explanation, every word kept
    assert max(len(line) for line in cli.stdout.splitlines() if not line.startswith("    ")) <= 80


@pytest.mark.slow  # real wheels, end to end: the default suite stays within 120 s on 2 cores
def test_fix_prints_a_runnable_plan_and_apply_turns_the_check_green(demo, bare_python, tmp_path):
    site, marker = demo
    run = run_doctor("fix", "--only", "demo.marker", sites=(site.root,), python=bare_python)
    assert run.returncode == 0  # a plan was printed
    assert run.stdout.startswith("#!/bin/sh")
    assert "before: Verdict: FAIL" in run.stderr
    # Only pip commands are run, with the target's pip; the plugin's `touch` stays a comment.
    assert f"#   touch {marker}" in run.stdout
    te = "'transformer-engine[pytorch,core_cu13]==2.16.1'"
    assert f'"$PY" -I -m pip install --no-build-isolation {te}' in run.stdout
    # A plan with a fix for every failure exits 0, so `dsv4-doctor fix > fix.sh && sh fix.sh` runs.
    wheel = tmp_path / "wheels"
    wheel.mkdir()
    site.file("marker_plugin.py", f"""
        import importlib.util
        from dsv4_doctor.model.core import Check, Fix, failed, passed
        FIX = Fix("Install the marker package", [["pip", "install", "--no-index", "--find-links", {str(wheel)!r},
                                                  "--target", {str(site.root)!r}, "dsv4-marker-pkg"]])
        CHECKS = [Check(id="demo.pkg", title="t", explanation="x", applies_when="always", detects="x", fixes=(FIX,),
                        run=lambda ctx: passed("ok") if importlib.util.find_spec("dsv4_marker_pkg")
                        else failed("missing", fixes=[FIX]))]
    """)
    site.dist("marker-plugin", "1", entry_points="[dsv4_doctor.checks]\nm = marker_plugin\n")
    _build_wheel(wheel)
    applied = run_doctor("fix", "--only", "demo.pkg", "--apply", "--yes", sites=(site.root,), python=sys.executable)
    assert applied.returncode == 0, applied.stderr
    assert "after:  Verdict: PASS" in applied.stderr and "still failing" not in applied.stderr
    assert "Successfully installed" not in applied.stdout  # pip's output went to stderr


def _build_wheel(dest):
    """A one-module wheel, built by hand (a wheel is a zip with a dist-info)."""
    import zipfile

    name = "dsv4_marker_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(dest / name, "w") as z:
        z.writestr("dsv4_marker_pkg.py", "X = 1\n")
        z.writestr("dsv4_marker_pkg-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: dsv4-marker-pkg\nVersion: 1.0\n")
        z.writestr("dsv4_marker_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr("dsv4_marker_pkg-1.0.dist-info/RECORD", "")


def test_module_entry_and_default_command(bare_python):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "dsv4_doctor", "--only", "python.version", "-f", "json"],
                          capture_output=True, text=True)
    assert done.returncode == 0
    assert validate(json.loads(done.stdout))["checks"][0]["id"] == "python.version"
    version = subprocess.run([sys.executable, "-m", "dsv4_doctor", "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("dsv4-doctor ")


def test_installed_names_do_not_collide():
    from importlib.metadata import packages_distributions

    assert set(packages_distributions()["dsv4_doctor"]) == {"dsv4-doctor"}
    assert "doctor" not in packages_distributions() or packages_distributions()["doctor"] != ["dsv4-doctor"]


def test_cli_process_never_imports_torch(tmp_path):
    import subprocess

    code = ("import sys; from dsv4_doctor.cli.main import main\n"
            "try:\n    main(['check', '-f', 'json', '--only', 'torch.install,gpu.devices'])\n"
            "except SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformer_engine', 'megatron', 'cudnn') if m in sys.modules]\n"
            "sys.stderr.write('HEAVY=' + ','.join(heavy))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY=\n" in done.stderr + "\n" and "HEAVY=" in done.stderr
    assert done.stderr.rstrip().endswith("HEAVY=")


@pytest.mark.parametrize("words", [["list"], ["list", "-f", "json"], ["explain", "te.version"],
                                   ["explain", "cudnn-fe", "-f", "json"]])
def test_list_and_explain_make_no_session_and_start_no_process(words):
    """`list` and `explain` inspect no target: they read the registry, import no session module (session, its
    probe pool, the run's report) and start no child process (a Python audit hook sees every spawn); they built a
    Session before."""
    import subprocess

    code = ("import os, sys\n"
            "spawned = []\n"
            "sys.addaudithook(lambda event, args: spawned.append(event) if event in "
            "('subprocess.Popen', 'os.posix_spawn', 'os.fork', 'os.exec') else None)\n"
            "from dsv4_doctor.cli.main import main\n"
            f"try:\n    main({words!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
            "heavy = sorted(m for m in ('dsv4_doctor.engine.session', 'dsv4_doctor.engine.earlystart',"
            " 'dsv4_doctor.engine.runner', 'dsv4_doctor.engine.runreport', 'dsv4_doctor.report.assemble',"
            " 'dsv4_doctor.engine.plugins') if m in sys.modules)\n"
            "sys.stderr.write('\\nCODE=%s SPAWNED=%s MODULES=%s' % (code, ','.join(spawned), ','.join(heavy)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines()[-1] == "CODE=0 SPAWNED= MODULES=", done.stderr[-2000:]
    assert done.stdout.strip()
