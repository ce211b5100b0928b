"""Part of the smoke probe (`check --deep`): compile the doctor's own CuTe DSL kernels ahead, from the shipped recipes
(kernel_recipes.json, recorded by a check on that arch's GPU), in a few processes beside tier 2's fused build, into
the per-user AOT kernel store. The build imports for ~13 s before its first kernel compile; by then its kernels are
stored, or being made (a marker per entry that the build waits on, while the prewarm process lives).

What a prewarm stores is keyed exactly as the build looks it up (dsv4probe_warm compares the replayed call's key
with the recipe's), so a served kernel is one the build would have compiled. A recipe that does not replay here
(another source, another arch) is left to the build, which compiles it as before. The GPU is hidden from the
prewarm processes: they compile for the arch they are told, as `dsv4-doctor warm` does.

Standard library only.
"""

import os
import subprocess
import time

from dsv4probe_common import LIB, cache_fds, launch_argv, request_beside  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
RECIPES = os.path.join(HERE, "kernel_recipes.json")
MAX_WORKERS = 4
MAX_RECIPES_BYTES = 8 << 20
MAX_ANSWER_BYTES = 32 << 20  # a probe's answer, as the doctor reads one


def _recipes():
    from dsv4probe_common import load_module

    return load_module("dsv4probe_kernelrecipe", HERE)


def shipped_recipes(arch):
    """The shipped recipes for `arch`, or [] (none, unreadable, or malformed): a regular file of at most
    MAX_RECIPES_BYTES, read without blocking; JSON that does not decode (a 100,000-deep nest included) is none. A
    recipe nested deeper than any recipe is (dsv4probe_kernelrecipe.MAX_DEPTH) is left out. Each recipe is then
    checked whole by the warm probe, as `warm` checks it."""
    recipes = _recipes()
    raw = recipes.read_regular(RECIPES, MAX_RECIPES_BYTES)
    data = recipes.decode_json(raw) if raw is not None else None
    if not isinstance(data, list):
        return []
    return [r for r in data if isinstance(r, dict) and r.get("arch") == arch and
            recipes.nesting_depth(r) <= recipes.MAX_DEPTH]


def installed_dsl():
    """The installed CuTe DSL's version (its distributions' metadata; nothing imported), or None."""
    from dsv4probe_common import installed_version

    for name in ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl"):
        version = installed_version(name)
        if version is not None:
            return version
    return None


def recorded_dsl(recipe):
    """The DSL version a recipe's key was recorded under, or None (no key, or one that does not decode)."""
    recipes = _recipes()
    key = recipe.get("key")
    data = recipes.decode_json(key) if isinstance(key, str) and len(key) <= recipes.MAX_KEY_CHARS else None
    stack = data.get("stack") if isinstance(data, dict) else None
    dsl = stack.get("dsl") if isinstance(stack, dict) else None
    return dsl if isinstance(dsl, str) else None


def plan(recipes, workers):
    """The recipes split over `workers` processes: the longest recorded compile first onto the least loaded one;
    each process then makes its share in the order a check needed them (`needed_at_s`: seconds into the recording
    process; a recipe without it last, in the list's order)."""
    shares = [[] for _ in range(max(1, workers))]
    loads = [0.0] * len(shares)

    def cost(r):
        value = r.get("compile_s")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 1.0

    for recipe in sorted(recipes, key=cost, reverse=True):
        i = loads.index(min(loads))
        shares[i].append(recipe)
        loads[i] += cost(recipe)
    order = {id(r): i for i, r in enumerate(recipes)}

    def needed(r):
        at = r.get("needed_at_s")
        known = isinstance(at, (int, float)) and not isinstance(at, bool)
        return (0, float(at), order[id(r)]) if known else (1, 0.0, order[id(r)])

    return [sorted(share, key=needed) for share in shares if share]


def start(request, outdir, arch):
    """Start the prewarm processes: a dict with them, and `build_env` for the builds (where the markers are); or
    {"skipped": why} when there is nothing to do."""
    env = os.environ
    if request.get("no_prewarm") or env.get("DSV4_DOCTOR_PREWARM") == "off":
        return {"skipped": "prewarm turned off (DSV4_DOCTOR_PREWARM=off)"}
    if not env.get("DSV4_DOCTOR_AOT_CACHE"):
        return {"skipped": "no per-user kernel store (--no-kernel-cache, or none could be opened)"}
    recipes = shipped_recipes(arch)
    if not recipes:
        return {"skipped": "no shipped kernel recipes for %s" % arch}
    dsl = installed_dsl()
    if dsl is not None:  # a recipe replays only under the DSL it was recorded with (dsv4probe_warm)
        versions = [recorded_dsl(r) for r in recipes]
        kept = [r for r, version in zip(recipes, versions) if version == dsl]
        if not kept:
            return {"skipped": "the shipped kernel recipes were recorded with nvidia-cutlass-dsl %s; this stack has %s"
                               % (", ".join(sorted({str(v) for v in versions})), dsl)}
        recipes = kept
    pending = os.path.join(outdir, "prewarm-pending")
    os.makedirs(pending, mode=0o700, exist_ok=True)
    workers = min(MAX_WORKERS, max(1, (os.cpu_count() or 2) // 4), len(recipes))
    child_env = dict(env, DSV4_DOCTOR_PROBE_LIB=LIB, DSV4_DOCTOR_AOT_PENDING=pending, CUDA_VISIBLE_DEVICES="",
                     CUTE_DSL_ARCH=arch)
    script = os.path.join(HERE, "dsv4probe_warm.py")
    procs = []
    for i, share in enumerate(plan(recipes, workers)):
        out = os.path.join(outdir, "prewarm-%d.json" % i)
        log = open(os.path.join(outdir, "prewarm-%d.log" % i), "wb")
        request = request_beside(out, {"arch": arch, "store": "user", "recipes": share})
        procs.append({"proc": subprocess.Popen(launch_argv(script, out, request), stdout=log,
                                               stderr=subprocess.STDOUT, env=child_env, pass_fds=cache_fds()),
                      "out": out, "log": log.name, "recipes": len(share)})
        log.close()
    return {"procs": procs, "started": time.monotonic(), "arch": arch, "recipes": len(recipes),
            "build_env": {"DSV4_DOCTOR_AOT_PENDING": pending}}


def finish(prewarm, grace_s=2.0):
    """The prewarm's evidence: per kernel what it did. Called once the builds are done: a prewarm process still
    running then has nothing left to give, and is stopped."""
    if not prewarm or "procs" not in prewarm:
        return {"skipped": (prewarm or {}).get("skipped", "not started")}
    rows, stopped = [], 0
    for p in prewarm["procs"]:
        proc = p["proc"]
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            stopped += 1
            continue
        raw = _recipes().read_regular(p["out"], MAX_ANSWER_BYTES)
        answer = _recipes().decode_json(raw) if raw is not None else None
        if not isinstance(answer, dict) or not isinstance(answer.get("evidence") or {}, dict):
            kernels = [{"result": "failed", "why": "the prewarm process gave no answer"}]
        else:
            kernels = (answer.get("evidence") or {}).get("kernels") or []
            kernels = kernels if isinstance(kernels, list) else []
        rows.extend(k for k in kernels if isinstance(k, dict))
    counts = {}
    for row in rows:
        counts[str(row.get("result"))] = counts.get(str(row.get("result")), 0) + 1
    return {"arch": prewarm["arch"], "processes": len(prewarm["procs"]), "recipes": prewarm["recipes"],
            "counts": counts, "stopped_unfinished": stopped, "kernels": rows[:64],
            "seconds": round(time.monotonic() - prewarm["started"], 3)}
