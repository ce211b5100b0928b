"""Median wall time of `dsv4-doctor check --format json` beside the floor `python -c pass`, as ratios from one run.

    python benchmarks/bench_check.py [--repeat 9] [--torch-python PATH] [--bare-python PATH]
    python benchmarks/bench_check.py --full [--cp 2] [--check-args "..."] [--repeat 5] [--report-dir DIR]

--full (on a GPU machine, the stack installed in --torch-python) times a full `check --cp N` against two floors, all
alternating in one run: the torch floor `import torch; torch.zeros(1).cuda()` and the import floor a full check cannot
avoid, `import torch, transformer_engine.pytorch, megatron.core; torch.zeros(1).cuda()`. Its first row, "cold", is
the very first command it runs: no warm-up, on a fresh empty kernel cache (DSV4_DOCTOR_KERNEL_CACHE=<new dir>); run
the bench first in a fresh container for it to mean "first run in the container". The warm rows then share one
persistent kernel cache. It prints the ratios against the goals of the stack it finds (complete when the import
floor runs: cold within 1.5x and warm within 1.25x the import floor; partial, no TE: warm within 2x the torch floor)
and where the cold and the last warm check spent their time: every check, tier 2's builds, each kernel sub-run's
`import torch` (its own processes' too) and each kernel's first and steady call and whether a cache served it.

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
# The goals, per stack: on the partial stack (no TE, so no tier 2) a second run within 2x the torch floor; on the
# complete stack within 1.5x the import floor cold and 1.25x warm. The stack is complete when the import floor runs.
GOALS = {"partial": {"warm_vs_torch_floor": 2.0},
         "complete": {"cold_vs_import_floor": 1.5, "warm_vs_import_floor": 1.25}}


def stack_of(floor_failed: dict) -> str:
    """"complete" when the import floor (torch, TE, Megatron, a CUDA tensor) ran, else "partial"."""
    return "partial" if "import floor" in floor_failed else "complete"


def judge(ratios: dict, stack: str) -> list[tuple[str, float, float | None, bool | None]]:
    """(ratio, value, its goal on this stack or None, met or None) for every ratio measured; only the stack's own
    goals are judged (the torch-floor goal is the partial stack's, the import-floor goals the complete stack's)."""
    goals = GOALS[stack]
    return [(key, value, goals.get(key), None if key not in goals else value <= goals[key])
            for key, value in ratios.items() if value is not None]


def run_report(argv: list[str], env: dict, path: str) -> tuple[float, int]:
    start = time.perf_counter()
    with open(path, "wb") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start, done.returncode


def where_time_goes(report_path: str) -> dict:
    """From a check's JSON report: every check by duration, the smoke's own timings (tier 2's builds), and each
    kernel sub-run with its `import torch` and CUDA set-up, its kernels' first and steady calls and whether a cache
    served them."""
    try:
        with open(report_path, encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": f"no report: {exc}"}
    checks = sorted(report.get("checks", []), key=lambda c: -float(c.get("duration_s") or 0))
    out: dict = {"total_s": (report.get("summary") or {}).get("duration_s"),
                 "exit_code": (report.get("summary") or {}).get("exit_code"),
                 "checks": [(c.get("id"), c.get("status"), c.get("duration_s")) for c in checks]}
    by_id = {c.get("id"): c for c in report.get("checks", [])}
    smoke = (by_id.get("smoke.thd-cp") or {}).get("evidence") or {}
    out["smoke_timing"] = smoke.get("timing")
    tier2 = smoke.get("tier2") or {}
    out["tier2_cp1_first_forward_s"] = (tier2.get("cp1") or {}).get("first_forward_s")
    builds = ((tier2.get("fused") or {}).get("builds")) or {}
    out["tier2_builds"] = {name: {k: b.get(k) for k in ("wall_s", "import_s", "first_forward_s", "first_backward_s",
                                                        "steady_forward_s", "steady_backward_s", "hang")}
                           for name, b in builds.items() if isinstance(b, dict)}
    kernel_evidence = (by_id.get("smoke.dsv4-kernels") or {}).get("evidence") or {}
    # Which kernel cache the probes got: a row meant to run on a fresh (or warm) cache means nothing if it was refused.
    out["kernel_cache"] = kernel_evidence.get("kernel_cache")
    runs = kernel_evidence.get("subruns") or {}
    out["kernel_subruns"] = {}
    for name, row in runs.items():
        evidence = row.get("evidence") or {}
        ran = evidence.get("kernels_ran") or {}
        out["kernel_subruns"][name] = {
            "status": row.get("status"), "total_s": row.get("total_s"), "torch_start_s": row.get("torch_start_s"),
            "kernels": [(k.get("kernel"), k.get("first_call_s"), k.get("steady_s"), k.get("cache"), k.get("process"))
                        for k in ran.get("kernels", [])],
            # The split layout sub-run's own processes: each pays its `import torch`, overlapped with the others.
            "processes": {mode: {k: p.get(k) for k in ("status", "wall_s", "total_s", "torch_start_s")}
                          for mode, p in (evidence.get("index_mode_processes") or {}).items() if isinstance(p, dict)}}
    return out


def _s(value) -> str:
    return "-" if value is None else f"{float(value):.2f}s"


def where_lines(where: dict) -> list[str]:
    """`where_time_goes` as text: the checks run as concurrent probes, so their times overlap."""
    if "error" in where:
        return [where["error"]]
    lines = [f"total {_s(where.get('total_s'))}, exit {where.get('exit_code')}; checks (concurrent, so they overlap):"]
    lines += [f"  {cid:<28} {status or '?':<5} {_s(took)}" for cid, status, took in where.get("checks") or []]
    for name, b in (where.get("tier2_builds") or {}).items():
        lines.append(f"  tier 2 {name} build: {_s(b.get('wall_s'))} (import {_s(b.get('import_s'))}, first forward "
                     f"{_s(b.get('first_forward_s'))}, first backward {_s(b.get('first_backward_s'))}, steady "
                     f"{_s(b.get('steady_forward_s'))} / {_s(b.get('steady_backward_s'))})")
    for name, run in (where.get("kernel_subruns") or {}).items():
        lines.append(f"  kernel sub-run {name}: {run.get('status')} {_s(run.get('total_s'))} "
                     f"(import torch + CUDA set-up {_s(run.get('torch_start_s'))})")
        for mode, proc in (run.get("processes") or {}).items():
            lines.append(f"    its own process ({mode}): {proc.get('status')} {_s(proc.get('wall_s'))} wall "
                         f"(import torch + CUDA set-up {_s(proc.get('torch_start_s'))})")
        for kernel, first, steady, cache, process in run.get("kernels") or []:
            lines.append(f"    {kernel}: first call {_s(first)}, steady {_s(steady)}"
                         + (f" [{process} process]" if process else "") + f": {cache}")
    cache = where.get("kernel_cache") or {}
    if cache:
        lines.append(f"  kernel cache: {cache.get('source')} {cache.get('directory') or ''} {cache.get('note') or ''}"
                     .rstrip())
    return lines


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
    stack = stack_of(floor_failed)
    print(f"{'command':<56} {'s':>8}")
    print(f"{'check --cp %d cold (first run, fresh kernel cache)' % args.cp:<56} {cold_s:>8.2f}")
    for name in commands:
        print(f"{name + ' (median)':<56} {medians[name]:>8.2f}")
    for name, why in floor_failed.items():
        print(f"{name} FAILED ({why}): no ratio against it")
    print(f"stack: {stack} ({'the import floor runs' if stack == 'complete' else 'the import floor fails'}): "
          + ", ".join(f"{k} <= {v}" for k, v in GOALS[stack].items()))
    for key, value, goal, met in judge(ratios, stack):
        verdict = "" if goal is None else f" {'<=' if met else '>'} {goal:.2f} goal {'met' if met else 'missed'}"
        print(f"{key:<56} {value:>8.2f}{verdict}")
    last = os.path.join(report_dir, f"warm-{args.repeat - 1}.json")
    rounded = {k: v if v is None else round(v, 3) for k, v in ratios.items()}
    warm_where, cold_where = where_time_goes(last), where_time_goes(os.path.join(report_dir, "cold.json"))
    for label, where in (("the last warm check", warm_where), ("the cold check", cold_where)):
        print(f"\nwhere {label}'s time goes:")
        print("\n".join(where_lines(where)))
    result = {"cpu_count": os.cpu_count(), "rows": rows, "ratios": rounded, "stack": stack,
              "floors_failed": floor_failed, "goals": GOALS[stack],
              "met": {k: met for k, _, goal, met in judge(ratios, stack) if goal is not None},
              "warm_exit_codes": codes, "reports": report_dir,
              "where_the_warm_time_goes": warm_where, "where_the_cold_time_goes": cold_where}
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
