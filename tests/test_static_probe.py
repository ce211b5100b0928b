"""The static probe against fake site directories: metadata, module locations, ast, and broken files."""

from __future__ import annotations

import os

import pytest

from dsv4_doctor.probes import STATIC_SCRIPT, Probe, StaticRequest, run_probe
from dsv4_doctor.procs import Processes


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
