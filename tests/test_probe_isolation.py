"""Every probe script, run as the doctor runs it (a subprocess of the target interpreter, the doctor's child
environment), answers correctly with a hostile same-named package in its own folder's position and on PYTHONPATH: a
probe drops its folder from sys.path before any import and loads its own modules by path, so nothing beside it or on
PYTHONPATH can stand in for what it imports.

The probe folders are copied whole (the engine's, and each check folder holding probe scripts), as an installed or a
plugin's copy would lie. Beside every probe module a package of the same name is planted (a package wins over a
module of the same name in one folder), and beside the scripts packages named after what they import (torch, cudnn,
...); PYTHONPATH holds packages named after every probe module. Each hostile package ends the process with EXIT at
import: a probe that imported one gives no answer.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import probe_modules
from conftest import has_torch
from dsv4_doctor.engine.probes import LAUNCHER, PROBE_DIR, child_env

EXIT = 86
HOSTILE = "import os\nos._exit(%d)\n" % EXIT
# What the probe scripts import from the environment under test: a folder beside them is never the job's.
IMPORTED = ("torch", "cudnn", "flash_mla", "megatron", "transformer_engine", "cutlass", "ray")
TIMEOUT_S = 120

needs_torch = pytest.mark.skipif(not has_torch(), reason="needs the test environment's torch (README test command)")


def _plant(folder: Path, names) -> None:
    for name in names:
        (folder / name).mkdir(exist_ok=True)
        (folder / name / "__init__.py").write_text(HOSTILE)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """(copies of the probe folders by their real folder, the hostile PYTHONPATH folder)."""
    root = tmp_path_factory.mktemp("hostile")
    folders = {}
    names = set()
    for real in probe_modules.probe_folders():
        scripts = sorted(real.glob("dsv4probe_*.py")) + sorted(real.glob("dsv4ref*.py"))
        if not scripts:
            continue
        copy = root / ("lib" if real == PROBE_DIR else "checks-" + real.name)
        copy.mkdir()
        for path in real.glob("*.py"):
            shutil.copy2(path, copy / path.name)
        own = {p.stem for p in copy.glob("*.py") if p.stem != "__init__"}
        _plant(copy, own | set(IMPORTED))
        names |= own
        folders[real] = copy
    pythonpath = root / "pythonpath"
    pythonpath.mkdir()
    _plant(pythonpath, names)
    return folders, pythonpath


def run_as_the_doctor(script: Path, request: dict, tmp_path: Path, lib: Path, pythonpath: Path | None) -> dict:
    out = tmp_path / ("answer-%s.json" % script.stem)
    env = child_env(TIMEOUT_S, {"DSV4_DOCTOR_PROBE_LIB": str(lib)})
    if pythonpath is None:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = str(pythonpath)
    request_file = tmp_path / ("request-%s.json" % script.stem)  # as the doctor hands a probe its request: a file
    request_file.write_text(json.dumps(request))
    # As run_probe starts it: through the library's launcher (its copy beside the copied library).
    argv = [sys.executable, str(lib / LAUNCHER.name), str(script), str(out), str(request_file)]
    proc = subprocess.run(argv, cwd=str(tmp_path), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode != EXIT, "%s imported a hostile stand-in: %s" % (script.name, proc.stderr[-1500:])
    assert out.exists(), "%s gave no answer (exit %s): %s" % (script.name, proc.returncode, proc.stderr[-1500:])
    answer = json.loads(out.read_text())
    assert "probe_error" not in answer, answer
    return answer


def hostile_run(hostile, name: str, request: dict, tmp_path: Path) -> dict:
    folders, pythonpath = hostile
    real = probe_modules.script(name)
    return run_as_the_doctor(folders[real.parent] / real.name, request, tmp_path, folders[PROBE_DIR], pythonpath)


def test_the_hostile_packages_win_over_a_plain_import(hostile, tmp_path):
    """The control: imported by name, from the probe's folder or through PYTHONPATH, the hostile packages answer
    (so the tests below would fail for a probe that imports so)."""
    folders, pythonpath = hostile
    for copy in folders.values():
        probe = copy / "plain_import.py"
        for module in ("torch", "dsv4probe_common"):
            probe.write_text("import %s\n" % module)
            env = dict(os.environ, PYTHONPATH=str(pythonpath))
            assert subprocess.run([sys.executable, str(probe)], env=env, timeout=60).returncode == EXIT
        probe.unlink()
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("import dsv4probe_common\n")
    assert subprocess.run([sys.executable, str(elsewhere)], env=dict(os.environ, PYTHONPATH=str(pythonpath)),
                          timeout=60).returncode == EXIT


def test_every_probe_script_is_covered_here():
    """A new probe script (a module the doctor runs: it serves an answer) gets its case below; the modules its
    scripts load are covered through them."""
    scripts = {p.stem for folder in probe_modules.probe_folders() for p in folder.glob("dsv4probe_*.py")
               if '\nif __name__ == "__main__":' in p.read_text()}
    # The launcher serves no answer of its own: it starts every case below.
    assert scripts - {LAUNCHER.stem} == set(CASES)


ENTRY_LINES = 8  # after its docstring: an import or two, HERE, and the served answer


def test_every_probe_entry_is_a_few_lines_that_serve_a_library_module_beside_it():
    """An entry says what its probe answers and who runs it (its docstring); its code is a library module beside it,
    named by its concern, which tests and other probes load by path (an entry run as __main__ is no module to load)."""
    served = re.compile(r'^    serve\(load_module\("(dsv4probe_\w+)", HERE\)\.answer\)$', re.M)
    entries = 0
    for folder in probe_modules.probe_folders():
        for path in folder.glob("dsv4probe_*.py"):
            text = path.read_text()
            if path.stem == LAUNCHER.stem or '\nif __name__ == "__main__":' not in text:
                continue
            entries += 1
            after = text[text.index('"""', 3) + 3:]
            code = [line for line in after.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            assert len(code) <= ENTRY_LINES, (path.name, code)
            library = served.findall(after)
            assert len(library) == 1 and (folder / (library[0] + ".py")).is_file(), (path.name, library)
    assert entries == len(CASES)


def hydra_ok(answer):
    assert answer["error"]["kind"] == "entry" and "@hydra.main" in answer["error"]["message"], answer
    assert answer["hydra"] is None  # nothing imported before the entry module's config is known


def static_ok(answer):
    copies = answer["distributions"]["packaging"]["copies"]
    assert copies[0]["version"] == importlib.metadata.version("packaging")
    assert answer["modules"]["json"]["found"] is True


def import_ok(answer):
    assert answer["results"][0]["ok"] is True and answer["results"][0]["kind"] == "function"


def libs_ok(answer):
    assert any(c.get("exports") for c in answer["copies"]), answer


def driver_ok(answer):
    real = run_as_the_doctor(PROBE_DIR / "dsv4probe_driver.py", {}, Path(answer["_tmp"]), PROBE_DIR, None)
    assert {k: v for k, v in answer.items() if k != "_tmp"} == real


def torch_ok(answer):
    import torch

    assert answer["imported"] is True and answer["version"] == torch.__version__
    assert Path(answer["origin"]).resolve() == Path(torch.__file__).resolve()


def fleet_ok(answer):
    assert answer["exit_code"] == 0, answer


def ray_ok(answer):
    # Usually no cluster to join here (RAY_ADDRESS unset: "auto" finds none) and the helper says so; where another
    # test's local cluster is up at the same moment (pytest-xdist), "auto" joins it and the helper lists its nodes.
    # Either is the real ray's answer: the hostile ray beside the helper would have ended the process instead.
    if "nodes" in answer:
        assert isinstance(answer["nodes"], list) and "error" not in answer, answer
    else:
        assert "Ray" in answer["error"] or "cannot import ray" in answer["error"], answer


def smoke_ok(answer):
    assert answer["imported"] is True and answer["tier1"]["ok"] is True, answer


def kernels_ok(answer):
    # Without the cuDNN frontend the sub-run is the frontend's skip; the hostile cudnn beside the probe would have
    # ended the process instead.
    assert answer["status"] == "skip" and answer["rule"] == "cudnn-fe.version", answer


CASES = {
    "dsv4probe_static": ({"distributions": ["packaging"], "modules": ["json"]}, static_ok, False),
    "dsv4probe_import": ({"targets": ["json:dumps"]}, import_ok, False),
    "dsv4probe_libs": ({"soname": "libc.so.6", "symbol": "printf"}, libs_ok, False),
    "dsv4probe_driver": ({}, driver_ok, False),
    # The toolchain: stdlib lookups and `nvcc --version` (a 1 s limit), whatever this machine has.
    "dsv4probe_toolchain": ({"nvcc_timeout_s": 1}, lambda a: "cuda_home_from" in a and "cxx" in a and "ninja" in a,
                            False),
    "dsv4probe_torch": ({}, torch_ok, True),
    "dsv4probe_fleet": (None, fleet_ok, True),
    "dsv4probe_ray": ({"dir": ".", "argv": [], "limit": 1, "task_s": 1}, ray_ok, True),
    "dsv4probe_smoke": ({"cp": 1, "device": "cpu", "tier2": False, "distributed": "off"}, smoke_ok, True),
    "dsv4probe_kernels": ({"subrun": "dsa", "device": "cpu"}, kernels_ok, True),
    # An entry module without @hydra.main (the probe script itself): read with ast, an answer that says so.
    "dsv4probe_hydra": ({"entry_file": str(PROBE_DIR / "dsv4probe_hydra.py")}, hydra_ok, False),
    # The settings probe on an entry without @hydra.main: not built, said before anything of the stack imports.
    "dsv4probe_settings": ({"kind": "verl", "entry_file": str(PROBE_DIR / "dsv4probe_hydra.py")},
                           lambda a: a["status"] == "not built" and "@hydra.main" in a["why"], False),
    # No image-wide store handed over (descriptor 212): it says so before importing anything of the stack.
    "dsv4probe_warm": ({"arch": "sm_90a", "recipes": []}, lambda a: a["status"] == "error" and
                       "no writable image-wide kernel store" in a["summary"], False),
}


def fleet_request(tmp_path: Path) -> dict:
    """One rank alone: its doctor's verdict and release are already written, so the exchange ends at once."""
    import socket

    folder = tmp_path / "fleet"
    folder.mkdir()
    (folder / "verdict.json").write_text(json.dumps({"exit_code": 0}))
    (folder / "released").write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"rank": 0, "world_size": 1, "dir": str(folder), "master_addr": "127.0.0.1", "port": port,
            "connect_s": 10.0, "scope": "isolation", "join_s": 0.2, "verdict_s": 2.0, "ack_s": 0.2}


def _cases():
    for name, (_request, _check, torch) in CASES.items():
        marks = [needs_torch, pytest.mark.slow] if torch else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_cases()))
def test_a_probe_answers_right_beside_hostile_same_named_packages(hostile, tmp_path, name, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    request, check, _ = CASES[name]
    answer = hostile_run(hostile, name, request if request is not None else fleet_request(tmp_path), tmp_path)
    if check is driver_ok:
        answer["_tmp"] = str(tmp_path)
    check(answer)


INSTALLED_RUN = r"""
import json, os, sys
import dsv4_doctor
from dsv4_doctor.checks import _te_build, gpu_checks
from dsv4_doctor.checks.smoke import kernels as kernel_checks
from dsv4_doctor.engine.probes import Probe, run_probe
from dsv4_doctor.hostio.procs import Processes

target = os.path.realpath(sys.argv[1])
assert os.path.realpath(dsv4_doctor.__file__).startswith(target + os.sep), dsv4_doctor.__file__
smoke = os.path.dirname(os.path.realpath(kernel_checks.__file__))
probes = {
    "driver": gpu_checks.DRIVER,
    "libs": _te_build.library_probe("libc.so.6", "printf", None),
    "static": Probe.python("static", "dsv4probe_static.py", {"modules": ["json"]}),
    "kernels": Probe.python("kernels", os.path.join(smoke, "dsv4probe_kernels.py"), {"subrun": "layout", "cp": 1,
                                                                                        "device": "cpu"}),
    "smoke": Probe.python("smoke", os.path.join(smoke, "dsv4probe_smoke.py"), {"cp": 1, "device": "cpu",
                                                                                "tier2": False}),
}
out = {}
for name, probe in probes.items():
    assert os.path.realpath(probe.script_path).startswith(target + os.sep), probe.script_path
    result = run_probe(probe, sys.executable, 120, Processes())
    out[name] = {"ok": result.ok, "data": result.data, "error": result.error, "stderr": result.stderr_tail}
print(json.dumps(out))
"""


@needs_torch
@pytest.mark.slow  # a pip build of the project, then torch probes
def test_a_non_editable_install_ships_the_probe_scripts_and_runs_them(tmp_path):
    """`pip install --no-deps --target`: every probe module is in the installed tree, beside the engine or beside its
    area's checks, and the doctor runs them from there."""
    repo = Path(__file__).resolve().parent.parent
    source = tmp_path / "source"  # a copy: the build writes build/ and egg-info beside the sources
    for part in ("doctor", "checks"):
        shutil.copytree(repo / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(repo / name, source / name)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
                    "--target", str(target), str(source)], check=True, timeout=300, capture_output=True)
    sources = {p.relative_to(repo) for p in repo.glob("doctor/**/dsv4*.py")} | \
        {p.relative_to(repo) for p in repo.glob("checks/**/dsv4*.py")}
    installed = {p.relative_to(target / "dsv4_doctor") for p in (target / "dsv4_doctor").glob("**/dsv4*.py")}
    # doctor/ installs as dsv4_doctor/, checks/ as dsv4_doctor/checks/.
    expected = {Path(*p.parts[1:]) if p.parts[0] == "doctor" else p for p in sources}
    assert expected and expected <= installed, sorted(map(str, expected - installed))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_DOCTOR")}
    env["PYTHONPATH"] = str(target)
    proc = subprocess.run([sys.executable, "-c", INSTALLED_RUN, str(target)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(a["ok"] for a in answers.values()), {k: (a["error"], a["stderr"][-500:]) for k, a in answers.items()}
    assert answers["driver"]["data"].get("loaded") in (True, False)
    assert any(c.get("exports") for c in answers["libs"]["data"]["copies"])
    assert answers["static"]["data"]["modules"]["json"]["found"] is True
    assert answers["kernels"]["data"]["status"] == "skip" and "CP 1" in answers["kernels"]["data"]["summary"]
    assert answers["smoke"]["data"]["tier1"]["ok"] is True


def test_a_probe_never_inherits_a_prewarm_marker_folder_or_a_stage_file_from_outside(monkeypatch, tmp_path):
    """A marker folder named from outside could make a build wait on markers it never made (the smoke probe names
    its own, for its builds only); a stage file is the doctor's to name."""
    from dsv4_doctor.engine.probes import PENDING_VARIABLE, STAGE_VARIABLE

    monkeypatch.setenv(PENDING_VARIABLE, str(tmp_path))
    monkeypatch.setenv(STAGE_VARIABLE, str(tmp_path / "stage"))
    env = child_env(5)
    assert PENDING_VARIABLE not in env and STAGE_VARIABLE not in env
