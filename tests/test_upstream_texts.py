"""The upstream error-text registry: every rule's texts, declared once with the check, classify a message back to the
rule; the published upstream files confirm the texts; a hostile message is classified fast and safely; `explain`
shows them."""

from __future__ import annotations

import argparse
import ast
import json
import string
import time
from pathlib import Path

import pytest

from dsv4_doctor.api import Source, UpstreamText, check, passed
from dsv4_doctor.model.core import Check
from dsv4_doctor.engine.registry import load
from dsv4_doctor.upstream.registry import TextIndex, classify

from conftest import run_doctor
from wheels import ensure

MEGATRON_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "megatron-lm-d48bd6be"
MLM_DEV = "https://github.com/NVIDIA/Megatron-LM/blob/d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1/"


@pytest.fixture(scope="module")
def builtins() -> list[Check]:
    return load().checks


def rendered(text: UpstreamText, value: str = "X") -> str:
    """The text as upstream would write it, each variable part given `value`."""
    return "".join(literal + (value if name is not None else "") for literal, name, *_ in
                   string.Formatter().parse(text.text))


def test_every_declared_text_is_classified_back_to_its_own_check(builtins):
    declared = [(c, t) for c in builtins for t in c.texts]
    ids = {t.id for _, t in declared}
    # The knowledge base's section 4 tables, its section 12 additions and job.config's Hydra texts.
    assert {f"M{i}" for i in range(1, 16)} | {f"R{i}" for i in range(1, 13)} | {"V1", "V2", "V3"} <= ids
    assert {f"F{i}" for i in range(1, 5)} | {f"T{i}" for i in range(1, 12)} <= ids
    assert {"M5-mtp", "M5-mla", "M5-gdn", "M12-ignored", "H1", "H2", "H3", "B1", "B2"} <= ids
    index = TextIndex(builtins)
    for c, t in declared:
        for value in ("X", "'contiguous'"):
            found = index.classify(f"Traceback (most recent call last):\n  ...\n{t.kind}: {rendered(t, value)}\n")
            assert found, (c.id, t.id)
            assert (found[0].check_id, found[0].text_id) == (c.id, t.id), (t.id, [m.text_id for m in found])
    # The public entry point reads the built-in registry.
    m15 = classify("ValueError: Conflicting DSA kernel controls: apply_dsa_kernel_fusion=False maps to "
                   "dsa_kernel_backend='none', but dsa_kernel_backend='cudnn' was also selected. Remove "
                   "apply_dsa_kernel_fusion and use dsa_kernel_backend only.")
    assert [(m.check_id, m.text_id, m.kind) for m in m15] == [("job.dsa-backend", "M15", "ValueError")]
    assert "transformer_config.py" in m15[0].source.url


def test_the_more_specific_text_comes_first(builtins):
    """T2 (the torch extension's mismatch) also contains T1's stable prefix: T2 is named first, T1 after it."""
    message = ("AssertionError: Transformer Engine package version mismatch. Found transformer_engine_torch v2.9.0, "
               "transformer-engine v2.10.0, and transformer-engine-cu12 v2.10.0. Install transformer-engine using "
               "'pip3 install --no-build-isolation transformer-engine[pytorch]==VERSION'")
    assert [m.text_id for m in classify(message, builtins)] == ["T2", "T1"]
    assert classify("an unrelated RuntimeError: CUDA out of memory", builtins) == []


# Where a declared source's file is on this machine: the Megatron fixture (committed) and the published wheels.
def _local_roots() -> dict[str, Path]:
    roots = {MLM_DEV: MEGATRON_FIXTURE,
             "https://github.com/verl-project/verl/blob/v0.9.1/": ensure("verl-0.9.1"),
             "https://github.com/facebookresearch/hydra/blob/v1.3.2/": ensure("hydra-core-1.3.2"),
             "https://github.com/python/cpython/blob/3.11/Lib/": Path(argparse.__file__).parent}
    for version in ("1.27.0", "1.32.0"):
        roots[f"https://github.com/NVIDIA/cudnn-frontend/blob/v{version}/python/"] = \
            ensure(f"nvidia-cudnn-frontend-{version}")
    return roots


def string_templates(path: Path) -> list[str]:
    """Every string the file's code writes: a literal, or an f-string with each variable part as NUL (a literal part
    of a declared text can never span one)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values))
    return out


def test_the_published_upstream_files_confirm_the_texts(builtins):
    """Each literal part of a text whose source file is here (the Megatron d48bd6be fixture, the verl 0.9.1, hydra-core
    1.3.2 and cudnn-frontend wheels, CPython's argparse) is a string that file writes: a text that drifts from
    upstream fails here."""
    roots = _local_roots()
    confirmed, read = [], {}
    for c in builtins:
        for t in c.texts:
            url = t.source.url.split("#", 1)[0]
            root = next((r for prefix, r in roots.items() if url.startswith(prefix)), None)
            if root is None:
                continue
            path = root / url[next(len(p) for p in roots if url.startswith(p)):]
            if not path.is_file():  # the Megatron fixture holds only the files the settings probe imports
                continue
            templates = read.setdefault(path, string_templates(path)) if path not in read else read[path]
            for fragment in t.fragments:
                assert any(fragment in s for s in templates), f"{c.id} {t.id}: {fragment!r} is not in {path}"
            confirmed.append(t.id)
    # M1, M2, M4-M7, M9-M13, M15, the MTP and partition-mode texts (transformer_config.py), M8 (utils.py), V1-V3,
    # F1, F2, F4, H1-H3: they stay checked.
    assert {"M1", "M2", "M4", "M5", "M5-mla", "M5-gdn", "M5-mtp", "M6", "M7", "M8", "M8-cuda", "M9", "M10", "M11",
            "M12", "M12-ignored", "M13", "M15", "V1", "V2", "V3", "F1", "F2", "F4", "H1", "H2", "H3"} <= set(confirmed)


def test_a_hostile_message_is_classified_fast_and_safely(builtins):
    m15 = "Conflicting DSA kernel controls: apply_dsa_kernel_fusion=True maps to dsa_kernel_backend='cudnn', but " \
          "dsa_kernel_backend='tilelang' was also selected. Remove apply_dsa_kernel_fusion and use " \
          "dsa_kernel_backend only."
    # Near misses of every text's first literal part (a scan must not restart at each of them), escapes, markup.
    near = "".join(t.fragments[0][:-1] for c in builtins for t in c.texts)
    junk = ("\x1b[31m[bold red]<script>alert(1)</script>\x1b]8;;file:///etc/passwd\x07link\x1b]8;;\x07 " + near) * 200
    junk = (junk * (1 + (1 << 20) // len(junk)))[: 1 << 20]
    index = TextIndex(builtins)
    for message in (junk, junk[: 1 << 19] + "\x1b[1;31m" + m15 + "\x1b[0m" + junk[1 << 19:],
                    "Conflicting DSA kernel controls: " * 30000):
        start = time.perf_counter()
        found = index.classify(message)
        took = time.perf_counter() - start
        assert took < 0.25, took  # about 10 ms here: a linear scan per text, no backtracking
        assert all(m.text_id != "M15" for m in found) or m15 in message
        for m in found:  # the answer is the registry's own data, never a piece of the message
            assert "\x1b" not in json.dumps(m.to_dict()) and "<script>" not in json.dumps(m.to_dict())
    # A short text inside another's near miss (a module path's prefix, an anchor within a longer text) is found
    # there, as it should be; M15 is the one the message adds.
    in_junk = {m.text_id for m in index.classify(junk[:1000])}
    assert [m.text_id for m in index.classify(junk[:1000] + "\x1b[31m" + m15 + "\x1b[0m")
            if m.text_id not in in_junk] == ["M15"]
    assert index.classify(None) == [] and index.classify("") == []  # type: ignore[arg-type]


def test_a_plugins_text_is_data_never_a_pattern():
    """A plugin declares texts as a built-in does; regex syntax in one is literal text, and what its host sends is
    rebuilt and bounded on the doctor's side."""
    from dsv4_doctor.engine.pluginhost import _describe, describe_check

    @check("acme.thing", "A plugin rule", applies_when="always", detects="nothing",
           sources=(Source("acme"),),
           texts=(UpstreamText("A1", "acme failed (.*)+$ on {device}: [a-z]+", Source("acme docs"), "RuntimeError"),))
    def thing(ctx):
        """A plugin's rule."""
        return passed("ok")

    rebuilt = describe_check(json.loads(json.dumps(_describe(thing))), "acme-plugin")
    assert rebuilt.texts == thing.texts
    assert classify("RuntimeError: acme failed (.*)+$ on cuda:0: [a-z]+", [rebuilt])[0].origin == "acme-plugin"
    assert classify("RuntimeError: acme failed badly on cuda:0: x", [rebuilt]) == []
    # What a host sends that is no valid text is dropped: a bad id, a text too short to pin a message down, markup
    # where a kind goes, a match that is not a list of literal parts.
    meta = _describe(thing)
    meta["texts"] += [{"id": "A2", "text": "{x}", "kind": "E", "source": {}},
                      {"id": "A3", "text": "acme broke in some way", "kind": "[red]x", "source": {}},
                      {"id": "A 4", "text": "acme broke in some way", "kind": "E", "source": {}},
                      {"id": "A5", "text": "acme broke in some way", "kind": "E", "source": {}, "match": "x" * 40}]
    assert [t.id for t in describe_check(meta, "acme-plugin").texts] == ["A1", "A5"]
    for bad in (dict(text="short {x}"), dict(text="unbalanced {field of a text"), dict(id="M15; rm -rf /")):
        with pytest.raises(ValueError):
            UpstreamText(**{"id": "A9", "text": "a long enough text", "source": Source("s"), "kind": "E", **bad})


def test_explain_shows_the_texts_and_finds_a_texts_check(builtins):
    from dsv4_doctor.report.explain import explain_text

    dsa = next(c for c in builtins if c.id == "job.dsa-backend")
    text = explain_text(dsa, 200)
    assert "M15 (ValueError): Conflicting DSA kernel controls: apply_dsa_kernel_fusion=… maps to" in text
    assert text.index("Upstream texts") < text.index("Sources:")
    cli = run_doctor("explain", "M15", "-f", "json")
    assert cli.returncode == 0, cli.stderr
    shown = json.loads(cli.stdout)
    shown = shown if isinstance(shown, list) else [shown]
    assert [c["id"] for c in shown] == ["job.dsa-backend"]
    m15 = next(t for t in shown[0]["texts"] if t["id"] == "M15")
    assert m15["kind"] == "ValueError" and m15["text"].startswith("Conflicting DSA kernel controls: ")
    assert "transformer_config.py" in m15["source"]["url"]
