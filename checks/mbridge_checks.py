"""Megatron-Bridge: verl's Megatron backend builds DSv4 through it, and it must have the DeepSeek-V4 bridge."""

from __future__ import annotations

from dsv4_doctor.api import Context, Result, Source, StaticRequest, check, failed, passed, skipped

from .fixes import catalogue as fixes
from ._anchors import missing_module

BRIDGES = ("megatron.bridge.models.deepseek.deepseek_v4_bridge",  # main from 66fe25897 (#3562), and c7774d44
           "megatron.bridge.models.deepseek_v4.deepseek_v4_bridge")  # a draft branch's layout
FLEX = 'moe_token_dispatcher_type = "flex"'
STATIC = StaticRequest(distributions=("megatron-bridge", "verl"), modules=("verl", "megatron.bridge", *BRIDGES),
                       sources=BRIDGES, contains=(FLEX,), assignments_of=("apply_dsa_kernel_fusion",))
NOT_FOUND = ("Megatron-Bridge package not found. Please install Megatron-Bridge with `pip install megatron-bridge`"
             " (verl prints this, then re-raises ModuleNotFoundError: No module named 'megatron.bridge')")


@check(
    "mbridge.dsv4",
    "Megatron-Bridge with the DeepSeek-V4 bridge (verl's Megatron backend)",
    texts=missing_module("I-bridge", "megatron.bridge"),
    applies_when="verl installed",
    detects="megatron.bridge location and its deepseek_v4_bridge.py (files, ast); megatron-bridge metadata",
    sources=(
        Source("verl 0.9.0 verl/models/mcore/bridge.py L16-20 (imports megatron.bridge, re-raises)",
               "https://github.com/verl-project/verl/blob/v0.9.0/verl/models/mcore/bridge.py"),
        Source("verl examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh (Megatron-Bridge c7774d44)",
               "https://github.com/verl-project/verl/blob/main/examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh"),
        Source("Megatron-Bridge #3562 (DeepSeek V4 Bridge, 66fe25897)",
               "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/3562"),
        Source("megatron-bridge 0.6.2 wheel (megatron/bridge/models/deepseek/deepseek_v4_bridge.py; 0.5.0+ ship it; "
               "Requires-Dist megatron-core[dev,mlm], hence --no-deps)", "https://pypi.org/project/megatron-bridge/0.6.2/"),
        Source("Megatron-Bridge #5543 (DSv4 defaults to flex/HybridEP, 24849e23c)",
               "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/5543"),
    ),
    fixes=(fixes.MBRIDGE,),
    static=STATIC,
)
def mbridge_dsv4(ctx: Context) -> Result:
    """verl's Megatron engine builds models through Megatron-Bridge: verl/models/mcore/bridge.py imports
    `megatron.bridge` and re-raises the ImportError without it, and verl's DSv4 example says Megatron-Bridge
    "must be installed and importable on every node". DeepSeek-V4 also needs the bridge's
    models/deepseek/deepseek_v4_bridge.py (on main from 66fe25897; a draft branch had models/deepseek_v4/),
    which no PyPI release has. The evidence also says whether that Bridge's DSv4 provider defaults the MoE
    dispatcher to `flex` with HybridEP (main since 24849e23c) or to `alltoall` (c7774d44, the commit verl's
    example names): verl's engine sets alltoall unless the user's overrides say otherwise, and flex needs
    DeepEP's HybridEP.
    """
    static = ctx.static
    if not static.module("verl").get("found"):
        return skipped("verl is not installed: Megatron-Bridge is what verl's Megatron backend imports")
    package = static.module("megatron.bridge")
    evidence: dict = {"version": static.version("megatron-bridge"), "module": package.get("origin") or
                      package.get("locations"), "verl": static.version("verl"),
                      "imported_copy": static.copy("megatron.bridge")["why"]}  # which copy the job imports, and why
    if not package.get("found"):
        return failed("Megatron-Bridge is not installed: verl's Megatron engine imports megatron.bridge when it builds "
                      f"the model. {NOT_FOUND}", fixes=[fixes.MBRIDGE], evidence=evidence)
    bridge = next((m for m in BRIDGES if static.module(m).get("found")), None)
    evidence["dsv4_bridge"] = static.module(bridge).get("origin") if bridge else None
    unknown = static.copy("megatron.bridge")["owner_not_known"]
    if unknown:  # several distributions install `megatron` and their RECORDs do not say which installed the bridge
        evidence["owner_not_known"] = unknown
    version = evidence["version"] or ("(version not known)" if unknown else "(no metadata)")
    if bridge is None:
        return failed(f"Megatron-Bridge {version} has no DeepSeek-V4 bridge (models/deepseek/deepseek_v4_bridge.py): "
                      "AutoBridge cannot map a DeepseekV4ForCausalLM checkpoint, so verl cannot build the model",
                      "It came to main in 66fe25897 (#3562); verl's DSv4 example names c7774d44, an ancestor of "
                      "v0.6.0. On PyPI, megatron-bridge 0.5.0 and later ship it (0.6.2 is the newest; they require "
                      "Python >= 3.12, so `pip index versions` on 3.11 shows only 0.3.x).", fixes=[fixes.MBRIDGE],
                      evidence=evidence)
    bridge_source = static.source(bridge)
    flex = bool((bridge_source.get("contains") or {}).get(FLEX))
    if not flex and bridge_source.get("error"):  # not found in a file not (wholly) read: not known
        evidence["default_dispatcher"] = f"not known: {bridge_source['error']}"
        return passed(f"Megatron-Bridge {version} has the DeepSeek-V4 bridge; its default MoE dispatcher is not "
                      "known (its source could not be read whole)", evidence=evidence)
    evidence["default_dispatcher"] = "flex (HybridEP)" if flex else "alltoall"
    note = ("; its DSv4 provider defaults the MoE dispatcher to flex with HybridEP (verl sets alltoall unless an "
            "override says otherwise; flex needs DeepEP's HybridEP)") if flex else "; default MoE dispatcher alltoall"
    return passed(f"Megatron-Bridge {version} has the DeepSeek-V4 bridge{note}", evidence=evidence)

CHECKS = [mbridge_dsv4]
