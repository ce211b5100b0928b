"""Whose module is it, where several distributions share a top-level name: megatron-core and megatron-bridge both
install into `megatron`, and each lists it in top_level.txt. The owner of megatron.core is the distribution whose
RECORD lists megatron/core/__init__.py, and the version label and the `--target` fix follow that owner. The real
wheels, megatron-core 0.19.2 and megatron-bridge 0.6.2, installed together in one `pip install --target` folder and
in a venv's site-packages; hostile RECORDs (garbage, a huge file, paths that leave the folder) never crash the doctor
and never name an owner RECORD does not show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_locate import by_kind, make_venv, probe_static, report, row, site_of
from wheels import DOWNLOADS, PY312, ensure

CORE, BRIDGE = "megatron-core-0.19.2", "megatron-bridge-0.6.2"
CORE_INFO, BRIDGE_INFO = "megatron_core-0.19.2.dist-info", "megatron_bridge-0.6.2.dist-info"
ARGS = ("--only", "mcore.dsv4")


def both_in_target_folder(folder: Path) -> Path:
    """The two wheels as one `pip install --no-deps --target FOLDER` of both lays them out: their `megatron` folders
    merged, the two dist-infos beside it (tests/wheels.py installs each with pip --target; copied together here)."""
    for key in (CORE, BRIDGE):
        shutil.copytree(ensure(key), folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))
    assert (folder / "megatron" / "core" / "__init__.py").is_file() and (folder / "megatron" / "bridge").is_dir()
    assert not (folder / "megatron" / "__init__.py").exists()  # `megatron` is a namespace package both share
    return folder


def mcore_row(python: str, entry: Path | None = None) -> dict:
    return row(report("check", *ARGS, python=python, sites=(entry,) if entry else ()), "mcore.dsv4")


def moved_aside(fixes: list[dict]) -> list[str]:
    """Every path a fix moves aside (the typed actions), dist-infos included."""
    out = []
    for fix in fixes:
        action = fix.get("action") or {}
        if action.get("kind") == "move-aside":
            out += [p for p in (action.get("path"), action.get("dist_info")) if p]
    return out


def test_in_a_target_folder_megatron_core_is_labelled_and_fixed_by_its_own_dist_info(tmp_path):
    entry = both_in_target_folder(tmp_path / "entry")
    python = make_venv(tmp_path / "venv")
    mcore = mcore_row(python, entry)
    assert mcore["status"] == "fail" and mcore["summary"].startswith("Megatron-core 0.19.2 has no dsv4_hybrid"), mcore
    assert "0.6.2" not in mcore["summary"]
    step = by_kind(mcore["fixes"], "move-aside")
    assert step["action"]["path"] == str(entry / CORE_INFO), step
    assert not any(BRIDGE_INFO in p for p in moved_aside(mcore["fixes"]))
    assert by_kind(mcore["fixes"], "install-via-staging")["action"]["entry"] == str(entry)  # beside megatron-bridge
    # The bridge's own module is still the bridge's: its RECORD lists megatron/bridge/__init__.py.
    found = probe_static(python, ["megatron.core", "megatron.bridge"], env={"PYTHONPATH": str(entry)})["modules"]
    assert found["megatron.core"]["owner"]["name"] == "megatron-core"
    assert found["megatron.bridge"]["owner"]["name"] == "megatron-bridge"
    assert found["megatron.bridge"]["owner"]["version"] == "0.6.2"


@pytest.mark.slow
def test_in_a_venvs_site_packages_megatron_core_is_labelled_by_its_own_dist_info(tmp_path):
    """A venv from `python -m venv`; megatron-bridge 0.6.2 installed into it by pip's ordinary scheme (pip --python
    VENV install --no-deps, --ignore-requires-python: the bridge declares Python >= 3.12, the tests run 3.11).
    megatron-core 0.19.2 ships cp312 wheels only, which pip installs for a 3.11 venv only with --python-version,
    and that only with --target: aimed at the venv's site-packages, first, so that the bridge's ordinary install
    merges into the `megatron` folder it made."""
    for key in (CORE, BRIDGE):
        ensure(key)  # the wheels in the download cache: both installs below are offline
    python = make_venv(tmp_path / "venv")
    site = site_of(python)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    offline = ["--no-deps", "--no-index", "--find-links", str(DOWNLOADS), "--only-binary=:all:"]
    subprocess.run([*pip, "install", *offline, "--target", str(site), *PY312, "megatron-core==0.19.2"], check=True,
                   timeout=300)
    subprocess.run([*pip, "--python", python, "install", *offline, "--ignore-requires-python",
                    "megatron-bridge==0.6.2"], check=True, timeout=300)
    assert (site / CORE_INFO).is_dir() and (site / BRIDGE_INFO).is_dir() and (site / "megatron" / "bridge").is_dir()
    mcore = mcore_row(python)
    assert mcore["status"] == "fail" and mcore["summary"].startswith("Megatron-core 0.19.2 has no dsv4_hybrid"), mcore
    assert "0.6.2" not in mcore["summary"]
    assert not any(BRIDGE_INFO in p for p in moved_aside(mcore["fixes"]))
    # site-packages is where `"$PY" -I -m pip` installs: its plain pip step, aimed at no folder
    assert not [f for f in mcore["fixes"] if (f.get("action") or {}).get("kind") == "install-into-entry"]
    assert any(a[:2] == ["pip", "install"] and "--target" not in a for f in mcore["fixes"] for a in f["argv"])
    found = probe_static(python, ["megatron.core", "megatron.bridge"])["modules"]
    assert (found["megatron.core"]["owner"]["name"], found["megatron.core"]["place"]) == ("megatron-core", "site")
    assert found["megatron.bridge"]["owner"]["name"] == "megatron-bridge"


GARBAGE = (b"\x00\x01\xff\xfe,,,\n\"unclosed,quote\n" + b"x" * 300_000 + b",sha256=,1\n\r\n,\n\x1b[31mred\x1b[0m,,\n"
           b"\"megatron/core/__init__.py\"trailing,,\n/abs/megatron/core/__init__.py,,\n")


def hostile_case(tmp_path: Path, case: str) -> Path:
    """The target folder of both wheels, with one hostile RECORD (or two)."""
    entry = both_in_target_folder(tmp_path / "entry")
    core, bridge = entry / CORE_INFO / "RECORD", entry / BRIDGE_INFO / "RECORD"
    if case == "garbage":  # megatron-core's RECORD is garbage; the bridge's claims core's file by paths outside it
        core.write_bytes(GARBAGE)
        with bridge.open("ab") as fh:
            fh.write(b"megatron/bridge/../core/__init__.py,,\n../entry/megatron/core/__init__.py,,\n"
                     + f"{entry}/megatron/core/__init__.py,,\n".encode() + b"./megatron/core/__init__.py,,\n")
    elif case == "huge":  # megatron-core's RECORD, whole at its start, then 256 MiB of holes (a sparse file)
        with core.open("r+b") as fh:
            fh.truncate(256 << 20)
    elif case == "huge-claim":  # the bridge's RECORD claims core's file past the read limit: not read, not known
        with bridge.open("r+b") as fh:
            fh.seek(64 << 20)
            fh.write(b"\nmegatron/core/__init__.py,,\n")
    elif case == "fifo":  # the bridge's RECORD is a FIFO: never opened for a blocking read
        bridge.unlink()
        os.mkfifo(bridge)
    return entry


@pytest.mark.parametrize("case, owner", [("garbage", None), ("huge", "megatron-core"), ("huge-claim", None),
                                         ("fifo", None)])
def test_a_hostile_record_never_crashes_and_never_names_an_owner_it_does_not_show(tmp_path, case, owner):
    entry = hostile_case(tmp_path, case)
    python = make_venv(tmp_path / "venv")
    found = probe_static(python, ["megatron.core"], env={"PYTHONPATH": str(entry)})["modules"]["megatron.core"]
    assert found["found"] is True and found["place"] == "pythonpath"
    if owner:
        assert found["owner"]["name"] == owner and "owner_not_known" not in found, found
    else:
        assert found["owner"] is None and "megatron/core/__init__.py" in found["owner_not_known"], found
    if case != "garbage":
        return  # one doctor run: the report, its label and its fixes, where the owner is not known
    mcore = mcore_row(python, entry)
    assert mcore["status"] == "fail" and "0.6.2" not in mcore["summary"] and "0.19.2" not in mcore["summary"]
    assert "is not known" in mcore["details"] and mcore["evidence"]["owner_not_known"]
    assert not any(p.endswith(".dist-info") for p in moved_aside(mcore["fixes"]))  # no dist-info guessed by name
    assert not [f for f in mcore["fixes"] if (f.get("action") or {}).get("kind") == "install-into-entry"]


def follow(fixes: list[dict], entry: Path) -> list[list[str]]:
    """Carry out a plan's steps on `entry` as a user would: each move-aside action, then each command. A pip step runs
    with pip's own --target logic, offline: its requirement (Megatron-LM's git URL, out of CI's reach) becomes the
    cached megatron-core 0.19.2 wheel, every option the plan wrote kept (--upgrade --target DIR --no-deps). Any
    other command runs as its argv, never through a shell. Returns the pip commands as the plan wrote them."""
    pips = []
    for fix in fixes:
        action = fix.get("action") or {}
        if action.get("kind") == "install-pip":
            continue  # the venv's ensurepip: the pip steps below run with the test's own pip
        if action.get("kind") == "move-aside":
            os.rename(action["path"], action["to"])
        for argv in fix["argv"]:
            if argv[0] == "pip":
                pips.append(argv)
                options = [a for a in argv[2:] if a.startswith("-") or argv[argv.index(a) - 1] == "--target"]
                subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", *options,
                                "--no-index", "--find-links", str(DOWNLOADS), "--only-binary=:all:", *PY312,
                                "megatron-core==0.19.2"], check=True, timeout=300)
            else:
                assert argv[0] in ("cp", "rm", "mv"), argv
                subprocess.run(argv, check=True, timeout=60)
    return pips


@pytest.mark.slow
def test_the_megatron_core_fix_in_a_shared_target_folder_leaves_megatron_bridge_in_place(tmp_path):
    """pip's `--upgrade --target DIR` removes every top-level folder the new wheel installs before it moves the new
    one in: megatron/, and megatron-bridge's megatron/bridge with it (its dist-info left pointing at nothing). The
    plan for megatron-core in a folder that also holds megatron-bridge is followed on that folder, its pip step run by
    real pip: megatron-bridge's files all survive, and the step is a manual one that says why."""
    entry = both_in_target_folder(tmp_path / "entry")
    ensure(CORE)  # the wheel in the download cache: the plan's pip step below runs offline
    bridge_files = [p.split(",")[0] for p in (entry / BRIDGE_INFO / "RECORD").read_text().splitlines()
                    if p.startswith("megatron/")]
    python = make_venv(tmp_path / "venv")
    fixes = mcore_row(python, entry)["fixes"]
    pips = follow(fixes, entry)
    assert pips, fixes  # the plan installs megatron-core
    missing = [p for p in bridge_files if not (entry / p).is_file()]
    assert not missing, f"following the plan deleted {len(missing)} of megatron-bridge's files: {missing[:3]}"
    assert (entry / "megatron" / "core" / "__init__.py").is_file() and (entry / CORE_INFO / "RECORD").is_file()
    assert not any(p.name.endswith("-staging") for p in tmp_path.iterdir())  # the staging folder removed
    found = probe_static(python, ["megatron.core", "megatron.bridge"], env={"PYTHONPATH": str(entry)})["modules"]
    assert found["megatron.core"]["owner"]["name"] == "megatron-core"
    assert (found["megatron.bridge"]["owner"]["name"], found["megatron.bridge"]["owner"]["version"]) == \
        ("megatron-bridge", "0.6.2")
    # never `--upgrade --target ENTRY` itself; the staged install is a manual step that says why
    assert not any(a[a.index("--target") + 1] == str(entry) for a in pips if "--target" in a), pips
    step = by_kind(fixes, "install-via-staging")
    assert step["manual"] and step["action"]["shared_with"] == "megatron-bridge 0.6.2 (megatron/bridge)", step
    assert "`pip install --target --upgrade` replaces the whole megatron/ folder" in step["description"]
    assert not [f for f in fixes if (f.get("action") or {}).get("kind") == "install-into-entry"]
