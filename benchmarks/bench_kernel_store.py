"""The AOT kernel store against a real compile, on a GPU: for each cached site the doctor's probes reach, a kernel
served from the store gives the outputs the freshly compiled one gives on the same inputs.

    python benchmarks/bench_kernel_store.py --python PY [--cp 2] [--out DIR] [--no-tier2]

Four fresh processes per part, in order: "compiled" (an empty store: every kernel compiled, then stored),
"served" (the same store: loaded), "warmed" (a store the warm probe filled without a GPU from the recipes the
compiled run recorded: what `warm` and a --deep check's prewarm serve), "compiled again" (another empty store: the
compiled kernels' own run-to-run spread). Parts:
- the kernel smoke's sub-runs `layout` (Megatron's CP layout kernels, in one process: split_layout off) and `dsa`
  (the cuDNN frontend's DSA indexer forward), run by the doctor's own probe script; every kernel call's output is
  kept (the probe's `_timed`, wrapped here) and compared;
- tier 2's fused build (the DSv4 layer with the cuDNN indexer and FlashMLA, forward and backward; `--deep`), whose
  saved output and gradients are compared.
For each tensor: bit-for-bit equal or not, and the largest absolute difference, served against compiled and
compiled again against compiled (the spread a kernel has without any cache). Prints a table and writes
equality.json into --out, with each run's store summary (which kernels were served).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

DRIVER = r'''
import importlib.util, json, os, sys
lib, smoke, out, request = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])  # argv[5]: tensors
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(lib, "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
ran = common.load_module("dsv4probe_kernels_ran", smoke)
outputs, real = {}, ran._timed


def kept(torch, device, fn, *args, **kwargs):
    result = real(torch, device, fn, *args, **kwargs)
    name = ran._kernel_name(fn)
    if name not in outputs:
        value = result[0]
        items = value if isinstance(value, (tuple, list)) else [value]
        outputs[name] = [v.detach().cpu().clone() for v in items if hasattr(v, "detach")]
    return result


ran._timed = kept  # before the sub-runs' modules load: they bind it by name
kernels = common.load_module("dsv4probe_kernels_dispatch", smoke)
answer = kernels.answer(request)
import torch
torch.save(outputs, sys.argv[5])
with open(out, "w") as fh:
    json.dump(answer, fh, default=str)
'''


def compare(torch, a: dict, b: dict) -> dict:
    """Per tensor name: whether the two are bit-for-bit equal, and their largest absolute difference."""
    out = {}
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype:
            out[name] = {"equal": False, "why": "missing or another shape/dtype"}
            continue
        bits = torch.equal(x.view(torch.uint8) if x.dtype.is_floating_point and x.dim() else x,
                           y.view(torch.uint8) if y.dtype.is_floating_point and y.dim() else y)
        diff = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
        out[name] = {"equal": bool(bits), "max_abs_diff": diff}
    return out


RUNS = ("compiled", "served", "warmed", "compiled again")


def fresh_store(parent: str) -> str:
    path = tempfile.mkdtemp(prefix="store-", dir=parent)
    os.chmod(path, 0o700)
    return path


def run(python: str, argv: list[str], store: str, env_extra: dict, timeout: float = 600) -> tuple[float, int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUTE_DSL_", "DSV4_DOCTOR_AOT"))}
    env.update(env_extra, DSV4_DOCTOR_AOT_CACHE=store, CUTE_DSL_CACHE_DIR=store, CUTE_DSL_DUMP_DIR=store,
               DSV4_DOCTOR_PROBE_TIMEOUT=str(int(timeout)))
    start = time.monotonic()
    done = subprocess.run([python, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    return time.monotonic() - start, done.returncode, done.stderr[-3000:]


def request_file(answer: str, request: dict) -> str:
    """A probe's request in a file beside its answer, as the doctor hands it over (never on the command line)."""
    path = answer.removesuffix(".json") + ".request.json"
    with open(path, "w") as fh:
        json.dump(request, fh)
    return path


def warm_from(python: str, smoke: str, recorded: str, store: str, scratch: str, env_extra: dict) -> dict:
    """Fill `store` with the warm probe (no GPU: CUDA hidden, the arch named) from the recipes the "compiled" run
    recorded beside its kernels (read as `dsv4-doctor warm --recipes FOLDER` reads them): what `warm` and a --deep
    check's prewarm serve."""
    from pathlib import Path

    from dsv4_doctor.kernels.warm import read_recipes

    recipes = read_recipes(Path(recorded))
    arch = next((r.get("arch") for r in recipes), None)
    if not arch:
        return {"error": "the compiled run recorded no recipes"}
    out = os.path.join(scratch, f"warm-{os.path.basename(store)}.json")
    took, code, err = run(python, [os.path.join(smoke, "dsv4probe_warm.py"), out,
                                   request_file(out, {"arch": arch, "store": "user", "recipes": recipes})],
                          store, dict(env_extra, CUDA_VISIBLE_DEVICES="", CUTE_DSL_ARCH=arch))
    answer: dict = json.load(open(out)) if os.path.exists(out) else {"error": err}
    kernels = (answer.get("evidence") or {}).get("kernels") or []
    return {"wall_s": round(took, 3), "exit_code": code, "summary": answer.get("summary"),
            "kernels": [{k: r.get(k) for k in ("kernel", "result", "why", "compile_s")} for r in kernels]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-tier2", action="store_true")
    args = ap.parse_args()
    import torch

    from dsv4_doctor.engine.probes import PROBE_DIR

    import dsv4_doctor.checks as checks

    smoke = os.path.join(os.path.dirname(checks.__file__), "smoke")
    out_dir = args.out or tempfile.mkdtemp(prefix="kernel-store-equality-")
    os.makedirs(out_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="stores-")
    driver = os.path.join(scratch, "driver.py")
    with open(driver, "w") as fh:
        fh.write(DRIVER)
    base_env = {"DSV4_DOCTOR_PROBE_LIB": str(PROBE_DIR)}
    result: dict = {"parts": {}}
    parts = [("layout", {"subrun": "layout", "cp": args.cp, "device": "cuda", "split_layout": False}),
             ("dsa", {"subrun": "dsa", "cp": args.cp, "device": "cuda"})]
    for name, request in parts:
        first = fresh_store(scratch)
        runs = {}
        for label in RUNS:
            store = first if label in ("compiled", "served") else fresh_store(scratch)
            if label == "warmed":
                result.setdefault("warm", {})[name] = warm_from(args.python, smoke, first, store, scratch, base_env)
            out = os.path.join(out_dir, f"{name}-{label.replace(' ', '-')}.json")
            tensors = os.path.join(scratch, f"{name}-{label.replace(' ', '-')}.pt")  # binary: kept out of --out
            took, code, err = run(args.python, [driver, str(PROBE_DIR), smoke, out, json.dumps(request), tensors],
                                  store, base_env)
            answer: dict = json.load(open(out)) if os.path.exists(out) else {"error": err}
            store_summary = ((answer.get("evidence") or {}).get("aot_kernel_store") or {})
            runs[label] = {"wall_s": round(took, 3), "exit_code": code, "status": answer.get("status"),
                           "summary": answer.get("summary"), "store": store_summary,
                           "outputs": tensors if os.path.exists(tensors) else None, "stderr": err[-800:]}
        result["parts"][name] = runs
    if not args.no_tier2:
        first = fresh_store(scratch)
        runs = {}
        for label in RUNS:
            store = first if label in ("compiled", "served") else fresh_store(scratch)
            if label == "warmed":
                result.setdefault("warm", {})["tier2 fused"] = warm_from(args.python, smoke, first, store, scratch,
                                                                        base_env)
            save = os.path.join(scratch, f"tier2-{label.replace(' ', '-')}.pt")
            out = os.path.join(out_dir, f"tier2-{label.replace(' ', '-')}.json")
            job = {"tier2_build": {"backend": "cudnn", "save": save, "control": False, "device": "cuda:0"}}
            took, code, err = run(args.python, [os.path.join(smoke, "dsv4probe_smoke.py"), out,
                                                request_file(out, job)], store, base_env)
            answer = json.load(open(out)) if os.path.exists(out) else {"error": err}
            answer = answer.get("result", answer)
            runs[label] = {"wall_s": round(took, 3), "exit_code": code, "ok": answer.get("ok"),
                           "first_forward_s": answer.get("first_forward_s"),
                           "first_backward_s": answer.get("first_backward_s"),
                           "store": answer.get("aot_kernel_store"), "cute_dsl_cache": answer.get("cute_dsl_cache"),
                           "outputs": save if os.path.exists(save) else None, "stderr": err[-800:]}
        result["parts"]["tier2 fused"] = runs
    print(f"{'part':<12} {'run':<15} {'wall s':>7} {'served':>6} {'compiled':>8}  status")
    for name, runs in result["parts"].items():
        for label, r in runs.items():
            counts = (r.get("store") or {}).get("counts") or {}
            print(f"{name:<12} {label:<15} {r['wall_s']:>7.2f} {counts.get('served', 0):>6} "
                  f"{counts.get('compiled', 0):>8}  {r.get('status') or r.get('ok')}")
        loaded = {label: r.get("outputs") for label, r in runs.items()}
        if not all(loaded.values()):
            result["parts"][name]["comparison"] = {"error": "a run kept no outputs"}
            continue
        data = {}
        for label, path in loaded.items():
            saved = torch.load(path)
            data[label] = ({k: v for k, v in saved["tensors"].items()} if "tensors" in saved else
                           {f"{k}[{i}]": t for k, ts in saved.items() for i, t in enumerate(ts)})
        served = compare(torch, data["compiled"], data["served"])
        warmed = compare(torch, data["compiled"], data["warmed"])
        spread = compare(torch, data["compiled"], data["compiled again"])
        result["parts"][name]["comparison"] = {"served_vs_compiled": served, "warmed_vs_compiled": warmed,
                                               "compiled_again_vs_compiled": spread}
        for tensor in sorted(served):
            s, w, c = served[tensor], warmed[tensor], spread[tensor]
            print(f"  {tensor:<50} served {'==' if s['equal'] else '!='} (max |d| {s.get('max_abs_diff', '-')}); "
                  f"warmed {'==' if w['equal'] else '!='} (max |d| {w.get('max_abs_diff', '-')}); "
                  f"compiled again {'==' if c['equal'] else '!='} (max |d| {c.get('max_abs_diff', '-')})")
    with open(os.path.join(out_dir, "equality.json"), "w") as fh:
        json.dump(result, fh, indent=2, default=str)
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"out": out_dir}))


if __name__ == "__main__":
    main()
