"""What the settings probe costs (probes/dsv4probe_settings.py: job.stack-config), beside the floor of any probe that
imports the stack: `python -c "import torch, megatron.core"`, both run in turn by the same interpreter on the stack
the tests use (verl 0.9.1, Hydra 1.3.2, Megatron-LM d48bd6be's config files, triton 3.7.0, the cuDNN frontend 1.32.0,
and what importing verl needs; tests/test_settings_probe.py installs them into .cache/).

    python benchmarks/bench_settings_probe.py [--repeat 7]

One verl DeepSeek-V4 job with CP 2 on CC 9.0 (Megatron-Bridge does not import on a CPU: the probe's direct mode).
Prints the medians of the wall time of each, their ratio, and the share of the probe's time its imports take (from
`-X importtime`: the sum of the top-level imports' cumulative times over the probe's wall time, one extra run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from dsv4_doctor.engine.probes import LAUNCHER  # noqa: E402
from test_settings_probe import DSV4_CONFIG, PROBE, stack_path, verl_case  # noqa: E402


def timed(argv: list[str], env: dict) -> float:
    start = time.monotonic()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return time.monotonic() - start


def import_share(argv: list[str], env: dict) -> tuple[float, float]:
    """(seconds in top-level imports, wall seconds) of one run under -X importtime."""
    start = time.monotonic()
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True,
                          timeout=600)
    wall = time.monotonic() - start
    total_us = 0
    for line in done.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"; a top-level import has no indentation.
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and not parts[2].startswith("  ") and \
                parts[1].strip().isdigit():
            total_us += int(parts[1].strip())
    return total_us / 1e6, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(DSV4_CONFIG))
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps(verl_case(model, "actor_rollout_ref.actor.megatron.context_parallel_size=2")))
        os.chmod(request, 0o600)
        env = dict(os.environ, PYTHONPATH=stack_path(), HF_HOME=str(Path(tmp) / "hf-home"))
        # As the doctor starts it: through the probe launcher.
        probe = [sys.executable, str(LAUNCHER), str(PROBE), str(Path(tmp) / "answer.json"), str(request)]
        floor = [sys.executable, "-c", "import torch, megatron.core"]
        timed(probe, env)  # warm-up: the page cache, .pyc files
        answer = json.loads((Path(tmp) / "answer.json").read_text())
        runs: dict[str, list[float]] = {"probe": [], "floor": []}
        for _ in range(args.repeat):  # in turn, so that drift hits both alike
            runs["probe"].append(timed(probe, env))
            runs["floor"].append(timed(floor, env))
        imports, wall = import_share(probe, env)
    probe_s, floor_s = statistics.median(runs["probe"]), statistics.median(runs["floor"])
    print(f"settings probe ({answer.get('status')}, mode {answer.get('mode')}): median {probe_s:.2f} s "
          f"(min {min(runs['probe']):.2f}, max {max(runs['probe']):.2f}, n {args.repeat})")
    print(f"floor `import torch, megatron.core`: median {floor_s:.2f} s (min {min(runs['floor']):.2f}, "
          f"max {max(runs['floor']):.2f})")
    print(f"probe / floor: {probe_s / floor_s:.2f}x; the probe's imports: {imports:.2f} s of {wall:.2f} s "
          f"({100 * imports / wall:.0f}%)")


if __name__ == "__main__":
    main()
