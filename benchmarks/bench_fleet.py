"""How the fleet exchange scales: N lightweight ranks on this machine's CPU exchange canned reports through the real
exchange helper (probes/dsv4probe_fleet.py, over torch.distributed's TCPStore) without running any check, so that 2
cores suffice; rank 0's doctor side (validating each report, the merge, the verdict) runs here, in this process, as
the doctor runs it (doctor/fleet/merge.py).

    python benchmarks/bench_fleet.py [--ranks 2 8 16] [--repeat 3] [--python PATH]

The canned report is a real one (`dsv4-doctor check --no-smoke -f json`, taken once), given per rank a host (8 ranks
per host) and a fingerprint. Per N it reports medians over the repeats of: the wall time from starting the N
helpers to rank 0's verdict, rank 0's gather (every report at rank 0, from its store being up), the doctor's
validation + merge time, and the bytes rank 0 received; then a linear extrapolation to 1,000 ranks from the 8- and
16-rank medians (per-rank cost = the difference divided by 8 ranks).
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
    sys.path.insert(0, str(REPO))
    from dsv4_doctor.fleet import merge as fleetmerge

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs, dirs = [], []
        for r in range(n):
            report = json.loads(json.dumps(base))
            report.setdefault("environment", {})["fleet_rank"] = {"rank": r, "local_rank": r % 8,
                                                                  "host": f"node{r // 8:04d}", "node": str(r // 8)}
            report["environment"]["fingerprint"] = {"packages": {"nvidia-cudnn-frontend": "1.27.0"}, "sources": {},
                                                    "platform": {"driver": "580.1"}}
            folder = os.path.join(tmp, f"rank{r}")
            os.makedirs(folder)
            dirs.append(folder)
            with open(os.path.join(folder, "hello.json"), "w") as fh:
                json.dump({"rank": r, "host": f"node{r // 8:04d}", "fingerprint": report["environment"]["fingerprint"]},
                          fh)
            with open(os.path.join(folder, "report.json"), "w") as fh:
                json.dump(report, fh)
            open(os.path.join(folder, "report.json.ready"), "wb").close()
            if r == 0:
                own = report
            request = {"rank": r, "world_size": n, "master_addr": "127.0.0.1", "port": port, "scope": "bench",
                       "join_s": 120.0, "verdict_s": 15.0, "ack_s": 10.0, "connect_s": 120.0, "dir": folder,
                       "leader": r % 8 == 0, "fingerprint_node": f"n{r // 8}"}
            env = dict(os.environ, DSV4_DOCTOR_PROBE_LIB=str(HELPER.parent))
            with open(os.path.join(folder, "request.json"), "w") as fh:  # as the doctor hands it over: a file
                json.dump(request, fh)
            procs.append(subprocess.Popen([python, str(HELPER), os.path.join(folder, "answer.json"),
                                           os.path.join(folder, "request.json")], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            if r == 0:
                start = time.perf_counter()
        gathered_path = os.path.join(dirs[0], "gathered.json")
        while not os.path.exists(gathered_path):
            if procs[0].poll() is not None:
                raise SystemExit(f"rank 0 exited with {procs[0].returncode} before the gather")
            time.sleep(0.01)
        with open(gathered_path) as fh:
            gathered = json.load(fh)
        # The doctor validates each report as it arrives, during the gather; timed apart from the merge proper.
        t_admit = time.perf_counter()
        received = 0
        others = {}
        for r in range(1, n):
            with open(os.path.join(dirs[0], "reports", f"{r}.json"), "rb") as fh:
                payload = fh.read()
            received += len(payload)
            others[r] = fleetmerge.admit(r, payload)
        mine = fleetmerge.admit(0, own)
        t_merge = time.perf_counter()
        merged, verdict = fleetmerge.merge(mine, others, n, {}, False)
        merge_s = time.perf_counter() - t_merge
        admit_s = t_merge - t_admit
        with open(os.path.join(dirs[0], "verdict.json"), "w") as fh:
            json.dump({"exit_code": verdict}, fh)
        wall = time.perf_counter() - start
        # Each other rank's own process takes the verdict its helper hands it (verdict.json) and says so (`taken`),
        # as the doctor does: only then is the rank acknowledged and rank 0's helper stops waiting.
        taken: set[int] = set()
        while not os.path.exists(os.path.join(dirs[0], "acks.json")):
            for r in range(1, n):
                if r not in taken and os.path.exists(os.path.join(dirs[r], "verdict.json")):
                    open(os.path.join(dirs[r], "taken"), "wb").close()
                    taken.add(r)
            time.sleep(0.01)
        open(os.path.join(dirs[0], "released"), "wb").close()
        for p in procs:
            p.wait(timeout=180)
        with open(os.path.join(dirs[0], "acks.json")) as fh:
            acks = json.load(fh)
        assert merged.fleet is not None and merged.fleet["reported"] == n and not gathered["missing"], \
            (merged.fleet, gathered)
        assert acks["acknowledged"] == list(range(1, n)), acks
        return {"wall_s": wall, "gather_s": gathered["timings"].get("gather_s", 0.0),
                "read_s": gathered["timings"].get("read_s", 0.0), "admit_s": admit_s,
                "merge_s": merge_s,
                "received_bytes": received, "report_bytes": len(json.dumps(merged.to_dict())),
                "input_bytes": len(json.dumps(base))}


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
    print(f"{'ranks':>6} {'wall s':>8} {'gather s':>9} {'read s':>7} {'admit s':>8} {'merge s':>8} "
          f"{'received KiB':>13} {'report KiB':>11}  (medians of {args.repeat})")
    for n, r in results.items():
        print(f"{n:>6} {r['wall_s']:>8.3f} {r['gather_s']:>9.3f} {r['read_s']:>7.4f} {r['admit_s']:>8.4f} "
              f"{r['merge_s']:>8.4f} {r['received_bytes'] / 1024:>13.1f} {r['report_bytes'] / 1024:>11.1f}")
    if 8 in results and 16 in results:
        keys = ("gather_s", "read_s", "admit_s", "merge_s", "report_bytes", "received_bytes")
        per = {k: (results[16][k] - results[8][k]) / 8 for k in keys}
        est = {k: results[16][k] + per[k] * (1000 - 16) for k in per}
        print(f"1,000 ranks, extrapolated linearly from 8 -> 16: gather {est['gather_s']:.2f} s (of which rank 0 "
              f"reading {est['read_s']:.2f} s), admit "
              f"{est['admit_s']:.2f} s (during the gather), merge {est['merge_s']:.2f} s, received "
              f"{est['received_bytes'] / 2 ** 20:.0f} MiB, report {est['report_bytes'] / 1024:.0f} KiB (per added "
              f"rank: gather {per['gather_s'] * 1000:.2f} ms, admit {per['admit_s'] * 1000:.2f} ms, merge "
              f"{per['merge_s'] * 1000:.3f} ms, received {per['received_bytes'] / 1024:.1f} KiB)")
    print(json.dumps({str(k): v for k, v in results.items()}))


if __name__ == "__main__":
    main()
