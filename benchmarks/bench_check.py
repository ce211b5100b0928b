"""Median wall time of `dsv4-doctor check --format json` beside the floor `python -c pass`, as ratios from one run.

    python benchmarks/bench_check.py [--repeat 9] [--torch-python PATH] [--bare-python PATH]
    python benchmarks/bench_check.py --full [--cp 2] [--check-args "..."] [--repeat 5] [--report-dir DIR]

--full (on a GPU machine, the stack installed in --torch-python) times a full `check --cp N` against two floors, all
alternating in one run: the torch floor `import torch; torch.zeros(1).cuda()` and the import floor a full check cannot
avoid, `import torch, transformer_engine.pytorch, megatron.core; torch.zeros(1).cuda()`. Its first row, "cold", is
the very first command it runs: no warm-up, on a fresh empty kernel cache (DSV4_DOCTOR_KERNEL_CACHE=<new dir>); run
the bench first in a fresh container for it to mean "first run in the container". The warm rows then share one
persistent kernel cache. It prints the ratios against the goals and where the last warm check spent its time
(the slowest checks, the smoke's and kernel sub-runs' own timings, each kernel's first call and cache use).

Each command gets one untimed warm-up; then every round runs the floor and each command once, alternating, so a
machine that warms up (page cache) or drifts favours none of them. Targets: a Python without torch (a fresh venv is
made when --bare-python is not given) and, when --torch-python has torch, that interpreter, where
`python -m torch.utils.collect_env` is timed too. Prints a table and JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
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


TORCH_FLOOR = "import torch; torch.zeros(1).cuda()"
IMPORT_FLOOR = "import torch, transformer_engine.pytorch, megatron.core; torch.zeros(1).cuda()"
# Issue 24's goals: partial stack, a second run within 2x the torch floor; complete stack within 1.5x the import
# floor cold and 1.25x warm.
GOALS = {"warm_vs_torch_floor": 2.0, "cold_vs_import_floor": 1.5, "warm_vs_import_floor": 1.25}


def run_report(argv: list[str], env: dict, path: str) -> tuple[float, int]:
    start = time.perf_counter()
    with open(path, "wb") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start, done.returncode


def where_time_goes(report_path: str, top: int = 8) -> dict:
    """From a check's JSON report: its slowest checks, the smoke's own timings and every kernel that ran."""
    try:
        with open(report_path, encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": f"no report: {exc}"}
    checks = sorted(report.get("checks", []), key=lambda c: -float(c.get("duration_s") or 0))
    out: dict = {"total_s": (report.get("summary") or {}).get("duration_s"),
                 "exit_code": (report.get("summary") or {}).get("exit_code"),
                 "slowest_checks": [(c.get("id"), c.get("status"), c.get("duration_s")) for c in checks[:top]]}
    by_id = {c.get("id"): c for c in report.get("checks", [])}
    smoke = (by_id.get("smoke.thd-cp") or {}).get("evidence") or {}
    out["smoke_timing"] = smoke.get("timing")
    tier2 = smoke.get("tier2") or {}
    out["tier2_cp1_first_forward_s"] = (tier2.get("cp1") or {}).get("first_forward_s")
    builds = ((tier2.get("fused") or {}).get("builds")) or {}
    out["tier2_builds"] = {name: {k: b.get(k) for k in ("wall_s", "import_s", "first_forward_s", "first_backward_s",
                                                        "steady_forward_s", "steady_backward_s", "hang")}
                           for name, b in builds.items()}
    kernel_evidence = (by_id.get("smoke.dsv4-kernels") or {}).get("evidence") or {}
    # Which kernel cache the probes got: a row meant to run on a fresh (or warm) cache means nothing if it was refused.
    out["kernel_cache"] = kernel_evidence.get("kernel_cache")
    runs = kernel_evidence.get("subruns") or {}
    out["kernel_subruns"] = {}
    for name, row in runs.items():
        ran = ((row.get("evidence") or {}).get("kernels_ran")) or {}
        out["kernel_subruns"][name] = {"status": row.get("status"), "total_s": row.get("total_s"),
                                       "kernels": [(k.get("kernel"), k.get("first_call_s"), k.get("steady_s"),
                                                    k.get("cache")) for k in ran.get("kernels", [])]}
    return out


def full(args, doctor: str) -> None:
    python = args.torch_python
    report_dir = args.report_dir or tempfile.mkdtemp(prefix="bench-check-")
    os.makedirs(report_dir, exist_ok=True)
    check = [doctor, "check", "-f", "json", "--cp", str(args.cp), "--python", python] + shlex.split(args.check_args)
    cold_cache = tempfile.mkdtemp(prefix="cold-kernel-cache-")
    warm_cache = tempfile.mkdtemp(prefix="warm-kernel-cache-")
    cold_s, cold_code = run_report(check, dict(os.environ, DSV4_DOCTOR_KERNEL_CACHE=cold_cache),
                                   os.path.join(report_dir, "cold.json"))
    warm_env = dict(os.environ, DSV4_DOCTOR_KERNEL_CACHE=warm_cache)
    commands = {
        "torch floor": ([python, "-c", TORCH_FLOOR], None),
        "import floor": ([python, "-c", IMPORT_FLOOR], None),
        f"check --cp {args.cp} (warm)": (check, warm_env),
    }
    run_report(check, warm_env, os.path.join(report_dir, "warm-up.json"))  # fills the warm kernel cache
    floor_failed = {}
    for name, (argv, env) in commands.items():
        if argv is not check:  # the warm-up, which also shows whether the floor runs at all here
            done = subprocess.run(argv, capture_output=True, text=True, env=env)
            if done.returncode:
                floor_failed[name] = f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    times: dict[str, list[float]] = {name: [] for name in commands}
    codes = []
    for i in range(args.repeat):
        for name, (argv, env) in commands.items():
            if argv is check:
                took, code = run_report(argv, env, os.path.join(report_dir, f"warm-{i}.json"))
                codes.append(code)
            else:
                took = once(argv, env)
            times[name].append(took)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    torch_floor, import_floor = medians["torch floor"], medians["import floor"]
    warm = medians[f"check --cp {args.cp} (warm)"]
    rows = {f"check --cp {args.cp} (cold: first run, fresh kernel cache)": {"s": round(cold_s, 3),
                                                                            "exit_code": cold_code}}
    for name, ts in times.items():
        rows[name] = {"median_s": round(medians[name], 3), "min_s": round(min(ts), 3), "max_s": round(max(ts), 3),
                      "runs": len(ts)}
    # A floor that fails (no GPU, no TE) measures nothing: no ratio against it.
    tf = None if "torch floor" in floor_failed else torch_floor
    imf = None if "import floor" in floor_failed else import_floor
    ratios = {"warm_vs_torch_floor": tf and warm / tf, "cold_vs_import_floor": imf and cold_s / imf,
              "warm_vs_import_floor": imf and warm / imf, "cold_vs_torch_floor": tf and cold_s / tf}
    print(f"{'command':<56} {'s':>8}")
    print(f"{'check --cp %d cold (first run, fresh kernel cache)' % args.cp:<56} {cold_s:>8.2f}")
    for name in commands:
        print(f"{name + ' (median)':<56} {medians[name]:>8.2f}")
    for name, why in floor_failed.items():
        print(f"{name} FAILED ({why}): no ratio against it")
    for key, value in ratios.items():
        if value is None:
            continue
        goal = GOALS.get(key)
        verdict = "" if goal is None else (" <= %.2f goal met" % goal if value <= goal
                                           else " > %.2f goal missed" % goal)
        print(f"{key:<56} {value:>8.2f}{verdict}")
    last = os.path.join(report_dir, f"warm-{args.repeat - 1}.json")
    rounded = {k: v if v is None else round(v, 3) for k, v in ratios.items()}
    result = {"cpu_count": os.cpu_count(), "rows": rows, "ratios": rounded,
              "floors_failed": floor_failed,
              "goals": GOALS, "warm_exit_codes": codes, "reports": report_dir,
              "where_the_warm_time_goes": where_time_goes(last),
              "where_the_cold_time_goes": where_time_goes(os.path.join(report_dir, "cold.json"))}
    print(json.dumps(result, indent=2))
    for d in (cold_cache, warm_cache):
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--bare-python")
    ap.add_argument("--full", action="store_true", help="Time a full check against the torch and import floors.")
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--check-args", default="", help="More arguments for the full check (one shell-quoted string).")
    ap.add_argument("--report-dir", help="Where --full keeps each check's JSON report (default: a new temp dir).")
    args = ap.parse_args()
    doctor = shutil.which("dsv4-doctor", path=os.path.dirname(sys.executable)) or shutil.which("dsv4-doctor")
    if args.full:
        full(args, doctor)
        return
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
