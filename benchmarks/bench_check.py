"""Median wall time of `dsv4-doctor check --format json` beside the floor `python -c pass`, as ratios from one run.

    python benchmarks/bench_check.py [--repeat 9] [--torch-python PATH] [--bare-python PATH]

Each command gets one untimed warm-up; then every round runs the floor and each command once, alternating, so a
machine that warms up (page cache) or drifts favours none of them. Targets: a Python without torch (a fresh venv is
made when --bare-python is not given) and, when --torch-python has torch, that interpreter, where
`python -m torch.utils.collect_env` is timed too. Prints a table and JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv


def once(argv: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def has_torch(python: str) -> bool:
    code = "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)"
    return subprocess.run([python, "-c", code]).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--bare-python")
    args = ap.parse_args()
    doctor = shutil.which("dsv4-doctor", path=os.path.dirname(sys.executable)) or shutil.which("dsv4-doctor")
    tmp = None
    bare = args.bare_python
    if not bare:
        tmp = tempfile.mkdtemp()
        venv.EnvBuilder(with_pip=False, symlinks=True).create(os.path.join(tmp, "v"))
        bare = os.path.join(tmp, "v", "bin", "python")
    commands = {
        "floor: python -c pass": [sys.executable, "-c", "pass"],
        "check --static-only (no torch)": [doctor, "check", "-f", "json", "--static-only", "--python", bare],
        "check --no-smoke (no torch)": [doctor, "check", "-f", "json", "--no-smoke", "--python", bare],
    }
    # With PYTHONPATH set (as in most training images) the doctor starts again with -E before its own imports.
    empty = tempfile.mkdtemp()
    with_path = dict(os.environ, PYTHONPATH=empty)
    commands["check --static-only (no torch, PYTHONPATH set)"] = commands["check --static-only (no torch)"]
    envs = {"check --static-only (no torch, PYTHONPATH set)": with_path}
    if has_torch(args.torch_python):
        commands["check --static-only (torch)"] = [doctor, "check", "-f", "json", "--static-only", "--python",
                                                   args.torch_python]
        commands["check --no-smoke (torch)"] = [doctor, "check", "-f", "json", "--no-smoke", "--python",
                                                args.torch_python]
        commands["python -m torch.utils.collect_env"] = [args.torch_python, "-m", "torch.utils.collect_env"]
    for name, argv in commands.items():
        once(argv, envs.get(name))  # warm-up
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, argv in commands.items():
            times[name].append(once(argv, envs.get(name)))
    floor = statistics.median(times["floor: python -c pass"])
    rows = {}
    print(f"{'command':<48} {'median s':>9} {'x floor':>8}")
    for name, ts in times.items():
        median = statistics.median(ts)
        rows[name] = {"median_s": round(median, 4), "min_s": round(min(ts), 4), "max_s": round(max(ts), 4),
                      "runs": len(ts), "ratio_to_floor": round(median / floor, 1)}
        print(f"{name:<48} {median:>9.3f} {median / floor:>8.1f}")
    print(json.dumps({"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "rows": rows}, indent=2))
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(empty, ignore_errors=True)


if __name__ == "__main__":
    main()
