"""The one upstream-text registry: the texts only the smoke and TE's undefined-symbol reader knew are in it, with the
right labels; the smoke reads it; `explain` lists them; and no check quotes an upstream text the registry lacks."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("line, check", [
    ("ModuleNotFoundError: No module named 'megatron.bridge'", "mbridge.dsv4"),
    ("ModuleNotFoundError: No module named 'megatron.bridge.models.deepseek'", "mbridge.dsv4"),
    ("ModuleNotFoundError: No module named 'megatron'", "mcore.dsv4"),
    ("ModuleNotFoundError: No module named 'megatron.core.transformer.experimental_attention_variant'",
     "mcore.dsv4"),
    ("ModuleNotFoundError: No module named 'cudnn.csa'", "cudnn-fe.csa"),
    ("ModuleNotFoundError: No module named 'cudnn.deepseek_sparse_attention.utils'", "cudnn-fe.dsa"),
    ("ImportError: cannot import name 'DSA' from 'cudnn' (/x/cudnn/__init__.py)", "cudnn-fe.dsa"),
    ("ModuleNotFoundError: No module named 'cudnn'", "cudnn-fe.version"),
    ("ModuleNotFoundError: No module named 'transformer_engine_torch'", "te.import"),
    ("ModuleNotFoundError: No module named 'flash_mla'", "kernels.flash-mla"),
    ("ModuleNotFoundError: No module named 'fast_hadamard_transform'", "kernels.fast-hadamard"),
    ("ModuleNotFoundError: No module named 'tvm_ffi'", "tvm-ffi.version"),
    ("ModuleNotFoundError: No module named 'torch'", "torch.install"),
    ("ModuleNotFoundError: No module named 'cuda'", "cutlass-dsl.import"),
    ("ImportError: /usr/lib/python3/site-packages/transformer_engine/libtransformer_engine.so: undefined symbol: "
     "cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13", "te.import"),
    ("ImportError: /x/flash_mla/flash_mla_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
     "_ZN3c104cuda9SetDeviceEi", "kernels.flash-mla"),
    ("TypeError: flash_mla_sparse_fwd() got an unexpected keyword argument 'indexer_topk'", "kernels.flash-mla"),
    ("ValueError: dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: "
     "flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev). Install them or set dsa_kernel_backend=none "
     "to use the PyTorch fallback.", "kernels.flash-mla"),
])
def test_the_most_specific_anchor_names_the_check(line, check):
    from dsv4_doctor.triage.match import causes_in

    found = causes_in(line)
    assert found and found[0].check_id == check, [(m.check_id, m.text_id) for m in found]
    assert all(m.check_id != "mcore.dsv4" for m in found) or check == "mcore.dsv4"


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",  # three rules declare it
    "ImportError: /x/some_ext.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",  # whose extension? not said
    "ModuleNotFoundError: No module named 'torchvision'",
    "KeyError: 'indexer_topk'",
])
def test_a_line_that_names_no_one_rule_gives_no_cause(line):
    from dsv4_doctor.triage.match import causes_in

    assert causes_in(line) == []


def test_the_smoke_reads_the_registry_for_texts_and_missing_modules():
    from dsv4_doctor.checks.smoke._causes import module_rule, tier2_rules

    assert module_rule("megatron.bridge") == "mbridge.dsv4"
    assert module_rule("megatron.core") == "mcore.dsv4"
    assert module_rule("cudnn.csa.compressor") == "cudnn-fe.csa"
    assert module_rule("transformer_engine.pytorch") == "te.import"
    assert module_rule("numpy") is None
    # a job-config text in the smoke's own layer is the installed Megatron's, not the job's (the smoke set it)
    said = {"type": "ValueError", "message": "DSv4 Hybrid with context parallelism requires "
            "cp_partition_mode='contiguous'."}
    assert tier2_rules(said) == ["mcore.cp-partition-mode"]
    kernel = {"type": "RuntimeError", "message": "CUDA error: no kernel image is available for execution on the device"}
    assert set(tier2_rules(kernel)) == {"kernels.flash-mla", "kernels.fast-hadamard", "te.import"}
    source = (ROOT / "checks" / "smoke" / "_causes.py").read_text()
    assert "TIER2_TEXTS" not in source and "TIER2_MODULES" not in source


def test_explain_lists_the_new_texts():
    done = subprocess.run([sys.executable, "-m", "dsv4_doctor", "explain", "mbridge.dsv4"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "No module named 'megatron.bridge'" in done.stdout
    done = subprocess.run([sys.executable, "-m", "dsv4_doctor", "explain", "te.import", "-f", "json"],
                          capture_output=True, text=True, timeout=120)
    assert "T6-lib" in done.stdout and "I-te" in done.stdout


# --- no check quotes an upstream text that the registry lacks --------------------------------------------------------

# The names a check gives the message it reads (an exception's text, a probe's stderr, a crash's tail).
MESSAGE_NAMES = re.compile(r"^(?:message|text|said|low|lowered|err|error|errors|stderr|msg|output|line|tail|crash"
                           r"|reason|what)$")
MIN_QUOTE = 8  # shorter constants are words ("cuda", "nccl"), not texts
CHECK_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)+$")


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func.value) if isinstance(node.func, ast.Attribute) else ""  # message.lower()
    return ""


def check_ids() -> set[str]:
    from dsv4_doctor.engine.registry import load

    return {c.id for c in load().checks}


def quoted_texts(source: str, ids: set[str] | None = None) -> list[tuple[int, str]]:
    """Each string constant a module matches a message against: `"text" in message` (any case of the message's
    name above), and the needles of a (text, check id) table."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Constant) and isinstance(left.value, str) and len(left.value) >= MIN_QUOTE \
                    and MESSAGE_NAMES.match(_name(right)):
                out.append((node.lineno, left.value))
        if isinstance(node, ast.Tuple) and len(node.elts) == 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            needle, rule = (e.value for e in node.elts)  # type: ignore[attr-defined]
            if CHECK_ID.match(rule) and (ids is None or rule in ids) and len(needle) >= MIN_QUOTE \
                    and not CHECK_ID.match(needle):
                out.append((node.lineno, needle))
    return out


def registry_texts() -> list[str]:
    from dsv4_doctor.upstream.registry import builtin_index

    return [e.text.text.casefold() for e in builtin_index().entries]


def test_every_upstream_text_a_check_quotes_is_in_the_registry():
    texts, ids = registry_texts(), check_ids()
    assert {"mcore.dsv4", "te.import"} <= ids
    missing = []
    for path in sorted((ROOT / "checks").rglob("*.py")):
        if path.name.startswith("dsv4probe_"):
            continue
        for line, quoted in quoted_texts(path.read_text(encoding="utf-8"), ids):
            if not any(quoted.casefold() in text for text in texts):
                missing.append(f"{path.relative_to(ROOT)}:{line}: {quoted!r}")
    assert not missing, "declare these upstream texts in the rule's texts= (the one registry):\n" + "\n".join(missing)


def test_the_quote_audit_sees_a_quoted_text_and_a_table():
    """The audit itself: what it must catch, it catches (so the test above can fail)."""
    code = '''
TABLE = (("a text nobody declared", "mcore.dsv4"), ("x", "y"))
def classify(message):
    if "Some upstream error text" in message:
        return 1
    if "short" in message or "not a message" in params:
        return 2
'''
    assert [q for _, q in quoted_texts(code)] == ["a text nobody declared", "Some upstream error text"]
    texts = registry_texts()
    assert not any("some upstream error text" in t for t in texts)
