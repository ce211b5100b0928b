"""A verl command read as Hydra and OmegaConf give it to the job: composed in the target with real hydra-core 1.3.2,
omegaconf 2.3.0 and verl 0.9.1's own config tree (installed --no-deps: its config files and entry modules, never
imported), and the doctor's own reader where the target has no Hydra: the SFT trainer, dict overrides, `+` on an
existing key, an override of a missing key, oc.env text against oc.decode, a --config-name file, whole-word shell
variables and arrays, and the bounds of the job's numbers (job.config)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_doctor
from test_job import job_rows_in_process
from wheels import ensure

from dsv4_doctor.job.command import parse
from dsv4_doctor.job.generated import judge
from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.model.core import Profile

PPO = ["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron"]
SFT = ["torchrun", "--nnodes", "1", "--nproc-per-node", "8", "-m", "verl.trainer.sft_trainer", "engine=megatron"]
ACTOR = "actor_rollout_ref.actor.megatron"
CP = f"{ACTOR}.context_parallel_size"
DECODE_ADVICE = "'${oc.decode:${oc.env:NAME}}'"


@pytest.fixture(scope="module")
def hydra_sites() -> tuple[Path, Path]:
    return ensure("hydra-core-1.3.2"), ensure("verl-0.9.1")


def composed(python: str, sites: tuple[Path, ...], argv: list[str], *extra: str, env: dict | None = None) -> dict:
    """`check --only 'job.*' --job-args ARGV` for real, with `sites` on the target's PYTHONPATH: the rows by id,
    and the profile."""
    run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.*", "--job-args", shlex.join(argv), *extra,
                     sites=sites, python=python, env=env)
    assert run.returncode in (0, 1), run.stderr
    return {c["id"]: c for c in run.report["checks"]} | {"_profile": run.report["profile"]}


# ------------------------------------------------------------------------------------ composed with Hydra in the target

def test_the_sft_trainer_is_composed_with_its_engine_keys(bare_python, hydra_sites):
    rows = composed(bare_python, hydra_sites, [*SFT, "engine.context_parallel_size=2"])
    job = rows["_profile"]["job"]
    assert rows["_profile"]["cp"] == 2 and job["trainer"] == "sft"
    assert job["read_by"] == "composed with Hydra 1.3.2 and verl 0.9.1's config (sft_trainer_engine)"
    assert job["roles"]["engine"]["cp"] == {"value": 2, "raw": "2", "type": "int", "source": "override"}
    assert job["roles"]["engine"]["tp"]["source"] == "default"  # verl's engine/megatron.yaml: known, not guessed
    assert rows["job.config"]["status"] == "pass"
    assert rows["job.cp-args"]["status"] != "skip"  # CP 2: the CP rules run, on engine.* lines
    assert any(f["description"].endswith("++engine.override_transformer_config.cp_partition_mode=contiguous")
               for f in rows["job.cp-args"]["fixes"]) or "verl will use" in rows["job.cp-args"]["details"]
    # --cp 2 agrees with the job instead of contradicting a CP 1 it misread.
    again = composed(bare_python, hydra_sites, [*SFT, "engine.context_parallel_size=2"], "--cp", "2")
    assert again["_profile"]["cp"] == 2


def test_a_dict_override_is_merged_as_hydra_merges_it(bare_python, hydra_sites):
    rows = composed(bare_python, hydra_sites,
                    [*PPO, f"{ACTOR}={{context_parallel_size:2,tensor_model_parallel_size:1}}"])
    job = rows["_profile"]["job"]
    assert rows["_profile"]["cp"] == 2 and job["roles"]["actor"]["cp"]["source"] == "override"
    assert job["roles"]["ref"]["cp"]["value"] == 2  # the ref inherits it through verl's oc.select
    assert rows["job.config"]["status"] == "pass"


@pytest.mark.parametrize("word, message", [
    (f"+{CP}=2", f"Could not append to config. An item is already at '{CP}'"),
    (f"{ACTOR}.no_such_key=2", f"Could not override '{ACTOR}.no_such_key'"),
])
def test_overrides_hydra_refuses_fail_with_hydras_message(bare_python, hydra_sites, word, message):
    secret = "hunter2-not-a-setting"  # a value Hydra's message would quote: never in the report
    word = word.replace("=2", f"={secret}") if "no_such_key" in word else word
    rows = composed(bare_python, hydra_sites, [*PPO, f"{CP}=2", word] if word.startswith(ACTOR) else [*PPO, word])
    row = rows["job.config"]
    assert row["status"] == "fail" and message in row["summary"], row
    assert secret not in json.dumps(rows)
    profile = rows["_profile"]
    # Hydra stops the job: nothing it would have read is known, and the CP rules run as for CP > 1.
    assert profile["job"]["cp_known"] is False and profile["cp"] == 2
    assert "Hydra refuses the command" in profile["job"]["not_known"]


def test_oc_env_is_text_and_oc_decode_a_number(bare_python, hydra_sites):
    env = {"DOCTOR_CP_SIZE": "2"}
    text = composed(bare_python, hydra_sites, [*PPO, f"{CP}=${{oc.env:DOCTOR_CP_SIZE}}"], env=env)
    cp = text["_profile"]["job"]["roles"]["actor"]["cp"]
    assert (cp["value"], cp["type"]) == ("2", "str")
    assert text["job.config"]["status"] == "fail" and DECODE_ADVICE in text["job.config"]["summary"]
    number = composed(bare_python, hydra_sites, [*PPO, f"{CP}='${{oc.decode:${{oc.env:DOCTOR_CP_SIZE}}}}'"], env=env)
    cp = number["_profile"]["job"]["roles"]["actor"]["cp"]
    assert (cp["value"], cp["type"]) == (2, "int") and number["job.config"]["status"] == "pass"
    # Unquoted, Hydra's override grammar cannot parse the nested interpolation: its own error.
    bare = composed(bare_python, hydra_sites, [*PPO, f"{CP}=${{oc.decode:${{oc.env:DOCTOR_CP_SIZE}}}}"], env=env)
    assert bare["job.config"]["status"] == "fail" and "Error parsing override" in bare["job.config"]["summary"]


def test_a_missing_variable_is_not_known_under_check_and_fails_under_preflight(
        bare_python, hydra_sites, tmp_path):
    argv = [*PPO, f"{CP}='${{oc.decode:${{oc.env:DOCTOR_UNSET_CP}}}}'"]
    rows = composed(bare_python, hydra_sites, argv)
    job = rows["_profile"]["job"]
    assert job["cp_known"] is False and "DOCTOR_UNSET_CP" in job["not_known"]
    report = tmp_path / "r.json"
    run = run_doctor("preflight", "--python", bare_python, "--dry-run", "--no-smoke", "--only", "job.config",
                     "--report", str(report), "--", *argv, sites=hydra_sites)
    row = {c["id"]: c for c in json.loads(report.read_text())["checks"]}["job.config"]
    assert run.returncode == 1 and row["status"] == "fail" and "DOCTOR_UNSET_CP" in row["summary"]


def test_a_config_name_file_that_sets_the_cp(bare_python, hydra_sites, tmp_path):
    config = hydra_sites[1] / "verl" / "trainer" / "config"
    (tmp_path / "my_trainer.yaml").write_text(
        f"hydra:\n  searchpath:\n    - file://{config}\ndefaults:\n  - ppo_megatron_trainer\n  - _self_\n"
        "actor_rollout_ref:\n  actor:\n    megatron:\n      context_parallel_size: 4\n")
    argv = ["python3", "-m", "verl.trainer.main_ppo", f"--config-path={tmp_path}", "--config-name=my_trainer"]
    rows = composed(bare_python, hydra_sites, argv)
    job = rows["_profile"]["job"]
    assert rows["_profile"]["cp"] == 4 and job["roles"]["actor"]["cp"]["source"] == "config file"
    assert job["roles"]["actor"]["tp"]["source"] == "default" and job["read_by"].endswith("(my_trainer)")
    # Without Hydra the doctor cannot read the file: the CP is not known (checked as CP > 1), said with how to state it.
    run = run_doctor("check", "--only", "job.config", "--job-args", shlex.join(argv), sites=(hydra_sites[1],),
                     python=bare_python)
    text = " ".join(run.stdout.split())
    assert run.returncode == 0 and "may set it" in text and "cp=2 (not known: checked as CP > 1)" in text


def test_an_unrelated_broken_interpolation_does_not_fail_the_job(bare_python, hydra_sites):
    rows = composed(bare_python, hydra_sites, [*PPO, f"{CP}=2", "trainer.project_name=${no_such_resolver:x}"])
    assert rows["job.config"]["status"] == "pass" and rows["_profile"]["cp"] == 2


# ------------------------------------------------------------------------ the doctor's reader (Hydra not in the target)

def test_the_readers_judgement_of_plus_and_missing_keys_matches_hydra(
        bare_python, hydra_sites, tmp_path):
    """verl readable, Hydra not importable: the generated config's keys judge `+` and plain overrides as Hydra does
    (each word composed for real by the probe, against the doctor's own reading)."""
    verl_config = hydra_sites[1] / "verl" / "trainer" / "config"
    text = (verl_config / "_generated_ppo_megatron_trainer.yaml").read_text()
    words = [f"+{CP}=2", f"{ACTOR}.no_such_key=1", f"++{ACTOR}.override_transformer_config.cp_partition_mode=x",
             f"{ACTOR}.override_transformer_config.cp_partition_mode=x", "+data.max_prompt_length=2",
             "data.max_prompt_length=2", f"{ACTOR}.override_transformer_config.recompute_method=uniform"]
    probe = REPO / "doctor" / "probes" / "dsv4probe_hydra.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, hydra_sites)))
    running = []
    for i, word in enumerate(words):  # one real composition per word, all at once
        request = {"entry_file": str(hydra_sites[1] / "verl" / "trainer" / "main_ppo.py"),
                   "words": {"overrides": ["model_engine=megatron", word]}, "select": [CP]}
        request_file = tmp_path / f"a{i}.request.json"  # as the doctor hands a probe its request: a file
        request_file.write_text(json.dumps(request))
        running.append(subprocess.Popen([bare_python, str(probe), str(tmp_path / f"a{i}.json"), str(request_file)],
                                        env=env))
    for i, (word, proc) in enumerate(zip(words, running, strict=True)):
        assert proc.wait(timeout=60) == 0
        hydra_refuses = json.loads((tmp_path / f"a{i}.json").read_text())["error"] is not None
        assert bool(judge(text, ["model_engine=megatron", word], "here")) == hydra_refuses, word
    rows = composed(bare_python, (hydra_sites[1],), [*PPO, f"+{CP}=2"])
    assert rows["job.config"]["status"] == "fail" and "An item is already at" in rows["job.config"]["summary"]
    assert "Hydra not in the target" in rows["_profile"]["job"]["read_by"]
    assert rows["_profile"]["job"]["checked_against"] == "verl 0.9.1's _generated_ppo_megatron_trainer.yaml"
    rows = composed(bare_python, (hydra_sites[1],), [*PPO, f"{CP}=2"])
    assert rows["job.config"]["status"] == "pass" and "_generated_ppo_megatron_trainer.yaml" in \
        rows["job.config"]["summary"]
    # No verl readable at all: not judged, and said so.
    rows = composed(bare_python, (), [*PPO, f"+{CP}=2"])
    assert rows["job.config"]["status"] == "warn" and "not known whether Hydra accepts" in rows["job.config"]["summary"]


def test_the_reader_takes_the_sft_engine_keys_and_dict_overrides():
    rows = job_rows_in_process([*SFT, "engine.context_parallel_size=2", "engine.tensor_model_parallel_size=1"])
    assert rows["_profile"]["cp"] == 2 and rows["job.cp-args"]["status"] != "skip"
    assert any("engine.override_transformer_config." in f["description"] for f in rows["job.cp-args"]["fixes"])
    job = parse([*PPO, f"{ACTOR}={{context_parallel_size:2,tensor_model_parallel_size:1}}"])
    assert job.cp() == 2 and job.roles["actor"]["tp"].value == 1
    nested = [*PPO, f"{ACTOR}={{context_parallel_size:2,override_transformer_config:{{a:1}}}}"]
    assert parse(nested).cp() is None  # a nested dict the reader does not take apart: not known, never the default
    decisions = job_profile(Profile(), nested, None, None).job.decisions
    assert decisions.cp_known is False and "is nested" in decisions.not_known


def test_the_reader_types_oc_env_as_omegaconf_does(monkeypatch):
    monkeypatch.setenv("DOCTOR_CP_SIZE", "2")
    for value in ("${oc.env:DOCTOR_CP_SIZE}", "${oc.env:DOCTOR_UNSET_CP,2}"):
        rows = job_rows_in_process([*PPO, f"{CP}={value}"])
        assert rows["job.config"]["status"] == "fail" and DECODE_ADVICE in rows["job.config"]["summary"], value
        assert rows["_profile"]["job"]["roles"]["actor"]["cp"]["type"] == "str"
    rows = job_rows_in_process([*PPO, f"{CP}='${{oc.decode:${{oc.env:DOCTOR_CP_SIZE}}}}'"])
    assert rows["_profile"]["job"]["roles"]["actor"]["cp"]["type"] == "int" and rows["_profile"]["cp"] == 2
    assert rows["job.config"]["status"] == "warn"  # no Hydra here: whether Hydra accepts it is not known
    # Unquoted, Hydra's grammar refuses the nested interpolation (as the composed path shows): the reader says so.
    rows = job_rows_in_process([*PPO, f"{CP}=${{oc.decode:${{oc.env:DOCTOR_CP_SIZE}}}}"])
    assert rows["job.config"]["status"] == "fail" and "must be quoted" in rows["job.config"]["summary"]
    unresolved = job_profile(Profile(), [*PPO, f"{CP}=${{oc.env:DOCTOR_UNSET_CP}}"], None, None)
    assert unresolved.cp == 2 and unresolved.cp_source == "default"  # not known (checked as CP > 1), never guessed
    assert "cannot resolve" in (unresolved.job.decisions.not_known or "")


@pytest.mark.parametrize("argv, word", [
    (["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "$MEGATRON_ARGS"], "$MEGATRON_ARGS"),
    (["torchrun", "$DISTRIBUTED_ARGS", "pretrain_gpt.py", "${GPT_ARGS}", "--seq-length", "4096"], "${GPT_ARGS}"),
    (["python3", "-m", "verl.trainer.main_ppo", "${ACTOR[@]}", "${CP_ARGS[@]}"], "${CP_ARGS[@]}"),
    (["python3", "-m", "verl.trainer.main_ppo", "$(cat overrides.txt)"], "$(...)"),  # a command's text is not shown
    ([*SFT, "$@"], "$@"),
])
def test_a_whole_unexpanded_word_hides_the_settings_it_may_hold(argv, word):
    profile = job_profile(Profile(), argv, None, None)
    job = profile.job
    assert job is not None and job.decisions is not None
    assert profile.cp == 2 and profile.cp_source == "default" and job.decisions.cp_known is False  # checked as CP > 1
    assert profile.dsa_backend == "cudnn" and "not known" in job.decisions.dsa_backend_decided
    assert repr(word) in (job.decisions.not_known or "") and "--cp N" in (job.decisions.not_known or "")
    rows = job_rows_in_process(argv)
    cp_args = rows["job.cp-args"]
    assert cp_args["status"] != "pass" and "not known" in cp_args["summary"], cp_args
    assert rows["job.parallelism"]["status"] == "warn" and "not stated" not in rows["job.parallelism"]["summary"]
    # --cp and --dsa-backend state them; a CP stated after the word is known.
    given = job_profile(Profile(), argv, 4, "none")
    assert given.cp == 4 and given.cp_source == "option" and given.dsa_backend == "none"
    head = "--context-parallel-size" if "pretrain_gpt.py" in argv else \
        "engine.context_parallel_size=" if "verl.trainer.sft_trainer" in argv else f"{CP}="
    after = job_profile(Profile(), [*argv, *(head.split("=")[0:1] + ["2"] if head.startswith("--") else [head + "2"])],
                        None, None)
    assert after.cp == 2 and after.cp_source == "job"


# ----------------------------------------------------------------------------------------------- bounded numbers

def test_job_numbers_are_exact_and_bounded():
    huge = "9" * 400
    rows = job_rows_in_process([*PPO, f"{CP}=2", "data.max_prompt_length=2048", f"data.max_response_length={huge}"])
    row = rows["job.config"]
    assert row["status"] == "fail" and "a number of 400 digits is out of range" in row["summary"]
    assert "from 1 to 2147483647" in row["summary"]
    assert rows["job.cp-args"]["status"] in ("warn", "fail", "skip")  # judged without the length: no OverflowError
    rows = job_rows_in_process(["pretrain_gpt.py", "--context-parallel-size", "99999"])
    assert rows["job.config"]["status"] == "fail" and "from 1 to 1024" in rows["job.config"]["summary"]
    assert rows["_profile"]["cp"] == 2 and rows["_profile"]["job"]["cp_known"] is False
    # Exact integer arithmetic: ceil((2^70 + 1) / 2) with no float in between.
    rows = job_rows_in_process([*PPO, f"{CP}=2", "data.max_prompt_length=1", f"data.max_response_length={2**30}"])
    assert any(f"max_seqlen_per_dp_cp_rank={2**29 + 1}" in f["description"] for f in rows["job.cp-args"]["fixes"])
    # Text longer than any integer Python parses stays text, and is out of range, not a crash.
    rows = job_rows_in_process([*PPO, f"{CP}=2", "data.max_prompt_length=" + "7" * 5000])
    assert rows["job.config"]["status"] == "fail" and "out of range" in rows["job.config"]["summary"]


def test_a_composition_that_crashes_leaves_the_settings_not_known(bare_python, hydra_sites, tmp_path):
    """A Hydra that kills its interpreter at import (no release does: a fake in front of the real one) is no answer:
    the settings are not known, with the reason, and the CP rules run as for CP > 1."""
    fake = tmp_path / "site" / "hydra"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    rows = composed(bare_python, (tmp_path / "site", *hydra_sites), [*PPO, f"{CP}=1"])
    job = rows["_profile"]["job"]
    assert job["read_by"].startswith("not known: the composition in the target failed") and "SIGSEGV" in \
        job["read_by"], job["read_by"]
    assert rows["_profile"]["cp"] == 2 and job["cp_known"] is False and "composition" in job["not_known"]


def test_a_composition_that_hangs_is_cut_at_the_probe_timeout(bare_python, hydra_sites, tmp_path):
    """A Hydra that hangs at import (a fake in front of the real one) is killed at the probe timeout: the settings
    are not known, with the reason, and the report comes within the run's budget."""
    fake = tmp_path / "site" / "hydra"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import time\ntime.sleep(600)\n")
    run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.config", "--timeout", "3", "--job-args",
                     shlex.join([*PPO, f"{CP}=1"]), sites=(tmp_path / "site", *hydra_sites), python=bare_python)
    job = run.report["profile"]["job"]
    assert run.returncode == 0 and run.seconds < 30 and "timed out" in job["read_by"], job["read_by"]
    assert run.report["profile"]["cp"] == 2 and job["cp_known"] is False
