"""Every version, gate and source rule of a stack package says in its evidence which copy the job imports, and why
(issue 33, item 1): `imported_copy`, as mcore.dsv4 and cudnn-fe.version give it, beside the copy's location. The
copy here lies on PYTHONPATH, behind another entry, so its reason is "PYTHONPATH entry 2". Judged in this process over
real probe answers (tests/probed.py)."""

from __future__ import annotations

import pytest

from fakes import Env, fake_cutedsl, fake_flash_mla, fake_kernel, fake_mbridge, fake_old_verl, fake_te
from probed import judge


def _filler(site) -> None:
    """A PYTHONPATH entry in front of the copy: an unrelated package, so the copy's entry is number 2."""
    site.file("unrelated_pkg/__init__.py", "")


def _tvm(site) -> None:
    fake_kernel(site, "tvm_ffi", "apache-tvm-ffi", None, "0.1.11")


def _hadamard(site) -> None:
    fake_kernel(site, "fast_hadamard_transform", "fast-hadamard-transform", "hadamard_transform", "1.1.0")


# (row, how its package is built, the evidence key that holds the copy's location, the options it runs under, what
# goes in front of the copy on PYTHONPATH)
CASES = [
    ("tvm-ffi.version", _tvm, "module", {"cp": 2}, _filler),
    ("te.version", fake_te, "module", {}, _filler),
    ("te.import", fake_te, "origin", {}, _filler),
    ("cutlass-dsl.import", fake_cutedsl, "module", {"cp": 2}, _filler),
    ("kernels.flash-mla", fake_flash_mla, "module", {"dsa_backend": "cudnn"}, _filler),
    ("kernels.fast-hadamard", _hadamard, "module", {}, _filler),
    ("verl.cp-layout", fake_old_verl, "module", {"cp": 2}, _filler),
    ("mbridge.dsv4", fake_mbridge, "module", {}, fake_old_verl),  # verl in front: the bridge is verl's backend
]


@pytest.mark.parametrize(("check_id", "build", "where", "options", "front"), CASES, ids=[c[0] for c in CASES])
def test_the_row_names_the_copy_the_job_imports_and_why(tmp_path, bare_python, check_id, build, where, options,
                                                        front):
    env = Env(tmp_path).fake("front", front).fake("copy", build)
    row = judge(env, bare_python, check_id, **options)
    assert row["status"] != "skip", row
    evidence = row["evidence"]
    assert evidence["imported_copy"] == "PYTHONPATH entry 2", evidence  # why the job imports it
    located = evidence[where]  # which copy: an origin, or a namespace package's locations
    located = located if isinstance(located, list) else [located]
    assert located and all(str(p).startswith(str(tmp_path / "copy")) for p in located), evidence


def test_a_row_whose_package_is_missing_says_so_without_a_reason(tmp_path, bare_python):
    row = judge(Env(tmp_path).fake("front", _filler), bare_python, "tvm-ffi.version", cp=2)
    assert row["status"] == "fail" and not row["evidence"]["module"], row
    assert row["evidence"]["imported_copy"] is None, row  # no copy, no reason
