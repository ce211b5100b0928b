"""Which device code runs on which GPU: CUDA's rules for cubins and PTX, applied to the archs a build's fatbins hold
(read by the static probe from the `.nv_fatbin` section of its shared objects, without loading them)."""

from __future__ import annotations

import os
import re

from dsv4_doctor.api import Profile, Source

ARCH = re.compile(r"(sm|compute)_([0-9]{1,3})([0-9])([af]?)")
RULES_SOURCE = Source("CUDA C++ Programming Guide: binary compatibility (a cubin for sm_XY runs on CC X.Z with Z >= "
                      "Y; arch-specific sm_XYa only on X.Y; family-specific sm_XYf on the X family; PTX is JIT-"
                      "compiled for any later CC, except arch- and family-specific PTX)",
                      "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility")
NO_KERNEL_IMAGE = "no kernel image is available for execution on the device"


def parse(arch: str) -> tuple[str, tuple[int, int], str] | None:
    """'sm_90a' -> ('sm', (9, 0), 'a'); 'compute_100f' -> ('compute', (10, 0), 'f'); None for anything else."""
    m = ARCH.fullmatch(arch)
    return (m.group(1), (int(m.group(2)), int(m.group(3))), m.group(4)) if m else None


def runs_on(arch: str, cc: tuple[int, int]) -> bool:
    """Whether code for `arch` runs on a GPU of compute capability `cc`, by CUDA's rules: an arch-specific cubin or
    PTX (sm_90a, compute_100a) only on that exact CC; a plain or family-specific cubin (sm_90, sm_100f) on the same
    major with a minor at least its own; plain PTX (compute_90) JIT-compiled for any CC at least its own; family PTX
    (compute_100f) within its family."""
    parsed = parse(arch)
    if parsed is None:
        return False
    kind, (major, minor), suffix = parsed
    if suffix == "a":
        return cc == (major, minor)
    if kind == "sm" or suffix == "f":
        return cc[0] == major and cc[1] >= minor
    return cc >= (major, minor)


def _listing(items: list[dict], what: str) -> str:
    return ", ".join(f"{a['arch']}" + (f" x{a['count']}" if a.get("count", 0) > 1 else "") for a in items) + \
        f" {what}" if items else ""


def holds(obj: dict) -> str:
    """What one object holds, for a sentence: 'sm_90a x24 cubins, compute_90 PTX'."""
    parts = [p for p in (_listing(obj.get("cubins") or [], "cubins"), _listing(obj.get("ptx") or [], "PTX")) if p]
    return "; ".join(parts) or "no cubin and no PTX"


def target(profile: Profile) -> str:
    """Where the compared CC comes from, for a sentence."""
    if profile.gpu_arch_source == "option":
        return f"CC {profile.gpu_arch}, from --gpu-arch"
    return f"CC {profile.gpu_arch}, this host's GPU"


def judge(code: dict, profile: Profile) -> dict:
    """The verdict on a module's device code for the profile's CC: {"state": ..., "objects": [...], "text": ...}.

    state: "runs" (every object with device code holds some that runs), "none-runs" (an object holds device code,
    read whole, none of which runs: its kernels cannot launch), "not-known" (no target CC, nothing read, or an
    object read only in part), "no-device-code" (no object has a fatbin section), "not-found".
    """
    cc = profile.cc
    objects = code.get("objects") or []
    evidence = [{k: o.get(k) for k in ("path", "has_fatbin", "cubins", "ptx", "fatbins", "entries", "compressed",
                                       "capped", "error") if o.get(k) not in (None, [], 0)} for o in objects]
    out: dict = {"objects": evidence, "target_cc": profile.gpu_arch, "rules": "sm_XYa: only CC X.Y; sm_XY, sm_XYf: CC "
                 "X.Z with Z >= Y; compute_XY PTX: any CC >= X.Y (JIT); compute_XYa PTX: only CC X.Y"}
    if not code.get("found"):
        return dict(out, state="not-found", text="the module was not found")
    with_code = [o for o in objects if o.get("has_fatbin")]
    unreadable = [o for o in objects if o.get("error") and not o.get("has_fatbin")]
    if not with_code:
        why = "; ".join(f"{os.path.basename(o['path'])}: {o['error']}" for o in unreadable)
        return dict(out, state="not-known" if unreadable else "no-device-code",
                    text=f"no device code could be read ({why})" if unreadable else
                    "no fatbin in its shared objects" + ("" if objects else " (none found)"))
    if cc is None:
        return dict(out, state="not-known", text="holds " + "; ".join(
            f"{os.path.basename(o['path'])}: {holds(o)}" for o in with_code) + " (no GPU arch to compare with)")
    dead = []
    for o in with_code:
        archs = [a["arch"] for a in (o.get("cubins") or []) + (o.get("ptx") or [])]
        o_runnable = [a for a in archs if runs_on(a, cc)]
        if not o_runnable:
            dead.append(o)
    partial = [o for o in dead if o.get("error") or o.get("capped") or o.get("cubins_left_out")]
    listing = "; ".join(f"{os.path.basename(o['path'])}: {holds(o)}" for o in with_code)
    if dead and len(partial) == len(dead):
        return dict(out, state="not-known", text=f"{listing}: nothing read runs on {target(profile)}, but the "
                    "fatbin could not be read whole (" + "; ".join(str(o.get("error") or o.get("capped"))
                                                             for o in partial) + ")")
    if dead:
        o = next(d for d in dead if d not in partial)
        return dict(out, state="none-runs", object=o["path"], text=f"{os.path.basename(o['path'])} holds "
                    f"{holds(o)} only: none of it runs on {target(profile)}")
    return dict(out, state="runs", text=listing)
