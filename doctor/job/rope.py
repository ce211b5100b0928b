"""Whether a job runs Megatron's fused MLA RoPE (`apply_rope_fusion`), and who decided it.

Megatron-Bridge's DeepSeek-V4 provider turns it on (0.6.2 deepseek_v4_bridge.py L428 `provider.apply_rope_fusion =
True`; verl builds its config through that provider), and Megatron-LM's own arguments default to it
(`--no-rope-fusion` is a store_false flag, arguments.py L3718-3723). So it is on unless the command turns it off: a
command that states it decides; one that leaves it to a word the doctor cannot expand is not known, and checked as on
(the stricter case: the fused kernel is then tested). Where the settings probe built the job's config
(job/stackbuild.py), its value is the stack's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .model import Job, is_interpolation

FIELD = "apply_rope_fusion"
BRIDGE_DEFAULT = ("Megatron-Bridge's DeepSeek-V4 provider sets apply_rope_fusion = True (deepseek_v4_bridge.py L428) "
                  "unless the command turns it off")
MEGATRON_DEFAULT = "Megatron-LM's arguments default to apply_rope_fusion=True (no --no-rope-fusion in the command)"


@dataclass(frozen=True)
class RopeFusion:
    on: bool | None  # True: the job runs the fused RoPE; False: it does not; None: not known (checked as on)
    why: str  # who decided, in words
    source: str  # "no job", "command", "default", "not known", "stack"

    @property
    def runs(self) -> bool:
        """Whether the fused RoPE is tested: on, or not known."""
        return self.on is not False


def rope_fusion(job: Job | None) -> RopeFusion:
    """The job's apply_rope_fusion as the command (or the stack's settings probe) decides it."""
    if job is None:
        return RopeFusion(True, "no job command: " + BRIDGE_DEFAULT, "no job")
    built = job.built if isinstance(job.built, dict) else {}
    if built.get("status") == "built":
        for role in ("actor", "engine", "model", "ref", "critic"):
            settings = ((built.get("roles") or {}).get(role) or {}).get("settings") or {}
            if isinstance(settings.get(FIELD), bool):
                return RopeFusion(settings[FIELD], f"{FIELD}={settings[FIELD]} as Megatron-Core built the job's "
                                                   f"config ({role})", "stack")
    if job.kind not in ("verl", "megatron"):
        return RopeFusion(None, "not known: the command is not read, so the fused RoPE is checked as on ("
                          + BRIDGE_DEFAULT + ")", "not known")
    roles = job.checked_roles() or ["actor"]
    stated = {role: job.effective(role).get(FIELD) for role in roles}
    for role, setting in stated.items():
        if setting is not None and (is_interpolation(setting.value) or not isinstance(setting.value, bool)):
            return RopeFusion(None, f"not known: the command writes {FIELD} as {setting.raw[:80]!r} ({role}), which "
                                    "the doctor cannot resolve; checked as on", "not known")
    if all(setting is not None and setting.value is False for setting in stated.values()):
        raw = next(iter(stated.values())).raw  # type: ignore[union-attr]
        return RopeFusion(False, f"the command turns it off ({FIELD}={raw[:80]})" if job.syntax != "megatron"
                          else f"the command turns it off ({raw[:80]})", "command")
    on = [(role, setting) for role, setting in stated.items() if setting is not None and setting.value is True]
    if on:
        return RopeFusion(True, f"the command turns it on ({FIELD}={on[0][1].raw[:80]}, {on[0][0]})", "command")
    default = MEGATRON_DEFAULT if job.syntax == "megatron" else BRIDGE_DEFAULT
    off = [role for role, setting in stated.items() if setting is not None]
    return RopeFusion(True, default + (f" (only {', '.join(off)} turns it off)" if off else ""), "default")


def rope_differs(readers: Job, built: Job) -> tuple[list[str], list[str]]:
    """Where the stack's settings probe built another apply_rope_fusion than the one smoke.dsv4-kernels' fused-RoPE
    sub-run was decided for (from the command, before the probe answered): (stated by the command, not known)."""
    before, after = rope_fusion(replace(readers, built=None)), rope_fusion(built)
    if after.source != "stack" or before.runs == after.runs:
        return [], []
    said = (f"apply_rope_fusion: the stack built {after.on}, the fused-RoPE sub-run of smoke.dsv4-kernels (where it "
            f"ran) was decided for {before.on} ({before.why})")
    return ([said], []) if before.source == "command" else ([], [said])
