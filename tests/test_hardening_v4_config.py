"""Hardening v4 (issue 43, item 5): a value the job's config gives is a finding, never the doctor's usage error.

A `--config-dir` YAML composed with real hydra-core 1.3.2 and verl 0.9.1's config tree, and the job's own overrides
(composed, and read by the doctor's reader where the target has no Hydra), that set the CP or another setting the
doctor reads to text, a float, a list, a dict, 0, -1, a boolean or a huge integer: exit 1 with a valid JSON report
whose job.config row fails and quotes the value (a list as a list, a dict as a dict), never exit 2. What the user
types as the doctor's own option (`--cp two`) stays a usage error."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Run, doctor_command, run_doctor, validate
from test_job import job_rows_in_process
from wheels import ensure

from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.model.core import Profile

PPO = ["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron"]
ACTOR = "actor_rollout_ref.actor.megatron"
CP = f"{ACTOR}.context_parallel_size"
HUGE = "9" * 41  # past 2^63: a JSON integer the doctor's probe reader does not take as one
# The CP values the issue names, each as a YAML file writes it and as job.config must quote it.
CP_VALUES = [('"two"', "'two' (text)"), ("2.5", "2.5 (a float)"), ("[2, 2]", "[2, 2] (a list)"),
             ("{a: 1}", "{a: 1} (a dict)"), ("0", "0 is out of range"), ("-1", "-1 is out of range"),
             ("true", "true (a boolean)"), (HUGE, f"{HUGE} is out of range")]


@pytest.fixture(scope="module")
def hydra_sites() -> tuple[Path, Path]:
    return ensure("hydra-core-1.3.2"), ensure("verl-0.9.1")


def doctor_runs(commands: list[tuple[list[str], tuple[Path, ...]]], python: str) -> list[Run]:
    """`check -f json --no-smoke --only 'job.*' --job-args CMD` for each (command, sites on the target's
    PYTHONPATH), all at once: each composes in a probe of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    start = time.monotonic()
    running = [subprocess.Popen([*doctor_command(), "check", "-f", "json", "--no-smoke", "--only", "job.*",
                                 "--job-args", shlex.join(argv), "--python", python],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(env, PYTHONPATH=os.pathsep.join(map(str, sites))))
               for argv, sites in commands]
    runs = []
    for proc in running:
        out, err = proc.communicate(timeout=120)
        runs.append(Run(proc.returncode, out, err, time.monotonic() - start))
    return runs


def failed_config(run: Run) -> tuple[str, dict]:
    """The failing job.config row's full text (every error, one a line) and the report's profile, from a run that
    exited 1 with a valid report."""
    assert run.returncode == 1, run.stderr
    report = validate(json.loads(run.stdout))
    row = next(c for c in report["checks"] if c["id"] == "job.config")
    assert row["status"] == "fail", row
    return row["details"], report["profile"]


def yaml_for(actor: str, ref: str, critic: str, extra: str = "") -> str:
    """A --config-dir file over verl's ppo_trainer that sets each role's CP (as YAML writes the values)."""
    return ("defaults:\n  - ppo_trainer\n  - _self_\n"
            f"actor_rollout_ref:\n  actor:\n    megatron:\n      context_parallel_size: {actor}\n{extra}"
            f"  ref:\n    megatron:\n      context_parallel_size: {ref}\n"
            f"critic:\n  megatron:\n    context_parallel_size: {critic}\n")


# The other settings the doctor reads, wrong in one more config file: (YAML under the actor's megatron, quoted).
OTHERS_YAML = ("      tensor_model_parallel_size: [1]\n"
               "      pipeline_model_parallel_size: [" + ", ".join(map(str, range(40))) + "]\n"
               "      expert_model_parallel_size: 0\n"
               "      dynamic_context_parallel: 'no'\n"
               "      override_transformer_config:\n"
               "        apply_dsa_kernel_fusion: 'false'\n"
               "        cp_partition_mode: [contiguous]\n"
               "        dsa_kernel_backend: {cudnn: true}\n"
               "        max_seqlen_per_dp_cp_rank: 2.5\n"
               "        dsa_indexer_loss_coeff: .inf\n")
OTHERS_QUOTED = ["actor: tp = [1] (a list)", "actor: pp = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, …] "
                 "(a list)", "actor: ep = 0 is out of range", "actor: dynamic_context_parallel = 'no' (text) is not "
                 "valid: it must be true or false", "actor: apply_dsa_kernel_fusion = 'false' (text)",
                 "actor: cp_partition_mode = [contiguous] (a list)", "actor: dsa_kernel_backend = {cudnn: true} "
                 "(a dict)", "actor: max_seqlen_per_dp_cp_rank = 2.5 (a float)",
                 "actor: dsa_indexer_loss_coeff = inf is out of range: it must be a finite number",
                 "max_response_length = 'long' (text)", "nnodes = -3 is out of range", "gpus_per_node = 8.0 (a float)"]


@pytest.mark.slow  # real Hydra compositions in the target: seconds
def test_a_config_dir_value_is_a_failing_job_config_row_that_quotes_it(bare_python, hydra_sites, tmp_path):
    """Each CP value the issue names, set by a --config-dir file composed with real Hydra (the actor's, the ref's
    and the critic's CP: three values a run), and every other setting the doctor reads set wrong: exit 1, a valid
    report, job.config fails quoting each value as the config gives it (never `null` for a list), the CP is not
    known and checked as CP > 1."""
    cases = [CP_VALUES[0:3], CP_VALUES[3:6], [*CP_VALUES[6:8], ("2", None)]]
    commands = []
    for i, values in enumerate(cases):
        folder = tmp_path / f"conf{i}"
        folder.mkdir()
        extra = OTHERS_YAML if i == 2 else ""
        text = yaml_for(*(v for v, _ in values), extra=extra)
        if i == 2:
            text += "data:\n  max_response_length: long\ntrainer:\n  nnodes: -3\n  n_gpus_per_node: 8.0\n"
        (folder / "my_ppo.yaml").write_text(text)
        # A critic override keeps the critic among the checked roles (verl runs it only when the command sets it).
        commands.append((["python3", "-m", "verl.trainer.main_ppo", "--config-dir", str(folder), "--config-name",
                          "my_ppo", "model_engine=megatron", "critic.megatron.tensor_model_parallel_size=1"],
                         hydra_sites))
    texts = []
    for values, run in zip(cases, doctor_runs(commands, bare_python), strict=True):
        text, profile = failed_config(run)
        texts.append(text)
        job = profile["job"]
        assert job["read_by"] == "composed with Hydra 1.3.2 and verl 0.9.1's config (my_ppo)"
        for role, (written, quoted) in zip(("actor", "ref", "critic"), values, strict=True):
            if quoted is None:
                assert job["roles"][role]["cp"]["value"] == 2  # a good value beside bad ones is read as it is
                continue
            assert f"{role}: cp = {quoted}" in text and "(in the config file)" in text, (written, text)
            cp = job["roles"][role]["cp"]
            assert cp["type"] == "not known" and cp["source"] == "config file", cp
            assert cp["raw"] == quoted.split(" (")[0].split(" is ")[0], cp  # as the config gives it
        assert "null" not in text  # a list or a dict is shown as itself
        assert profile["cp"] == 2 and job["cp_known"] is False and "so it is not known" in job["not_known"]
    for quoted in OTHERS_QUOTED:  # the third file's other settings
        assert quoted in texts[2], (quoted, texts[2])


@pytest.mark.slow  # real Hydra compositions in the target: seconds
def test_the_jobs_own_overrides_are_findings_composed_or_read(bare_python, hydra_sites):
    """The job's command is the job's config: `...context_parallel_size=two` in it fails job.config (exit 1, a
    report), composed with Hydra (a list override is a list) and read by the doctor's reader (no Hydra in the
    target). The doctor's own `--cp two` is its user's usage error (exit 2)."""
    argv = [*PPO, f"{CP}=[2,2]", "actor_rollout_ref.ref.megatron.context_parallel_size=two",
            "critic.megatron.context_parallel_size={a:1}"]
    composed, read = doctor_runs([(argv, hydra_sites), (argv, (hydra_sites[1],))], bare_python)
    text, profile = failed_config(composed)
    assert profile["job"]["read_by"].startswith("composed with Hydra")
    for quoted in ("actor: cp = [2, 2] (a list)", "ref: cp = 'two' (text)", "critic: cp = {a: 1} (a dict)"):
        assert quoted in text, (quoted, text)
    text, profile = failed_config(read)
    assert profile["job"]["read_by"] == "read by the doctor (Hydra not in the target)"
    for quoted in ("actor: cp = '[2,2]' (text)", "ref: cp = 'two' (text)", "critic: cp = '{a:1}' (text)"):
        assert quoted in text, (quoted, text)
    assert profile["cp"] == 2 and profile["job"]["cp_known"] is False
    # The doctor's own option: a usage error, with no report.
    usage = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.*", "--cp", "two", "--job-args",
                       shlex.join([*PPO, f"{CP}=2"]))
    assert usage.returncode == 2 and usage.stdout == "" and "--cp" in usage.stderr


READ = [([*PPO, f"{CP}={value}"], f"actor: cp = {quoted}") for value, quoted in
        [("two", "'two' (text)"), ("2.5", "2.5 (a float)"), ("[2,2]", "'[2,2]' (text)"), ("{a:1}", "'{a:1}' (text)"),
         ("0", "0 is out of range"), ("-1", "-1 is out of range"), ("true", "true (a boolean)"),
         (HUGE, f"{HUGE} is out of range")]] + \
    [(["pretrain_gpt.py", "--context-parallel-size", value], f"model: cp = {quoted}") for value, quoted in
     [("two", "'two' (text)"), ("2.5", "2.5 (a float)"), ("0", "0 is out of range")]]


@pytest.mark.parametrize("argv, quoted", READ)
def test_the_readers_values_are_findings_and_cp_is_then_not_known(argv, quoted):
    """The doctor's reader (no target): each CP value is job.config's failure quoting it, never a UsageError; the
    CP is then not known (checked as CP > 1, and job.cp-args says so), and --cp gives it without contradicting the
    job."""
    rows = job_rows_in_process(argv)
    row = rows["job.config"]
    assert row["status"] == "fail" and quoted in row["summary"], row
    assert rows["_profile"]["cp"] == 2 and rows["_profile"]["job"]["cp_known"] is False
    assert rows["job.cp-args"]["status"] != "pass" and "not known here" in rows["job.cp-args"]["summary"]
    given = job_rows_in_process(argv, cp=4)
    assert given["_profile"]["cp"] == 4 and given["job.config"]["status"] == "fail"
    assert "the CP is --cp 4's" in given["_profile"]["job"]["not_known"]


def test_a_launchers_node_count_is_a_finding_too():
    rows = job_rows_in_process(["torchrun", "--nnodes", "two", "--nproc-per-node", "8", "pretrain_gpt.py",
                                "--context-parallel-size", "2", "--tensor-model-parallel-size", "1"])
    assert rows["job.config"]["status"] == "fail" and "nnodes = 'two' (text)" in rows["job.config"]["summary"]
    assert rows["_profile"]["cp"] == 2 and rows["_profile"]["job"].get("cp_known") is not False
    parallelism = rows["job.parallelism"]  # the world size is not known: never judged on a guess
    assert parallelism["status"] == "warn" and "nnodes = two (text) is not valid" in parallelism["summary"]


@pytest.mark.parametrize("flag", ["--config-dir", "-cd"])
def test_a_config_dir_the_reader_cannot_read_may_set_what_the_command_does_not_state(flag):
    """Without Hydra the doctor reads no config file, and a --config-dir's files come before verl's own (its
    ppo_trainer.yaml replaces verl's): what the command does not state is not known, never verl's default, as for
    --config-name."""
    argv = ["python3", "-m", "verl.trainer.main_ppo", flag, "conf", f"{CP}=2"]
    rows = job_rows_in_process(argv)
    assert rows["_profile"]["cp"] == 2
    assert rows["job.parallelism"]["status"] == "warn" and f"the config the command names may set it ({flag})" in \
        rows["job.parallelism"]["summary"]
    # A CP the command does not state beside such a folder is not known: checked as CP > 1, never a usage error.
    unstated = job_profile(Profile(), ["python3", "-m", "verl.trainer.main_ppo", "--config-dir", "conf"], None, None)
    assert unstated.cp == 2 and unstated.cp_source == "default"
    assert unstated.job is not None and unstated.job.decisions is not None
    assert "the config it names (--config-dir) may set it" in (unstated.job.decisions.not_known or "")
