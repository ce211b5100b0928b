"""The job's entry runs its own grammar: Hydra's argument parser before composing (real hydra-core 1.3.2), verl's
configs as Hydra composes them where the target has no Hydra or the check is --static-only (the SFT trainer's
`sft_trainer_engine` by its defaults list, checked key for key against the real Hydra), with verl 0.9.1's own config
tree installed --no-deps (read, never imported)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from wheels import ensure

from dsv4_doctor.job.generated import composed_keys

PPO = ["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron"]
SFT = ["torchrun", "--nnodes", "1", "--nproc-per-node", "8", "-m", "verl.trainer.sft_trainer", "engine=megatron"]


def job_config_rows(python: str, sites: tuple[Path, ...], commands: list[list[str]], *extra: str) -> list[dict]:
    """`check --only job.* --job-args CMD` for each command, run at once (one doctor each): its job.config row and
    the profile's job."""
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, sites))
    from conftest import doctor_command

    running = [subprocess.Popen([*doctor_command(), "check", "-f", "json", "--no-smoke", "--only", "job.*",
                                 "--job-args", shlex.join(cmd), *extra, "--python", python],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for cmd in commands]
    out = []
    for proc in running:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), stderr[-2000:]
        report = json.loads(stdout)
        row = next(c for c in report["checks"] if c["id"] == "job.config")
        out.append(dict(row, _job=report["profile"]["job"]))
    return out


# -------------------------------------------------------------------------- Hydra's argument parser, before composing

@pytest.mark.slow  # two real compositions in the target: seconds
def test_a_command_hydras_own_parser_refuses_fails_job_config_with_its_message(bare_python):
    """Hydra's argparse takes its overrides as one positional list: overrides on both sides of --config-name are
    "unrecognized arguments", and @hydra.main stops there. The doctor composed such a command and passed it."""
    sites = (ensure("hydra-core-1.3.2"), ensure("verl-0.9.1"))
    split = [*PPO, "--config-name", "ppo_trainer", "trainer.nnodes=2"]
    together = [*PPO, "trainer.nnodes=2", "--config-name", "ppo_trainer"]
    refused, taken = job_config_rows(bare_python, sites, [split, together])
    assert refused["status"] == "fail", refused
    assert "Hydra's argument parser refuses the command (error: unrecognized arguments: trainer.nnodes=2)" \
        in refused["summary"] + refused["details"], refused
    assert taken["status"] == "pass", taken
    assert taken["_job"]["read_by"].startswith("composed with Hydra 1.3.2")


# ------------------------------------------------------------- without Hydra: every verl trainer's config, by structure

def _hydra_keys(name: str, overrides: list[str]) -> set[str]:
    """Every key path of verl's config `name` as the real Hydra composes it (in a subprocess with hydra-core)."""
    code = r'''
import json, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
folder, name, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with initialize_config_dir(config_dir=folder, version_base=None):
    cfg = OmegaConf.to_container(compose(config_name=name, overrides=overrides), resolve=False)
def flat(d, prefix=""):
    out = []
    for k, v in d.items():
        out.append(prefix + str(k))
        if isinstance(v, dict):
            out += flat(v, prefix + str(k) + ".")
    return out
print(json.dumps(flat(cfg)))
'''
    folder = ensure("verl-0.9.1") / "verl" / "trainer" / "config"
    done = subprocess.run([sys.executable, "-c", code, str(folder), name, json.dumps(overrides)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ensure("hydra-core-1.3.2"))))
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("name, overrides", [
    ("sft_trainer_engine", ["engine=megatron"]),  # the SFT trainer with verl's Megatron engine
    ("sft_trainer_engine", []),                   # its default engine (fsdp)
    ("evaluation", []),
])
def test_a_config_composed_by_structure_has_exactly_hydras_keys(name, overrides):
    folder = ensure("verl-0.9.1") / "verl" / "trainer" / "config"

    def read(relpath: str) -> str | None:
        path = folder / relpath
        return path.read_text() if path.is_file() else None

    composed = composed_keys(name, overrides, read)
    assert composed is not None
    assert composed[0] == _hydra_keys(name, overrides)


def test_a_config_the_structure_reader_cannot_follow_is_not_judged():
    """ppo_trainer's group files have defaults lists of their own (verl ships its composed file instead); a choice
    whose file is not there is Hydra's error to give, not the reader's guess."""
    folder = ensure("verl-0.9.1") / "verl" / "trainer" / "config"

    def read(relpath: str) -> str | None:
        path = folder / relpath
        return path.read_text() if path.is_file() else None

    assert composed_keys("ppo_trainer", [], read) is None
    assert composed_keys("sft_trainer_engine", ["engine=no_such_engine"], read) is None


@pytest.mark.slow  # real doctor runs: seconds
def test_the_sft_trainer_without_hydra_and_under_static_only_is_judged_as_hydra_composes_it(bare_python):
    """Without Hydra in the target the doctor's reader judged `+key=` and unknown keys for PPO only, and
    --static-only judged none: an SFT command Hydra stops at start passed job.config."""
    sites = (ensure("verl-0.9.1"),)  # verl's files, no Hydra
    command = [*SFT, "+engine.context_parallel_size=2", "engine.no_such_key=1", "trainer.nnodes=1"]
    for extra in ((), ("--static-only",)):
        (row,) = job_config_rows(bare_python, sites, [command], *extra)
        text = row["summary"] + row["details"]
        assert row["status"] == "fail", row
        assert "Could not append to config. An item is already at 'engine.context_parallel_size'" in text
        assert "Could not override 'engine.no_such_key'" in text
        assert "trainer.nnodes" not in text  # a key the SFT config has: no finding
        assert row["_job"]["checked_against"] == "verl 0.9.1's sft_trainer_engine (composed by structure)"
    (ppo,) = job_config_rows(bare_python, sites, [[*PPO, "+trainer.nnodes=2"]], "--static-only")
    assert ppo["status"] == "fail" and "_generated_ppo_megatron_trainer.yaml" in ppo["_job"]["checked_against"]


# -------------------------------------------------------------------------- the grammar comes from the entry, only

@pytest.mark.parametrize("argv, kind, syntax, cp", [
    (["python3", "-m", "verl.trainer.main_ppo", "actor_rollout_ref.actor.megatron.context_parallel_size=2"],
     "verl", "hydra", 2),
    (["python3", "/opt/verl/verl/trainer/main_ppo.py", "actor_rollout_ref.actor.megatron.context_parallel_size=2"],
     "verl", "hydra", 2),  # verl's app run by its file is the same app
    (["python3", "pretrain_gpt.py", "--context-parallel-size", "2"], "megatron", "megatron", 2),
    (["python3", "scripts/training/run_recipe.py", "--model", "deepseek_v4", "--mode", "pretrain", "-cp", "2"],
     "megatron", "bridge", 2),
    # Another entry's words are never read by another grammar: before, these two were read as verl's and
    # Megatron-LM's by their flags, and gave a confident CP 2.
    (["python3", "my_train.py", "actor_rollout_ref.actor.megatron.context_parallel_size=2"], "unknown", "unknown",
     None),
    (["python3", "tool.py", "--context-parallel-size", "2"], "unknown", "unknown", None),
    (["python3", "-c", "import x", "--context-parallel-size", "2"], "unknown", "unknown", None),
])
def test_the_commands_grammar_is_its_entrys(argv, kind, syntax, cp):
    from dsv4_doctor.job.command import parse

    job = parse(argv)
    assert (job.kind, job.syntax) == (kind, syntax)
    settings = job.roles.get("actor" if kind == "verl" else "model", {})
    assert (settings["cp"].value if "cp" in settings else None) == cp
    if kind == "unknown":
        assert "is not one whose command line the doctor knows" in (job.unknown_why or "")


# --------------------------------------------------- Megatron-Bridge's recipe launcher: its options, then its overrides

def test_the_recipe_launchers_trailing_override_wins_over_its_option_and_the_recipe_decides_the_rest():
    from test_job import job_rows_in_process

    launcher = ["python3", "scripts/training/run_recipe.py", "--model", "deepseek_v4", "--mode", "pretrain"]
    rows = job_rows_in_process([*launcher, "-cp", "2", "-tp", "2", "model.context_parallel_size=4",
                                "model.tensor_model_parallel_size=1"], gpu_arch="9.0")
    model = rows["_profile"]["job"]["roles"]["model"]
    assert rows["_profile"]["cp"] == 4 and model["tp"]["value"] == 1  # run_recipe.py applies the trailing ones last
    assert rows["job.parallelism"]["status"] != "fail"
    assert rows["job.config"]["status"] == "pass"
    # What the command leaves to the recipe is not known, never Megatron's default.
    assert "the config the command names may set it (--model deepseek_v4)" in rows["job.cp-args"]["summary"]
    # TP 2 from the option alone: DSv4's attention rejects it, and the fix is the launcher's own override.
    tp2 = job_rows_in_process([*launcher, "-cp", "2", "-tp", "2"], gpu_arch="9.0")
    assert tp2["job.parallelism"]["status"] == "fail"
    assert any(f["description"].endswith("model.tensor_model_parallel_size=1") for f in tp2["job.parallelism"]["fixes"])
    # What the launcher's own parser refuses stops the job: job.config fails in its words.
    refused = job_rows_in_process([*launcher, "-cp", "two"])
    assert refused["job.config"]["status"] == "fail"
    assert "argument -cp/--context_parallel_size: invalid int value: 'two'" in refused["job.config"]["summary"]


# --------------------------------------------------------- verl's SFT trainer under torchrun: torchrun's world size

SFT_CP2 = ["engine=megatron", "engine.context_parallel_size=2", "engine.tensor_model_parallel_size=1"]


@pytest.mark.parametrize("launcher, status, said", [
    # verl's sft_trainer takes WORLD_SIZE from torchrun; its config's trainer.n_gpus_per_node (1) sizes nothing.
    (["torchrun", "--nnodes", "1", "--nproc-per-node", "8"], "pass", "divides the 8 GPUs"),
    (["torchrun", "--nnodes", "1", "--nproc-per-node", "3"], "fail", "does not divide the 3 GPUs"),
    (["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8"], None, "--nnodes 1:4 is an elastic range"),
    (["torchrun", "--nproc-per-node", "auto"], None, "--nproc-per-node auto"),
    (["python3"], None, "takes its world size from WORLD_SIZE, which torchrun sets"),
])
def test_the_sft_trainers_world_size_is_torchruns(launcher, status, said):
    from test_job import job_rows_in_process

    row = job_rows_in_process([*launcher, "-m", "verl.trainer.sft_trainer", *SFT_CP2,
                               "trainer.n_gpus_per_node=1"])["job.parallelism"]
    assert said in row["summary"], row
    if status is not None:
        assert row["status"] == status, row
    else:  # not known: never a number, never a pass
        assert row["status"] not in ("pass", "fail"), row


@pytest.mark.slow  # a real composition in the target: seconds
def test_a_correct_sft_command_under_torchrun_passes_job_parallelism_composed(bare_python):
    """Before: the composed config's trainer.n_gpus_per_node (1) was taken as the world size, so TP x PP x CP = 2
    'did not divide' it and a correct command failed (and preflight would block it)."""
    sites = (ensure("hydra-core-1.3.2"), ensure("verl-0.9.1"))
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, sites))
    from conftest import doctor_command

    command = ["torchrun", "--nnodes", "1", "--nproc-per-node", "8", "-m", "verl.trainer.sft_trainer", *SFT_CP2]
    done = subprocess.run([*doctor_command(), "check", "-f", "json", "--no-smoke", "--only", "job.parallelism",
                           "--job-args", shlex.join(command), "--python", bare_python], capture_output=True,
                          text=True, timeout=120, env=env)
    report = json.loads(done.stdout)
    row = next(c for c in report["checks"] if c["id"] == "job.parallelism")
    assert report["profile"]["job"]["read_by"].startswith("composed with Hydra"), report["profile"]["job"]
    assert row["status"] == "pass" and "divides the 8 GPUs" in row["summary"], row
