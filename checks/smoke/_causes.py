"""What a smoke failure points at: the check that reports its cause (from the upstream text or the missing module it
shows), and that check's fixes. Tier 2 and the kernel smoke defer to that check where it already failed."""

from __future__ import annotations

import os
import re

from dsv4_doctor.api import Context, Fix, Phase, Redactor, Result, anchored, errored, failed

from ..fixes import catalogue as fixes, frontend as frontend_fixes
from ..mcore_checks import mcore_fix

# A tier-2 failure's cause is read from the one upstream-text registry (each rule's `texts=`): the texts it shows,
# and the module a ModuleNotFoundError names (the longest declared module path wins: a missing megatron.bridge is
# mbridge.dsv4's, a missing cudnn.csa cudnn-fe.csa's). Only the rules the smoke reports through count (RULE_FIXES).
RULE_FIXES = {
    "mcore.cp-partition-mode": lambda s: [fixes.mcore()], "mcore.dsv4": lambda s: [fixes.mcore()],
    "te.version": lambda s: [fixes.TE], "te.import": lambda s: [fixes.TE],
    "cutlass-dsl.import": lambda s: [frontend_fixes.cutlass(s)], "gpu.arch": lambda s: [fixes.SUPPORTED_GPU],
    "kernels.flash-mla": lambda s: [fixes.FLASH_MLA], "kernels.fast-hadamard": lambda s: [fixes.fast_hadamard(s)],
    "cudnn-fe.dsa": lambda s: [frontend_fixes.frontend_stack(s)],
    "cudnn-fe.version": lambda s: [frontend_fixes.frontend_stack(s)],
    "tvm-ffi.version": lambda s: [frontend_fixes.tvm_ffi(s)], "torch.install": lambda s: [fixes.torch(s)],
}


def module_rule(missing: str) -> str | None:
    """The rule of the package a missing module belongs to (`No module named '...'` in the registry), or None."""
    if not missing:
        return None
    found = anchored(f"No module named '{missing}'")
    return next((m.check_id for m in found if m.kind == "ModuleNotFoundError"), None)


def tier2_rules(error: dict) -> list[str]:
    """Every rule that reports what a tier-2 error shows, most specific first (Megatron's dependency check can name
    several missing packages in one message)."""
    text = f"{error.get('type')}: {error.get('message')}"
    missing = module_rule(str(error.get("missing_module") or ""))
    rules = [missing] if missing else []
    rules += [m.check_id for m in anchored(text, RULE_FIXES) if m.check_id not in rules]
    if cause_of(text) == "wrong-arch":  # CUDA's own words name no build: each row that reads a build's archs
        rules += [rule for rule in ARCH_ROWS if rule not in rules]
    return rules


def tier2_rule(error: dict) -> str | None:
    """The most specific rule that reports what a tier-2 error shows, or None."""
    rules = tier2_rules(error)
    return rules[0] if rules else None


def rule_fixes(rule: str | None, ctx: Context) -> list[Fix]:
    """The fixes of the rule that reports a finding (tier 2's, and the kernel smoke's for a missing module)."""
    if rule in ("mcore.dsv4", "mcore.cp-partition-mode"):
        return [mcore_fix(ctx)]  # names a PYTHONPATH copy that shadows the installed one (pip cannot fix that)
    return RULE_FIXES[rule](ctx.static) if rule in RULE_FIXES else []


def tier2_fixes(error: dict, ctx: Context) -> list[Fix]:
    return rule_fixes(tier2_rule(error), ctx)


# --- the cause of a GPU crash, from its own words -------------------------------------------------------------------

CRASH_TEXT_CHARS = 4000  # the crash text kept in the evidence: redacted first, then its tail cut to this
CUDA_ERROR_AT = re.compile(r"CUDA error \(([^()\n]{1,300})\): ([^\n]{1,200})")
# The rows that read a compiled extension's archs, for a "no kernel image" crash.
ARCH_ROWS = ("kernels.flash-mla", "kernels.fast-hadamard", "te.import")
KNOWN = (
    ("no kernel image is available", "wrong-arch"),
    ("cudaErrorNoKernelImageForDevice", "wrong-arch"),
    ("out of memory", "oom"),
    ("cudaErrorMemoryAllocation", "oom"),
    ("CUDA_ERROR_OUT_OF_MEMORY", "oom"),
    ("an illegal memory access", "illegal-access"),
    ("cudaErrorIllegalAddress", "illegal-access"),
    ("CUDA driver version is insufficient", "driver"),
    ("NVIDIA driver on your system is too old", "driver"),
    ("CUDA_ERROR_INSUFFICIENT_DRIVER", "driver"),
    ("no CUDA-capable device", "no-device"),
    ("No CUDA GPUs are available", "no-device"),
)
ILLEGAL_ACCESS_FIX = Fix("Rerun the failing kernel alone with CUDA_LAUNCH_BLOCKING=1 (and under compute-sanitizer) to "
                         "find which kernel and argument reads out of bounds: the CUDA context is lost after this "
                         "error, so every later CUDA call fails too", [], key="illegal-memory-access",
                         phase=Phase.RUNTIME, manual=True)


def crash_text(*parts: object) -> str:
    """The crash's own words as the evidence keeps them: redacted, then cut to the tail (where the error is)."""
    text = "\n".join(str(p) for p in parts if p)
    text = Redactor(os.environ).text(text)
    return text[-CRASH_TEXT_CHARS:]


def cause_of(text: str) -> str | None:
    """The known cause a crash text shows (wrong-arch, oom, illegal-access, driver, no-device), or None."""
    low = text.lower()
    return next((key for needle, key in KNOWN if needle.lower() in low), None)


def _wrong_arch_rule(ctx: Context, hint: str | None) -> str | None:
    """The row that found a build with no code for the target (item: its evidence `device_code`), else `hint`."""
    for rule in ((hint,) if hint in ARCH_ROWS else ()) + ARCH_ROWS:
        outcome = ctx.outcome(rule) if rule else None
        code = outcome.evidence.get("device_code") if outcome is not None else None
        verdicts = [code] if isinstance(code, dict) and "state" in code else (
            list(code.values()) if isinstance(code, dict) else [])
        if any(isinstance(v, dict) and v.get("state") == "none-runs" for v in verdicts):
            return rule
    return hint


def crash_cause(ctx: Context, text: str, *, what: str = "the probe", hint: str | None = None) -> dict | None:
    """A known cause of a crash: {"cause", "summary" (one short sentence), "fixes", "rule"}, or None.

    `what` names what crashed ("the FlashMLA sub-run"); `hint` is the rule that owns it (a sub-run's)."""
    from ..gpu_checks import driver_gets
    from .._gpu_facts import PROCESS_MIB, hidden_cause, holders, memory
    from ..kernels_checks import hadamard_arch_fix

    cause = cause_of(text)
    if cause is None:
        return None
    profile = ctx.profile
    if cause == "wrong-arch":
        at = CUDA_ERROR_AT.search(text)
        where = f" at {at.group(1).rsplit('/', 2)[-1] if '/' in at.group(1) else at.group(1)}" if at else ""
        rule = _wrong_arch_rule(ctx, hint)
        outcome = ctx.outcome(rule) if rule else None
        found = list(outcome.fixes) if outcome is not None and outcome.fixes else (
            [fixes.flash_mla(profile.cc)] if rule == "kernels.flash-mla" else
            [hadamard_arch_fix(ctx, fixes.fast_hadamard(ctx.static))] if rule == "kernels.fast-hadamard" else [])
        see = f" (see {rule}: the archs the build holds)" if rule else ""
        return {"cause": cause, "rule": rule, "fixes": found,
                "summary": f"{what} has no kernel for this GPU (CC {profile.gpu_arch or 'unknown'}): CUDA "
                           f"error{where}: no kernel image is available for execution on the device{see}"}
    if cause == "oom":
        gpus = memory(ctx)["gpus"]
        gpu = gpus[profile.device_index % len(gpus)] if gpus else None
        state = (f"GPU {gpu['index']} has {gpu['free_mib']} of {gpu['total_mib']} MiB free, held by {holders(gpu)}"
                 if gpu else "nvidia-smi could not say who holds it")
        return {"cause": cause, "rule": "gpu.memory", "fixes": [],
                "summary": f"{what} ran out of GPU memory: {state}; a smoke process needs less than 1 GiB "
                           f"(about {PROCESS_MIB} MiB with its CUDA context)"}
    if cause == "illegal-access":
        return {"cause": cause, "rule": hint, "fixes": [ILLEGAL_ACCESS_FIX],
                "summary": f"a kernel in {what} made an illegal memory access (a kernel bug or a wrong argument; "
                           "the CUDA context is lost)"}
    if cause == "driver":
        api, _ = driver_gets(ctx)
        gets = f" (it supports CUDA {api // 1000}.{api % 1000 // 10})" if api else ""
        return {"cause": cause, "rule": "gpu.driver", "fixes": [fixes.DRIVER],
                "summary": f"{what} could not start CUDA: the NVIDIA driver is older than the CUDA torch is built "
                           f"for{gets} (see gpu.driver)"}
    why, found = hidden_cause(ctx, driver_gets(ctx)[0])
    return {"cause": cause, "rule": "gpu.devices", "fixes": found,
            "summary": f"{what} found no GPU, so the GPU was not tested: {why}"}


def cause_result(cause: dict, details: str, evidence: dict) -> Result:
    """A crash of known cause: out of memory is an `error` (nothing was tested; gpu.memory says who holds it), every
    other cause a `fail` with its fix."""
    if cause["cause"] == "oom":
        return errored(cause["summary"], details, evidence=evidence)
    return failed(cause["summary"], details, fixes=cause["fixes"], evidence=evidence)
