"""How the fleet exchange scales: N lightweight ranks on this machine's CPU exchange canned reports over
torch.distributed (TCPStore + gloo, the real exchange helper) without running any check, so that 2 cores suffice.

    python benchmarks/bench_fleet.py [--ranks 2 8 16] [--repeat 3] [--python PATH]

The canned report is a real one (`dsv4-doctor check --no-smoke -f json`, taken once), given per rank a host (8 ranks
per host) and a fingerprint. Per N it reports medians over the repeats of: the wall time from starting the N
helpers to rank 0's answer, rank 0's gather (all reports at rank 0) and merge times, and the merged report's size;
then a linear extrapolation to 1,000 ranks from the 8- and 16-rank medians (the method: per-rank cost = the
difference divided by 8 ranks; the report's size grows with distinct results and hosts, not ranks, since identical
results are grouped).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HELPER = REPO / "doctor" / "probes" / "dsv4probe_fleet.py"


def canned_report(python: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "dsv4_doctor", "check", "--no-smoke", "-f", "json", "--python",
                           python], capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(n: int, base: dict, python: str) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for r in range(n):
            report = json.loads(json.dumps(base))
            report.setdefault("environment", {})["fleet_rank"] = {"rank": r, "local_rank": r % 8,
                                                                  "host": f"node{r // 8:04d}"}
            report["environment"]["fingerprint"] = {"packages": {"nvidia-cudnn-frontend": "1.27.0"}, "sources": {},
                                                    "platform": {"driver": "580.1"}}
            path = os.path.join(tmp, f"report{r}.json")
            with open(path, "w") as fh:
                json.dump(report, fh)
            released = os.path.join(tmp, "released")
            request = {"rank": r, "world_size": n, "master_addr": "127.0.0.1", "port": port, "wait_s": 60.0,
                       "verdict_grace_s": 60.0, "strict": False, "report_path": path,
                       "merged_path": os.path.join(tmp, "merged.json"), "released_path": released}
            env = dict(os.environ, DSV4_DOCTOR_PROBE_LIB=str(HELPER.parent))
            procs.append(subprocess.Popen([python, str(HELPER), os.path.join(tmp, f"answer{r}.json"),
                                           json.dumps(request)], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            if r == 0:
                start = time.perf_counter()
        merged_path = os.path.join(tmp, "merged.json")
        while not os.path.exists(merged_path):
            if procs[0].poll() is not None:
                raise SystemExit(f"rank 0 exited with {procs[0].returncode} before merging")
            time.sleep(0.01)
        wall = time.perf_counter() - start
        open(os.path.join(tmp, "released"), "wb").close()
        for p in procs:
            p.wait(timeout=120)
        with open(merged_path) as fh:
            text = fh.read()
        merged = json.loads(text)
        timings = merged["fleet"]["timings"]
        assert merged["fleet"]["reported"] == n, merged["fleet"]
        return {"wall_s": wall, "gather_s": timings.get("gather_s", 0.0), "merge_s": timings.get("merge_s", 0.0),
                "report_bytes": len(text), "input_bytes": len(json.dumps(base))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    base = canned_report(args.python)
    results = {}
    for n in args.ranks:
        runs = [one_run(n, base, args.python) for _ in range(args.repeat)]
        results[n] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{'ranks':>6} {'wall s':>8} {'gather s':>9} {'merge s':>8} {'report KiB':>11}  (medians of {args.repeat})")
    for n, r in results.items():
        kib = r["report_bytes"] / 1024
        print(f"{n:>6} {r['wall_s']:>8.3f} {r['gather_s']:>9.3f} {r['merge_s']:>8.4f} {kib:>11.1f}")
    if 8 in results and 16 in results:
        per = {k: (results[16][k] - results[8][k]) / 8 for k in ("gather_s", "merge_s", "report_bytes")}
        est = {k: results[16][k] + per[k] * (1000 - 16) for k in per}
        print(f"1,000 ranks, extrapolated linearly from 8 -> 16: gather {est['gather_s']:.2f} s, merge "
              f"{est['merge_s']:.2f} s, report {est['report_bytes'] / 1024:.0f} KiB (per added rank: gather "
              f"{per['gather_s'] * 1000:.2f} ms, merge {per['merge_s'] * 1000:.3f} ms, report "
              f"{per['report_bytes']:.0f} B); each rank's report is {results[16]['input_bytes'] / 1024:.0f} KiB, "
              f"so rank 0 receives about {results[16]['input_bytes'] * 1000 / 2 ** 20:.0f} MiB at 1,000 ranks")
    print(json.dumps({str(k): v for k, v in results.items()}))


if __name__ == "__main__":
    main()
