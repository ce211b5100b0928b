"""PEP 668: an externally managed interpreter gets a plan pip accepts, never a plain pip step that pip refuses.

The externally managed interpreter is this machine's own /usr/bin/python3 (Debian 12 ships
/usr/lib/python3.11/EXTERNALLY-MANAGED), judged against its real pip: only dry runs there (`pip install --dry-run`,
offline from the test wheels), never an install. What must install for real goes into a venv made from it, or into a
copy of it (its binary copied, its stdlib folder a folder of links to the original's, its own dist-packages).
A venv made from it is the control: pip ignores the marker there, and the plan keeps plain pip steps.
"""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_doctor
from test_locate import CACHED, row
from wheels import DOWNLOADS, ensure

SYSTEM_PYTHON = "/usr/bin/python3"
ARGS = ("--only", "tvm-ffi.version", "--cp", "2")  # it fails on a bare interpreter: `pip install apache-tvm-ffi==...`
WHEEL = "apache-tvm-ffi"


def _marker_of(python: str) -> Path | None:
    out = subprocess.run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                         capture_output=True, text=True, timeout=30)
    marker = Path(out.stdout.strip()) / "EXTERNALLY-MANAGED" if out.returncode == 0 else None
    return marker if marker is not None and marker.is_file() else None


def _has_pip(python: str) -> bool:
    return subprocess.run([python, "-I", "-m", "pip", "--version"], capture_output=True, timeout=60).returncode == 0


MARKER = _marker_of(SYSTEM_PYTHON) if os.path.exists(SYSTEM_PYTHON) else None
pytestmark = pytest.mark.skipif(MARKER is None or not _has_pip(SYSTEM_PYTHON),
                                reason="no externally managed /usr/bin/python3 with pip here (Debian 12 has one)")


@pytest.fixture(autouse=True)
def no_pip_override(monkeypatch):
    """Neither the doctor nor pip sees an override of this machine's (a PIP_BREAK_SYSTEM_PACKAGES, a pip.conf)."""
    monkeypatch.delenv("PIP_BREAK_SYSTEM_PACKAGES", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(DOWNLOADS), "PIP_CONFIG_FILE": os.devnull,
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra})
    return env


def said(script: str) -> str:
    """The script's comments as one line of words: a wrapped description reads whole."""
    return " ".join(" ".join(line.lstrip("#") for line in script.splitlines()).split())


def pip_dry_run(argv: list[str], **extra: str) -> subprocess.CompletedProcess:
    """A pip command as the plan prints it, run by the real pip as a dry run, offline: nothing is installed."""
    ensure(CACHED["tvm"])
    return subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=120, env=offline_env(**extra))


def script_commands(script: str, python: str) -> list[tuple[str, list[str]]]:
    """The commands the printed script runs, each with the interpreter "$PY" holds at that line."""
    py, out = python, []
    for line in script.splitlines():
        if line.startswith("PY="):
            py = shlex.split(line[3:])[0]
        elif line.startswith('"$PY" '):
            out.append((py, [py if w == "$PY" else w for w in shlex.split(line)]))
    return out


def evidence(python: str, **kwargs) -> dict:
    rep = run_doctor("check", "--only", "python.version", "-f", "json", python=python, **kwargs)
    assert rep.returncode in (0, 1), rep.stderr
    return row(rep.report, "python.version")["evidence"]["externally_managed"]


def venv_of_system_python(root: Path) -> str:
    """The control: a venv made by /usr/bin/python3 (`-m venv`), which sees its pip (--system-site-packages)."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", str(root)], check=True,
                   timeout=60)
    return str(root / "bin" / "python")


def test_the_marker_is_read_where_pep_668_puts_it_and_a_venv_is_exempt(tmp_path):
    found = evidence(SYSTEM_PYTHON)
    parsed = configparser.ConfigParser(interpolation=None)
    parsed.read(MARKER, encoding="utf-8")  # the oracle: the marker's own [externally-managed] Error, as pip reads it
    assert found["marker"] == str(MARKER) and found["found"] and not found["in_venv"] and found["enforced"]
    assert found["error"] == parsed["externally-managed"]["Error"].strip() and found["unread"] is None
    control = evidence(venv_of_system_python(tmp_path / "venv"))
    # The same stdlib folder and marker, inside a venv: PEP 668 does not apply there.
    assert control["marker"] == str(MARKER) and control["found"] and control["in_venv"] and not control["enforced"]


def test_pip_refuses_a_plain_step_and_the_plan_prints_none(tmp_path):
    refused = pip_dry_run([SYSTEM_PYTHON, "-I", "-m", "pip", "install", "--no-deps", f"{WHEEL}==0.1.11"])
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr  # the oracle
    rep = run_doctor("check", *ARGS, "-f", "json", python=SYSTEM_PYTHON).report
    fixes = row(rep, "tvm-ffi.version")["fixes"]
    kinds = [(f.get("action") or {}).get("kind") for f in fixes]
    assert kinds[:2] == ["make-venv", "break-system-packages"], kinds  # both ways, typed, before the pip step
    venv, breaking = fixes[0]["action"], fixes[1]["action"]
    assert venv["python"] == SYSTEM_PYTHON and venv["system_site_packages"] == "true" and venv["default"] == "true"
    assert venv["marker"] == breaking["marker"] == str(MARKER) and breaking["default"] == "false"
    assert breaking["option"] == "--break-system-packages" and fixes[1]["manual"] and not fixes[1]["commands"]
    script = run_doctor("fix", *ARGS, python=SYSTEM_PYTHON, cwd=tmp_path).stdout  # the venv: tmp_path/.venv-dsv4
    ran = script_commands(script, SYSTEM_PYTHON)
    assert ran and all("--break-system-packages" in argv for py, argv in ran if py == SYSTEM_PYTHON and
                       "pip" in argv), script  # no plain pip step runs with the externally managed interpreter
    assert ran[0][1] == [SYSTEM_PYTHON, "-I", "-m", "venv", "--system-site-packages", "--without-pip",
                         str(tmp_path / ".venv-dsv4")] and "# Installs: " in script
    assert not (tmp_path / ".venv-dsv4").exists()  # printed, not made


def test_the_printed_break_system_packages_form_is_what_pip_accepts():
    fix = run_doctor("fix", *ARGS, "--break-system-packages", python=SYSTEM_PYTHON)
    assert fix.returncode == 0, fix.stderr
    pips = [argv for py, argv in script_commands(fix.stdout, SYSTEM_PYTHON) if "pip" in argv]
    assert pips and all(py == SYSTEM_PYTHON for py, _ in script_commands(fix.stdout, SYSTEM_PYTHON))
    assert "venv" not in fix.stdout.split("# Step", 1)[1] and "--break-system-packages, as asked" in said(fix.stdout)
    for argv in pips:
        assert argv[4:6] == ["install", "--break-system-packages"], argv
        accepted = pip_dry_run(argv)
        assert accepted.returncode == 0 and f"Would install {WHEEL}" in accepted.stdout, accepted.stderr


def test_a_venv_of_the_same_interpreter_keeps_plain_pip_steps_that_pip_accepts(tmp_path):
    python = venv_of_system_python(tmp_path / "venv")
    rep = run_doctor("check", *ARGS, "-f", "json", python=python).report
    assert not [f for f in row(rep, "tvm-ffi.version")["fixes"] if f.get("action")]
    script = run_doctor("fix", *ARGS, python=python).stdout
    ran = script_commands(script, python)
    assert [argv[4:] for _, argv in ran] == [["install", "--no-deps", f"{WHEEL}==0.1.11"]], script
    assert "Installs:" not in script and "break-system-packages" not in script
    accepted = pip_dry_run(ran[0][1])
    assert accepted.returncode == 0, accepted.stderr
    assert not evidence(python)["enforced"]


def test_pip_checks_no_marker_for_a_target_folder_and_the_flag_goes_only_where_it_does(tmp_path):
    """The one install pip lets through without the flag: one aimed at a `--target` folder (pip skips its check)."""
    from dsv4_doctor.fix.steps import breaking_system_packages
    from dsv4_doctor.model.core import Command

    aimed = ["pip", "install", "--upgrade", "--target", str(tmp_path), "--no-deps", f"{WHEEL}==0.1.11"]
    assert breaking_system_packages(Command(tuple(aimed))).argv == tuple(aimed)
    accepted = pip_dry_run([SYSTEM_PYTHON, "-I", "-m", *aimed])
    assert accepted.returncode == 0, accepted.stderr
    uninstall = breaking_system_packages(Command(("pip", "uninstall", "-y", WHEEL))).argv
    assert uninstall == ("pip", "uninstall", "--break-system-packages", "-y", WHEEL)
    ensurepip = breaking_system_packages(Command(("ensurepip", "--upgrade")))
    assert ensurepip.argv == ("ensurepip", "--upgrade") and ensurepip.env == (("PIP_BREAK_SYSTEM_PACKAGES", "1"),)


def test_pips_own_override_is_read_and_the_plan_spells_the_flag_out(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nbreak_system_packages = yes\n")
    plain = [SYSTEM_PYTHON, "-I", "-m", "pip", "install", "--no-deps", f"{WHEEL}==0.1.11"]
    assert pip_dry_run(plain, PIP_CONFIG_FILE=str(conf)).returncode == 0  # the oracle: pip reads it so
    assert pip_dry_run(plain, PIP_BREAK_SYSTEM_PACKAGES="1").returncode == 0
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    found = evidence(SYSTEM_PYTHON)
    assert found["enforced"] and found["override"] == f"break-system-packages = yes in {conf} [global]"
    script = run_doctor("fix", *ARGS, python=SYSTEM_PYTHON).stdout
    assert f"pip's own override is set (break-system-packages = yes in {conf} [global]" in said(script)
    assert [argv[4:6] for _, argv in script_commands(script, SYSTEM_PYTHON)] == [["install", "--break-system-packages"]]
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert evidence(SYSTEM_PYTHON, env={"PIP_BREAK_SYSTEM_PACKAGES": "1"})["override"] == \
        "PIP_BREAK_SYSTEM_PACKAGES=1 in the environment"
    # --venv takes the venv way even then.
    chosen = run_doctor("fix", *ARGS, "--venv", str(tmp_path / "v"), python=SYSTEM_PYTHON,
                        env={"PIP_BREAK_SYSTEM_PACKAGES": "1"}).stdout
    assert script_commands(chosen, SYSTEM_PYTHON)[0][1][:4] == [SYSTEM_PYTHON, "-I", "-m", "venv"]


def test_a_folder_that_is_no_venv_of_the_target_is_never_made_one(tmp_path):
    taken = tmp_path / "notes"
    taken.mkdir()
    (taken / "todo.txt").write_text("mine\n")
    fix = run_doctor("fix", *ARGS, "--venv", str(taken), python=SYSTEM_PYTHON)
    assert fix.returncode == 1 and "NO INSTALLER: no usable virtual environment" in fix.stdout, fix.stdout
    assert "exit 1" in fix.stdout and script_commands(fix.stdout, SYSTEM_PYTHON) == []
    applied = run_doctor("fix", *ARGS, "--venv", str(taken), "--apply", "--yes", python=SYSTEM_PYTHON)
    assert applied.returncode == 1 and "nothing applied: no usable virtual environment" in applied.stderr
    assert sorted(p.name for p in taken.iterdir()) == ["todo.txt"]
    other = tmp_path / "other"  # a venv of another interpreter: making a venv over it would mix the two
    subprocess.run([shutil.which("python3") or "python3", "-m", "venv", "--without-pip", str(other)], check=True)
    if os.path.realpath(other / "bin" / "python") != os.path.realpath(SYSTEM_PYTHON):
        assert f"{other} is a virtual environment of another interpreter" in said(run_doctor(
            "fix", *ARGS, "--venv", str(other), python=SYSTEM_PYTHON).stdout)
    both = run_doctor("fix", *ARGS, "--venv", str(taken), "--break-system-packages", python=SYSTEM_PYTHON)
    assert both.returncode == 2 and "give one" in both.stderr


def test_a_hostile_marker_never_stalls_the_probe_and_is_judged_as_pip_judges_it(tmp_path):
    """A marker that is no UTF-8 INI text still applies (pip shows its own message); a FIFO is no file to pip."""
    python = copy_of_system_python(tmp_path / "copy")
    marker = _marker_of(python)
    assert marker is not None and marker.is_symlink()
    marker.unlink()  # the link to the original's marker, never the marker itself
    marker.write_bytes(b"\xff\xfe[externally-managed]\nError=\x1b]52;c;ZXZpbA==\x07\n")
    plain = [python, "-I", "-m", "pip", "install", "--no-deps", f"{WHEEL}==0.1.11"]
    assert pip_dry_run(plain).returncode != 0  # the oracle: refused all the same
    found = evidence(python)
    assert found["enforced"] and found["error"] is None and found["unread"].startswith("not parsed")
    marker.unlink()
    os.mkfifo(marker)
    assert pip_dry_run(plain).returncode == 0  # the oracle: pip tests os.path.isfile
    found = evidence(python, timeout=60)
    assert not found["found"] and not found["enforced"]


def copy_of_system_python(root: Path) -> str:
    """/usr/bin/python3, externally managed as the original is, with site-packages of its own: its binary copied
    (Python finds its prefix from where the binary is), its stdlib folder a folder of links to the original's files
    (the marker among them), and pip copied into its own dist-packages (Debian's pip finds the wheels it unbundled in
    /usr/share/python-wheels). pip installs into root/local/lib/pythonX.Y/dist-packages, never the original's."""
    real = Path(os.path.realpath(SYSTEM_PYTHON))
    stdlib = Path(MARKER).parent  # type: ignore[arg-type]
    (root / "bin").mkdir(parents=True)
    shutil.copy2(real, root / "bin" / real.name)
    (root / "lib" / stdlib.name).mkdir(parents=True)
    for entry in stdlib.iterdir():
        (root / "lib" / stdlib.name / entry.name).symlink_to(entry)
    pip = Path(subprocess.run([SYSTEM_PYTHON, "-I", "-c", "import os, pip; print(os.path.dirname(pip.__file__))"],
                              capture_output=True, text=True, check=True).stdout.strip())
    shutil.copytree(pip, root / "lib" / "python3" / "dist-packages" / "pip", symlinks=True)
    python = str(root / "bin" / real.name)
    assert _marker_of(python) == root / "lib" / stdlib.name / "EXTERNALLY-MANAGED"
    return python


@pytest.mark.slow
def test_the_printed_venv_route_works_and_the_job_is_judged_in_it(tmp_path):
    folder = tmp_path / "job-venv"
    script = run_doctor("fix", *ARGS, "--venv", str(folder), python=SYSTEM_PYTHON).stdout
    # Nothing of it may run pip with the system interpreter itself (pip would refuse; this test never tries).
    assert all(py == str(folder / "bin" / "python") for py, argv in script_commands(script, SYSTEM_PYTHON)
               if "pip" in argv), script
    ensure(CACHED["tvm"])
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300, env=offline_env())
    assert done.returncode == 0, done.stderr
    inside = folder / "bin" / "python"
    assert list((folder / "lib").glob(f"python3.*/site-packages/{WHEEL.replace('-', '_')}-0.1.11.dist-info"))
    assert f"PY={inside}" in script
    assert row(run_doctor("check", *ARGS, "-f", "json", python=str(inside)).report, "tvm-ffi.version")["status"] \
        == "pass"
    gone = subprocess.run([SYSTEM_PYTHON, "-I", "-c", f"import importlib.metadata as m; m.version('{WHEEL}')"],
                          capture_output=True, timeout=30)
    assert gone.returncode != 0  # the system interpreter is as it was


@pytest.mark.slow
def test_fix_apply_makes_a_venv_in_the_jobs_folder_and_names_it(tmp_path):
    """On the copy of /usr/bin/python3 (what --apply runs must never reach the system interpreter's packages)."""
    python = copy_of_system_python(tmp_path / "copy")
    job = tmp_path / "job"
    job.mkdir()
    ensure(CACHED["tvm"])
    applied = run_doctor("fix", *ARGS, "--apply", "--yes", python=python, cwd=job, env=offline_env())
    folder = job / ".venv-dsv4"
    assert applied.returncode == 0, applied.stderr
    assert f"installing: {python} is externally managed (PEP 668): the pip steps install into the virtual " \
           f"environment {folder}" in applied.stderr
    assert f"+ {python} -I -m venv --system-site-packages --without-pip {folder}" in applied.stderr
    assert f"+ {folder}/bin/python -I -m pip install --no-deps {WHEEL}==0.1.11" in applied.stderr
    assert "after:  Verdict: PASS" in applied.stderr and f"run the job with {folder}/bin/python" in applied.stderr
    assert list((folder / "lib").glob("python3.*/site-packages/apache_tvm_ffi-0.1.11.dist-info"))
    assert not (tmp_path / "copy" / "local").exists()  # nothing went into the interpreter itself


@pytest.mark.slow
def test_fix_apply_with_break_system_packages_installs_into_the_interpreter_itself(tmp_path):
    python = copy_of_system_python(tmp_path / "copy")
    plain = [python, "-I", "-m", "pip", "install", "--no-deps", f"{WHEEL}==0.1.11"]
    assert "externally-managed-environment" in pip_dry_run(plain).stderr  # the copy is managed as the original is
    applied = run_doctor("fix", *ARGS, "--apply", "--yes", "--break-system-packages", python=python, cwd=tmp_path,
                         env=offline_env())
    assert applied.returncode == 0, applied.stderr
    assert f"installing: {python} is externally managed (PEP 668): the pip steps install into it with pip's " \
           "--break-system-packages, as asked" in applied.stderr
    assert f"+ {python} -I -m pip install --break-system-packages --no-deps {WHEEL}==0.1.11" in applied.stderr
    assert "after:  Verdict: PASS" in applied.stderr and "-m venv" not in applied.stderr
    assert list((tmp_path / "copy" / "local" / "lib").glob("python3.*/dist-packages/apache_tvm_ffi-0.1.11.dist-info"))
    assert not (tmp_path / ".venv-dsv4").exists()


def test_without_pip_the_venv_brings_its_own_and_the_flag_reaches_ensurepip(tmp_path):
    """An externally managed interpreter with ensurepip but no pip (a state this machine's python3 does not show):
    the venv way makes a venv with pip of its own and drops the interpreter's ensurepip step, which pip would refuse;
    the other way keeps ensurepip, through PIP_BREAK_SYSTEM_PACKAGES=1, and flags every pip step."""
    from dsv4_doctor.checks.fixes.installer import break_route, venv_route
    from dsv4_doctor.fix.plan import Policy, build_plan
    from dsv4_doctor.model.core import CheckReport, Fix, Status

    fixes = [venv_route(SYSTEM_PYTHON, str(MARKER), with_pip=True), break_route(SYSTEM_PYTHON, str(MARKER), None),
             Fix("install pip", [["ensurepip", "--upgrade"]], key="installer:ensurepip", phase="path"),
             Fix("tvm", [["pip", "install", "--no-deps", f"{WHEEL}==0.1.11"]], key="tvm")]
    rows = [CheckReport(id="tvm-ffi.version", title="t", status=Status.FAIL, summary="s", fixes=fixes)]
    plan = build_plan(rows, {}, Policy(venv=str(tmp_path / "v")))
    assert [[list(c.argv) for c in s.commands] for s in plan.steps] == [
        [["venv", "--system-site-packages", str(tmp_path / "v")]],
        [["pip", "install", "--no-deps", f"{WHEEL}==0.1.11"]]]
    assert plan.venv_python == str(tmp_path / "v" / "bin" / "python") and plan.steps[0].automatic
    breaking = build_plan(rows, {}, Policy(break_system_packages=True))
    assert [(list(c.argv), c.env) for s in breaking.steps for c in s.commands] == [
        (["ensurepip", "--upgrade"], (("PIP_BREAK_SYSTEM_PACKAGES", "1"),)),
        (["pip", "install", "--break-system-packages", "--no-deps", f"{WHEEL}==0.1.11"], ())]
    assert breaking.venv_python is None and "as asked" in breaking.installer_way
