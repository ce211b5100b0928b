"""`dsv4-doctor warm`: compile the doctor's own CuTe DSL kernels for one GPU arch, without a GPU, into the image-wide
kernel store, so that the first check in a new container loads them instead of compiling (docs/smoke.md, "The AOT
kernel store").

Run as root after the stack is installed (the Dockerfile does): the store (default /usr/local/share/dsv4-doctor/
kernels) is made root's and writable by nobody else (doctor/kernels/cachedir.py, root_only), and every user may load
from it. What is compiled comes from kernel recipes (checks/smoke/dsv4probe_kernelrecipe.py): the ones the doctor ships
(checks/smoke/kernel_recipes.json, recorded by a check on that arch's GPU) or `--recipes` (a file, or a per-user
kernel store whose checks recorded them), read here as untrusted data. The warm probe checks each recipe whole before
any of it is imported, built or called (docs/security.md, "Recipes are untrusted input"): one that fails, or whose
source file differs from the installed one, is not warmed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..model.core import UsageError

MAX_RECIPE_BYTES = 8 << 20
MAX_RECIPES = 256
MAX_RECIPE_DEPTH = 32  # of a recipes file's JSON: a recipe the warm probe accepts nests at most 18 levels
WARM_TIMEOUT_S = 600.0


@dataclass
class WarmResult:
    status: str  # pass | fail | skip | error
    summary: str
    arch: str
    into: str
    kernels: list[dict] = field(default_factory=list)
    recipes_from: str = ""

    def to_dict(self) -> dict:
        return {"schema": "dsv4-doctor.warm/1", "status": self.status, "summary": self.summary, "arch": self.arch,
                "into": self.into, "recipes_from": self.recipes_from, "kernels": self.kernels}

    @property
    def exit_code(self) -> int:
        return 0 if self.status in ("pass", "skip") else 1


def dsl_arch(gpu_arch: str) -> str:
    """"9.0" -> "sm_90a", as the CuTe DSL names the arch it compiles for (detect_gpu_arch: "a" from CC 9)."""
    major, _, minor = gpu_arch.partition(".")
    return f"sm_{int(major)}{int(minor)}{'a' if int(major) >= 9 else ''}"


def shipped_recipes() -> Path:
    from ..engine.registry import builtin_dir  # located, not imported: the engine never imports the rulebook

    return Path(builtin_dir()) / "smoke" / "kernel_recipes.json"


def nesting_depth(value: object, limit: int = MAX_RECIPE_DEPTH) -> int:
    """How deeply decoded JSON nests, counted without recursion; limit + 1 once it is deeper than `limit`."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if not isinstance(item, (dict, list)):
            continue
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_recipes(path: Path) -> list[dict]:
    """The recipes in a JSON file (a list), or in a kernel store's folder (each `*.recipe.json`), read as untrusted
    data: bounded, never blocking, objects only. A file that is not read or whose JSON does not decode (not UTF-8,
    not JSON, a 100,000-deep nest, more than memory holds), or that nests deeper than any recipe does, is a usage
    error naming it. What is in a recipe is checked by the warm probe before any of it is used."""
    from ..hostio.safeio import ReadRefused, load_json

    files = sorted(path.glob("aot-*.recipe.json"))[:MAX_RECIPES] if path.is_dir() else [path]
    out: list[dict] = []
    for file in files:
        try:
            data = load_json(str(file), MAX_RECIPE_BYTES)
        except ReadRefused as exc:
            raise UsageError(f"--recipes {file}: not a readable JSON file ({exc})") from None
        if nesting_depth(data) > MAX_RECIPE_DEPTH:
            raise UsageError(f"--recipes {file}: not a recipes file (JSON nested deeper than {MAX_RECIPE_DEPTH} "
                             "levels)")
        out += [r for r in (data if isinstance(data, list) else [data]) if isinstance(r, dict)]
    return out[:MAX_RECIPES]


def warm(python: str, gpu_arch: str, into: str | None, recipes: str | None, timeout: float | None) -> WarmResult:
    """Compile the recipes for `gpu_arch` in a probe of `python` into the image-wide store `into`."""
    from . import cache as kernelcache
    from .cachedir import Refused, open_verified
    from ..engine.probes import Probe, run_probe
    from ..hostio.procs import Processes

    arch = dsl_arch(gpu_arch)
    where = into or os.environ.get(kernelcache.IMAGE_ENV) or kernelcache.DEFAULT_IMAGE_DIR
    if not os.path.isabs(where):
        raise UsageError(f"--into {where!r}: give an absolute path")
    if os.geteuid() != 0:
        raise UsageError("the image-wide kernel store is root's (every user loads from it, only root may change it): "
                         "run `dsv4-doctor warm` as root, as the Dockerfile does")
    source = Path(recipes) if recipes else shipped_recipes()
    found = read_recipes(source)
    if not found:
        return WarmResult("skip", f"no kernel recipes in {source}", arch, where, recipes_from=str(source))
    try:
        verified = open_verified(where, create=True, root_only=True)
    except Refused as exc:
        return WarmResult("error", f"the image-wide kernel store cannot be used: {exc}", arch, where,
                          recipes_from=str(source))
    try:
        kernelcache.hold_for_warm(verified)
    except Refused as exc:
        return WarmResult("error", f"the image-wide kernel store cannot be held open: {exc}", arch, where,
                          recipes_from=str(source))
    finally:
        verified.close()
    probe = Probe.python("warm:" + arch, shipped_recipes().parent / "dsv4probe_warm.py",
                         {"arch": arch, "recipes": found}, timeout_s=timeout or WARM_TIMEOUT_S)
    # Cross-compiling: the DSL compiles for CUTE_DSL_ARCH; no GPU is used, even where there is one.
    probe = Probe(**{**probe.__dict__, "env": (("DSV4_DOCTOR_AOT_WARM", "1"), ("CUTE_DSL_ARCH", arch),
                                               ("CUDA_VISIBLE_DEVICES", ""))})
    procs = Processes()
    try:
        result = run_probe(probe, python, timeout or WARM_TIMEOUT_S, procs)
    finally:
        procs.close()
        kernelcache.reset()  # the held store's descriptor is closed
    data = result.data if result.ok and isinstance(result.data, dict) else {}
    if not data:
        return WarmResult("error", f"the warm probe {result.error or 'gave no answer'}", arch, where,
                          recipes_from=str(source))
    evidence = data.get("evidence")
    found_rows = evidence.get("kernels") if isinstance(evidence, dict) else None
    kernels = [k for k in found_rows if isinstance(k, dict)][:MAX_RECIPES] if isinstance(found_rows, list) else []
    status = data.get("status") if data.get("status") in ("pass", "fail", "skip", "error") else "error"
    return WarmResult(str(status), str(data.get("summary") or "")[:500], arch, where, kernels, str(source))


def rendered(result: WarmResult, as_json: bool) -> str:
    """The result as JSON or as text lines, secrets masked and every text made inert (it holds a probe's words)."""
    from ..hostio.redact import Redactor, clean_text

    data = Redactor()(result.to_dict())
    if as_json:
        return json.dumps(data, indent=2) + "\n"
    lines = [f"dsv4-doctor warm: {data['summary']}",
             f"  store: {data['into']} (arch {data['arch']}; recipes: {data['recipes_from']})"]
    for k in data["kernels"]:
        error = k.get("error") if isinstance(k.get("error"), dict) else {}
        why = k.get("why") or error.get("message")
        lines.append(f"  {k.get('result')}: {k.get('kernel')} ({k.get('file')})" + (f": {why}" if why else ""))
    return "".join(clean_text(line) + "\n" for line in lines)
