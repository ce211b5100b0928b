"""The job as Megatron will see it: the DSA backend Megatron-Bridge's installed DSv4 provider picks for a verl command
that states none (real 0.5.1 and 0.6.2 wheels), wrapper and overrides-only commands, and the job settings (CP_ARGS,
export lines) in the report and the fix plan."""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path

import pytest

from conftest import run_doctor
from fakes import Env, fake_flash_mla
from probed import profile, run_in_process
from wheels import ensure

from dsv4_doctor.job import bridge_rule as bridgerule
from dsv4_doctor.job.command import parse
from dsv4_doctor.model.core import UsageError

OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"
VERL = ["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron", "data.max_prompt_length=2048",
        "data.max_response_length=10241",
        "actor_rollout_ref.actor.megatron.context_parallel_size=2"]
BRIDGE = "megatron/bridge/models/deepseek/deepseek_v4_bridge.py"


def _source_facts(root: Path) -> dict:
    """The static probe's summary of the installed bridge, as the doctor's probe computes it (same function)."""
    import probe_modules

    sys.path.insert(0, str(root))
    try:
        return probe_modules.load("dsv4probe_static_sources").source_facts(bridgerule.BRIDGE_MODULE, [], (),
                                                                   [bridgerule.FIELD])
    finally:
        sys.path.remove(str(root))


# --- the bridge's rule, read from the real wheels --------------------------------------------------------------------

def test_bridge_0_5_1_turns_fusion_on_for_any_blackwell():
    root = ensure("megatron-bridge-0.5.1")
    assert "provider.apply_dsa_kernel_fusion = use_blackwell_fused_kernels" in (root / BRIDGE).read_text()
    rule = bridgerule.read_rule(_source_facts(root))
    assert rule["readable"] and rule["line"] == 460
    assert [(t["kind"], t.get("major_min")) for t in rule["terms"]] == [("cc", 10)]
    assert bridgerule.import_targets(rule) == []
    assert bridgerule.decide(rule, (10, 0), {}, "b")[:2] == ("cudnn", True)  # installed kernels or not
    assert bridgerule.decide(rule, (10, 3), {}, "b")[:2] == ("cudnn", True)
    assert bridgerule.decide(rule, (9, 0), {}, "b")[:2] == ("none", True)
    backend, known, how = bridgerule.decide(rule, None, {}, "b")
    assert (backend, known) == ("cudnn", False) and "not known" in how and "--gpu-arch" in how


def test_bridge_0_6_2_also_needs_cudnn_dsa_and_flash_mla_to_import():
    root = ensure("megatron-bridge-0.6.2")
    rule = bridgerule.read_rule(_source_facts(root))
    assert rule["readable"] and rule["line"] == 472
    assert [t["kind"] for t in rule["terms"]] == ["cc", "imports"]
    assert bridgerule.import_targets(rule) == ["cudnn:DSA", "flash_mla:flash_mla_sparse_fwd"]
    ok = {"cudnn:DSA": {"ok": True}, "flash_mla:flash_mla_sparse_fwd": {"ok": True}}
    missing = dict(ok, **{"flash_mla:flash_mla_sparse_fwd": {"ok": False, "error": {"type": "ModuleNotFoundError"}}})
    assert bridgerule.decide(rule, (10, 0), ok, "b")[:2] == ("cudnn", True)
    assert bridgerule.decide(rule, (10, 0), missing, "b")[:2] == ("none", True)
    assert bridgerule.decide(rule, (9, 0), {}, "b")[:2] == ("none", True)  # the CC decides before the imports
    # --static-only: the imports were not tried, so not known; an error the bridge does not catch: not known.
    assert bridgerule.decide(rule, (10, 0), None, "b")[:2] == ("cudnn", False)
    crash = dict(ok, **{"cudnn:DSA": {"ok": False, "error": {"type": "RuntimeError"}}})
    assert bridgerule.decide(rule, (10, 0), crash, "b")[:2] == ("cudnn", False)


def test_an_import_that_lacks_the_gpu_hosts_driver_library_is_not_known_without_a_gpu():
    """A CPU build machine checking for --gpu-arch 10.0: FlashMLA's extension cannot load libcuda there, which the
    container runtime mounts only on a GPU host, so the bridge's probe may pass on the node: not known, never off.
    On a GPU host the same ImportError is what the bridge sees: off. A package that is absent is absent anywhere."""
    rule = bridgerule.read_rule(_source_facts(ensure("megatron-bridge-0.6.2")))
    no_driver = {"cudnn:DSA": {"ok": True}, "flash_mla:flash_mla_sparse_fwd": {"ok": False, "error": {
        "type": "ImportError", "message": "libcuda.so.1: cannot open shared object file: No such file or directory"}}}
    backend, known, how = bridgerule.decide(rule, (10, 0), no_driver, "b", gpu_visible=False)
    assert (backend, known) == ("cudnn", False) and "no GPU" in how
    assert bridgerule.decide(rule, (10, 0), no_driver, "b", gpu_visible=True)[:2] == ("none", True)
    absent = dict(no_driver, **{"flash_mla:flash_mla_sparse_fwd": {"ok": False, "error": {
        "type": "ModuleNotFoundError", "message": "No module named 'flash_mla'"}}})
    assert bridgerule.decide(rule, (10, 0), absent, "b", gpu_visible=False)[:2] == ("none", True)


@pytest.mark.slow
def test_a_cpu_machine_s_missing_driver_leaves_the_bridge_backend_not_known(tmp_path):
    def flash_mla_needing_the_driver(site):
        site.dist("flash-mla", "1.0.0")
        site.file("flash_mla/__init__.py", "raise ImportError('libcuda.so.1: cannot open shared object file: No such "
                                           "file or directory')\n")

    env = (Env(tmp_path).wheel("mbridge", "megatron-bridge-0.6.2").wheel("verl", "verl-0.9.0")
           .wheel("fe", "nvidia-cudnn-frontend-1.27.0").fake("flash_mla", flash_mla_needing_the_driver))
    p = _profile(env, "--gpu-arch", "10.0")
    assert p["dsa_backend"] == "cudnn" and p["job"]["dsa_backend_known"] is False, p["job"]["dsa_backend_decided"]


def test_a_bridge_rule_the_doctor_cannot_read_is_not_known():
    assert bridgerule.read_rule({"found": False})["readable"] is False
    odd = {"found": True, "functions": {}, "assignments": [
        {"attribute": bridgerule.FIELD, "value": "os.environ.get('X') == '1'", "lineno": 3, "locals": {}}]}
    rule = bridgerule.read_rule(odd)
    assert rule["readable"] is False
    assert bridgerule.decide(rule, (10, 0), {}, "b")[:2] == ("cudnn", False)  # never "none"


def _profile(env: Env, *args: str, argv: list[str] = VERL) -> dict:
    run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.dsa-backend", "--job-args", shlex.join(argv),
                     *args, sites=tuple(env.sites.values()))
    assert run.returncode in (0, 1), run.stderr
    return run.report["profile"]


@pytest.mark.slow  # five doctor runs against real bridges
def test_the_profile_takes_the_backend_from_the_installed_bridge(tmp_path):
    old = Env(tmp_path / "old").wheel("mbridge", "megatron-bridge-0.5.1").wheel("verl", "verl-0.9.0")
    new = Env(tmp_path / "new").wheel("mbridge", "megatron-bridge-0.6.2").wheel("verl", "verl-0.9.0")
    p = _profile(old, "--gpu-arch", "10.0")
    assert p["dsa_backend"] == "cudnn" and p["job"]["dsa_backend_known"] is True
    assert "Megatron-Bridge 0.5.1 deepseek_v4_bridge.py L460" in p["job"]["dsa_backend_decided"]
    p = _profile(new, "--gpu-arch", "10.0")  # neither kernel installed: the bridge leaves fusion off
    assert p["dsa_backend"] == "none" and "failed to import" in p["job"]["dsa_backend_decided"]
    assert p["job"]["dsa_backend_rule"]["imports"] == {"cudnn:DSA": False, "flash_mla:flash_mla_sparse_fwd": False}
    # The real frontend 1.27.0 (a lazy DSA namespace) and FlashMLA's interface: the same imports succeed.
    new.wheel("fe", "nvidia-cudnn-frontend-1.27.0").fake("flash_mla", fake_flash_mla)
    p = _profile(new, "--gpu-arch", "10.0")
    assert p["dsa_backend"] == "cudnn" and "the imports succeed" in p["job"]["dsa_backend_decided"]
    assert _profile(new, "--gpu-arch", "9.0")["dsa_backend"] == "none"
    # No GPU and no --gpu-arch: not known, and the cudnn checks stay on.
    p = _profile(new)
    assert p["dsa_backend"] == "cudnn" and p["job"]["dsa_backend_known"] is False


# --- wrapper and overrides-only commands -----------------------------------------------------------------------------

# Commands whose launch chain stops before the entry (doctor/job/chain.py): a script, a pipe, an unknown program.
WRAPPERS = [["bash", "run.sh"], ["sh", "-c", "python3 -m verl.trainer.main_ppo | grep step"],
            ["srun", "--ntasks=8", "train.sh"],
            ["env", "A=1", "bash", "x.sh", "actor_rollout_ref.actor.megatron.context_parallel_size=1"],
            ["mpirun", "-np", "8", "python3", "-m", "verl.trainer.main_ppo"]]


@pytest.mark.parametrize("argv", WRAPPERS)
def test_a_wrapper_is_read_as_not_known(argv):
    job = parse(argv)
    assert job.kind == "unknown" and job.chain is not None and job.chain.stopped
    # A wrapper the chain follows is read through: `sh -c` and timeout reach verl's entry.
    assert parse(["sh", "-c", "python3 -m verl.trainer.main_ppo"]).kind == "verl"
    assert parse(["timeout", "3600", "python3", "-m", "verl.trainer.main_ppo"]).kind == "verl"


@pytest.mark.parametrize("argv", [WRAPPERS[0], WRAPPERS[3]])
def test_a_wrapper_command_leaves_the_settings_not_known(argv):
    report = run_in_process(None, sys.executable, ["job.*"], prof=profile(job_args=argv, smoke="off")).to_dict()
    job = report["profile"]["job"]
    assert report["profile"]["cp"] > 1 and job["cp_known"] is False and report["profile"]["dsa_backend"] == "cudnn"
    assert "--cp N" in job["not_known"]
    rows = {c["id"]: c for c in report["checks"]}
    assert rows["job.cp-args"]["status"] == "warn" and "not known" in rows["job.cp-args"]["summary"]
    # The text report's first lines say so: through the CLI.
    text = run_doctor("check", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv)).stdout
    head = text.split("\n[")[0]  # before the first area
    assert "not known:" in head and "--cp N" in " ".join(head.split())
    given = profile(job_args=argv, cp=1, dsa_backend="none").to_dict()
    assert (given["cp"], given["dsa_backend"], given["job"]["cp_given"]) == (1, "none", 1)


def test_preflight_of_a_wrapper_script_does_not_start_a_job_check_would_fail(tmp_path, bare_python):
    """`preflight --only 'cudnn-fe.*' -- bash run.sh` on frontend 1.26.0 without its stack: the cudnn rules run, as
    for the stricter job, so it stops, as `check` does."""
    script = tmp_path / "run.sh"
    marker = tmp_path / "started"
    script.write_text(f"touch {shlex.quote(str(marker))}\n")
    sites = (ensure("nvidia-cudnn-frontend-1.26.0"),)
    pre = run_doctor("preflight", "--no-smoke", "--gpu-arch", "10.0", "--only", "cudnn-fe.*", "--", "bash",
                     str(script), sites=sites, python=bare_python)
    assert pre.returncode == 1 and not marker.exists(), pre.stderr
    assert "nothing was checked" not in pre.stderr and "FAIL" in pre.stderr
    # `check --job-args` of the same command judges the same rules: it fails too.
    check = run_in_process(list(sites), bare_python, ["cudnn-fe.*"],
                           prof=profile(gpu_arch="10.0", smoke="off", job_args=["bash", str(script)]))
    assert check.exit_code == 1


def test_overrides_only_are_verl_overrides_or_refused():
    job = parse(["actor_rollout_ref.actor.megatron.context_parallel_size=2", f"++{OTC}.cp_partition_mode=contiguous"])
    assert job.kind == "verl" and job.cp() == 2 and job.entry is None
    with pytest.raises(UsageError, match="actor_rollout_ref.actor.megatron.context_parallel_size"):
        parse(["context_parallel_size=2", "data.max_prompt_length=2048"])
    for mistyped in (["cp=2"], ["actor.megatron.context_parallel_size=2"], [f"++{OTC[len('actor_rollout_ref.'):]}"
                                                                          ".cp_partition_mode=contiguous"]):
        with pytest.raises(UsageError, match="no verl key"):
            parse([*mistyped, "data.max_prompt_length=2048"])
    # The rollout's own TP (verl's DSv4 example sets it) is no mistyped actor setting.
    assert parse(["actor_rollout_ref.rollout.tensor_model_parallel_size=1", "model_engine=megatron"]).cp() == 1
    run = run_doctor("check", "--no-smoke", "--only", "job.*", "--job-args", "context_parallel_size=2 a.b=1")
    assert run.returncode == 2 and "no verl key" in run.stderr
    # Leading assignments in front of a program are its environment, as a shell reads them.
    job = parse(["NCCL_NVLS_ENABLE=0", *VERL])
    assert job.kind == "verl" and job.env == {"NCCL_NVLS_ENABLE": "0"} and job.cp() == 2


def test_a_wrapper_s_script_text_never_reaches_the_report_as_a_key():
    """`sh -c 'SCRIPT'`: the script is one word with an `=` in it; only names are listed, never what precedes the
    `=` of a sentence (a password given to another program there)."""
    script = "mysql -u admin -phunter2Xyz db < dump.sql; python3 -m verl.trainer.main_ppo a.b=1"
    for argv in (["sh", "-c", script], ["mytool", script, "--flag=x", "k.v=1"]):
        job = parse(argv)
        assert job.kind == "unknown" and not any("hunter2" in name for name in job.unknown), job.unknown
    assert parse(["mytool", script, "--flag=x", "k.v=1"]).unknown == ["--flag", "k.v"]
    # A flag word holding a sentence, in a verl or a Megatron-LM command: left out too.
    for argv in ([*VERL, "--note pass hunter2Xyz"], ["pretrain_gpt.py", "--seq-length", "8", "--x pass hunter2Xyz"]):
        job = parse(argv)
        assert job.kind in ("verl", "megatron") and not any("hunter2" in n for n in job.unknown), job.unknown


# --- job settings in the report and the plan --------------------------------------------------------------------------

def test_fix_job_args_prints_all_three_cp_args_lines_rounded_up(tmp_path):
    """A verl command without the CP settings, whose lengths are no multiple of CP: the plan ends with the full
    CP_ARGS, max_seqlen_per_dp_cp_rank rounded up (verl's script would give 6144, one token short), and the export
    lines, all comments: neither the script nor --apply runs them."""
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")
    run = run_doctor("fix", "--only", "job.*", "--job-args", shlex.join(VERL), sites=tuple(env.sites.values()),
                     env={"NCCL_NVLS_ENABLE": "", "CUDA_DEVICE_MAX_CONNECTIONS": ""})
    assert run.returncode == 0, run.stderr
    wanted = [f"++{OTC}.cp_partition_mode=contiguous", f"++{OTC}.sequence_packing_scheduler=dp_balanced",
              f"++{OTC}.max_seqlen_per_dp_cp_rank={math.ceil((2048 + 10241) / 2)}"]
    lines = run.stdout.splitlines()
    for line in wanted:
        hits = [x for x in lines if line in x]
        assert hits and all(x.startswith("#") for x in hits), (line, run.stdout)
    assert "max_seqlen_per_dp_cp_rank=6144" not in run.stdout
    assert any(x.startswith("#") and "export NCCL_NVLS_ENABLE=0" in x for x in lines)
    assert not [x for x in lines if x.strip() and not x.startswith("#") and ("++" in x or "export" in x)]
    section = lines.index(next(x for x in lines if x.startswith("# Job settings")))
    assert all(not x.startswith('"$PY"') for x in lines[section:])  # after the pip steps
    applied = run_doctor("fix", "--apply", "--yes", "--only", "job.*", "--job-args", shlex.join(VERL),
                         sites=tuple(env.sites.values()), env={"NCCL_NVLS_ENABLE": ""})
    assert "nothing to apply" in applied.stderr  # settings are never run


def test_the_report_keeps_job_settings_apart_from_the_argv_fixes(tmp_path):
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")
    report = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(VERL),
                        sites=tuple(env.sites.values()), env={"NCCL_NVLS_ENABLE": "1"}).report  # schema-validated
    settings = report["job_settings"]
    assert settings["cp_args"]["max_seqlen_per_dp_cp_rank"] == 6145 and len(settings["cp_args"]["lines"]) == 3
    assert "rounds down" in settings["cp_args"]["rounding"]
    assert "export NCCL_NVLS_ENABLE=0" in settings["exports"]
    row = next(c for c in report["checks"] if c["id"] == "job.cp-args")
    assert row["status"] == "warn" and "max_seqlen_per_dp_cp_rank not stated" in row["summary"]
    assert any(f["description"].endswith(f"++{OTC}.max_seqlen_per_dp_cp_rank=6145") for f in row["fixes"])
    assert all(f["phase"] == "setting" and not f["argv"] for c in report["checks"] if c["id"].startswith("job.")
               for f in c["fixes"])
    json.dumps(report)


def test_a_stated_max_seqlen_that_covers_the_longest_sample_is_not_lacking():
    """The section's "lacks" counts only what the command would have to change: a stated max_seqlen_per_dp_cp_rank
    at least the rounded-up length is stated (a larger one is valid), a shorter one is lacking."""
    from dsv4_doctor.job.settings import cp_args

    def lacking(value, lengths=True):
        argv = [*(VERL if lengths else VERL[:3] + VERL[5:]), f"++{OTC}.cp_partition_mode=contiguous",
                f"++{OTC}.sequence_packing_scheduler=dp_balanced", f"++{OTC}.max_seqlen_per_dp_cp_rank={value}"]
        return cp_args(parse(argv), 2)["missing"]

    assert lacking(6145) == [] and lacking(8192) == [] and lacking(6000, lengths=False) == []
    assert lacking(6144) == [f"++{OTC}.max_seqlen_per_dp_cp_rank=6145"]
    wrapped = cp_args(parse(["bash", "x.sh"]), 2)
    assert wrapped["max_seqlen_per_dp_cp_rank"] is None and "not stated" not in wrapped["computed"]
    assert "not read" in wrapped["computed"]


def test_mcore_config_s_cp_args_round_up_as_the_job_settings_do():
    """mcore.config prints CP_ARGS as shell for a job script: its division, run by a real shell, rounds up."""
    import subprocess

    from dsv4_doctor.checks import mcore_checks as mcore

    line = mcore.CP_ARGS[-1]
    out = subprocess.run(["sh", "-c", f"MAX_PROMPT_LENGTH=2048 MAX_RESPONSE_LENGTH=10241 ACTOR_CP=2; echo {line}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"++{OTC}.max_seqlen_per_dp_cp_rank={math.ceil((2048 + 10241) / 2)}"


@pytest.mark.parametrize("source", [None, 5, "x", {"found": True, "assignments": 5},
                                    {"found": True, "assignments": [{"attribute": bridgerule.FIELD, "value": "(" * 500,
                                                                     "locals": [], "lineno": "x"}]},
                                    {"found": True, "functions": {"f": 1}, "assignments": [
                                        {"attribute": bridgerule.FIELD, "value": "a", "locals": {"a": "a"}}]}])
def test_a_hostile_bridge_summary_is_not_known_never_a_crash(source):
    rule = bridgerule.read_rule(source)
    assert rule["readable"] is False
    assert bridgerule.decide(rule, (10, 0), {}, "b")[:2] == ("cudnn", False)


def test_the_job_settings_section_stays_comments_whatever_it_holds():
    from dsv4_doctor.fix import plan as fixplan
    from dsv4_doctor.report.script import render_script

    evil = {"cp_args": {"syntax": "hydra", "cp": 2, "lines": ["a=1\nrm -rf ~", "b=$(touch PWNED)\r\x1b[2J"],
                        "missing": ["x"], "computed": "c\nid", "rounding": "r"},
            "exports": ["export A=1\nrm -rf ~"], "notes": ["n\n`id`"]}
    script = render_script(fixplan.Plan([], []), "/usr/bin/python3", {"cp": 2}, "0", job_settings=evil)
    body = script.split("set -eu\n", 1)[1].splitlines()
    assert [line for line in body if line and not line.startswith("#")] == ["PY=/usr/bin/python3"]
    assert "\x1b" not in script and "\r" not in script
