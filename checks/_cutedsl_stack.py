"""The cuDNN frontend's CuTe-DSL stack: what the installed frontend declares for it, which of that is unmet, and the
fixes that meet it."""

from __future__ import annotations

from dsv4_doctor.api import StaticFacts, canonical, requirements

from .fixes import catalogue as fixes, frontend as frontend_fixes

FE = "nvidia-cudnn-frontend"
# What the frontend's cutedsl extra (1.26-1.28) or its unconditional requirements (1.29+) name; read from metadata.
CUTEDSL_STACK = ("nvidia-cutlass-dsl", "cuda-python", "torch", "apache-tvm-ffi", "torch-c-dlpack-ext")


def unmet_stack(static: StaticFacts) -> list[str]:
    """Every unmet requirement of the frontend's CuTe-DSL stack at once (an import error names only the first).

    Requirements under the `cutedsl` extra (1.26-1.28) and unconditional ones (1.29+) both count; without a frontend
    installed, the stack's known members stand in for its declared requirements."""
    fe = static.readable_dist(FE)
    if fe is None:
        return [f"{name} (not installed)" for name in CUTEDSL_STACK if static.version(name) is None]
    missing = []
    for req in requirements(fe, ("cutedsl",)):
        if canonical(req.name) not in CUTEDSL_STACK:
            continue  # not asked of the static probe
        installed = static.version(canonical(req.name))
        if installed is None:
            missing.append(f"{req.name} (not installed)")
        elif req.specifier and not req.specifier.contains(installed, prereleases=True):
            missing.append(f"{req.name} {installed} (needs {req.specifier})")
    return missing


def stack_fixes(static: StaticFacts, missing: list[str], cc: tuple[int, int] | None = None) -> list:
    found = [frontend_fixes.frontend_stack(static, cc)]
    if any(m.startswith("torch ") for m in missing):
        found.append(fixes.torch(static))
    return found
