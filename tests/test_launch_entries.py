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
