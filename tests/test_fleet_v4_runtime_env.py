"""`check --ray` with the job's whole runtime_env, against a real local Ray cluster (one GPU node: the head, whose
raylet has the published frontend 1.27.0 on its PYTHONPATH). Two runs on one cluster:

1. the job's `py_modules` holds the published frontend 1.26.0's `cudnn` package: the node's rows judge that one (Ray
   puts the job's modules on its workers' path, before the doctor's own shipped probes); and the driver carries a
   plugin with 1,001 rows, over the admission bounds: its own fleet.ranks entry, the report still written, exit 1;
2. the job's `working_dir` holds that stale `cudnn` and its runtime_env has a `pip` field the check cannot apply: the
   node's rows are not known (warn, never a pass), saying what they saw (the working_dir's 1.26.0), and the verdict
   line names `pip`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import doctor_command, validate
import test_fleet_ray
from test_fleet_ray import _env, _rows

ray_cluster = test_fleet_ray.ray_cluster  # the shared cluster fixture (one cluster for this module's runs)

HEAD = "+ray_kwargs.ray_init.runtime_env."


def _many_rows_plugin(tmp_path: Path) -> Path:
    """A site with a plugin of 1,001 passing checks in the cudnn-fe family (so that `--only cudnn-fe.*` selects them
    on the driver, and the node, without the plugin, still matches the built-in ones)."""
    site = tmp_path / "many-site"
    (site / "many_plugin-1.dist-info").mkdir(parents=True)
    (site / "many_plugin-1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: many-plugin\nVersion: 1\n")
    (site / "many_plugin-1.dist-info" / "entry_points.txt").write_text("[dsv4_doctor.checks]\nmany = many_checks\n")
    (site / "many_checks.py").write_text(
        "from dsv4_doctor.model.core import Check, passed\n"
        "def run(ctx):\n    return passed('fine')\n"
        "CHECKS = [Check(id='cudnn-fe.many%04d' % i, title='t', explanation='x', applies_when='always', detects='x',"
        " run=run) for i in range(1001)]\n")
    return site


def _job(*extra: str) -> str:
    return shlex.join(["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=1", "trainer.n_gpus_per_node=1",
                       *extra])


def _node_groups(report: dict, check: str) -> list[dict]:
    """The groups of a row that hold a Ray node (not the driver)."""
    return [g for g in _rows(report)[check]["evidence"]["groups"] if "(node " in json.dumps(g.get("hosts"))]


@pytest.mark.slow
def test_the_jobs_runtime_env_is_applied_or_not_known_and_the_drivers_oversize_report_is_its_entry(ray_cluster,
                                                                                                   tmp_path):
    started = time.monotonic()
    cluster = ray_cluster
    stale = Path(cluster.old) / "cudnn"
    check = [*doctor_command(), "check", "--ray", "--no-smoke", "-f", "json", "--python", sys.executable]

    # 1. py_modules applied and judged; the driver's 1,001 rows are its own entry, the report is written.
    site = _many_rows_plugin(tmp_path)
    out1 = tmp_path / "one.json"
    done = subprocess.run([*check, "--only", "python.version,cudnn-fe.*", "-o", str(out1), "--job-args",
                           _job(f"{HEAD}py_modules=[{stale}]")],
                          env=_env(cluster, PYTHONPATH=f"{cluster.new}{os.pathsep}{site}"), capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    report = validate(json.loads(out1.read_text()))
    ranks = _rows(report)["fleet.ranks"]
    entries = {e["rank"]: e for e in ranks["evidence"]["ranks"]}
    assert ranks["status"] == "fail" and list(entries) == [0], ranks
    assert entries[0]["host"].endswith("(driver)")
    assert "the driver's own report could not be merged" in entries[0]["why"]
    assert "rows (at most 1000)" in entries[0]["why"]
    assert report["fleet"]["reported"] == 2  # the node's report is kept
    modules = ranks["evidence"]["runtime_env"]["py_modules"]
    assert modules[0] == str(stale) and modules[-1].endswith("dsv4_doctor_shipped_probes"), modules
    node = _node_groups(report, "cudnn-fe.version")
    assert node and all(g["status"] != "pass" and "1.26.0" in g["summary"] for g in node), node

    # 2. working_dir still judged; a pip field the check cannot apply: not known on the node, named in the verdict.
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(stale, work / "cudnn")
    out2 = tmp_path / "two.json"
    done = subprocess.run([*check, "--only", "python.version,cudnn-fe.version", "-o", str(out2), "--job-args",
                           _job(f"{HEAD}working_dir={work}", f"{HEAD}pip=[nvidia-cudnn-frontend==1.27.0]")],
                          env=_env(cluster), capture_output=True, text=True, timeout=240)
    report = validate(json.loads(out2.read_text()))
    assert report["fleet"]["runtime_env_not_applied"] == ["pip"], report["fleet"]
    for check_id in ("cudnn-fe.version", "python.version"):
        node = _node_groups(report, check_id)
        assert node and all(g["status"] == "warn" and g["summary"].startswith("not known: the job's runtime_env "
                                                                              "sets pip") for g in node), node
    assert "1.26.0" in json.dumps(_node_groups(report, "cudnn-fe.version"))  # what the working_dir showed
    rows = _rows(report)
    assert rows["cudnn-fe.version"]["status"] == "warn" and report["summary"]["status"] == "warn"
    # The nodes' packages and sources as the task saw them: not known either, never a pass.
    assert rows["fleet.drift"]["status"] == "warn" and rows["fleet.drift"]["summary"].startswith("not known")
    assert rows["fleet.ranks"]["status"] == "pass"
    assert done.returncode == 0, done.stderr[-3000:]  # warnings: --strict makes them a failure
    verdict = next(line for line in done.stderr.splitlines() if line.startswith("Verdict:"))
    assert "the job's runtime_env pip not applied to the nodes' checks" in verdict, verdict
    assert time.monotonic() - started < 150


# ------------------------------------------------------------------- the command's runtime_env, without a cluster

def test_the_runtime_env_fields_the_tasks_cannot_take_are_named(tmp_path):
    from dsv4_doctor.fleet.rayjob import read_runtime_env

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    verl = ["python3", "-m", "verl.trainer.main_ppo"]
    got = read_runtime_env([*verl, f"{HEAD}py_modules=[{second}, '{first}']", f"{HEAD}excludes=['*.bin']",
                            f"{HEAD}config={{setup_timeout_seconds:60}}", f"{HEAD}env_vars.A=1"])
    assert got.env == {"py_modules": [str(second), str(first)], "excludes": ["*.bin"], "env_vars": {"A": "1"}}
    assert got.unapplied == [] and got.notes == []
    for word, field in ((f"{HEAD}pip=[nvidia-cudnn-frontend==1.27.0]", "pip"), (f"{HEAD}conda=env", "conda"),
                        (f"{HEAD}uv=[x]", "uv"), (f"{HEAD}image_uri=img:1", "image_uri"),
                        (f"{HEAD}container={{image:x}}", "container"), (f"{HEAD}my_plugin=1", "my_plugin"),
                        (f"{HEAD}working_dir=s3://bucket/job.zip", "working_dir"),
                        (f"{HEAD}py_modules=[s3://bucket/mod.zip]", "py_modules"),
                        (f"{HEAD}py_modules=[{tmp_path}/mod-1-py3-none-any.whl]", "py_modules"),
                        (f"{HEAD}env_vars.SECRET=${{oc.env:NOPE_NOT_SET}}", "env_vars")):
        got = read_runtime_env([*verl, word])
        assert got.unapplied == [field], (word, got)
        assert len(got.notes) == 1 and "1.27.0" not in got.notes[0] and "bucket" not in got.notes[0]
    # Hydra: the last word wins, and `~` removes the field: nothing left unapplied.
    assert read_runtime_env([*verl, f"{HEAD}pip=[x]", f"~{HEAD[1:]}pip"]).unapplied == []
    assert read_runtime_env([*verl, f"{HEAD}working_dir=s3://x", f"{HEAD}working_dir={first}"]).unapplied == []
    # A config file may set any of it.
    assert read_runtime_env([*verl, "--config-path", str(tmp_path), "--config-name", "job"]).unapplied == [
        "runtime_env"]


def test_a_crash_of_the_ray_merge_still_writes_a_report_and_exits_3(tmp_path, monkeypatch):
    """The doctor's own merge breaking (its bug; no release shows it, so the merge is made to raise here): the
    report of the driver's rows, the nodes named as not in it, is delivered, and the run exits 3."""
    import types

    from dsv4_doctor.fleet import raycluster
    from dsv4_doctor.model.report import Report

    done = subprocess.run([*doctor_command(), "check", "--no-smoke", "--only", "python.version", "-f", "json"],
                          capture_output=True, text=True, timeout=120)
    own = Report.from_wire(json.loads(done.stdout))
    answer = {"nodes": [{"index": 0, "node_id": "ab" * 28, "host": "n1", "gpus": 1.0, "why": "x"}]}
    monkeypatch.setattr(raycluster, "run_helper", lambda *a, **k: (answer, str(tmp_path), None))

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the merge")

    monkeypatch.setattr(raycluster, "_with_evidence", broken)
    delivered: list = []
    opts = types.SimpleNamespace(python=sys.executable, no_smoke=True, static_only=False, strict=False,
                                 only=["python.version"], skip=[], cp=None, dsa_backend=None, gpu_arch=None,
                                 timeout=None, deep=False, ray_wait_nodes=None)
    code, checked = raycluster.take_part(opts, own, None, lambda r: delivered.append(r) or 0,
                                         ("fleet.ranks", "fleet.drift"), own.profile)
    assert code == 3 and checked == [] and len(delivered) == 1
    report = delivered[0].to_dict()
    assert report["summary"]["exit_code"] == 3 and "a bug in the merge" in report["summary"]["partial"]
    assert any(c["id"] == "python.version" for c in report["checks"])


def test_the_ray_hook_keeps_the_jobs_own_py_modules_and_hydra_reads_them_back():
    """--ray-hook's py_modules override replaces the command's list (Hydra: the last word wins), so the hook's module
    goes after the job's own entries, written back as Hydra strings: real Hydra parses the override to the job's
    entries plus the hook. An entry the doctor cannot write back, or a list a config file may set, refuses
    --ray-hook before any check runs (the job never starts without its modules)."""
    import sys as _sys

    from wheels import ensure

    from dsv4_doctor.fleet.raycluster import HOOK_MODULE, hook_overrides
    from dsv4_doctor.fleet.rayhelper import job_py_modules
    from dsv4_doctor.model.core import UsageError
    from dsv4_doctor.engine.probes import PROBE_DIR

    key = "ray_kwargs.ray_init.runtime_env.py_modules"
    command = ["python3", "-m", "verl.trainer.main_ppo", f"++{key}=[/opt/old]", f"++{key}=[/opt/mods,'s3://b/m.zip']"]
    assert job_py_modules(command) == ["/opt/mods", "s3://b/m.zip"]
    assert job_py_modules(["python3", "-m", "verl.trainer.main_ppo"]) == []
    override = [o for o in hook_overrides(["0a1b"], job_py_modules(command)) if o.startswith(f"++{key}=")]
    _sys.path.insert(0, str(ensure("hydra-core-1.3.2")))
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(override)[0]
    finally:
        _sys.path.remove(str(ensure("hydra-core-1.3.2")))
    assert parsed.value() == ["/opt/mods", "s3://b/m.zip", str(PROBE_DIR / HOOK_MODULE)]
    for refused in (["python3", "-m", "verl.trainer.main_ppo", f"++{key}=[\"/opt/it's\"]"],
                    ["python3", "-m", "verl.trainer.main_ppo", "--config-path", "/cfg", "--config-name", "x"]):
        with pytest.raises(UsageError, match="leave --ray-hook off"):
            job_py_modules(refused)
