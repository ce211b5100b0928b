"""The warm probe (`dsv4-doctor warm`): compiles the doctor's own CuTe DSL kernels from their recipes for one arch,
without a GPU, into the image-wide kernel store, each under the key a check on that GPU looks it up by.

Request: {"arch": "sm_90a", "recipes": [recipe, ...]} (dsv4probe_kernelrecipe). The doctor hands the store's
directory over as descriptor 212 (DSV4_DOCTOR_AOT_IMAGE, with DSV4_DOCTOR_AOT_WARM=1: it is written) and sets
CUTE_DSL_ARCH to the arch. For each recipe: the callable and its arguments built again; the call's key computed as a
check computes it, and compared with the recipe's in everything but the stack's identity (this image's DSL is what
a check here will have); then compiled and stored. Answer: {"status", "summary", "evidence": {"kernels": [...]}}.
Stdlib besides the stack under test. Run as `python dsv4probe_warm.py OUT REQUEST_JSON`.
"""

import os
import sys

# Before any other import: nothing beside a probe script is the job's (dsv4probe_common's docstring says why).
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]
if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
    import importlib.util

    _spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
        os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
    sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["dsv4probe_common"])
from dsv4probe_common import error_info, load_module, serve, stage

import hashlib
import json
import time

MAX_RECIPES = 256


def _differs(a, b):
    """The parts of two keys (JSON) that differ, the stack's identity left out."""
    a, b = json.loads(a), json.loads(b)
    return sorted(k for k in set(a) | set(b) if k != "stack" and a.get(k) != b.get(k))


def warm_one(store, recipes, writer, recipe, arch, compile_):
    fn = recipes.replay_callable(recipe)
    recorded = recipe.get("key")
    want = json.loads(recorded).get("args") if isinstance(recorded, str) else None
    if not isinstance(want, list):
        raise recipes.NotRecordable("the recipe has no key")
    args = recipes.replay_args(recipe, store.describe, want)
    options = recipe.get("options")
    if options is not None and not isinstance(options, str):
        raise recipes.NotRecordable("options that are not a string")
    key = store.call_key(fn, args, {}, options, arch)
    differs = _differs(key, recorded)
    if differs:
        return {"result": "not warmed", "why": "the call made again differs from the recipe's in " +
                ", ".join(differs)}
    digest = hashlib.sha256(key.encode()).hexdigest()
    name, function_name = "aot-%s.o" % digest[:40], "dsv4_doctor_%s" % digest[:24]
    t0 = time.monotonic()
    compiled = compile_(fn, *args, options=options)
    compile_s = round(time.monotonic() - t0, 3)
    kind = type(compiled).__name__
    if kind not in store.STORED_TYPES:
        return {"result": "not warmed", "why": "a compiled %s is not stored" % kind}
    why = writer.save(compiled, name, function_name, dict(recipe, key=key, entry=name))
    if why:
        return {"result": "failed", "why": why, "compile_s": compile_s}
    return {"result": "stored", "entry": name, "compile_s": compile_s}


def answer(request):
    arch = str(request.get("arch") or "")
    recipes_in = request.get("recipes") if isinstance(request.get("recipes"), list) else []
    stage("importing the CuTe DSL")
    store = load_module("dsv4probe_kernelstore", HERE)
    recipes = load_module("dsv4probe_kernelrecipe", HERE)
    writer = store.Store()
    if writer.write is None or writer.write[0] != "image":
        return {"status": "error", "summary": "no writable image-wide kernel store was handed over"}
    try:
        import cutlass.cute as cute
    except BaseException as exc:
        return {"status": "error", "summary": "the CuTe DSL does not import", "error": error_info(exc)}
    rows = []
    for recipe in recipes_in[:MAX_RECIPES]:
        if not isinstance(recipe, dict):
            continue
        where = recipe.get("function") or recipe.get("object") or {}
        row = {"kernel": str(where.get("qualname") if isinstance(where, dict) else "?")[:120],
               "file": str(where.get("file") if isinstance(where, dict) else "?")[:200]}
        if recipe.get("arch") != arch:
            row.update(result="other arch", why="recorded for %s" % str(recipe.get("arch"))[:32])
            rows.append(row)
            continue
        stage("warm: %s" % row["kernel"])
        try:
            row.update(warm_one(store, recipes, writer, recipe, arch, cute.compile))
        except recipes.NotRecordable as exc:
            row.update(result="not warmed", why=str(exc))
        except BaseException as exc:
            row.update(result="failed", error=error_info(exc, frames=4))
        rows.append(row)
    counts = {}
    for row in rows:
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    for_arch = [r for r in rows if r["result"] != "other arch"]
    status = "fail" if counts.get("failed") else "pass" if counts.get("stored") else "skip"
    summary = "%d of %d kernel(s) for %s stored" % (counts.get("stored", 0), len(for_arch), arch) + (
        "; %d not warmed" % counts["not warmed"] if counts.get("not warmed") else "") + (
        "; %d failed" % counts["failed"] if counts.get("failed") else "")
    return {"status": status, "summary": summary, "evidence": {"kernels": rows, "counts": counts, "arch": arch}}


if __name__ == "__main__":
    serve(answer)
