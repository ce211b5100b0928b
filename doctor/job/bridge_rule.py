"""The DSA kernel backend of a verl job that states none, as Megatron will see it.

verl never sets `apply_dsa_kernel_fusion` or `dsa_kernel_backend`; Megatron-Bridge's DeepSeek-V4 provider does
(`provider_bridge` in `megatron/bridge/models/deepseek/deepseek_v4_bridge.py`), and Megatron d48bd6be maps
`apply_dsa_kernel_fusion=True` to `dsa_kernel_backend='cudnn'`. Two published rules:

- 0.5.0/0.5.1: `provider.apply_dsa_kernel_fusion = use_blackwell_fused_kernels`: on for any CC major >= 10,
  whether or not the kernels are installed;
- c7774d44, 0.6.0-0.6.2: `use_blackwell_fused_kernels and deepseek_v4_supports_fused_dsa_kernels()`: also needs
  `from cudnn import DSA` and `from flash_mla import flash_mla_sparse_fwd` to import (an ImportError means off).

The installed bridge's rule is read from the static probe's `ast` summary of that file (never imported) and
reduced to terms: a CC threshold, imports that must succeed, constants. Anything else is not readable, and the
backend is then not known: the environment is checked for cudnn, the stricter of the two.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ..hostio.redact import shorten

BRIDGE_MODULE = "megatron.bridge.models.deepseek.deepseek_v4_bridge"
FIELD = "apply_dsa_kernel_fusion"
FUSED_DSA_IMPORTS = ("cudnn:DSA", "flash_mla:flash_mla_sparse_fwd")  # deepseek_v4_supports_fused_dsa_kernels (0.6.x)
_THRESHOLD = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*(?:\[0\])?\s*>=\s*(\d+)\s*$")
_MAX_EXPRESSION = 2000


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def read_rule(source: Any) -> dict:
    """The bridge's rule from its source summary: {"readable": True, "terms": [...], "line", "expression"} or
    {"readable": False, "why"}. A term is {"kind": "cc", "major_min": N, "function"}, {"kind": "imports",
    "imports": [...], "function"} or {"kind": "const", "value": bool}."""
    if not isinstance(source, dict) or source.get("found") is not True:
        return {"readable": False, "why": "the DeepSeek-V4 bridge's source was not found"}
    if source.get("error") is not None or source.get("truncated") or source.get("capped"):
        error = source.get("error")
        why = error if isinstance(error, str) and error else "its summary is incomplete (no reason given)"
        return {"readable": False, "why": f"its source could not be read whole ({shorten(why, 200)})"}
    found = source.get("assignments")
    if not isinstance(found, list) or not isinstance(source.get("functions"), dict):
        return {"readable": False, "why": "its summary lacks the assignments or functions the rule is read from"}
    assignments = [a for a in (found if isinstance(found, list) else [])
                   if isinstance(a, dict) and a.get("attribute") == FIELD]
    if not assignments:
        return {"readable": False, "why": f"no assignment to {FIELD} was found in it"}
    values = {str(a.get("value")) for a in assignments}
    if len(values) != 1:
        return {"readable": False, "why": f"it assigns {FIELD} in {len(values)} different ways"}
    hit = assignments[0]
    if hit.get("capped"):  # a local past the cap, or a value cut: not what the function says
        return {"readable": False, "why": f"the function's assignments were capped ({hit['capped']})"}
    local: Any = hit.get("locals")
    functions: Any = source.get("functions")
    local, functions = (local if isinstance(local, dict) else {}), (functions if isinstance(functions, dict) else {})
    line = hit.get("lineno") if isinstance(hit.get("lineno"), int) else None
    try:
        terms, expression = _terms(str(hit.get("value")), local, functions, 0)
    except (ValueError, RecursionError, MemoryError) as exc:
        return {"readable": False, "why": f"L{line}: {exc}", "line": line}
    return {"readable": True, "terms": terms, "line": line, "expression": expression[:_MAX_EXPRESSION]}


def _terms(text: str, local: dict, functions: dict, depth: int) -> tuple[list[dict], str]:
    if depth > 6 or len(text) > _MAX_EXPRESSION:
        raise ValueError(f"`{shorten(text, 80)}` is too deep or too long to follow")
    from ..hostio.safeio import ReadRefused, parse_python

    try:
        node = parse_python(text.strip(), mode="eval").body  # type: ignore[attr-defined]
    except ReadRefused:
        raise ValueError(f"`{shorten(text, 80)}` is no expression") from None
    return _node_terms(node, local, functions, depth)


def _node_terms(node: ast.AST, local: dict, functions: dict, depth: int) -> tuple[list[dict], str]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        terms, parts = [], []
        for value in node.values:
            t, shown = _node_terms(value, local, functions, depth)
            terms += t
            parts.append(shown)
        return terms, " and ".join(parts)
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return [{"kind": "const", "value": node.value}], str(node.value)
    if isinstance(node, ast.Name):
        if isinstance(local.get(node.id), str):
            return _terms(local[node.id], local, functions, depth + 1)
        raise ValueError(f"`{node.id}` is not assigned in the same function")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args and not node.keywords:
        name = node.func.id
        facts = functions.get(name)
        if not isinstance(facts, dict):
            raise ValueError(f"`{name}()` is not a function of the module")
        if facts.get("capped"):  # a call or import past the cap is not known to be absent
            raise ValueError(f"`{name}()`'s summary was capped ({facts['capped']}): not read whole")
        calls, compares = _texts(facts.get("calls")), _texts(facts.get("compares"))
        imports, catches = _texts(facts.get("imports")), _texts(facts.get("catches"))
        line = facts.get("lineno") if isinstance(facts.get("lineno"), int) else None
        if any(c.endswith("get_device_capability") for c in calls) and not imports:
            thresholds = [int(m.group(1)) for m in map(_THRESHOLD.match, compares) if m]
            if len(thresholds) == 1 and len(compares) == 1:
                return ([{"kind": "cc", "major_min": thresholds[0], "function": name, "line": line}],
                        f"CC major >= {thresholds[0]} ({name}, L{line})")
            raise ValueError(f"`{name}()` compares the compute capability in a way not read ({compares[:3]})")
        if imports and not calls and catches and all(c in ("ImportError", "ModuleNotFoundError") for c in catches):
            shown = ", ".join(f"`from {i.split(':')[0]} import {i.split(':')[1]}`" if ":" in i else f"`import {i}`"
                              for i in imports)
            return ([{"kind": "imports", "imports": imports, "function": name, "line": line}],
                    f"{shown} succeed ({name}, L{line})")
        raise ValueError(f"`{name}()` is neither a compute-capability test nor an import test")
    raise ValueError(f"`{shorten(ast.unparse(node), 80)}` is not a form the doctor reads")


def import_targets(rule: dict) -> list[str]:
    """The import probe's targets (`module:name`) the rule needs, in its order."""
    out: list[str] = []
    for term in rule.get("terms") or []:
        if term.get("kind") == "imports":
            out += [t for t in term["imports"] if t not in out]
    return out


# An import that fails because this machine lacks a library the GPU node has (the driver's libcuda, which a
# container runtime mounts only on a GPU host), not because the package is absent or broken.
_HOST_LIBRARY = re.compile(r"cannot open shared object file|libcuda\.so|libnvidia-", re.I)


def decide(rule: dict, cc: tuple[int, int] | None, imports: dict[str, dict] | None,
           where: str, gpu_visible: bool = True) -> tuple[str, bool, str]:
    """(backend, known, how it was decided). `imports`: the import probe's outcome per target, None when it did
    not run; `gpu_visible`: whether this machine has a GPU (without one, the CC comes from --gpu-arch and an
    import that fails to load a shared library may succeed on the GPU node). Anything not known leaves "cudnn",
    the stricter backend for the environment checks."""
    strict = "; the environment is checked for cudnn, the stricter"
    if not rule.get("readable"):
        return "cudnn", False, f"not known: the Megatron-Bridge rule could not be read ({rule.get('why')}){strict}"
    rule_text = f"{where} L{rule.get('line')}: {FIELD} = {rule.get('expression')}"
    pending: list[str] = []
    for term in rule["terms"]:
        kind = term["kind"]
        if kind == "const" and term["value"] is False:
            return "none", True, f"{rule_text}: off"
        if kind == "cc":
            if cc is None:
                return "cudnn", False, (f"not known: {rule_text}, and the GPU's compute capability is not known "
                                        f"(no GPU visible; give --gpu-arch){strict}")
            if cc[0] < term["major_min"]:
                return "none", True, f"{rule_text}: CC {cc[0]}.{cc[1]} is below {term['major_min']}.0, so off"
        if kind == "imports":
            pending += term["imports"]
    if pending:
        if imports is None:
            return "cudnn", False, (f"not known: {rule_text}, and its imports were not tried (--static-only){strict}")
        failed = []
        for target in pending:
            outcome: Any = imports.get(target)
            outcome = outcome if isinstance(outcome, dict) else {}
            if outcome.get("ok") is True:
                continue
            error: Any = outcome.get("error")
            error = error if isinstance(error, dict) else {}
            kind = str(error.get("type") or "no answer")
            if kind not in ("ImportError", "ModuleNotFoundError", "AttributeError"):  # a missing name: ImportError
                # The bridge catches ImportError only: anything else stops the job while the model is built.
                return "cudnn", False, (f"not known: {rule_text}, and {target} raised {kind}, which the bridge "
                                        f"does not catch{strict}")
            message = str(error.get("message") or "")
            if not gpu_visible and kind != "ModuleNotFoundError" and _HOST_LIBRARY.search(message):
                return "cudnn", False, (f"not known: {rule_text}, and {target} failed to load a shared library "
                                        f"({shorten(message, 160)}) on this machine, which has no GPU: on the GPU "
                                        f"node it may load{strict}")
            failed.append(f"{target} ({kind})")
        if failed:
            return "none", True, f"{rule_text}: {', '.join(failed)} failed to import, so off"
    on = f"CC {cc[0]}.{cc[1]}" if cc else "always"
    return "cudnn", True, f"{rule_text}: on ({on}{', the imports succeed' if pending else ''}) -> cudnn"


# --- Megatron's fold of the switch into the backend -------------------------------------------------------------------

SWITCH_BACKEND = {True: "cudnn", False: "none"}  # apply_dsa_kernel_fusion -> the dsa_kernel_backend it maps to
MEGATRON_DEFAULT_BACKEND = "none"  # TransformerConfig.dsa_kernel_backend (d48bd6be transformer_config.py L348)


def conflict_text(switch: bool, backend: str) -> str:
    """Megatron's ValueError for a switch and a backend that disagree (d48bd6be transformer_config.py L1632-1638)."""
    return (f"Conflicting DSA kernel controls: apply_dsa_kernel_fusion={switch} maps to "
            f"dsa_kernel_backend={SWITCH_BACKEND[switch]!r}, but dsa_kernel_backend={backend!r} was also selected. "
            "Remove apply_dsa_kernel_fusion and use dsa_kernel_backend only.")


def fold(switch: bool | None, backend: str | None) -> tuple[str | None, str | None]:
    """(the backend Megatron runs, its ValueError's text or None), as `TransformerConfig.__post_init__` folds the
    deprecated switch for dsv4_hybrid (d48bd6be L1618-1646): a switch of None keeps the backend; True or False maps to
    cudnn or none, raises where the backend is neither "none" nor that, and otherwise overwrites it. `backend` None:
    not stated, Megatron's default "none"."""
    stated = MEGATRON_DEFAULT_BACKEND if backend is None else backend
    if switch is None:
        return stated, None
    mapped = SWITCH_BACKEND[switch]
    if stated not in (MEGATRON_DEFAULT_BACKEND, mapped):
        return None, conflict_text(switch, stated)
    return mapped, None
