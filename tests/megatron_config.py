"""Megatron-LM d48bd6be's own `MLATransformerConfig` (tests/fixtures/megatron-lm-d48bd6be), run on the CPU: the
verdict of Megatron's `TransformerConfig.__post_init__` on a batch of DSv4 configs, in ONE subprocess (importing
Megatron's config classes takes seconds; a test module batches its cases into one call).

    results = megatron_configs([{"cc": (9, 0), "apply_dsa_kernel_fusion": False, "dsa_kernel_backend": "cudnn"}])
    results[0] == {"error": "ValueError", "message": "Conflicting DSA kernel controls: ..."}   # or {"backend": ...}

A case's keys other than "cc" are TransformerConfig fields over SMALLEST_DSV4 (the smallest DSv4 config Megatron
accepts: two dsv4_hybrid layers, no compressed layer, CP 1); "cc" is the capability of the GPU the job runs on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from wheels import CACHE, ensure

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "megatron-lm-d48bd6be"
SMALLEST_DSV4 = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "experimental_attention_variant": "dsv4_hybrid", "multi_latent_attention": True,
                 "csa_compress_ratios": [0, 0]}

_RUNNER = r"""
import json, sys, types, warnings
warnings.simplefilter("ignore")
import torch
import megatron.core.transformer.transformer_config as tc
from megatron.core.transformer.transformer_config import MLATransformerConfig

# The job's GPU, supplied as --gpu-arch supplies it to the doctor: this CPU has none. Patched in this process only.
# dsv4_hybrid's cudnn path asks torch for the device's capability, checks that the frontend's DSA and FlashMLA
# import (_validate_dsa_kernel_backend_dependencies, which needs CUDA) and imports `cudnn.DSA`: the GPU node's
# answers, not this machine's.
tc._validate_dsa_kernel_backend_dependencies = lambda backend: None
sys.modules.setdefault("cudnn", types.SimpleNamespace(DSA=types.SimpleNamespace()))
cases, base = json.loads(sys.stdin.read())
out = []
for case in cases:
    cc = tuple(case.pop("cc", (9, 0)))
    torch.cuda.get_device_capability = lambda device=None, cc=cc: cc
    try:
        config = MLATransformerConfig(**dict(base, **case))
        out.append({"backend": config.dsa_kernel_backend})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print("RESULTS " + json.dumps(out))
"""


def megatron_configs(cases: list[dict], timeout: float = 180) -> list[dict]:
    """Each case's verdict from Megatron's own config class: {"backend": the dsa_kernel_backend it runs} or
    {"error": its exception's type, "message": its text}."""
    import torch  # the dev venv's CPU torch, which Megatron's config module imports

    ensure("triton-3.7.0")
    ensure("numpy-2.4.6")
    path = [str(FIXTURE), str(CACHE / "envs" / "triton-3.7.0"), str(CACHE / "envs" / "numpy-2.4.6"),
            str(Path(torch.__file__).parent.parent)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONNOUSERSITE="1")
    done = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps([cases, SMALLEST_DSV4]),
                          capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1][len("RESULTS "):])
