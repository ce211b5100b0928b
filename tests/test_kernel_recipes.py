"""Kernel recipes without the DSL: how `warm` reads a recipes file, how a --deep check's prewarm splits the shipped
recipes over its processes, and that the CLI and the probes name an arch alike. (The recipes' replay against the real
CuTe DSL is tests/test_warm.py, slow.)"""

from __future__ import annotations

import json
import os

import pytest

import probe_modules
from dsv4_doctor.kernels.warm import MAX_RECIPE_BYTES, UsageError, dsl_arch, read_recipes, shipped_recipes


@pytest.mark.parametrize(("gpu_arch", "cc"), [("9.0", (9, 0)), ("10.0", (10, 0)), ("12.1", (12, 1)), ("8.0", (8, 0))])
def test_warm_and_a_check_name_an_arch_alike(gpu_arch, cc, monkeypatch):
    """`warm --gpu-arch` stores under the arch a check on that GPU computes its keys with (kernelstore.arch_of)."""
    store = probe_modules.load("dsv4probe_kernelstore")
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)

    class Cuda:
        @staticmethod
        def get_device_capability(_device):
            return cc

    class Torch:
        cuda = Cuda

    class Device:
        type = "cuda"

    assert dsl_arch(gpu_arch) == store.arch_of(Torch, Device)


def test_a_recipes_file_too_large_undecodable_or_not_json_is_a_usage_error(tmp_path):
    big = tmp_path / "big.json"
    big.write_text("[" + " " * (MAX_RECIPE_BYTES + 1) + "]")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00[")
    for path in (big, binary, tmp_path / "missing.json"):
        with pytest.raises(UsageError, match="not a readable JSON file"):
            read_recipes(path)
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([{"arch": "sm_90a"}, 3, "x", None, [1]]))
    assert read_recipes(mixed) == [{"arch": "sm_90a"}]  # objects only


def test_the_prewarm_hands_the_longest_compiles_out_first_and_keeps_the_checks_order_in_each_process():
    prewarm = probe_modules.load("dsv4probe_prewarm")
    # As gathered from a store: in the order of their file names, not the order the check needed them.
    recipes = [{"entry": name, "compile_s": seconds, "needed_at_s": at} for name, seconds, at in
               (("post", 0.4, 22.1), ("compactify", 0.3, 12.9), ("idx-bwd", 5.0, 14.2), ("grad", 0.3, 21.0),
                ("recompute", 2.4, 13.0), ("main", 6.3, 21.9), ("pre", 0.8, 21.5), ("fwd", 1.4, 12.7),
                ("unknown", None, None))]
    shares = prewarm.plan(recipes, 4)
    assert sorted(e["entry"] for s in shares for e in s) == sorted(r["entry"] for r in recipes)  # each once
    # 6.3 | 5.0 | 2.4 + 0.8 | 1.4 + 1.0 (not recorded) + 0.4 + 0.3 + 0.3, each in the order the check needed them
    assert [[e["entry"] for e in s] for s in shares] == [["main"], ["idx-bwd"], ["recompute", "pre"],
                                                         ["fwd", "compactify", "grad", "post", "unknown"]]
    assert prewarm.plan([{"needed_at_s": True}, {"needed_at_s": "x"}], 1)[0] == [{"needed_at_s": True},
                                                                               {"needed_at_s": "x"}]
    assert prewarm.plan(recipes[:2], 4) == [[recipes[0]], [recipes[1]]]  # no idle process
    assert prewarm.plan([], 4) == []


def test_the_prewarm_reads_only_a_bounded_shipped_list_of_this_arch(tmp_path, monkeypatch):
    prewarm = probe_modules.load("dsv4probe_prewarm")
    shipped = json.loads(shipped_recipes().read_text())
    monkeypatch.setattr(prewarm, "RECIPES", str(shipped_recipes()))
    assert prewarm.shipped_recipes("sm_90a") == [r for r in shipped if r["arch"] == "sm_90a"]
    assert prewarm.shipped_recipes("sm_100a") == []
    for content in (b"{not json", b"\xff\xfe", json.dumps({"arch": "sm_90a"}).encode(),
                    b"[" + b" " * prewarm.MAX_RECIPES_BYTES + b"]"):
        path = tmp_path / "r.json"
        path.write_bytes(content)
        monkeypatch.setattr(prewarm, "RECIPES", str(path))
        assert prewarm.shipped_recipes("sm_90a") == []
    monkeypatch.setattr(prewarm, "RECIPES", str(tmp_path / "none.json"))
    assert prewarm.shipped_recipes("sm_90a") == []


def test_the_prewarm_starts_nothing_when_off_without_a_store_or_without_recipes(tmp_path, monkeypatch):
    prewarm = probe_modules.load("dsv4probe_prewarm")
    monkeypatch.setenv("DSV4_DOCTOR_AOT_CACHE", str(tmp_path))
    monkeypatch.setenv("DSV4_DOCTOR_PREWARM", "off")
    assert "turned off" in prewarm.start({}, str(tmp_path), "sm_90a")["skipped"]
    monkeypatch.delenv("DSV4_DOCTOR_PREWARM")
    assert "no shipped kernel recipes for sm_120a" in prewarm.start({}, str(tmp_path), "sm_120a")["skipped"]
    monkeypatch.delenv("DSV4_DOCTOR_AOT_CACHE")
    assert "no per-user kernel store" in prewarm.start({}, str(tmp_path), "sm_90a")["skipped"]
    assert prewarm.finish({"skipped": "x"}) == {"skipped": "x"} and prewarm.finish(None) == {"skipped": "not started"}
    assert not os.listdir(tmp_path)  # no marker folder, no process


def test_the_prewarm_skips_recipes_recorded_under_another_dsl(tmp_path, monkeypatch):
    """A recipe's tensors are described by the DSL's own cache key, whose text is its version's: recipes recorded
    under 4.5.2 are not replayed on a stack with 4.8.1 (no process is started for them)."""
    prewarm = probe_modules.load("dsv4probe_prewarm")
    monkeypatch.setenv("DSV4_DOCTOR_AOT_CACHE", str(tmp_path))
    monkeypatch.delenv("DSV4_DOCTOR_PREWARM", raising=False)
    monkeypatch.setattr(prewarm, "RECIPES", str(shipped_recipes()))
    shipped = {prewarm.recorded_dsl(r) for r in prewarm.shipped_recipes("sm_90a")}
    assert shipped == {"4.5.2"}
    monkeypatch.setattr(prewarm, "installed_dsl", lambda: "4.8.1")
    got = prewarm.start({}, str(tmp_path), "sm_90a")
    assert got == {"skipped": "the shipped kernel recipes were recorded with nvidia-cutlass-dsl 4.5.2; this stack has "
                              "4.8.1"}
    assert prewarm.recorded_dsl({"key": "{not json"}) is None and prewarm.recorded_dsl({}) is None


def test_the_prewarms_evidence_survives_any_answer_and_stops_a_process_still_running(tmp_path):
    import subprocess
    import sys
    import time

    prewarm = probe_modules.load("dsv4probe_prewarm")
    answers = [{"evidence": {"kernels": [{"result": "stored", "kernel": "a"}, 3, "x"]}}, {"evidence": {"kernels": 7}},
               [1, 2], None]
    procs = []
    for i, answer in enumerate(answers):
        out = tmp_path / f"prewarm-{i}.json"
        if answer is not None:
            out.write_text(json.dumps(answer))
        procs.append({"proc": subprocess.Popen([sys.executable, "-c", "pass"]), "out": str(out), "log": "",
                      "recipes": 1})
    for p in procs:
        p["proc"].wait(timeout=60)  # these have answered (on a loaded machine, later than finish's grace)
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    procs.append({"proc": hung, "out": str(tmp_path / "none.json"), "log": "", "recipes": 1})
    started = time.monotonic()
    got = prewarm.finish({"procs": procs, "started": started, "arch": "sm_90a", "recipes": 5}, grace_s=0.5)
    assert hung.poll() is not None and time.monotonic() - started < 10
    assert got["stopped_unfinished"] == 1 and got["processes"] == 5
    assert got["counts"] == {"stored": 1, "failed": 2}, got  # [1, 2] and no file: no answer
    json.dumps(got)  # plain data
