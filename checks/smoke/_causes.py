"""What a smoke failure points at: the check that reports its cause (from the upstream text or the missing module it
shows), and that check's fixes. Tier 2 and the kernel smoke defer to that check where it already failed."""

from __future__ import annotations

from dsv4_doctor.model import Context, Fix

from .. import fixes, frontend_fixes
from ..mcore_checks import mcore_fix

# Upstream texts and missing modules a tier-2 failure can show: the rule that reports the cause, and its fix.
TIER2_TEXTS: tuple[tuple[str, str], ...] = (
    ("requires cp_partition_mode='contiguous'", "mcore.cp-partition-mode"),
    ("unexpected keyword argument 'cp_partition_mode'", "mcore.cp-partition-mode"),
    ("DSv4 THD CP requires a contiguous CP partition", "mcore.cp-partition-mode"),
    ("Invalid experimental attention variant", "mcore.dsv4"),
    ("SFT sequence packing requires Transformer Engine", "te.version"),
    ("requires CUDA tensors and CuTeDSL", "cutlass-dsl.import"),
    ("CSA CP CuTe kernels", "gpu.arch"),
    ("FlashMLA is required", "kernels.flash-mla"),
    ("flash_mla (https:", "kernels.flash-mla"),  # an item of Megatron's dependency check (utils.py)
    ("indexer_topk", "kernels.flash-mla"),
    ("fast_hadamard_transform is not installed", "kernels.fast-hadamard"),
    ("q_causal_offsets", "cudnn-fe.dsa"),
    ("cudnn-frontend DSA namespace not available", "cudnn-fe.dsa"),
    ("requires fused DSA kernels", "cudnn-fe.dsa"),
)
TIER2_MODULES = {
    "transformer_engine": "te.import", "cudnn": "cudnn-fe.version", "cutlass": "cutlass-dsl.import",
    "cuda": "cutlass-dsl.import", "flash_mla": "kernels.flash-mla", "fast_hadamard_transform": "kernels.fast-hadamard",
    "megatron": "mcore.dsv4", "tvm_ffi": "tvm-ffi.version", "torch": "torch.install",
}
RULE_FIXES = {
    "mcore.cp-partition-mode": lambda s: [fixes.mcore()], "mcore.dsv4": lambda s: [fixes.mcore()],
    "te.version": lambda s: [fixes.TE], "te.import": lambda s: [fixes.TE],
    "cutlass-dsl.import": lambda s: [frontend_fixes.cutlass(s)], "gpu.arch": lambda s: [fixes.SUPPORTED_GPU],
    "kernels.flash-mla": lambda s: [fixes.FLASH_MLA], "kernels.fast-hadamard": lambda s: [fixes.fast_hadamard(s)],
    "cudnn-fe.dsa": lambda s: [frontend_fixes.frontend_stack(s)],
    "cudnn-fe.version": lambda s: [frontend_fixes.frontend_stack(s)],
    "tvm-ffi.version": lambda s: [frontend_fixes.tvm_ffi(s)], "torch.install": lambda s: [fixes.torch(s)],
}


def tier2_rules(error: dict) -> list[str]:
    """Every rule that reports what a tier-2 error shows, most specific first (Megatron's dependency check can name
    several missing packages in one message)."""
    text = f"{error.get('type')}: {error.get('message')}"
    missing = (error.get("missing_module") or "").split(".")[0]
    rules = [TIER2_MODULES[missing]] if missing in TIER2_MODULES else []
    rules += [rule for needle, rule in TIER2_TEXTS if needle in text and rule not in rules]
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
