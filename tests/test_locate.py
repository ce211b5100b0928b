"""The copy the job imports, found as its interpreter finds it (the job's sys.path[0], PYTHONPATH, the user site,
PEP 660 editable finders), the fixes that reach it, and the installer the target really has. Real tools throughout:
venvs from the standard library, pip's editable installs with setuptools and hatchling, uv's venv and its pip, git
checkouts; the printed plans are followed and checked again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from dsv4_doctor.engine.probes import LAUNCHER

from conftest import FakeSite, run_doctor
from fakes import fake_megatron_dev
from wheels import ensure

from dsv4_doctor.job.syspath import job_path

CACHED = {"tvm-old": "apache-tvm-ffi-0.1.9", "tvm": "apache-tvm-ffi-0.1.11", "fe-1.32": "nvidia-cudnn-frontend-1.32.0",
          "mcore-release": "megatron-core-0.19.2"}
DEBIAN_PYTHON = "/usr/bin/python3.11"  # a non-venv interpreter (its user site is on), when the image has one


def site_of(python: str) -> Path:
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def put(site: Path, key: str, *names: str) -> None:
    """Copy a real wheel's installed files (from the test cache) into a site folder: `pip install --target`."""
    src = ensure(CACHED[key])
    for entry in src.iterdir():
        if not names or entry.name in names or entry.name.endswith(".dist-info"):
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, site / entry.name)


def make_venv(root: Path, pip: bool = False) -> str:
    venv.EnvBuilder(with_pip=pip, symlinks=True).create(root)
    return str(root / "bin" / "python")


def report(*args: str, **kwargs) -> dict:
    run = run_doctor(*args, "-f", "json", **kwargs)
    assert run.returncode in (0, 1), run.stderr
    return run.report


def row(rep: dict, check_id: str) -> dict:
    return next(c for c in rep["checks"] if c["id"] == check_id)


def by_kind(fixes: list[dict], kind: str) -> dict:
    return next(f for f in fixes if (f.get("action") or {}).get("kind") == kind)


def stale_tvm_target(tmp_path: Path) -> str:
    """A venv whose site-packages holds apache-tvm-ffi 0.1.11 and a frontend 1.32.0 that requires >= 0.1.11."""
    python = make_venv(tmp_path / "venv", pip=False)
    site = site_of(python)
    put(site, "tvm", "tvm_ffi")
    put(site, "fe-1.32", "__none__")  # its metadata: the requirement tvm-ffi.version holds the copy to
    return python


# --- the job's sys.path[0] ------------------------------------------------------------------------------------------

def test_the_jobs_first_path_entry_follows_its_command(tmp_path):
    real = tmp_path / "checkout"
    real.mkdir()
    (tmp_path / "link.py").symlink_to(real / "pretrain_gpt.py")
    cwd = str(tmp_path / "cwd")
    assert job_path(["python", "train/run.py"], cwd).path == os.path.realpath(f"{cwd}/train")
    assert job_path(["python3", "-u", "-X", "dev", str(tmp_path / "link.py")], cwd).path == str(real.resolve())
    assert job_path(["python3", "-m", "verl.trainer.main_ppo", "a=1"], cwd).why == "the working directory (python -m)"
    assert job_path(["python3", "-c", "pass"], cwd).path == os.path.realpath(cwd)
    assert job_path(["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py"], cwd).why == "the script's folder"
    assert job_path(["torchrun", "--nnodes=2", "-m", "verl.x"], cwd).path == os.path.realpath(cwd)
    assert job_path(["python", "-m", "torch.distributed.run", "--standalone", "s/t.py"], cwd).path == \
        os.path.realpath(f"{cwd}/s")
    assert job_path(["env", "-C", "sub", "NCCL_X=1", "python", "-m", "m"], cwd).path == os.path.realpath(f"{cwd}/sub")
    isolated = job_path(["python", "-I", "train.py"], cwd)
    assert isolated.path is None and isolated.flags == ("-I",)
    assert job_path(["python", "-sE", "t.py"], cwd).flags == ("-s", "-E")
    assert job_path(["PYTHONSAFEPATH=1", "python", "t.py"], cwd).path is None
    assert job_path(["PYTHONPATH=/x", "python", "t.py"], cwd).env == (("PYTHONPATH", "/x"),)
    assert job_path(["bash", "run.sh"], cwd).path is None
    assert job_path(["torchrun", "--no-python", "prog"], cwd).path is None


# --- the job's own folder and PYTHONPATH shadow site-packages; the plan reaches the copy the job imports ---------

# "script" also runs the printed fix script (ensurepip, then pip from the test wheels): seconds, with the slow tests.
@pytest.mark.parametrize("how", [pytest.param("script", marks=pytest.mark.slow), "module"])
def test_the_jobs_own_folder_shadows_site_packages_and_the_plan_moves_it_aside(tmp_path, how):
    python = stale_tvm_target(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    put(job, "tvm-old", "tvm_ffi")  # a stale copy in the job's folder (`pip install --target .` once)
    (job / "train.py").write_text("print('train')\n")
    command = "python3 train.py" if how == "script" else "python3 -m train"
    args = ("--only", "tvm-ffi.version,deps.copies", "--cp", "2", "--job-args", command)
    # --job-cwd says where the job runs (the doctor runs elsewhere); preflight would use its own folder.
    rep = report("check", *args, "--job-cwd", str(job), python=python, cwd=tmp_path)
    tvm = row(rep, "tvm-ffi.version")
    assert tvm["status"] == "warn" and "0.1.9" in tvm["summary"], tvm
    why = "from the script's folder" if how == "script" else "from the working directory (python -m)"
    copies = row(rep, "deps.copies")
    assert copies["status"] == "warn" and f"({why})" in copies["summary"] and "0.1.11 at" in copies["summary"]
    step = by_kind(tvm["fixes"], "move-aside")
    assert step["phase"] == "path", step
    assert step["action"]["path"] == str(job / "tvm_ffi")
    # Without --job-cwd the doctor's own folder is the working directory: the job's copy is not seen for -m.
    if how == "module":
        assert row(report("check", *args, python=python, cwd=tmp_path), "tvm-ffi.version")["status"] == "pass"
    # The plan, followed: the typed action carried out (and, once, the printed script run); the re-check is green.
    fix = run_doctor("fix", *args, "--job-cwd", str(job), python=python, cwd=tmp_path)
    assert "move that copy aside" in fix.stdout and '"$PY" -I -m ensurepip --upgrade' in fix.stdout
    os.rename(step["action"]["path"], step["action"]["to"])
    os.rename(step["action"]["dist_info"], step["action"]["dist_info_to"])
    if how == "script":  # the printed script itself, run offline from the test wheels (ensurepip, then pip)
        from wheels import DOWNLOADS

        ensure(CACHED["tvm"])
        done = subprocess.run(["sh", "-c", fix.stdout], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(DOWNLOADS), PYTHONPATH=""))
        assert done.returncode == 0, done.stderr
    assert row(report("check", *args, "--job-cwd", str(job), python=python, cwd=tmp_path),
               "tvm-ffi.version")["status"] == "pass"


def test_a_pythonpath_copy_is_dropped_by_the_plan_and_the_recheck_is_green(tmp_path):
    python = stale_tvm_target(tmp_path)
    site_of(python)
    stale = ensure(CACHED["tvm-old"])
    args = ("--only", "tvm-ffi.version", "--cp", "2")
    rep = report("check", *args, python=python, sites=(stale,))
    tvm = row(rep, "tvm-ffi.version")
    assert tvm["status"] == "warn" and "0.1.9" in tvm["summary"]
    drop, pip = by_kind(tvm["fixes"], "drop-pythonpath-entry"), tvm["fixes"][-1]
    assert drop["action"] == {"kind": "drop-pythonpath-entry", "module": "tvm_ffi", "entry": os.path.realpath(stale),
                              "index": "1", "variable": "PYTHONPATH", "value": ""}
    assert "PYTHONPATH entry 1" in drop["description"] and "unset PYTHONPATH" in drop["description"]
    assert pip["argv"] == [["pip", "install", "--no-deps", "apache-tvm-ffi==0.1.11"]] and pip["installer"] == "pip"
    assert by_kind(tvm["fixes"], "install-pip")["argv"] == [["ensurepip", "--upgrade"]]  # a venv without pip
    script = run_doctor("fix", *args, python=python, sites=(stale,)).stdout
    assert script.index("PYTHONPATH entry 1") < script.index("apache-tvm-ffi==0.1.11")  # the drop comes first
    # Followed: the entry dropped as the action says (the install step is then satisfied already).
    env = {drop["action"]["variable"]: drop["action"]["value"]}
    assert row(report("check", *args, python=python, env=env), "tvm-ffi.version")["status"] == "pass"


@pytest.mark.skipif(not os.path.exists(DEBIAN_PYTHON), reason="no non-venv interpreter here")
def test_a_user_site_copy_shadows_a_plain_interpreter_not_a_venv(tmp_path):
    base = tmp_path / "userbase"
    user_site = base / "lib" / "python3.11" / "site-packages"
    user_site.mkdir(parents=True)
    put(user_site, "tvm-old", "tvm_ffi")
    env = {"PYTHONUSERBASE": str(base)}
    args = ("--only", "tvm-ffi.version,deps.copies", "--cp", "2")
    rep = report("check", *args, python=DEBIAN_PYTHON, env=env)
    assert row(rep, "tvm-ffi.version")["summary"].startswith("apache-tvm-ffi 0.1.9")  # the user site's copy
    static = probe_static(DEBIAN_PYTHON, ["tvm_ffi"], env)["modules"]["tvm_ffi"]
    assert static["why"] == "the user site" and static["place"] == "user-site"
    assert static["origin"].startswith(str(user_site))
    # Carried out (PYTHONNOUSERSITE=1): the user-site copy is no longer the job's.
    off = probe_static(DEBIAN_PYTHON, ["tvm_ffi"], dict(env, PYTHONNOUSERSITE="1"))["modules"]["tvm_ffi"]
    assert off.get("place") != "user-site"
    # Inside a venv the user site is off: the same PYTHONUSERBASE does not reach its interpreter.
    inside = probe_static(make_venv(tmp_path / "venv"), ["tvm_ffi"], env)["modules"]["tvm_ffi"]
    assert inside == {"found": False, "missing": "tvm_ffi"}


def test_a_user_site_copy_is_cleared_before_the_install_step(tmp_path):
    """The routing itself, on the probe's real answer for a user-site copy that hides a site-packages one."""
    from dsv4_doctor.model.facts import StaticFacts
    from dsv4_doctor.checks._reach import clearing

    if not os.path.exists(DEBIAN_PYTHON):
        pytest.skip("no non-venv interpreter here")
    base = tmp_path / "userbase"
    user_site = base / "lib" / "python3.11" / "site-packages"
    user_site.mkdir(parents=True)
    put(user_site, "tvm-old", "tvm_ffi")
    answer = probe_static(DEBIAN_PYTHON, ["tvm_ffi"], {"PYTHONUSERBASE": str(base)},
                          distributions=["apache-tvm-ffi"])
    step = clearing(StaticFacts(answer), "tvm_ffi", "apache-tvm-ffi")
    assert step is not None and dict(step.action)["kind"] == "disable-user-site"
    assert "the user site" in step.description and dict(step.action)["entry"] == str(user_site)


def probe_static(python: str, modules: list[str], env: dict | None = None, job: dict | None = None,
                 distributions: list[str] | None = None, cwd: Path | None = None) -> dict:
    """The static probe's answer, run by `python` as the doctor runs it."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"static-{os.getpid()}-{abs(hash(str(modules)))}.json"
    request = {"modules": modules, "distributions": distributions or []}
    if job:
        request["job_path"] = job
    script = Path(__file__).resolve().parents[1] / "doctor" / "probes" / "dsv4probe_static.py"
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUSERBASE", "PYTHONNOUSERSITE")}
    request_file = out.with_name(out.stem + ".request.json")  # as the doctor hands a probe its request: a file
    request_file.write_text(json.dumps(request))
    try:
        subprocess.run([python, str(LAUNCHER), str(script), str(out), str(request_file)], env=dict(full, **(env or {})),
                       check=True, cwd=cwd, timeout=60)
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
        request_file.unlink()


# --- editable installs: setuptools (flat layout, as Megatron-LM) and hatchling ------------------------------------

def git(*args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


MEGATRON_PYPROJECT = """\
[build-system]
requires = ["setuptools>=77.0.3"]
build-backend = "setuptools.build_meta"

[project]
name = "megatron-core"
dynamic = ["version"]

[tool.setuptools.dynamic]
version = {attr = "megatron.core.package_info.__version__"}

[tool.setuptools.packages.find]
include = ["megatron.core", "megatron.core.*"]
"""


@pytest.fixture(scope="module")
def builder_python(tmp_path_factory) -> str:
    """A venv with pip and the two build backends (setuptools as Megatron-LM requires it, hatchling), from PyPI:
    the editable installs below build without isolation, once each."""
    root = tmp_path_factory.mktemp("builders") / "venv"
    backends = ["pip", "setuptools>=77.0.3", "wheel", "hatchling", "editables"]
    uv = uv_binary()  # uv makes the venv and installs them in seconds, the standard library and pip in about twenty
    if uv:
        subprocess.run([uv, "venv", "-q", str(root), "--python", sys.executable], check=True, timeout=60)
        python = str(root / "bin" / "python")
        subprocess.run([uv, "pip", "install", "-q", "--python", python, *backends], check=True, capture_output=True,
                       timeout=300)
    else:
        python = make_venv(root, pip=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *backends], check=True, capture_output=True,
                       timeout=300)
    return python


def editable(python: str, checkout: Path) -> None:
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", str(checkout)],
                   check=True, capture_output=True, timeout=120)


@pytest.mark.slow
def test_an_editable_megatron_checkout_is_judged_and_updated_in_place(tmp_path, builder_python):
    """pip install -e of a flat-layout checkout with setuptools, as Megatron-LM's developers install it: the
    release's files (megatron-core 0.19.2) fail mcore.dsv4 as what they are, never "not installed"; the plan moves
    the checkout itself (git fetch, git checkout), and once the checkout holds dev's files the re-check passes."""
    python = builder_python
    origin = tmp_path / "origin"
    shutil.copytree(ensure(CACHED["mcore-release"]) / "megatron", origin / "megatron",
                    ignore=shutil.ignore_patterns("*.dist-info", "__pycache__"))
    (origin / "pyproject.toml").write_text(MEGATRON_PYPROJECT)
    (origin / "megatron" / "core" / "package_info.py").write_text("__version__ = '0.19.2'\nMAJOR = 0\n")
    git("init", "-q", "-b", "main", str(origin))
    git("-C", str(origin), "add", "-A")
    git("-C", str(origin), "commit", "-qm", "release")
    checkout = tmp_path / "Megatron-LM"
    git("clone", "-q", str(origin), str(checkout))
    editable(python, checkout)
    rep = report("check", "--only", "mcore.dsv4", python=python, cwd=tmp_path)
    mcore = row(rep, "mcore.dsv4")
    assert mcore["status"] == "fail" and "not installed" not in mcore["summary"], mcore
    assert mcore["evidence"]["imported_copy"].startswith("editable megatron-core 0.19.2 -> ")
    step = mcore["fixes"][0]
    assert step["action"] == {"kind": "update-checkout", "module": "megatron.core", "checkout": str(checkout),
                              "commit": step["action"]["commit"]} and len(step["action"]["commit"]) == 40
    assert step["argv"][0] == ["git", "-C", str(checkout), "fetch", "origin"]
    # Upstream moves on to dev (here: the dev tree's files on the origin's main); the plan's fetch brings it, and a
    # checkout of what was fetched stands for the pinned commit (which this local origin cannot have).
    dev = FakeSite(tmp_path / "dev")
    fake_megatron_dev(dev)
    shutil.copytree(dev.root / "megatron", origin / "megatron", dirs_exist_ok=True)
    git("-C", str(origin), "add", "-A")
    git("-C", str(origin), "commit", "-qm", "dev")
    subprocess.run(step["argv"][0], check=True, capture_output=True)
    git("-C", str(checkout), "checkout", "-q", "FETCH_HEAD")
    again = row(report("check", "--only", "mcore.dsv4", python=python, cwd=tmp_path), "mcore.dsv4")
    assert again["status"] == "pass", again
    assert git("-C", str(checkout), "rev-parse", "HEAD")[:8] in again["summary"]


HATCH_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "nvidia-cudnn-frontend"
version = "1.26.0"

[tool.hatch.build.targets.wheel]
packages = ["cudnn"]
"""


@pytest.mark.slow
def test_an_editable_hatchling_install_is_the_copy_the_job_imports(tmp_path, builder_python):
    python = builder_python
    checkout = tmp_path / "cudnn-frontend"
    (checkout / "cudnn").mkdir(parents=True)
    (checkout / "cudnn" / "__init__.py").write_text("__version__ = '1.26.0'\n")
    (checkout / "pyproject.toml").write_text(HATCH_PYPROJECT)
    editable(python, checkout)
    found = probe_static(python, ["cudnn"], distributions=["nvidia-cudnn-frontend"])["modules"]["cudnn"]
    assert found["origin"] == str(checkout / "cudnn" / "__init__.py")
    assert found["place"] == "editable" and found["owner"]["editable"] is True
    assert found["why"].startswith(f"editable nvidia-cudnn-frontend 1.26.0 -> {checkout}")


# --- the installer the target has ---------------------------------------------------------------------------------

def uv_binary() -> str | None:
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


@pytest.mark.slow
@pytest.mark.skipif(uv_binary() is None, reason="uv is in the test extras")
def test_a_uv_venv_gets_uv_pip_and_the_printed_plan_turns_it_green(tmp_path):
    uv = uv_binary()
    assert uv is not None
    target = tmp_path / "uvv"
    subprocess.run([uv, "venv", "-q", str(target), "--python", sys.executable], check=True, timeout=60)
    assert "uv = " in (target / "pyvenv.cfg").read_text()
    python = str(target / "bin" / "python")
    path = os.pathsep.join([str(Path(uv).parent), os.environ.get("PATH", "")])
    args = ("--only", "tvm-ffi.version", "--cp", "2")
    rep = report("check", *args, python=python, env={"PATH": path})
    assert rep["environment"]["target_python"]["installer"]["uv_venv"] is True
    assert rep["environment"]["target_python"]["installer"]["pip"] is None
    fix = row(rep, "tvm-ffi.version")["fixes"][0]
    assert fix["installer"] == "uv"
    # Without uv on PATH, the same venv's plan starts with its own ensurepip.
    bare = os.pathsep.join(p for p in path.split(os.pathsep) if p and not (Path(p) / "uv").exists())
    assert '"$PY" -I -m ensurepip --upgrade' in run_doctor("fix", *args, python=python, env={"PATH": bare}).stdout
    script = run_doctor("fix", *args, python=python, env={"PATH": path}).stdout
    assert 'uv pip install --python "$PY" --no-deps apache-tvm-ffi==0.1.11' in script
    assert "-m pip" not in script
    done = subprocess.run(["sh", "-c", script], env=dict(os.environ, PATH=path), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert row(report("check", *args, python=python, env={"PATH": path}), "tvm-ffi.version")["status"] == "pass"
    # fix --apply makes the same choice: uv aimed at the target.
    subprocess.run([uv, "pip", "uninstall", "-q", "--python", python, "apache-tvm-ffi"], check=True, timeout=60)
    applied = run_doctor("fix", *args, "--apply", "--yes", python=python, env={"PATH": path})
    assert applied.returncode == 0 and f"+ {uv} pip install --python {python} --no-deps" in applied.stderr, \
        applied.stderr


def test_no_pip_means_ensurepip_first_and_no_ensurepip_means_no_installer(tmp_path):
    python = make_venv(tmp_path / "venv")  # the standard library's venv, without pip: ensurepip is there
    args = ("--only", "tvm-ffi.version", "--cp", "2")
    script = run_doctor("fix", *args, python=python).stdout
    assert script.index('"$PY" -I -m ensurepip --upgrade') < script.index('"$PY" -I -m pip install')
    if not os.path.exists(DEBIAN_PYTHON) or os.path.isdir("/usr/lib/python3.11/ensurepip/_bundled"):
        return
    debian = tmp_path / "debian-venv"  # Debian strips ensurepip's wheels: no pip, no ensurepip, no uv venv
    subprocess.run([DEBIAN_PYTHON, "-m", "venv", "--without-pip", str(debian)], check=True)
    fix = run_doctor("fix", *args, python=str(debian / "bin" / "python"))
    assert fix.returncode == 1 and "NO INSTALLER" in fix.stdout and "exit 1" in fix.stdout
    done = subprocess.run(["sh", "-c", fix.stdout], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "no installer" in done.stderr
    # fix --apply makes the same choice: nothing is run.
    applied = run_doctor("fix", *args, "--apply", "--yes", python=str(debian / "bin" / "python"))
    assert applied.returncode == 1 and "nothing applied: no installer" in applied.stderr, applied.stderr
    assert "-m pip" not in applied.stderr


@pytest.mark.slow
def test_fix_apply_on_a_venv_without_pip_runs_its_ensurepip_first_and_the_recheck_is_green(tmp_path):
    """`fix --apply` follows the plan's installer choice: the target's own ensurepip, then its pip (offline, from the
    test wheels), and the re-check passes."""
    from wheels import DOWNLOADS

    python = make_venv(tmp_path / "venv")  # the standard library's venv, without pip: ensurepip is there
    put(site_of(python), "fe-1.32", "__none__")  # the frontend's metadata: it requires apache-tvm-ffi >= 0.1.11
    ensure(CACHED["tvm"])  # its wheel in the offline index
    args = ("--only", "tvm-ffi.version", "--cp", "2")
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(DOWNLOADS)}
    applied = run_doctor("fix", *args, "--apply", "--yes", python=python, env=env, timeout=300)
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr.index(f"+ {python} -I -m ensurepip --upgrade") < \
        applied.stderr.index(f"+ {python} -I -m pip install --no-deps apache-tvm-ffi==0.1.11")
    assert "after:  Verdict: PASS" in applied.stderr


def test_how_each_installer_runs_a_pip_command():
    from dsv4_doctor.fix.steps import Command, installer_argv
    from dsv4_doctor.report.script import pip_line

    cmd = Command(("pip", "install", "--no-cache-dir", "--no-deps", "x==1"))
    assert installer_argv("/py", cmd) == ["/py", "-I", "-m", "pip", "install", "--no-cache-dir", "--no-deps", "x==1"]
    assert installer_argv("/py", cmd, "uv", "/bin/uv") == ["/bin/uv", "pip", "install", "--python", "/py",
                                                          "--no-cache", "--no-deps", "x==1"]
    assert installer_argv("/py", Command(("pip", "uninstall", "-y", "x")), "uv") == \
        ["uv", "pip", "uninstall", "--python", "/py", "x"]  # uv never asks
    assert pip_line(cmd, "uv") == 'uv pip install --python "$PY" --no-cache --no-deps x==1'
    assert pip_line(Command(("ensurepip", "--upgrade"))) == '"$PY" -I -m ensurepip --upgrade'


# --- "installed N times": every stack package, each copy with its own version and folder ------------------------

def test_every_copy_of_a_compiled_package_is_listed_with_its_version_and_folder(tmp_path, bare_python):
    from fakes import Env, fake_kernel
    from probed import judge

    env = Env(tmp_path)
    env.fake("old", lambda s: fake_kernel(s, "fast_hadamard_transform", "fast-hadamard-transform", "f", "1.0.4"))
    env.fake("new", lambda s: fake_kernel(s, "fast_hadamard_transform", "fast-hadamard-transform", "f", "1.1.0"))
    env.fake("flash", lambda s: fake_kernel(s, "flash_mla", "flash-mla", None, "1.0.0"))
    got = judge(env, bare_python, "deps.copies")
    assert got["status"] == "warn", got
    old, new = tmp_path / "old", tmp_path / "new"
    assert f"fast-hadamard-transform is installed 2 times (1.0.4 at {old}; 1.1.0 at {new})" in got["summary"]
    assert f"the job imports the copy at {old} (PYTHONPATH entry 1)" in got["summary"]
    assert "flash-mla" not in got["details"]  # one copy: no note
    assert got["evidence"]["fast-hadamard-transform"]["copies"] == [
        {"version": "1.0.4", "path": str(old / "fast_hadamard_transform-1.0.4.dist-info")},
        {"version": "1.1.0", "path": str(new / "fast_hadamard_transform-1.1.0.dist-info")}]


def test_a_dev_checkout_in_the_jobs_folder_with_nothing_installed_is_judged_by_its_files(tmp_path):
    """`torchrun pretrain_gpt.py` in a Megatron-LM checkout: the checkout's own files are what the job imports."""
    python = make_venv(tmp_path / "venv")
    checkout = tmp_path / "Megatron-LM"
    fake_megatron_dev(FakeSite(checkout))
    for meta in checkout.glob("*.dist-info"):
        shutil.rmtree(meta)  # a checkout: no metadata
    (checkout / "pretrain_gpt.py").write_text("print('train')\n")
    job = ("--only", "mcore.dsv4", "--job-args", "torchrun --nproc-per-node 8 pretrain_gpt.py")
    mcore = row(report("check", *job, python=python, cwd=checkout), "mcore.dsv4")
    assert mcore["status"] == "pass", mcore
    assert mcore["evidence"]["imported_copy"] == "from the script's folder"
    assert mcore["evidence"]["checkout"] == str(checkout) and mcore["evidence"]["files_version"] == "0.19.0"
    # Without the job's command the checkout is not on the path: not installed, as the doctor's own folder says.
    assert row(report("check", "--only", "mcore.dsv4", python=python, cwd=tmp_path), "mcore.dsv4")["status"] == "fail"
