"""The static probe against fake site directories: metadata, module locations, ast, and broken files."""

from __future__ import annotations

import os

import pytest

from dsv4_doctor.engine.probes import STATIC_SCRIPT, Probe, StaticRequest, run_probe
from dsv4_doctor.hostio.procs import Processes


def static(site, bare_python, **request):
    probe = Probe.python("static", STATIC_SCRIPT, StaticRequest(**request).to_json())
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(site.root)
    try:
        result = run_probe(probe, bare_python, 30, Processes())
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    assert result.ok, result
    return result.data


def test_versions_duplicates_and_broken_metadata(site, bare_python):
    site.dist("good-pkg", "1.2.3")
    site.dist("twice", "1.0")
    site.dist("twice", "2.0")
    site.dist("empty-meta", None, metadata=b"")
    site.dist("latin1", "1.0", metadata="Metadata-Version: 2.1\nName: latin1\nVersion: 1.0\nSummary: caf\xe9\n"
              .encode("latin-1"))
    data = static(site, bare_python, distributions=["good-pkg", "twice", "empty-meta", "latin1", "absent"])
    dists = data["distributions"]
    assert dists["good-pkg"]["copies"][0]["version"] == "1.2.3"
    assert sorted(c["version"] for c in dists["twice"]["copies"]) == ["1.0", "2.0"]
    assert dists["empty-meta"]["copies"][0]["error"]
    assert dists["empty-meta"]["copies"][0]["version"] is None
    latin = dists["latin1"]["copies"][0]
    # METADATA is UTF-8 (core metadata spec): a Latin-1 file is unreadable, an error of its own, never a crash
    assert latin["version"] is None and latin["error"].startswith("UnicodeDecodeError")
    assert dists["absent"]["copies"] == []


def test_modules_are_located_without_being_imported(site, bare_python, tmp_path):
    marker = tmp_path / "imported"
    site.file("heavy/__init__.py", f"open({str(marker)!r}, 'w').write('x')\n")
    site.file("heavy/core/__init__.py", f"open({str(marker)!r}, 'w').write('x')\n")
    site.file("heavy/core/params.py", "x = 1\n")
    site.file("nspkg/sub/mod.py", "y = 2\n")  # a namespace package, as megatron is
    data = static(site, bare_python, modules=["heavy.core.params", "nspkg.sub.mod", "heavy.nothing", "nope"])
    mods = data["modules"]
    assert mods["heavy.core.params"]["found"] and mods["heavy.core.params"]["origin"].endswith("heavy/core/params.py")
    assert mods["nspkg.sub.mod"]["found"]
    assert mods["heavy.nothing"] == {"found": False, "missing": "heavy.nothing"}
    assert mods["nope"]["found"] is False
    assert not marker.exists()


def test_ast_summary_and_undecodable_source(site, bare_python):
    site.file("pkg/params.py", """
        from dataclasses import dataclass
        from typing import Literal

        @dataclass
        class Params:
            qkv_format: str = None
            cp_partition_mode: Literal["zigzag", "contiguous"] = "zigzag"

        class Loose:
            def __init__(self, a, **kwargs):
                pass

        def helper(x, *, cp_layout="zigzag"):
            return x

        FLAG = True
    """)
    site.file("pkg/bad.py", b"x = '\xff\xfe not utf-8'\n")
    data = static(site, bare_python, sources=["pkg.params", "pkg.bad", "pkg.absent"], contains=["FLAG = True"])
    src = data["sources"]["pkg.params"]
    fields = {f["name"]: f for f in src["classes"]["Params"]["fields"]}
    assert fields["cp_partition_mode"]["default"] == "'zigzag'"
    assert src["classes"]["Params"]["decorators"] == ["dataclass"]
    assert src["classes"]["Loose"]["methods"]["__init__"]["varkw"] == "kwargs"
    assert src["functions"]["helper"]["params"] == ["x", "cp_layout"]
    assert "FLAG" in src["names"] and src["contains"]["FLAG = True"]
    assert data["sources"]["pkg.bad"]["error"].startswith("SyntaxError: (unicode error)")
    assert data["sources"]["pkg.absent"]["found"] is False


@pytest.mark.slow  # real wheels, end to end: the default suite stays near 120 s on 2 cores
def test_record_fingerprint_is_the_package_files_not_how_it_was_installed(tmp_path, bare_python):
    """Two installs of one published wheel, from the index folder with .pyc files and from another folder with
    --no-compile, have the same fingerprint (on the H200 the RECORD hashes differed in direct_url.json only);
    another version does not. fleet.drift compares these."""
    import shutil
    import subprocess
    import sys
    from types import SimpleNamespace

    from wheels import DOWNLOADS, ensure

    ensure("apache-tvm-ffi-0.1.11")
    ensure("apache-tvm-ffi-0.1.9")
    wheel = next(DOWNLOADS.glob("apache_tvm_ffi-0.1.11-*.whl"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(wheel, elsewhere)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*pip, "--find-links", str(DOWNLOADS), "--target", str(tmp_path / "a"), "apache-tvm-ffi==0.1.11"],
                   check=True)
    subprocess.run([*pip, "--no-compile", "--target", str(tmp_path / "b"), str(elsewhere / wheel.name)], check=True)
    subprocess.run([*pip, "--find-links", str(DOWNLOADS), "--target", str(tmp_path / "c"), "apache-tvm-ffi==0.1.9"],
                   check=True)
    records = {x: (tmp_path / x / "apache_tvm_ffi-0.1.11.dist-info" / "RECORD") for x in "ab"}
    assert records["a"].read_bytes() != records["b"].read_bytes()  # the raw files differ: the premise
    prints = {}
    for x in "abc":
        copies = static(SimpleNamespace(root=tmp_path / x), bare_python,
                        distributions=["apache-tvm-ffi"])["distributions"]["apache-tvm-ffi"]["copies"]
        prints[x] = copies[0]["record_sha256"]
    assert prints["a"] == prints["b"] and len(prints["a"]) == 64
    assert prints["c"] != prints["a"]


def test_a_fifo_in_place_of_metadata_or_a_source_does_not_stall_the_probe(site, bare_python):
    """A FIFO named METADATA blocked the static probe until its timeout, and every static check
    became an error. It is an unreadable file of its own now."""
    import os
    import time

    site.dist("transformer-engine", "2.8.0")
    meta = next(site.root.glob("transformer_engine-2.8.0.dist-info")) / "METADATA"
    meta.unlink()
    os.mkfifo(meta)
    site.dist("good-pkg", "1.2.3")
    site.file("fifo_src/__init__.py", "x = 1\n")
    init = site.root / "fifo_src" / "__init__.py"
    init.unlink()
    os.mkfifo(init)
    start = time.monotonic()
    data = static(site, bare_python, distributions=["transformer-engine", "good-pkg"], sources=["fifo_src"])
    assert time.monotonic() - start < 10
    te = data["distributions"]["transformer-engine"]["copies"][0]
    assert "not a regular file" in te["error"]
    assert data["distributions"]["good-pkg"]["copies"][0]["version"] == "1.2.3"
    fifo = data["sources"]["fifo_src"]
    assert fifo["error"] and "classes" not in fifo and "names" not in fifo  # never read, never summarised


def _opened_by_the_static_probe(site, request: dict) -> tuple[dict, list[str]]:
    """The static probe's answer to `request` over `site`, and every file it opened (a Python audit hook sees each
    open: os.open and open alike), in the target interpreter."""
    import json
    import subprocess
    import sys

    from dsv4_doctor.engine.probes import PROBE_DIR

    code = ("import json, os, sys\n"
            f"sys.path.insert(0, {str(site.root)!r})\n"
            "opened = []\n"
            "sys.addaudithook(lambda event, args: opened.append(args[0]) if event == 'open' and "
            "isinstance(args[0], str) else None)\n"
            # The library first, by path, as the launcher (dsv4probe_launch.py) loads it before any probe script.
            "import importlib.util\n"
            "lib = importlib.util.spec_from_file_location('dsv4probe_common', "
            f"{str(PROBE_DIR / 'dsv4probe_common.py')!r})\n"
            "sys.modules['dsv4probe_common'] = importlib.util.module_from_spec(lib)\n"
            "lib.loader.exec_module(sys.modules['dsv4probe_common'])\n"
            # The static probe's library module (its entry, STATIC_SCRIPT, only serves its answer), loaded by path.
            "probe = sys.modules['dsv4probe_common'].load_module('dsv4probe_static_answer', "
            f"{str(PROBE_DIR)!r})\n"
            f"answer = probe.answer(json.loads({json.dumps(request)!r}))\n"
            "print(json.dumps({'answer': answer, 'opened': opened}))\n")
    env = dict(os.environ, DSV4_DOCTOR_PROBE_LIB=str(PROBE_DIR))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return out["answer"], [p for p in out["opened"] if p.startswith(str(site.root))]


def test_dependents_read_metadata_only_and_each_file_once(site):
    """dependents() reads each distribution's METADATA, once, and nothing else; RECORD is read and hashed only for
    the distributions the answer lists (fleet.drift's fingerprint), once each, however many parts ask for them."""
    for i in range(30):
        d = site.dist(f"user-{i}", "1.0", requires=("torch>=2", "numpy") if i % 2 else ("numpy",))
        (d / "RECORD").write_text(f"user_{i}/__init__.py,sha256=x,0\n")
    for name in ("torch", "numpy"):
        d = site.dist(name, "2.0", requires=("filelock",))
        (d / "RECORD").write_text(f"{name}/__init__.py,sha256=y,0\n")
    d = site.dist("filelock", "3.0")
    (d / "RECORD").write_text("filelock/__init__.py,sha256=z,0\n")
    answer, opened = _opened_by_the_static_probe(site, StaticRequest(
        distributions=["torch", "numpy"], dependents_of=["torch"], requirements_of=["torch", "numpy"]).to_json())
    assert set(answer["dependents"]) == {f"user-{i}" for i in range(1, 30, 2)}
    assert answer["requirement_targets"] == {"filelock": "3.0"}
    torch = answer["distributions"]["torch"]["copies"][0]
    assert torch["version"] == "2.0" and len(torch["record_sha256"]) == 64
    assert len(opened) == len(set(opened)), "a file was read twice"
    records = sorted(os.path.basename(os.path.dirname(p)) for p in opened if p.endswith("/RECORD"))
    assert records == ["numpy-2.0.dist-info", "torch-2.0.dist-info"]
    read = {os.path.basename(p) for p in opened if "/user_" in p}
    assert read == {"METADATA"}  # a dependent: no RECORD, INSTALLER or direct_url.json


def write_tiny_distributions(site_packages, count: int) -> None:
    """`count` tiny real distributions, as an installer leaves them: METADATA (every third one requires the next),
    RECORD and INSTALLER in a .dist-info folder, and the module the RECORD lists."""
    for i in range(count):
        name, module = f"tiny-pkg-{i:05d}", f"tiny_pkg_{i:05d}"
        info = os.path.join(site_packages, f"{module}-1.0.{i}.dist-info")
        os.mkdir(info)
        requires = f"Requires-Dist: tiny-pkg-{(i + 1) % count:05d}\n" if i % 3 == 0 else ""
        with open(os.path.join(info, "METADATA"), "w") as fh:
            fh.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.{i}\n{requires}\nA tiny package.\n")
        with open(os.path.join(info, "INSTALLER"), "w") as fh:
            fh.write("pip\n")
        with open(os.path.join(info, "RECORD"), "w") as fh:
            fh.write(f"{module}.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n"
                     f"{module}-1.0.{i}.dist-info/METADATA,,\n{module}-1.0.{i}.dist-info/RECORD,,\n")
        open(os.path.join(site_packages, module + ".py"), "w").close()


@pytest.mark.slow  # 20,000 distributions written, then a whole check
def test_a_static_check_over_20000_distributions_takes_a_quarter_of_the_static_probes_timeout(tmp_path):
    """`check --static-only` of a venv with 20,000 distributions in its site-packages finishes within a quarter
    of the static probe's own timeout (2-core machine: 3-4 s while every dependent's RECORD was read and hashed,
    0.7 s with METADATA only), with the dependents and the requirement targets read."""
    import json
    import subprocess
    import time
    import venv

    from conftest import doctor_command

    from dsv4_doctor.engine.probes import STATIC_TIMEOUT_S

    root = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = str(root / "bin" / "python")
    site_packages = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    write_tiny_distributions(site_packages, 20_000)
    # One distribution the checks ask about (deps.*: what requires torch), required by one of the 20,000.
    torch_info = os.path.join(site_packages, "torch-2.13.0.dist-info")
    os.mkdir(torch_info)
    with open(os.path.join(torch_info, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n\n")
    with open(os.path.join(site_packages, "tiny_pkg_00007-1.0.7.dist-info", "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: tiny-pkg-00007\nVersion: 1.0.7\nRequires-Dist: torch>=2\n\n")
    argv = doctor_command() + ["check", "--static-only", "--format", "json", "--python", python]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(argv, capture_output=True, env=env, timeout=120)  # the page cache warmed, as a second run has it
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    seconds = time.monotonic() - start
    report = json.loads(done.stdout)
    assert not [c["id"] for c in report["checks"] if c["status"] == "error"], done.stdout
    consistency = next(c for c in report["checks"] if c["id"] == "deps.consistency")
    assert list(consistency["evidence"]["also_required_by"]) == ["tiny-pkg-00007"]  # the one dependent, found
    assert seconds < STATIC_TIMEOUT_S / 4, f"{seconds:.2f} s over 20,000 distributions"
