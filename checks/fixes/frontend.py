"""Fixes for the cuDNN frontend and its CuTe-DSL stack (apache-tvm-ffi, nvidia-cutlass-dsl, torch-c-dlpack-ext):
one consistent set. Every fix here follows one decision, whether a plan keeps the installed frontend or installs the
tested set (`frontend_kept`), and pins only what that frontend accepts; an exact pin names the installed packages it
would break (`breaks`). The versions are the catalogue's (fixes)."""

from __future__ import annotations

import re

from packaging.version import Version

from dsv4_doctor.api import (Fix, Phase, StaticFacts, parse_requirement, requirement_text, requirements, safe_specifier,
                             safe_version, version)

from .._gates import first_frontend_accepting, first_frontend_for_installed_gate
from .catalogue import CUTLASS_VERSION, FE_VERSION, TORCH_C_DLPACK_EXT_VERSION, TVM_FFI_VERSION, withheld


def frontend_requirement(static: StaticFacts, name: str):
    """What the installed frontend declares for `name` (its `cutedsl` extra counted), or None."""
    fe = static.readable_dist("nvidia-cudnn-frontend")
    for req in requirements(fe, ("cutedsl",)):
        if req.name.lower() == name:
            return req
    return None


def _pin_within(req, tested: str) -> str | None:
    """`==tested` when the requirement accepts it (the tested pin), else the requirement's own specifier; None when
    that specifier is not a plain one (read from METADATA: hostile input with `===a&...`)."""
    if req is None or not str(req.specifier) or req.specifier.contains(tested, prereleases=True):
        return f"=={tested}"
    return safe_specifier(str(req.specifier))


def _meets(req, installed: str | None) -> bool:
    return installed is not None and (req is None or req.specifier.contains(installed, prereleases=True))


def frontend_minimum(cc: tuple[int, int] | None = None, static: StaticFacts | None = None) -> str:
    """The frontend a plan needs on this CC: the tested 1.27.0, or the first release whose CSA compressor accepts a
    CC that 1.27.0's `check_support` rejects (1.28.0 for CC 10.3; the frontend's cutedsl requirements of 1.28.0,
    cutlass-dsl >= 4.5.0 and apache-tvm-ffi >= 0.1.11, admit the rest of the tested set). With the CC not known, the
    first release that accepts every CC the installed Megatron's gate admits (an image runs on several GPU kinds)."""
    if cc is not None:
        first = first_frontend_accepting(cc)
    else:
        first = first_frontend_for_installed_gate(static) if static is not None else None
    return first if first and Version(first) > Version(FE_VERSION) else FE_VERSION


def frontend_kept(static: StaticFacts, cc: tuple[int, int] | None = None) -> bool:
    """Whether a plan keeps the installed frontend (>= the tested 1.27.0, or what this CC needs) or replaces it with
    the tested set. Every fix below follows this one decision, so that a plan never pins the CuTe DSL for a frontend
    it replaces (frontend 1.26.0 got the tested set and then 1.26.0's own cutlass==4.5.0)."""
    fe_v = version(static.version("nvidia-cudnn-frontend"))
    return fe_v is not None and fe_v >= Version(frontend_minimum(cc, static))


def breaks(static: StaticFacts, name: str, pin: str) -> list[str]:
    """The installed packages whose declared requirement on `name` an exact `pin` ("==X") breaks: a --no-deps
    install does not look, so the plan names them (vLLM pins its own apache-tvm-ffi)."""
    if not pin.startswith("=="):
        return []
    new = pin[2:]
    out = []
    for dependent, info in sorted(static.dependents().items()):
        declared = info.get("requires") if isinstance(info.get("requires"), list) else []
        for line in declared:
            req = parse_requirement(line) if isinstance(line, str) else None
            if req is None or req.name.lower().replace("_", "-") != name or (req.marker is not None and not _marker(
                    req, static)):
                continue
            if str(req.specifier) and not req.specifier.contains(new, prereleases=True):
                out.append(f"{dependent} {info.get('version')} requires {line}")
    return out


def _marker(req, static: StaticFacts) -> bool:
    try:
        return bool(req.marker.evaluate(dict(static.marker_env, extra="")))
    except Exception:
        return False


def _with_breaks(fix: Fix, static: StaticFacts, pins: dict[str, str]) -> Fix:
    broken = [b for name, pin in pins.items() for b in breaks(static, name, pin)]
    if not broken:
        return fix
    return Fix(fix.description, [c.argv for c in fix.commands], key=fix.key, phase=fix.phase, manual=fix.manual,
               notes=[*fix.notes, "This breaks what other installed packages declare: " + "; ".join(broken[:8])
                      + (f" (+{len(broken) - 8} more)" if len(broken) > 8 else "")])


def frontend_stack(static: StaticFacts, cc: tuple[int, int] | None = None) -> Fix:
    """Either keep the installed frontend (>= 1.27.0, or >= what this CC needs) and install only what it declares and
    lacks, or pin the tested set together (with the frontend this CC needs)."""
    fe = static.version("nvidia-cudnn-frontend")
    fe_pin = frontend_minimum(cc, static)
    if not frontend_kept(static, cc):
        pins = {"apache-tvm-ffi": f"=={TVM_FFI_VERSION}", "nvidia-cutlass-dsl": f"=={CUTLASS_VERSION}"}
        commands = [["pip", "install", "--no-deps", f"apache-tvm-ffi=={TVM_FFI_VERSION}"],
                    ["pip", "install", "--force-reinstall", "--no-deps", f"nvidia-cudnn-frontend=={fe_pin}"],
                    ["pip", "install", f"nvidia-cutlass-dsl[cu13]=={CUTLASS_VERSION}"]]
        dlpack = ""
        if static.version("torch-c-dlpack-ext") is None:  # 1.27.0's cutedsl extra declares it; nothing brings it
            pins["torch-c-dlpack-ext"] = f"=={TORCH_C_DLPACK_EXT_VERSION}"
            commands.append(["pip", "install", "--no-deps", f"torch-c-dlpack-ext=={TORCH_C_DLPACK_EXT_VERSION}"])
            dlpack = (f", and torch-c-dlpack-ext {TORCH_C_DLPACK_EXT_VERSION}, which the frontend's cutedsl extra "
                      "declares (--no-deps: it requires only torch, which stays the image's)")
        which = (f"cuDNN frontend {fe_pin} (the first whose CSA compressor accepts compute capability "
                 f"{cc[0]}.{cc[1]}; 1.27.0 raises there)" if fe_pin != FE_VERSION and cc else
                 f"cuDNN frontend {fe_pin} (the first whose CSA compressor accepts every compute capability the "
                 "installed Megatron's gate admits, B300/GB300 (10.3) included; 1.27.0 raises there)"
                 if fe_pin != FE_VERSION else
                 f"cuDNN frontend {FE_VERSION} (first with the fused CSA compressor cudnn.csa)")
        return _with_breaks(Fix(
            f"Install the tested set: {which}, "
            f"apache-tvm-ffi {TVM_FFI_VERSION} and nvidia-cutlass-dsl {CUTLASS_VERSION} (the Megatron DSv4 recipes' "
            f"pins; the CuTe DSL 4.5.2 brings cuda-python){dlpack}", commands, key="fe-stack"), static, pins)
    commands, pins, declared, withheld = [], {}, [], []
    fe_dist = static.readable_dist("nvidia-cudnn-frontend")
    for req in requirements(fe_dist, ("cutedsl",)):
        name = req.name.lower().replace("_", "-")
        if name == "torch":
            continue  # the image's (a manual step when wrong)
        declared.append(requirement_text(req))
        if _meets(req, static.version(name)):
            continue  # already what the frontend declares: not touched (otherwise: a cutlass 4.8.1 that met
            # >=4.5.0 was downgraded to the tested 4.5.2, breaking its own libs)
        tested = {"apache-tvm-ffi": TVM_FFI_VERSION, "nvidia-cutlass-dsl": CUTLASS_VERSION,
                  "torch-c-dlpack-ext": TORCH_C_DLPACK_EXT_VERSION}.get(name)
        pin = _pin_within(req, tested) if tested else safe_specifier(str(req.specifier)) if str(req.specifier) else ""
        if pin is None or not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,100}", name):
            withheld.append(name[:100])
            continue
        if name in ("apache-tvm-ffi", "torch-c-dlpack-ext"):  # --no-deps: the dlpack helper requires only torch
            pins[name] = pin
            commands.append(["pip", "install", "--no-deps", name + pin])
        elif name == "nvidia-cutlass-dsl":
            pins[name] = pin
            commands.append(["pip", "install", "nvidia-cutlass-dsl[cu13]" + pin])
        else:  # e.g. cuda-python: cutlass 4.5.2 brought it, 4.8 does not (frontend 1.32.0)
            commands.append(["pip", "install", name + pin])
    fe_safe = safe_version(fe)
    if fe_safe:
        commands.insert(0, ["pip", "install", "--force-reinstall", "--no-deps", f"nvidia-cudnn-frontend=={fe_safe}"])
    note = (f"; the requirement on {', '.join(withheld)} is not a plain version specifier, so its command is "
            "withheld" if withheld else "")
    return _with_breaks(Fix(
        f"Keep nvidia-cudnn-frontend {fe} and install what it declares and lacks (it declares "
        f"{', '.join(declared) or 'no CuTe DSL requirement'}), reinstalling the frontend itself without touching its "
        f"dependencies{note}", commands, key="fe-stack"), static, pins)


def cutlass(static: StaticFacts) -> Fix:
    """The CuTe DSL the plan's frontend accepts: the tested 4.5.2 with the tested set; with a kept frontend, the
    installed version when it meets the frontend's requirement (reinstalled with its libraries), else the tested
    one when the requirement accepts it, else the requirement."""
    pin: str | None
    if not frontend_kept(static):
        pin, why = f"=={CUTLASS_VERSION}", f"the tested set, with cuDNN frontend {FE_VERSION}; it brings cuda-python"
    else:
        req = frontend_requirement(static, "nvidia-cutlass-dsl")
        have = safe_version(static.version("nvidia-cutlass-dsl"))
        pin = f"=={have}" if have and _meets(req, have) else _pin_within(req, CUTLASS_VERSION)
        why = (f"nvidia-cudnn-frontend {static.version('nvidia-cudnn-frontend')} declares {requirement_text(req)}"
               if req is not None else "the Megatron DSv4 recipes' pin")
        if pin is None:
            return withheld(f"Install the CuTe DSL the frontend accepts ({why})", "the frontend's requirement is not "
                            "a plain version specifier", phase=Phase.PIN, key="cutlass:withheld")
    return _with_breaks(Fix(f"Install the CuTe DSL with its CUDA 13 libraries ({why})",
                            [["pip", "install", f"nvidia-cutlass-dsl[cu13]{pin}"]], key=f"cutlass:{pin}"),
                        static, {"nvidia-cutlass-dsl": pin})


def tvm_ffi(static: StaticFacts) -> Fix:
    req = frontend_requirement(static, "apache-tvm-ffi") if frontend_kept(static) else None
    pin = _pin_within(req, TVM_FFI_VERSION)
    if pin is None:
        return withheld("Install the apache-tvm-ffi the frontend accepts", "the frontend's requirement is not a plain "
                        "version specifier", phase=Phase.PIN, key="tvm-ffi:withheld")
    return _with_breaks(Fix(
        f"Install apache-tvm-ffi{pin} (the cuDNN frontend's CuTe-DSL kernels import it at their first call; the "
        "Megatron and verl lock files pin 0.1.9)", [["pip", "install", "--no-deps", f"apache-tvm-ffi{pin}"]],
        key=f"tvm-ffi:{pin}"), static, {"apache-tvm-ffi": pin})
