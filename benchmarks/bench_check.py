"""Median wall time of `dsv4-doctor check --format json`, beside the floor, as ratios from one run.

    python benchmarks/bench_check.py [--repeat 7] [--torch-python PATH] [--bare-python PATH]

Targets: a Python without torch (a fresh venv is made when --bare-python is not given) and, when --torch-python
has torch, that interpreter, where `python -m torch.utils.collect_env` is timed too. Prints a table and JSON.
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


def timed(argv: list[str], repeat: int) -> dict:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": repeat}


def has_torch(python: str) -> bool:
    return subprocess.run([python, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)"]
                          ).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
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
    rows = {}
    rows["floor: python -c pass"] = timed([sys.executable, "-c", "pass"], args.repeat)
    rows["check --static-only (no torch)"] = timed([doctor, "check", "-f", "json", "--static-only", "--python", bare],
                                                   args.repeat)
    rows["check (no torch)"] = timed([doctor, "check", "-f", "json", "--python", bare], args.repeat)
    if has_torch(args.torch_python):
        rows["check --static-only (torch)"] = timed(
            [doctor, "check", "-f", "json", "--static-only", "--python", args.torch_python], args.repeat)
        rows["check (torch)"] = timed([doctor, "check", "-f", "json", "--python", args.torch_python], args.repeat)
        rows["python -m torch.utils.collect_env"] = timed([args.torch_python, "-m", "torch.utils.collect_env"],
                                                          args.repeat)
    floor = rows["floor: python -c pass"]["median_s"]
    print(f"{'command':<40} {'median s':>9} {'x floor':>8}")
    for name, r in rows.items():
        r["ratio_to_floor"] = round(r["median_s"] / floor, 1)
        print(f"{name:<40} {r['median_s']:>9.3f} {r['ratio_to_floor']:>8.1f}")
    print(json.dumps({"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "rows": rows}, indent=2))
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
