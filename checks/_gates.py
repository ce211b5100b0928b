"""Compute-capability gates as the installed code writes them: Megatron's fused-compressor dispatch and the cuDNN
frontend's CSA compressor `check_support`, read with ast by the static probe (`capability` of a source summary)."""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_doctor.api import StaticFacts

from ._upstream import EAV

# The frontend releases whose CSA compressor first accepts a CC, read from the published wheels'
# cudnn/csa/compressor/compressor_sm100.py: 1.27.0 `SUPPORTED_COMPUTE_CAPABILITY = (10, 0)` (api.py `!=`), 1.28.0
# `MINIMUM_COMPUTE_CAPABILITY_MAJOR = 10` (api.py `capability[0] < ...`); 1.29.0-1.32.0 keep 1.28.0's gate.
FE_EXACT_10_0 = "1.27.0"
FE_MAJOR_10 = "1.28.0"
# The installed Megatron's fused-compressor module: csa_utils/fused_compressor.py from 1c44a570, csa_fused_compressor.py
# from 108cb6bc before it.
_EAV_MOD = EAV.replace("/", ".").rstrip(".")
FUSED_COMPRESSOR = (f"{_EAV_MOD}.csa_utils.fused_compressor", f"{_EAV_MOD}.csa_fused_compressor")
# The frontend's CSA compressor files that hold its check_support gate.
FE_COMPRESSOR = ("cudnn.csa.compressor.api", "cudnn.csa.compressor.compressor_sm100")


@dataclass(frozen=True)
class Gate:
    """Which compute capabilities a piece of code accepts: exactly `value` (a tuple), or a major >= `value`."""

    kind: str  # "exact": value is (major, minor); "major": value is (lowest major,)
    value: tuple[int, ...]
    where: str  # path:line of the comparison

    def accepts(self, cc: tuple[int, int]) -> bool:
        if self.kind == "exact":
            return tuple(cc) == self.value
        return cc[0] >= self.value[0]

    def describe(self) -> str:
        if self.kind == "exact":
            return "compute capability == " + ".".join(map(str, self.value))
        return f"compute capability major >= {self.value[0]}"

    def gpus(self) -> str:
        """The DSv4 GPUs this gate admits, in words."""
        if self.kind == "exact":
            names: dict[tuple[int, ...], str] = {(10, 0): "B200/GB200 (10.0)", (10, 3): "B300/GB300 (10.3)",
                                                 (9, 0): "H100/H200 (9.0)"}
            return names.get(self.value, self.describe())
        if self.value[0] == 10:
            return "B200/GB200 (10.0) and B300/GB300 (10.3)"
        return self.describe()


# A comparison accepts on ==, >=, >; a raise-if test (the frontend's `_runtime_error_if(cap != X)`) rejects on
# !=, <, <=. Both reduce to one accepted set.
_ACCEPT = {"==": ("exact", 0), "!=": ("exact", 0), ">=": ("major", 0), "<": ("major", 0), ">": ("major", 1),
           "<=": ("major", 1)}


def read_gate(static: StaticFacts, *modules: str) -> Gate | None:
    """The gate the first comparison in `modules` writes, its constant looked up in any of them; None when no
    module holds a comparison the doctor can read (then the gate is not known)."""
    constants: dict = {}
    for module in modules:
        constants.update((static.source(module).get("capability") or {}).get("constants") or {})
    for module in modules:
        src = static.source(module)
        for cmp in (src.get("capability") or {}).get("compares") or []:
            const = constants.get(cmp.get("constant") or "") or {}
            value, op, subject = const.get("value"), cmp.get("op"), cmp.get("subject") or ""
            if value is None or op not in _ACCEPT:
                continue
            kind, shift = _ACCEPT[op]
            major_subject = subject.endswith("[0]")
            where = f"{src.get('path')}:{cmp.get('lineno')}"
            if kind == "exact" and isinstance(value, tuple) and len(value) == 2 and not major_subject:
                return Gate("exact", value, where)
            if kind == "major" and isinstance(value, int) and major_subject:
                return Gate("major", (value + shift,), where)
    return None


def gate_message(static: StaticFacts, module: str, cc: tuple[int, int], constant_values: dict) -> str | None:
    """The error text the frontend's check_support builds for this CC (its f-string, filled in), or None."""
    src = static.source(module)
    fill = {"capability[0]": str(cc[0]), "capability[1]": str(cc[1]), "target": "cuda:0",
            **{k: str(v) for k, v in constant_values.items()}}
    for message in (src.get("capability") or {}).get("messages") or []:
        parts = message.get("parts") or []
        if not any("expr" in p and p["expr"] in constant_values for p in parts):
            continue
        return "".join(p["text"] if "text" in p else fill.get(p["expr"], "{" + p["expr"] + "}") for p in parts)
    return None


def constant_values(static: StaticFacts, *modules: str) -> dict:
    out = {}
    for module in modules:
        for name, const in ((static.source(module).get("capability") or {}).get("constants") or {}).items():
            if const.get("value") is not None:
                out[name] = const["value"]
    return out


def first_frontend_accepting(cc: tuple[int, int]) -> str | None:
    """The first nvidia-cudnn-frontend release whose CSA compressor accepts `cc` (None: none does)."""
    if tuple(cc) == (10, 0):
        return FE_EXACT_10_0
    if cc[0] >= 10:
        return FE_MAJOR_10
    return None


# Every fused-compressor gate Megatron has shipped (d48bd6be: == (10, 0); 88a285f0: major >= 10) admits only CC >= 10.
ANY_KNOWN_GATE = Gate("major", (10,), "every known Megatron gate (d48bd6be, 88a285f0)")
# The DSv4 GPUs a fused compressor gate can admit: B200/GB200 and B300/GB300.
BLACKWELL_CCS = ((10, 0), (10, 3))


def megatron_compressor(static: StaticFacts) -> tuple[str | None, Gate | None]:
    """(the installed Megatron's fused-compressor module, its CC gate); (None, None) without one."""
    for module in FUSED_COMPRESSOR:
        if static.source(module).get("found") or static.module(module).get("found"):
            return module, read_gate(static, module)
    return None, None


def first_frontend_for_installed_gate(static: StaticFacts) -> str | None:
    """With the GPU not known: the first frontend that accepts every CC the installed Megatron's gate admits (an
    image built once runs on several GPU kinds); None when no gate was read."""
    _, gate = megatron_compressor(static)
    if gate is None:
        return None
    firsts = [first_frontend_accepting(cc) for cc in BLACKWELL_CCS if gate.accepts(cc)]
    return max((f for f in firsts if f), key=lambda v: tuple(map(int, v.split("."))), default=None)
