"""The warm probe's answer (its entry, dsv4probe_warm.py, says what is checked before anything is built): each recipe
checked, built again, its key compared, then compiled and stored in the image-wide kernel store under its key.
Stdlib besides the stack under test; loaded by path (dsv4probe_common.load_module).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import error_info, load_module, stage

HERE = os.path.dirname(os.path.realpath(__file__))

import hashlib
import time

MAX_RECIPES = 256


def _differs(a, b):
    """The parts of two keys (decoded) that differ, the stack's identity left out."""
    return sorted(k for k in set(a) | set(b) if k != "stack" and a.get(k) != b.get(k))


def _claim(store, name):
    """A prewarm's marker that it is making `name` (the waiting build polls it), or None when another has it."""
    marker = store.pending_marker(name)
    if marker is None:
        return ""
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return None
    except OSError:
        return ""
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return marker


def warm_one(store, recipes, writer, recipe, arch, compile_, prewarm=False):
    """One recipe: checked whole, its key compared with all it says and its file found and hashed, all before
    anything of it is imported, built or called; then made again, and compiled and stored when the key the call
    made again gives is the recorded one. NotRecordable: not warmed."""
    recipes.check(recipe)
    key_data = recipes.parse_key(recipe["key"])
    want = key_data["args"]
    # The key describes each tensor by the DSL's own cache key, whose text is the DSL version's: a recipe replays only
    # under the DSL it was recorded with.
    was = key_data["stack"].get("dsl")
    try:
        here = store._stack_identity().get("dsl")
    except store.Uncacheable as exc:
        return {"result": "not warmed", "why": str(exc)}
    if was != here:
        return {"result": "not warmed", "why": "recorded with nvidia-cutlass-dsl %s, this stack has %s: record the "
                "recipes again under it (`check --deep` on the GPU)" % (str(was)[:32], str(here)[:32])}
    located = recipes.locate(recipe.get("function") or recipe["object"])
    recipes.check_key(recipe, key_data, arch, store.KEY_VERSION, store.dsl_settings())
    fn = recipes.replay_callable(recipe, located)
    args = recipes.replay_args(recipe, store.describe, want)
    options = recipe["options"]
    try:
        store.call_shape(fn, args)  # what a check can serve: the same rule as the check's store
        key = store.call_key(fn, args, {}, options, arch)
    except store.Uncacheable as exc:
        return {"result": "not warmed", "why": str(exc)}
    differs = _differs(recipes.parse_key(key), key_data)
    if differs:
        return {"result": "not warmed", "why": "the call made again differs from the recipe's in " +
                ", ".join(differs)}
    digest = hashlib.sha256(key.encode()).hexdigest()
    name, function_name = "aot-%s.o" % digest[:40], "dsv4_doctor_%s" % digest[:24]
    if prewarm and writer.has(name):
        return {"result": "already stored", "entry": name}
    marker = _claim(store, name) if prewarm else ""
    if marker is None:
        return {"result": "already stored", "entry": name, "why": "another prewarm makes it"}
    try:
        t0 = time.monotonic()
        compiled = compile_(fn, *args, options=options)
        compile_s = round(time.monotonic() - t0, 3)
        kind = type(compiled).__name__
        if kind not in store.STORED_TYPES:
            return {"result": "not warmed", "why": "a compiled %s is not stored" % kind}
        why = writer.save(compiled, name, function_name, dict(recipe, key=key, entry=name))
    finally:
        if marker:
            try:
                os.unlink(marker)
            except OSError:
                pass
    if why:
        return {"result": "failed", "why": why, "compile_s": compile_s}
    return {"result": "stored", "entry": name, "compile_s": compile_s}


def _text(value, limit):
    """A recipe's name for the answer: its text when it is one, else "?" (never the repr of a nest)."""
    return value[:limit] if isinstance(value, str) else "?"


def answer(request):
    arch = str(request.get("arch") or "")
    recipes_in = request.get("recipes") if isinstance(request.get("recipes"), list) else []
    stage("importing the CuTe DSL")
    store = load_module("dsv4probe_kernelstore", HERE)
    recipes = load_module("dsv4probe_kernelrecipe", HERE)
    writer = store.Store()
    # "image": `dsv4-doctor warm`; "user": a --deep check's prewarm, compiling its kernels beside the fused build.
    into = "user" if request.get("store") == "user" else "image"
    if writer.write is None or writer.write[0] != into:
        return {"status": "error", "summary": "no writable %s kernel store was handed over" % (
            "per-user" if into == "user" else "image-wide")}
    try:
        import cutlass.cute as cute
    except BaseException as exc:
        return {"status": "error", "summary": "the CuTe DSL does not import", "error": error_info(exc)}
    store.export_only_without_a_gpu()
    rows = []
    for recipe in recipes_in[:MAX_RECIPES]:
        if not isinstance(recipe, dict):
            continue
        where = recipe.get("function") or recipe.get("object")
        where = where if isinstance(where, dict) else {}
        row = {"kernel": _text(where.get("qualname"), 120), "file": _text(where.get("file"), 200)}
        if recipe.get("arch") != arch:
            row.update(result="other arch", why="recorded for %s" % _text(recipe.get("arch"), 32))
            rows.append(row)
            continue
        stage("warm: %s" % row["kernel"])
        try:
            row.update(warm_one(store, recipes, writer, recipe, arch, cute.compile, prewarm=into == "user"))
        except recipes.NotRecordable as exc:
            row.update(result="not warmed", why=str(exc))
        except BaseException as exc:
            row.update(result="failed", error=error_info(exc, frames=4))
        rows.append(row)
    counts = {}
    for row in rows:
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    for_arch = [r for r in rows if r["result"] != "other arch"]
    status = "fail" if counts.get("failed") else "pass" if counts.get("stored") or counts.get("already stored") \
        else "skip"
    summary = "%d of %d kernel(s) for %s stored" % (counts.get("stored", 0), len(for_arch), arch) + (
        "; %d not warmed" % counts["not warmed"] if counts.get("not warmed") else "") + (
        "; %d failed" % counts["failed"] if counts.get("failed") else "")
    return {"status": status, "summary": summary, "evidence": {"kernels": rows, "counts": counts, "arch": arch}}

