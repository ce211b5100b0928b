"""Rulebook v4's gaps, closed: a `pip install --target` folder on PYTHONPATH (and a job-folder copy with its own
dist-info) hides what `"$PY" -I -m pip` installs, so the plan aims its pip step at that folder (or moves the copy
aside) and the printed plan, followed, turns the re-check green; torchrun's script folder with its links resolved;
`fix --apply`'s no-installer line; Hydra's --config-dir passed to the composition; verl's generated config read
without blocking on a FIFO."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_locate import CACHED, by_kind, make_venv, put, report, row, run_doctor, site_of
from wheels import DOWNLOADS, ensure

from dsv4_doctor.job.syspath import job_path

ARGS = ("--only", "tvm-ffi.version", "--cp", "2")


def target_folder_case(tmp_path: Path) -> tuple[str, Path]:
    """A venv (no pip) whose site-packages holds only frontend 1.32.0's metadata (it requires apache-tvm-ffi >=
    0.1.11), and a `pip install --target` folder with apache-tvm-ffi 0.1.9 on PYTHONPATH, nothing else of it."""
    python = make_venv(tmp_path / "venv")
    put(site_of(python), "fe-1.32", "__none__")
    entry = tmp_path / "entry"
    shutil.copytree(ensure(CACHED["tvm-old"]), entry)
    return python, entry


def test_a_pythonpath_target_folder_gets_the_pip_step_aimed_at_it_and_the_followed_plan_is_green(tmp_path):
    python, entry = target_folder_case(tmp_path)
    tvm = row(report("check", *ARGS, python=python, sites=(entry,)), "tvm-ffi.version")
    assert tvm["status"] == "warn" and "0.1.9" in tvm["summary"]
    meta = str(entry / "apache_tvm_ffi-0.1.9.dist-info")
    moved = by_kind(tvm["fixes"], "move-aside")
    assert moved["action"] == {"kind": "move-aside", "module": "tvm_ffi", "path": meta, "to": meta + ".aside"}
    assert moved["phase"] == "path" and moved["manual"]
    pip = by_kind(tvm["fixes"], "install-into-entry")
    assert pip["argv"] == [["pip", "install", "--upgrade", "--target", str(entry), "--no-deps",
                            "apache-tvm-ffi==0.1.11"]], pip
    assert pip["action"]["entry"] == str(entry) and pip["action"]["index"] == "1" and not pip["manual"]
    # No pip step that site-packages would take while the folder keeps the job's copy.
    assert not any(a[:3] == ["pip", "install", "--no-deps"] for f in tvm["fixes"] for a in f["argv"])
    script = run_doctor("fix", *ARGS, python=python, sites=(entry,)).stdout
    assert f'"$PY" -I -m pip install --upgrade --target {entry} --no-deps apache-tvm-ffi==0.1.11' in script
    # Followed: the typed action carried out, then the printed script run (offline, from the test wheels).
    ensure(CACHED["tvm"])
    os.rename(moved["action"]["path"], moved["action"]["to"])
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(DOWNLOADS), PYTHONPATH=str(entry)))
    assert done.returncode == 0, done.stderr
    assert (entry / "apache_tvm_ffi-0.1.11.dist-info").is_dir()
    assert row(report("check", *ARGS, python=python, sites=(entry,)), "tvm-ffi.version")["status"] == "pass"


def test_a_job_folder_copy_with_its_own_dist_info_is_moved_aside_not_pip_installed_behind(tmp_path):
    python = make_venv(tmp_path / "venv")
    put(site_of(python), "fe-1.32", "__none__")  # nothing of tvm_ffi in site-packages: the job folder's is the one
    job = tmp_path / "job"
    job.mkdir()
    put(job, "tvm-old", "tvm_ffi")
    (job / "train.py").write_text("print('train')\n")
    args = (*ARGS, "--job-args", "python3 train.py", "--job-cwd", str(job))
    tvm = row(report("check", *args, python=python, cwd=tmp_path), "tvm-ffi.version")
    assert tvm["status"] == "warn" and "0.1.9" in tvm["summary"]
    step = by_kind(tvm["fixes"], "move-aside")
    assert step["action"]["path"] == str(job / "tvm_ffi") and step["action"]["dist_info"].startswith(str(job))
    assert [f for f in tvm["fixes"] if (f.get("action") or {}).get("kind") == "install-into-entry"] == []


def test_torchrun_takes_the_script_folder_with_its_links_resolved(tmp_path):
    real = tmp_path / "checkout"
    real.mkdir()
    (real / "pretrain_gpt.py").write_text("")
    (tmp_path / "link.py").symlink_to(real / "pretrain_gpt.py")
    got = job_path(["torchrun", "--nproc-per-node", "8", "link.py"], str(tmp_path))
    assert got.path == str(real.resolve()) and got.why == "the script's folder"


def test_apply_without_an_installer_says_it_once():
    from dsv4_doctor.checks._reach import NO_INSTALLER
    from dsv4_doctor.fix.apply import apply_and_recheck
    from dsv4_doctor.fix.plan import Answer, Plan, Step
    from dsv4_doctor.model.core import Fix
    from dsv4_doctor.hostio.redact import Redactor

    fix = Fix("no installer: the target interpreter has no pip", key=NO_INSTALLER, phase="path", manual=True)
    said: list[str] = []
    code = apply_and_recheck(Plan([Step(fix, [])], []), "/x/python", Redactor(), 1, "v", True,
                             lambda q: Answer(True), said.append, lambda: None)  # type: ignore[arg-type,return-value]
    assert code == 1 and said == ["nothing applied: no installer: the target interpreter has no pip"]


def test_hydra_config_dir_is_a_search_path_of_the_composition(bare_python, tmp_path):
    sites = (ensure("hydra-core-1.3.2"), ensure("verl-0.9.1"))
    extra = tmp_path / "conf"
    extra.mkdir()
    (extra / "my_ppo.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\n")
    argv = ["python3", "-m", "verl.trainer.main_ppo", "--config-dir", str(extra), "--config-name", "my_ppo",
            "model_engine=megatron", "actor_rollout_ref.actor.megatron.context_parallel_size=2"]
    import shlex

    run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv),
                     sites=sites, python=bare_python)
    assert run.returncode in (0, 1), run.stderr
    rows = {c["id"]: c for c in run.report["checks"]}
    assert rows["job.config"]["status"] == "pass", rows["job.config"]
    assert "MissingConfigException" not in rows["job.config"]["summary"]
    assert run.report["profile"]["cp"] == 2 and "(my_ppo)" in run.report["profile"]["job"]["read_by"]


def test_a_fifo_at_verls_generated_config_does_not_block_the_reader(tmp_path):
    from dsv4_doctor.job.command import parse
    from dsv4_doctor.job.compose import _judged_without_hydra

    config = tmp_path / "verl" / "trainer" / "config"
    config.mkdir(parents=True)
    os.mkfifo(config / "_generated_ppo_megatron_trainer.yaml")  # no process ever writes it
    job = parse(["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron", "+a.b=1"])
    start = time.monotonic()
    assert _judged_without_hydra(job, {"verl_dir": str(tmp_path / "verl"), "verl": "0.9.1"}) == ([], None)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("flag", ["--config-dir", "-cd"])
def test_the_config_dir_flag_is_read_from_the_command(flag):
    from dsv4_doctor.job.command import parse
    from dsv4_doctor.job.compose import _config_dir, _overrides

    job = parse(["python3", "-m", "verl.trainer.main_ppo", flag, "conf", "a=1"])
    assert _config_dir(job) == "conf" and _overrides(job) == ["a=1"]
    assert _config_dir(parse(["python3", "-m", "verl.trainer.main_ppo", f"{flag}=c2"])) == "c2"
