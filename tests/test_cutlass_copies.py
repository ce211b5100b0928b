"""Which `cutlass` the job imports when two CuTe DSL releases are installed, with the published wheels: 4.5.2 installed
into a venv's site-packages and 4.8.1 in a `pip install --target` folder on PYTHONPATH, and the reverse. A folder on
PYTHONPATH never has its .pth files read, and 4.8's .pth finds its `dsl_packages` through the namespace package
`nvidia_cutlass_dsl`, whose first portion can be another copy's: the `cutlass` that imports is then another copy than
the one whose metadata comes first, or none. `cutlass-dsl.import` names the copy and version that really imports."""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from conftest import run_doctor
from wheels import ensure

# What each release imports with (the published wheels, installed files as pip lays them out).
CUTLASS_452 = ("nvidia-cutlass-dsl-4.5.2", "nvidia-cutlass-dsl-libs-base-4.5.2")
CUTLASS_481 = ("nvidia-cutlass-dsl-4.8.1-cu13",)
BESIDE = ("cuda-bindings-13.4.4", "cuda-pathfinder-1.9.1", "cuda-python-13.4.4", "numpy-2.4.6",
          "typing-extensions-4.16.0")


def venv_with(root: Path, keys: tuple[str, ...]) -> str:
    """A venv whose site-packages holds these wheels' files, .pth files included (read there, as after `pip
    install`)."""
    venv.EnvBuilder(symlinks=True).create(root)
    python = str(root / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    for key in keys:
        for entry in ensure(key).iterdir():
            if entry.name in (".complete", "bin"):
                continue
            if entry.is_dir():  # shared folders (nvidia_cutlass_dsl, cuda) merge, as pip installs them
                shutil.copytree(entry, Path(purelib) / entry.name, dirs_exist_ok=True)
            else:
                shutil.copy2(entry, Path(purelib) / entry.name)
    return python


def cutlass_row(python: str, sites: tuple[Path, ...]) -> dict:
    run = run_doctor("check", "--cp", "2", "--only", "cutlass-dsl.*", "-f", "json", python=python, sites=sites,
                     timeout=180)
    assert run.returncode in (0, 1), run.stderr
    return next(c for c in run.report["checks"] if c["id"] == "cutlass-dsl.import")


def imports(python: str, sites: tuple[Path, ...]) -> str:
    """What the interpreter itself imports: cutlass's file and version, or the error."""
    code = ("try:\n import cutlass; print(cutlass.__version__, cutlass.__file__)\n"
            "except ImportError as e: print('ImportError', e)")
    env = {"PYTHONPATH": ":".join(str(s) for s in sites), "PATH": "/usr/bin:/bin"}
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout.strip()


@pytest.mark.slow
def test_a_target_folder_of_4_8_1_over_a_venv_of_4_5_2(tmp_path):
    python = venv_with(tmp_path / "venv", CUTLASS_452 + BESIDE)
    target = ensure(CUTLASS_481[0])  # --target: its nvidia_cutlass_dsl_packages.pth is never read
    assert imports(python, (target,)).startswith("4.5.2 " + str(tmp_path / "venv"))  # the interpreter's own answer
    row = cutlass_row(python, (target,))
    assert row["status"] == "warn", row
    assert row["summary"].startswith("`cutlass` imports, but it is 4.5.2 (nvidia-cutlass-dsl-libs-base 4.5.2 -> ")
    assert "nvidia_cutlass_dsl/python_packages (nvidia_cutlass_dsl.pth)" in row["summary"]
    assert f"not the nvidia-cutlass-dsl 4.8.1 whose metadata comes first on the path ({target}, sys.path entry" \
        in row["summary"]
    imported = row["evidence"]["imported"]
    assert (imported["version"], imported["version_from"], imported["metadata_version"]) == ("4.5.2", "import", "4.8.1")
    assert imported["file"].startswith(str(tmp_path / "venv"))
    # the locator's rule: the version the job runs is the importing copy's, not the first metadata's
    assert row["evidence"]["distributions"]["nvidia-cutlass-dsl"] == "4.5.2"


@pytest.mark.slow
def test_target_folders_of_4_5_2_over_a_venv_of_4_8_1(tmp_path):
    python = venv_with(tmp_path / "venv", CUTLASS_481 + BESIDE)
    assert imports(python, ()).startswith("4.8.1 ")
    # Alone, 4.8.1 imports from the venv: its .pth runs, `cutlass` is -libs-core's.
    row = cutlass_row(python, ())
    assert row["status"] == "pass", row
    assert "cutlass 4.8.1, nvidia-cutlass-dsl-libs-core 4.8.1 -> " in row["summary"]
    assert "nvidia_cutlass_dsl/dsl_packages (nvidia_cutlass_dsl_packages.pth)" in row["summary"]
    # 4.5.2 on PYTHONPATH: its .pth is not read, and 4.8.1's points into 4.5.2's nvidia_cutlass_dsl (the namespace
    # package's first portion), where there is no dsl_packages: nothing imports, and the metadata says 4.5.2.
    targets = tuple(ensure(k) for k in CUTLASS_452)
    assert imports(python, targets) == "ImportError No module named 'cutlass'"
    row = cutlass_row(python, targets)
    assert row["status"] == "fail", row
    assert "cutlass: ModuleNotFoundError: No module named 'cutlass'" in row["summary"]
    assert "Several copies of nvidia-cutlass-dsl are installed; none puts its `cutlass` on sys.path" in row["details"]
    assert f"first wins: 4.5.2 in {targets[0]}, sys.path entry" in row["details"]
    assert f"4.8.1 in {tmp_path / 'venv'}" in row["details"]
    assert row["evidence"]["imported"]["version"] is None and row["evidence"]["imported"]["from"] is None
