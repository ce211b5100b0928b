"""The settings probe's whole provider path on the CPU, in one probe process: verl 0.9.1's own
`MegatronEngine._build_tf_config` (verl/workers/engine/megatron/transformer_impl.py) with Megatron-Bridge 0.6.2's
real AutoBridge and DeepSeek-V4 provider (`to_megatron_provider(load_weights=False)`, `apply_overrides_and_finalize`)
and Megatron-LM d48bd6be's config classes. Every answer must say mode "verl": the provider ran, not the probe's
direct mode.

The stack is real: verl 0.9.1, Megatron-Bridge 0.6.2 and Hydra 1.3.2 from PyPI (`pip install --no-deps --target`,
tests/wheels.py); the megatron/core and megatron/training files of Megatron-LM d48bd6be that this path imports
(tests/fixtures/megatron-lm-d48bd6be, as published); the cuDNN frontend 1.32.0 (its `from cudnn import DSA` imports on
a CPU); the packages importing verl's engine module needs (transformers 5.12.1 and the rest of
tests/test_settings_probe.py's stack-deps, plus peft, accelerate and datasets with their imports, pip-installed once,
pinned, into .cache/settings-probe/provider-deps). Two test-only shims, and nothing else stands in for a release:

- a `sitecustomize` giving Python 3.11's `typing` the `override` decorator (from typing_extensions): Megatron-Bridge
  0.6.2 and Megatron-LM's megatron.training declare Python >= 3.12 and use `typing.override`; CI runs Python 3.11;
- a stand-in `transformer_engine` (Transformer Engine has no CPU release): every submodule imports and every name in
  it is a class that refuses to be built. Megatron-Bridge imports `transformer_engine.pytorch` unguarded
  (megatron/bridge/peft/lora_layers.py), and Megatron reads TE's version in its config checks, so it says 2.20.2, the
  stack's TE. Nothing of it runs on this path: no layer is built.

The GPU facts (compute capability, the outcome of the two fused-DSA imports) are supplied by the probe inside its own
process, as on a machine without a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsv4_doctor.engine.probes import LAUNCHER

from test_settings_probe import DSV4_CONFIG, OTC, PROBE, stack_path, verl_case
from wheels import CACHE, ensure, pip_target_once

PROVIDER_DEPS = CACHE.parent / "settings-probe" / "provider-deps"
# What importing verl's engine package and Megatron-Bridge needs beyond the fast tests' stack-deps: verl's engines
# import peft (and accelerate) and verl's datasets (datasets, pandas, pyarrow, PIL); each module listed is imported on
# this path. --no-deps: torch is the test environment's.
PROVIDER_DEPS_PACKAGES = ["--no-deps", "peft==0.21.2", "accelerate==1.16.0", "datasets==5.2.0", "pyarrow==26.0.1",
                          "pandas==3.1.1", "python-dateutil==4.0.0", "pytz==2026.6", "dill==0.4.1",
                          "multiprocess==0.70.19", "xxhash==4.1.0", "pillow==13.0.0", "requests==2.34.2",
                          "urllib3==2.8.0", "charset-normalizer==3.5.3"]

TYPING_OVERRIDE = '''"""Test-only: Python 3.11's typing gets `override` (3.12), which Megatron-Bridge and
megatron.training use."""
import typing

if not hasattr(typing, "override"):
    from typing_extensions import override

    typing.override = override
'''

TE_STAND_IN = '''"""Test-only stand-in for Transformer Engine (no CPU release): every submodule imports,
every name in it is a class that refuses to be built."""
import importlib
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "2.20.2"


class _StandInType(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(name)
        setattr(cls, name, value)
        return value


def _refuse(self, *args, **kwargs):
    raise RuntimeError("transformer_engine stand-in: %s is not built on the CPU" % type(self).__name__)


def _stand_in(name):
    return _StandInType(name, (), {"__init__": _refuse})


class _Names(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(name)
        setattr(self, name, value)
        return value


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return importlib.import_module(__name__ + "." + name)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Names(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Submodules())
'''

# A DeepSeek-V4 config.json as AutoBridge reads it: its architecture names the bridge, its RoPE is YaRN.
DSV4_PROVIDER_CONFIG = dict(DSV4_CONFIG, architectures=["DeepseekV4ForCausalLM"], rope_scaling={
    "type": "yarn", "rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
    "beta_slow": 1})
GRPO = "algorithm.adv_estimator=grpo"  # no critic: verl's validation would read the critic's model too


def provider_deps() -> Path:
    return pip_target_once(PROVIDER_DEPS, PROVIDER_DEPS_PACKAGES)


def shims(folder: Path) -> Path:
    (folder / "transformer_engine").mkdir(parents=True)
    (folder / "sitecustomize.py").write_text(TYPING_OVERRIDE)
    (folder / "transformer_engine" / "__init__.py").write_text(TE_STAND_IN)
    return folder


@pytest.mark.slow
def test_the_whole_provider_path_decides_the_dsa_backend_as_the_stack_does(tmp_path):
    """CC 9.0: the bridge writes apply_dsa_kernel_fusion=False, so a stated cudnn raises Megatron's conflict; CC 10.0
    with both imports: it writes True, so a stated none builds cudnn; without the imports it writes False and none
    stays none; the command's `apply_dsa_kernel_fusion=null` with cudnn builds cudnn."""
    path = os.pathsep.join(str(p) for p in (shims(tmp_path / "shims"), ensure("megatron-bridge-0.6.2"), stack_path(),
                                            provider_deps()))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DSV4_PROVIDER_CONFIG))
    cases = {
        "conflict_h100": verl_case(model, GRPO, OTC + "dsa_kernel_backend=cudnn", cc=(9, 0)),
        "none_on_blackwell": verl_case(model, GRPO, OTC + "dsa_kernel_backend=none", cc=(10, 0)),
        "none_without_imports": verl_case(model, GRPO, OTC + "dsa_kernel_backend=none", cc=(10, 0), imports=False),
        "null_and_cudnn": verl_case(model, GRPO, OTC + "apply_dsa_kernel_fusion=null",
                                    OTC + "dsa_kernel_backend=cudnn", cc=(9, 0)),
    }
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"batch": list(cases.values())}))
    out = tmp_path / "answer.json"
    env = dict(os.environ, PYTHONPATH=path, HF_HOME=str(tmp_path / "hf-home"))
    env.pop("HF_HUB_CACHE", None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(LAUNCHER), str(PROBE), str(out), str(request)],
                          env=env, capture_output=True,
                          text=True, timeout=240)
    assert out.exists(), proc.stderr[-3000:]
    got = dict(zip(cases, json.loads(out.read_text())["batch"], strict=True))
    print("the probe's wall time: %.1f s" % (time.monotonic() - started))

    for name, answer in got.items():
        assert answer.get("mode") == "verl", (name, answer.get("why_direct"), answer.get("error"))
        assert answer["versions"]["megatron_bridge"] == "0.6.2" and answer["versions"]["verl"] == "0.9.1", answer
        assert answer["stages"]["verl.validate_config"] == {"status": "ok"}, answer  # verl's own validation ran
        assert answer["gpu"]["gpu"] == "supplied", answer
    # The stand-in FlashMLA module is supplied afresh in each case that says the imports succeed.
    for name in ("conflict_h100", "none_on_blackwell", "null_and_cudnn"):
        assert got[name]["gpu"]["flash_mla"] == "supplied (it does not import here)", (name, got[name]["gpu"])

    conflict = got["conflict_h100"]
    assert conflict["status"] == "raised", conflict
    assert conflict["error"]["message"].startswith(
        "Conflicting DSA kernel controls: apply_dsa_kernel_fusion=False maps to dsa_kernel_backend='none', but "
        "dsa_kernel_backend='cudnn' was also selected.")
    assert conflict["error"]["file"] == "megatron/core/transformer/transformer_config.py"
    assert conflict["error"]["stage"] == "build (actor)"
    assert "bridge_decision" not in conflict  # the bridge decided, not the probe

    blackwell = got["none_on_blackwell"]
    assert blackwell["status"] == "built", blackwell.get("error")
    settings = blackwell["roles"]["actor"]["settings"]
    assert settings["dsa_kernel_backend"] == "cudnn" and settings["apply_dsa_kernel_fusion"] is True, settings
    assert settings["experimental_attention_variant"] == "dsv4_hybrid" and settings["multi_latent_attention"] is True
    assert settings["mtp_num_layers"] == 0 and settings["num_layers"] == 4  # verl's override: MTP off
    assert blackwell["roles"]["actor"]["class"] == "MLAModelProvider"

    without = got["none_without_imports"]["roles"]["actor"]["settings"]
    assert without["dsa_kernel_backend"] == "none" and without["apply_dsa_kernel_fusion"] is False, without

    null = got["null_and_cudnn"]
    assert null["status"] == "built", null.get("error")
    assert null["roles"]["actor"]["settings"]["dsa_kernel_backend"] == "cudnn"
    assert null["roles"]["actor"]["settings"]["apply_dsa_kernel_fusion"] is None


MEGATRON_ARGS = ["--num-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "1024",
                 "--max-position-embeddings", "1024", "--micro-batch-size", "1", "--global-batch-size", "8",
                 "--tokenizer-type", "NullTokenizer", "--vocab-size", "1024", "--bf16"]


@pytest.mark.slow
def test_a_megatron_lm_command_is_judged_by_megatrons_own_argument_validation(tmp_path):
    """A Megatron-LM command (pretrain_gpt.py's arguments): Megatron d48bd6be's own parse_args, validate_args and
    core_transformer_config_from_args build its config; a TP that does not divide the world fails with Megatron's
    own text and place (megatron/training/arguments.py). The same typing.override shim: megatron.training declares
    Python >= 3.12."""
    path = os.pathsep.join(str(p) for p in (shims(tmp_path / "shims"), stack_path(), provider_deps()))
    gpu = {"cc": [9, 0], "fused_dsa_imports": True}
    cases = [{"kind": "megatron", "entry": "pretrain_gpt.py", "argv": MEGATRON_ARGS + extra, "gpu": gpu,
              "world_size": 8} for extra in ([], ["--tensor-model-parallel-size", "3"])]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"batch": cases}))
    out = tmp_path / "answer.json"
    env = dict(os.environ, PYTHONPATH=path, HF_HOME=str(tmp_path / "hf-home"))
    proc = subprocess.run([sys.executable, str(LAUNCHER), str(PROBE), str(out), str(request)],
                          env=env, capture_output=True,
                          text=True, timeout=240)
    assert out.exists(), proc.stderr[-3000:]
    built, refused = json.loads(out.read_text())["batch"]
    assert built["status"] == "built" and built["mode"] == "megatron", built
    settings = built["roles"]["model"]["settings"]
    assert settings["num_layers"] == 4 and settings["tensor_model_parallel_size"] == 1, settings
    assert refused["status"] == "raised", refused
    assert refused["error"]["message"] == "world size (8) is not divisible by total_model_size (total_model_size=3)"
    assert refused["error"]["file"] == "megatron/training/arguments.py" and refused["error"]["stage"] == \
        "megatron.validate_args"
