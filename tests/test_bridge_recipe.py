"""Megatron-Bridge's recipe launcher read as the script reads itself: the doctor's reading of `run_recipe.py`'s
options and trailing overrides against the script's own parser (tests/fixtures/megatron-bridge-067f987d, committed
from Megatron-Bridge 067f987d with its licence: CI cannot reach github.com).

The script's own `parse_args` runs on a corpus of command lines; its top-level imports of Megatron-Bridge's
training modules (the recipe runner, the benchmark topology helpers, the dataset presets, none of which its parser
uses beyond DATASET_PRESETS' names) are stand-ins, and recipe_metadata.py is the real one (stdlib only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4_doctor.job.bridge_recipe import read_launcher

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "megatron-bridge-067f987d" / "scripts" / "training"

PARSE = r'''
import contextlib, io, json, sys, types
def stub(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
noop = lambda *a, **k: None
stub("benchmark_parallelism", ParallelTopology=object, data_parallel_size=noop, topology_from_config=noop,
     weak_scaled_global_batch_size=noop)
stub("recipe_runner", **{n: noop for n in ("apply_cli_overrides", "apply_determinism", "apply_runtime_environment",
     "bootstrap_recipe_environment", "load_forward_step", "load_recipe", "run_config", "sync_finetuning_cp_invariants",
     "sync_model_dataset_sequence_length", "sync_model_pipeline_layout", "sync_offline_packing_alignment")})
for name in ("megatron", "megatron.bridge", "megatron.bridge.recipes", "megatron.bridge.recipes.utils"):
    stub(name)
stub("megatron.bridge.recipes.utils.dataset_utils", DATASET_PRESETS={"mock": 1, "squad": 2},
     build_dataset_config=noop, dataset_train_mode=noop)
sys.path.insert(0, sys.argv[1])
import run_recipe
out = []
for argv in json.loads(sys.stdin.read()):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, overrides = run_recipe.parse_args(argv)
        out.append({"overrides": overrides})
    except SystemExit:
        out.append({"error": err.getvalue().strip().splitlines()[-1].split(": error: ", 1)[-1]})
    except ValueError as exc:
        out.append({"error": str(exc)})
print(json.dumps(out))
'''

CORPUS = [
    ["--model", "deepseek_v4", "--mode", "pretrain", "-cp", "2", "model.context_parallel_size=4"],
    ["--recipe", "dsv4_pretrain_config", "--context_parallel_size=2", "-tp", "1", "model.cp_partition_mode=contiguous",
     "+model.dsa_kernel_backend=cudnn", "++model.apply_dsa_kernel_fusion=null"],
    ["--model", "m", "--mode", "sft", "-cp", "two"], ["--model", "m", "--mode", "sft", "--foo"],
    ["--model", "m", "--mode", "sft", "bare"], ["--model", "m", "--recipe", "r_pretrain_config"], [], ["-cp", "2"],
    ["--model", "m", "--mode", "sft", "-cp"], ["--model", "m", "--mode", "sft", "-cp", "-2"],
    ["--model", "m", "--mode", "sft", "-sl", "4096", "dataset.seq_length=8192"],
    ["--model", "m", "--mode", "sft", "-cp2"], ["--model", "m", "--mode", "sft", "-cp=3"],
    ["--model", "m", "--mode", "sft", "--context_parallel_size", "2", "-cp", "3"],
    ["--model", "m", "--mode", "sft", "--cont", "2"], ["--model", "m", "--mode", "sft", "--", "a=1"],
    ["--model", "m", "--mode", "sft", "--dry-run", "a.b=1", "--deterministic"],
    ["--model=m", "--mode=lora", "-ep", "8", "-etp", "1", "model.expert_model_parallel_size=4"],
    ["--model", "m", "--mode", "sft", "-cp", "2.0"], ["--model", "m", "--mode", "sft", "--lr", "x"],
    ["--model", "m", "--mode", "train"], ["--model", "m", "-cp", "2"], ["--recipe", "custom_config", "-cp", "2"],
    ["--recipe", "qwen3_30b_a3b_finetune_config", "-cp", "2", "~model.context_parallel_size"],
    ["--model", "m", "--mode", "pretrain", "-cp", "2", "--step-func", "llm_step", "--dataset", "mock"],
]


@pytest.fixture(scope="module")
def the_scripts_own_answers() -> list[dict]:
    done = subprocess.run([sys.executable, "-c", PARSE, str(FIXTURE)], input=json.dumps(CORPUS), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("index", range(len(CORPUS)), ids=lambda i: " ".join(CORPUS[i])[:60] or "(none)")
def test_the_launchers_words_read_as_its_own_parser_reads_them(the_scripts_own_answers, index):
    """The overrides in the order the script applies them (a trailing override after the convenience option of the
    same field: the trailing one wins), and the script's first refusal in its own words."""
    script = the_scripts_own_answers[index]
    overrides, errors, _, _ = read_launcher(CORPUS[index])
    if "error" in script:
        assert errors == [script["error"]], (script, errors)
    else:
        assert not errors and overrides == script["overrides"], (script, overrides)
