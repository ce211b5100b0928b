"""Distribution metadata of the DSv4 packages: readable, so that versions can be judged at all; and their declared
requirements on each other hold."""

from __future__ import annotations

import re

from dsv4_doctor.api import (MAX_REQUIREMENTS, Context, Fix, Phase, Result, Source, StaticFacts, StaticRequest,
                             canonical, check, failed, parse_requirement, passed, safe_specifier, skipped, warned)

from .fixes import catalogue as fixes, frontend as frontend_fixes
from ._reach import STACK, STACK_MODULES, copies_note


@check(
    "deps.metadata",
    "The DSv4 packages' metadata is readable",
    applies_when="always",
    detects="importlib.metadata of every distribution the checks inspect",
    sources=(Source("pip operations/check.py: don't crash on unreadable or broken metadata",
                    "https://github.com/pypa/pip/blob/main/src/pip/_internal/operations/check.py"),),
)
def deps_metadata(ctx: Context) -> Result:
    """Every version this doctor judges comes from a distribution's METADATA, as pip and Megatron read it. An
    empty, truncated or non-UTF-8 METADATA file (a half-finished install, a copied site-packages) makes a
    version unreadable. That is its own finding: it never lowers the verdict of another check, which judges the
    copies that do read (or says it cannot tell).
    """
    static = ctx.static
    broken = static.unreadable()
    evidence: dict = {"unreadable": broken}
    truncated = static.truncated()
    if truncated:
        evidence["headers_only"] = truncated  # over the read limit: every header read, the description not
    if not broken and not static.installed():
        return skipped("no inspected distribution is installed, so there is no METADATA to read (the install checks "
                       "report what is missing)", evidence=evidence)
    if not broken:
        return passed("every inspected distribution's METADATA reads"
                      + (f" ({len(truncated)} over the read limit: headers read)" if truncated else ""),
                      evidence=evidence)
    names = sorted({k.split(" (")[0] for k in broken})
    fix = Fix("Reinstall " + ", ".join(names) + " (their METADATA is unreadable: pip and importlib.metadata cannot "
              "see their versions)", key="setting:reinstall-broken-metadata", phase=Phase.SETTING)
    return warned(
        f"unreadable METADATA: {', '.join(f'{k}: {v}' for k, v in broken.items())}",
        "Other checks judge what they can from the copies that read; a version that cannot be read at all is "
        "reported by the check that needs it. Megatron reads versions with importlib.metadata too (TE's packing "
        "gate), so the job may not see what pip installed.",
        fixes=[fix], evidence=evidence)


# The DSv4 packages whose declared requirements among themselves must hold (what `pip check` would say, restricted
# to them), and the extras the DSv4 stack installs them with.
DSV4_PACKAGES = ("torch", "triton", "transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13",
                 "transformer-engine-torch", "nvidia-cudnn-frontend", "nvidia-cutlass-dsl",
                 # the CuTe DSL's libraries (the compiler and its CUDA 13 runtime): required at run time, so one
                 # missing is judged here, not warned about as an outside package
                 "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13", "apache-tvm-ffi",
                 "cuda-python", "cuda-bindings", "cuda-core", "cuda-pathfinder", "cuda-toolkit", "torch-c-dlpack-ext",
                 "megatron-core", "megatron-bridge", "verl", "flash-mla")
USED_EXTRAS = {"nvidia-cudnn-frontend": ("cutedsl",), "nvidia-cutlass-dsl": ("cu13",),
               "transformer-engine": ("pytorch", "core-cu13", "core_cu13")}
# Packages whose requirements that are not installed at all are reported (a warning: whether the import breaks is the
# import checks' finding). The others' (verl, Megatron-Bridge: dozens of requirements, many for features DSv4 jobs do
# not use) are pip check's business.
MISSING_IS_RUNTIME = {"torch", "triton", "transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13",
                      "transformer-engine-torch", "nvidia-cudnn-frontend", "nvidia-cutlass-dsl",
                      "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13", "apache-tvm-ffi",
                      "cuda-python", "cuda-bindings", "cuda-core", "megatron-core", "flash-mla"}


def _index_key(name: str) -> str:
    """How the static probe's index names a distribution (PEP 503 normalised, with underscores)."""
    return re.sub(r"[-_.]+", "_", name).lower()


# Requirements that matter when the job runs (a mismatch is a failure); every other unmet one is a warning.
RUNTIME = {("nvidia-cudnn-frontend", "nvidia-cutlass-dsl"), ("nvidia-cudnn-frontend", "apache-tvm-ffi"),
           ("nvidia-cudnn-frontend", "cuda-python"), ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base"),
           ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13"), ("transformer-engine", "transformer-engine-cu12"),
           ("transformer-engine", "transformer-engine-cu13"), ("transformer-engine", "transformer-engine-torch")}
CONSISTENCY_STATIC = StaticRequest(distributions=DSV4_PACKAGES, modules=STACK_MODULES,
                                   distribution_prefixes=("nvidia-", "cuda-", "transformer-engine"),
                                   dependents_of=DSV4_PACKAGES, requirements_of=DSV4_PACKAGES)


def _applies(req, env: dict, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate(dict(env, extra=e)) for e in ("", *extras))
    except Exception:  # a marker this environment cannot evaluate: not ours to judge
        return False


def unmet_requirements(static) -> tuple[list[dict], dict]:
    """Every declared requirement among the inspected distributions that the installed set does not meet."""
    stack = {canonical(p) for p in DSV4_PACKAGES}
    installed = {k: v for k, v in static.installed().items()
                 if k in stack or k.startswith(("nvidia-", "cuda-", "transformer-engine"))}
    env = static.marker_env
    targets = static.requirement_targets()
    parsed: dict[str, list] = {}
    for name, dist in installed.items():
        parsed[name] = [r for r in map(parse_requirement, (dist.get("requires") or [])[:MAX_REQUIREMENTS]) if r]
    # The extras each package is used with: the DSv4 stack's, plus those its dependents ask for (cuda-toolkit[cublas])
    # in requirements that apply: cuda-python's `cuda-bindings[all]; extra == "all"` asks for nothing unless
    # cuda-python[all] is used (otherwise: three warnings about cuda-toolkit[...] nobody installed).
    extras: dict[str, set[str]] = {canonical(k): set(v) for k, v in USED_EXTRAS.items()}
    for _ in range(4):  # extras asking for extras: a few rounds reach the fixed point
        before = sum(len(v) for v in extras.values())
        for name, reqs in parsed.items():
            for req in reqs:
                if req.extras and _applies(req, env, extras.get(name, set())):
                    extras.setdefault(canonical(req.name), set()).update(req.extras)
        if sum(len(v) for v in extras.values()) == before:
            break
    unmet = []
    for name, reqs in sorted(parsed.items()):
        for req in reqs:
            target = canonical(req.name)
            if target not in installed and target not in stack:
                # Outside the DSv4 stack: only a requirement that is not installed at all matters here (a
                # --no-deps install that left TE without pydantic fails at import); other versions are pip check's.
                resolved = targets.get(_index_key(req.name), "absent")
                if resolved is None and name in MISSING_IS_RUNTIME and _applies(req, env, extras.get(name, set())):
                    # A warning: measured on the H200, TE 2.12.0 imports without its declared importlib-metadata and
                    # nvdlfw-inspect but not without pydantic; what breaks the import is te.import's finding.
                    unmet.append({"package": name, "version": installed[name].get("version"), "requires": str(req),
                                  "installed": None, "runtime": False, "missing": True})
                continue
            if not _applies(req, env, extras.get(name, set())):
                continue
            have = installed.get(target, {}).get("version")
            if have is not None and (not req.specifier or req.specifier.contains(have, prereleases=True)):
                continue
            # An apache-tvm-ffi older than the frontend declares ran the indexer right on the H200 (§9.3): a declared
            # requirement unmet, a warning as in tvm-ffi.version; a missing one fails at the first DSA call.
            runtime = (name, target) in RUNTIME and not (target == "apache-tvm-ffi" and have is not None)
            unmet.append({"package": name, "version": installed[name].get("version"), "requires": str(req),
                          "installed": have, "runtime": runtime})
    return unmet, installed


def _install_missing(u: dict) -> Fix:
    """`pip install <the requirement>` for a requirement that is not installed at all, as its requirer spells it."""
    req = parse_requirement(u["requires"])
    specifier = safe_specifier(str(req.specifier)) if req is not None and str(req.specifier) else ""
    spec = f"{req.name}{specifier}" if req is not None and specifier is not None else ""
    desc = f"Install {spec or u['requires']}, which {u['package']} {u['version']} requires"
    if not spec or not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", req.name if req is not None else ""):
        return fixes.withheld(desc, "the requirement is not a plain name and version", phase=Phase.PIN,
                              key=f"missing:{u['requires']}")
    return Fix(desc, [["pip", "install", spec]], key=f"missing:{spec}")


@check(
    "deps.consistency",
    "Declared requirements among the DSv4 packages hold",
    applies_when="always",
    detects="Requires-Dist of the DSv4 and nvidia-* distributions (metadata), evaluated for the target interpreter",
    sources=(
        Source("pip check (pip/_internal/operations/check.py)",
               "https://github.com/pypa/pip/blob/main/src/pip/_internal/operations/check.py"),
        Source("nvidia-cudnn-frontend 1.32.0 METADATA (nvidia-cutlass-dsl[cu13]>=4.8.0, apache-tvm-ffi>=0.1.11)",
               "https://pypi.org/project/nvidia-cudnn-frontend/1.32.0/"),
        Source("flashinfer #4360 / vLLM #45169 (apache-tvm-ffi pins on the rollout side)",
               "https://github.com/flashinfer-ai/flashinfer/issues/4360"),
    ),
    fixes=(frontend_fixes.frontend_stack(StaticFacts({})), fixes.TE_REINSTALL),
    static=CONSISTENCY_STATIC,
)
def deps_consistency(ctx: Context) -> Result:
    """What `pip check` would say, restricted to the DSv4 stack and read from metadata without running pip: the
    requirements that torch, Transformer Engine (and its sub-packages), the cuDNN frontend, nvidia-cutlass-dsl
    (and its libraries), apache-tvm-ffi, cuda-python/cuda-bindings, megatron-core, megatron-bridge, verl,
    FlashMLA, triton and the nvidia-* CUDA wheels declare on each other, with the extras the stack installs them
    with (`nvidia-cudnn-frontend[cutedsl]`, `nvidia-cutlass-dsl[cu13]`, `transformer-engine[pytorch,core_cu13]`,
    and whatever a dependent asks for, such as torch's `cuda-toolkit[cublas,...]`). The frontend's requirements
    on the CuTe DSL, tvm-ffi and cuda-python, the CuTe DSL's on its libraries and TE's on its core and torch
    extension matter at run time: unmet, they fail; every other unmet requirement warns (the Megatron DSv4
    recipes run pip check as a build invariant). It also names the other installed packages that require the
    same ones (vLLM or flashinfer pinning another apache-tvm-ffi), so that a --no-deps fix does not silently
    break the rollout side of the image.
    """
    static = ctx.static
    unmet, installed = unmet_requirements(static)
    # Only what those packages require as installed: a requirement behind an extra nobody asked for (torchmetrics'
    # `torch==2.8.0; extra == "dev"`, seen on the H200 image) is not one a fix can break.
    others = {}
    inspected = {canonical(p) for p in DSV4_PACKAGES}
    for name, info in static.dependents().items():
        if canonical(name) in inspected or canonical(name).startswith(("nvidia-", "cuda-", "transformer-engine")):
            continue  # the stack itself (the CuTe DSL's libs): its requirements are judged above, not listed as others'

        declared = info.get("requires") if isinstance(info.get("requires"), list) else []
        live = [line for line in declared if isinstance(line, str)
                and (req := parse_requirement(line)) is not None and _applies(req, static.marker_env, set())]
        if live:
            others[name] = dict(info, requires=list(dict.fromkeys(live)))
    evidence: dict = {"unmet": unmet, "inspected": {k: v.get("version") for k, v in sorted(installed.items())},
                      "also_required_by": others}
    lines = [f"{u['package']} {u['version']} requires {u['requires']}, but "
             + (f"{u['installed']} is installed" if u["installed"] else "it is not installed") for u in unmet]
    other_lines = []
    for name, info in sorted(others.items()):
        for line in info["requires"]:
            other_lines.append(f"{name} {info.get('version')} requires {line}")
    details = ""
    if other_lines:
        details = ("Other installed packages require DSv4 packages too, so a --no-deps fix can break them (the "
                   "rollout side of the image: vLLM, flashinfer, ...):\n" + "\n".join("  " + x for x in other_lines))
    runtime = [u for u in unmet if u["runtime"]]
    found = []
    if any(u["package"] == "nvidia-cudnn-frontend" for u in runtime):
        # it installs the CuTe DSL the frontend declares, libraries too
        found.append(frontend_fixes.frontend_stack(static, ctx.profile.cc))
    elif any(u["package"] == "nvidia-cutlass-dsl" for u in runtime):
        found.append(frontend_fixes.cutlass(static))  # pip installs the libraries a satisfied nvidia-cutlass-dsl lacks
    if any(u["package"].startswith("transformer-engine") and u["installed"] for u in runtime):
        found.append(fixes.te_reinstall(static))
    if runtime:
        return failed("; ".join(lines[unmet.index(u)] for u in runtime), "\n".join(
            [("Every unmet requirement:\n" + "\n".join("  " + x for x in lines))] + ([details] if details else [])),
            fixes=found, evidence=evidence)
    if unmet:
        missing = [_install_missing(u) for u in unmet if u.get("missing")]
        if any(u["package"] == "nvidia-cudnn-frontend" and u["installed"] is None for u in unmet):
            # what it declares and lacks (torch-c-dlpack-ext), pinned
            missing.append(frontend_fixes.frontend_stack(static, ctx.profile.cc))
        return warned("; ".join(lines), details, fixes=missing, evidence=evidence)
    if not installed:
        return skipped("none of the DSv4 and CUDA packages is installed, so there are no declared requirements to "
                       "check (the install checks report what is missing)", evidence=evidence)
    summary = f"the declared requirements among {len(installed)} DSv4 and CUDA packages hold"
    return passed(summary + (f"; {len(others)} other package(s) require some of them" if others else ""), details,
                  evidence=evidence)

COPIES_STATIC = StaticRequest(distributions=tuple(STACK), modules=STACK_MODULES)


@check(
    "deps.copies",
    "Each DSv4 package has one copy on the job's path",
    applies_when="always",
    detects="every dist-info of each stack package on the job's sys.path, and every folder that holds its module",
    sources=(
        Source("Python docs: the module search path (sys.path[0], PYTHONPATH, site-packages, .pth files)",
               "https://docs.python.org/3/library/sys_path_init.html"),
        Source("PEP 660: editable installs (meta-path finders and .pth files)", "https://peps.python.org/pep-0660/"),
        Source("cudnn-frontend python/cudnn/collect_env.py (loaded vs installed)",
               "https://github.com/NVIDIA/cudnn-frontend/blob/main/python/cudnn/collect_env.py"),
    ),
    static=COPIES_STATIC,
)
def deps_copies(ctx: Context) -> Result:
    """Two copies of one package (two dist-infos, or a folder on PYTHONPATH, in the user site or in the job's own
    folder in front of site-packages) mean that the version pip reports and the code the job runs can differ, and
    that an install step may change the copy the job does not import. Each copy is listed with its own version and
    place, and the one the job imports is named, with why (the job's folder, PYTHONPATH entry N, the user site, an
    editable install). This covers every stack package, compiled ones (TE, FlashMLA, fast-hadamard-transform)
    included.
    """
    static = ctx.static
    notes, evidence, seen = [], {}, set()
    for dist in STACK:
        copies = static.dist_copies(dist)
        module = STACK[dist]
        imported = static.copy(module)
        shadowed = [o for o in imported["others"] if o.get("path")] if imported["found"] else []
        if len(copies) > 1:
            notes.append(copies_note(dist, copies, imported))
        elif shadowed and module not in seen:  # one note per module (TE's distributions share one)
            seen.add(module)
            hidden = "; ".join(f"{o.get('version') or '(no metadata)'} at {o['path']} ({o.get('why')})"
                               for o in shadowed[:8])
            notes.append(f"{module} has {len(shadowed) + 1} copies: the job imports "
                         f"{imported['version'] or '(no version)'} at {imported['root']} ({imported['why']}), in "
                         f"front of {hidden}")
        if len(copies) > 1 or shadowed:
            evidence[dist] = {"imported": imported["why"], "root": imported["root"],
                              "copies": [{"version": c.get("version"), "path": c.get("path")} for c in copies],
                              "shadowed": shadowed}
    if not notes:
        return passed("each stack package found has one copy on the job's path", evidence=evidence)
    return warned(f"{len(notes)} package(s) with more than one copy: " + notes[0] + ("" if len(notes) == 1 else " …"),
                  "\n".join(notes), evidence=evidence)


CHECKS = [deps_metadata, deps_consistency, deps_copies]
