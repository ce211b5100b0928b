"""Wall time of the smoke forward beside its floor, medians from one run (on a GPU host).

    python benchmarks/bench_smoke.py [--repeat 3] [--cp 1] [--python PATH]

Floor: a fresh interpreter that imports torch, initialises CUDA and makes one first variable-length attention call,
the cost no smoke test can avoid. Smoke: `python -m dsv4_doctor smoke --format json --cp N` (its own process, the
doctor's start-up, the probes and every comparison: `smoke.thd-cp` and the stack's own kernels in
`smoke.dsv4-kernels`). Each gets one untimed warm-up, then they alternate, so a machine that warms up (page cache) or
drifts does not favour either. Goal: the smoke, stack kernels included, within the floor + 10 s (each kernel's first
call JIT-compiles, 2.6-5.7 s measured). The last smoke report's per-sub-run first-call (JIT) and steady times and peak
GPU memory are printed too (the layout kernels' first calls one by one: compact forward, backward, indices per
mode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

FLOOR = """
import torch
torch.cuda.init()
from torch.nn.attention.varlen import varlen_attn
q = torch.randn(256, 4, 64, device="cuda", dtype=torch.bfloat16)
cu = torch.tensor([0, 100, 256], dtype=torch.int32, device="cuda")
varlen_attn(q, q, q, cu, cu, 156, 156, window_size=(-1, 0))
torch.cuda.synchronize()
"""


LAST: dict = {}


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr[-2000:]}")
    if done.stdout.startswith("{"):
        LAST["report"] = done.stdout
    return elapsed


def kernel_times(report_text: str) -> dict:
    """Per kernel sub-run: status, first-call (JIT) and steady seconds, peak GPU MiB, from a smoke JSON report."""
    report = json.loads(report_text)
    row = next((c for c in report["checks"] if c["id"] == "smoke.dsv4-kernels"), None)
    out = {}
    for name, sub in ((row or {}).get("evidence", {}).get("subruns") or {}).items():
        ev = sub.get("evidence") or {}
        out[name] = {"status": sub.get("status"), "jit_s": ev.get("jit_s"), "steady_s": ev.get("steady_s"),
                     "total_s": sub.get("total_s"), "gpu_memory_peak_mib": sub.get("gpu_memory_peak_mib"),
                     "first_call_s": ev.get("first_call_s")}  # the layout kernels: each kernel's first call
    return out


def timed_pair(a: list[str], b: list[str], repeat: int) -> tuple[dict, dict]:
    """One untimed warm-up of each (page cache, CUDA caches), then a and b alternately, so drift hits both."""
    once(a)
    once(b)
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(once(a))
        tb.append(once(b))
    def summary(ts):
        return {"median_s": round(statistics.median(ts), 3), "runs_s": [round(t, 3) for t in ts]}
    return summary(ta), summary(tb)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    floor, smoke = timed_pair([args.python, "-c", FLOOR],
                              [args.python, "-m", "dsv4_doctor", "smoke", "--format", "json", "--cp", str(args.cp),
                               "--python", args.python], args.repeat)
    added = round(smoke["median_s"] - floor["median_s"], 3)
    print(f"{'command':<58} {'median s':>9}")
    print(f"{'floor: import torch; cuda.init(); first varlen_attn call':<58} {floor['median_s']:>9.3f}")
    print(f"{'dsv4-doctor smoke --cp ' + str(args.cp):<58} {smoke['median_s']:>9.3f}")
    print(f"smoke - floor = {added:.3f} s; smoke / floor = {smoke['median_s'] / floor['median_s']:.2f}")
    kernels = kernel_times(LAST["report"]) if LAST.get("report") else {}
    for name, t in kernels.items():
        print(f"  kernel {name:<9} {t['status']:<5} first call {t['jit_s']} s, steady {t['steady_s']} s, "
              f"probe {t['total_s']} s, peak GPU {t['gpu_memory_peak_mib']} MiB")
        if isinstance(t.get("first_call_s"), dict):
            print("    first calls: " + ", ".join(f"{k} {v} s" for k, v in t["first_call_s"].items()))
    print(json.dumps({"floor": floor, "smoke": smoke, "added_s": added, "cp": args.cp, "kernels": kernels}))


if __name__ == "__main__":
    main()
