"""Hardening v3 (issue 36), the gaps an audit found: a function's capped lists in the static probe's source summary
are said, and a rule that looks for something's absence in one says "not known"; errors in the static probe's parts
are cut with the redact-aware cut_text; Slurm variables, GROUP_RANK and --fleet-wait at their limits and far past
them; a FIFO as the exchange helper's log."""

from __future__ import annotations

import pytest

from test_hardening_cache import _bridge, _rule

# --- a function's capped lists: the cap said, and absence past it not known ---------------------------------------


def _provider(fn: str) -> str:
    return ("def provider_bridge(provider):\n"
            f"    provider.apply_dsa_kernel_fusion = {fn}()\n\n\n")


def test_a_compute_capability_call_past_the_calls_cap_is_not_known_not_absent(tmp_path):
    """Before: calls were cut at 100, silently; the get_device_capability call past them read as absent."""
    body = "".join(f"    f{i}()\n" for i in range(120))
    source = _provider("gate") + ("import torch\n\n\ndef gate():\n" + body
                                  + "    major, _ = torch.cuda.get_device_capability()\n    return major >= 10\n")
    facts, rule = _rule(_bridge(tmp_path, source))
    gate = facts["functions"]["gate"]
    assert len(gate["calls"]) == 100 and gate["capped"] == {"calls": 121}, gate.get("capped")
    assert not any(c.endswith("get_device_capability") for c in gate["calls"])  # past the cap: not in the list
    assert facts["capped"]["functions.gate.calls"] == 121 and facts["truncated"] is True
    assert "functions.gate.calls: 121" in facts["error"]
    assert rule["readable"] is False and "capped" in rule["why"], rule


def test_an_import_past_the_imports_cap_never_makes_a_rule_that_omits_it(tmp_path):
    """Before: the 51st import was dropped silently, and the rule read "on when these 50 import" (a false answer
    when only the 51st fails)."""
    imports = "".join(f"        from m{i} import X\n" for i in range(51))
    source = _provider("fused") + ("def fused():\n    try:\n" + imports
                                   + "    except ImportError:\n        return False\n    return True\n")
    facts, rule = _rule(_bridge(tmp_path, source))
    assert facts["functions"]["fused"]["capped"] == {"imports": 51}
    assert rule["readable"] is False and "capped" in rule["why"], rule


def test_an_assigned_value_cut_at_its_cap_is_not_read_as_a_shorter_rule(tmp_path):
    """Before: the value was cut at 500 characters, where `True and ... and True` still parses: the rule read "on"
    for a source that says `... and False`."""
    value = "True and " * 60 + "False"
    source = f"def provider_bridge(provider):\n    provider.apply_dsa_kernel_fusion = {value}\n"
    facts, rule = _rule(_bridge(tmp_path, source))
    assert facts["assignments"][0]["capped"] == {"texts_cut": 1}
    assert rule["readable"] is False and "capped" in rule["why"], rule


def test_locals_past_their_cap_are_said(tmp_path):
    local = "".join(f"    v{i} = {i}\n" for i in range(250))
    source = "def provider_bridge(provider):\n" + local + "    provider.apply_dsa_kernel_fusion = v249 > 0\n"
    facts, rule = _rule(_bridge(tmp_path, source))
    hit = facts["assignments"][0]
    assert len(hit["locals"]) == 200 and hit["capped"] == {"locals": 250}
    assert facts["capped"]["assignments.0.locals"] == 250
    assert rule["readable"] is False


def test_a_small_function_is_not_capped(tmp_path):
    source = _provider("gate") + ("import torch\n\n\ndef gate():\n"
                                  "    major, _ = torch.cuda.get_device_capability()\n    return major >= 10\n")
    facts, rule = _rule(_bridge(tmp_path, source))
    assert "capped" not in facts["functions"]["gate"] and "capped" not in facts
    assert rule["readable"] is True and rule["terms"][0]["kind"] == "cc", rule


# --- redact, then cut: the static probe's parts cut their error texts with cut_text --------------------------------

SECRET = "hf_" + "Ab3dE" * 8  # a Hugging Face token: recognised by its start and its length


@pytest.mark.parametrize("part", ["dsv4probe_static_fatbin", "dsv4probe_static_installed"])
@pytest.mark.parametrize("offset", [250, 270, 285, 295, 299])
def test_the_static_parts_error_cut_never_leaves_part_of_a_secret(part, offset):
    """Before: `str(exc)[:300]`, so a secret that straddled the cut left a part redaction misses."""
    import probe_modules

    text = "x" * offset + " " + SECRET + " and more"
    cut = probe_modules.load(part)._common().cut_text(text, 300)  # the library's cut, as each part finds it
    assert len(cut) <= 302 and ("hf_" not in cut or SECRET in cut), cut


def test_a_traceback_tail_never_starts_inside_a_secret():
    from dsv4_doctor.hostio.redact import cut_tail

    text = "head " + SECRET + " the rest of the traceback"
    for limit in range(1, len(text) + 2):
        tail = cut_tail(text, limit)
        assert len(tail) <= limit and ("Ab3dE" not in tail or SECRET in tail), (limit, tail)


# --- ranges: Slurm variables, GROUP_RANK and --fleet-wait at their limits and far past them -------------------------

MAX_WORLD = 131072
SRUN = {"SLURM_STEP_NUM_TASKS": str(MAX_WORLD), "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
        "SLURM_STEP_NODELIST": "node1", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}
TORCHRUN = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": str(MAX_WORLD)}


@pytest.mark.parametrize("base, name, at_limit, past, far_past", [
    (SRUN, "SLURM_STEP_NUM_TASKS", str(MAX_WORLD), str(MAX_WORLD + 1), "100000000"),
    (SRUN, "SLURM_PROCID", str(MAX_WORLD - 1), str(MAX_WORLD), "9" * 400),
    (SRUN, "SLURM_LOCALID", str(MAX_WORLD - 1), str(MAX_WORLD), "9" * 5000),
    (SRUN, "SLURM_NODEID", str(MAX_WORLD - 1), str(MAX_WORLD), "9" * 400),
    (SRUN, "SLURM_STEP_NUM_NODES", str(MAX_WORLD), str(MAX_WORLD + 1), "1" * 400),
    (TORCHRUN, "GROUP_RANK", str(MAX_WORLD - 1), str(MAX_WORLD), "9" * 400),
    (TORCHRUN, "GROUP_WORLD_SIZE", str(MAX_WORLD), str(MAX_WORLD + 1), "9" * 400),
])
def test_slurm_and_group_numbers_at_their_limit_and_past_it(base, name, at_limit, past, far_past):
    import time

    from dsv4_doctor.fleet import env as fleetenv
    from dsv4_doctor.model.core import UsageError

    assert fleetenv.MAX_WORLD_SIZE == MAX_WORLD and fleetenv.RANGES[name][1] in (MAX_WORLD, MAX_WORLD - 1)
    env = fleetenv.detect(dict(base, **{name: at_limit}))
    assert env is not None and env.world_size == int(dict(base, **{name: at_limit}).get(
        "WORLD_SIZE") or dict(base, **{name: at_limit})["SLURM_STEP_NUM_TASKS"])
    for value in (past, far_past, "-1"):
        start = time.monotonic()
        with pytest.raises(UsageError, match=r"out of range \(a whole number in \d+-\d+"):
            fleetenv.detect(dict(base, **{name: value}))
        assert time.monotonic() - start < 0.5


@pytest.mark.parametrize("value, ok", [("3600", True), ("1", True), ("3600.5", False), ("0.5", False),
                                       ("1" + "0" * 400, False), ("9" * 5000, False), ("inf", False), ("nan", False)])
def test_fleet_wait_at_its_limit_and_far_past_it(value, ok):
    from dsv4_doctor.cli.grammar import BadValue, parse_timeout

    if ok:
        assert parse_timeout(value) == float(value)
    else:
        with pytest.raises(BadValue, match="must be between 1 and 3600 seconds"):
            parse_timeout(value)


def test_fleet_wait_far_past_its_range_is_a_usage_error():
    from conftest import run_doctor

    run = run_doctor("check", "--no-smoke", "--fleet-wait", "9" * 5000, timeout=60)
    assert run.returncode == 2 and "must be between 1 and 3600 seconds" in run.stderr, run.stderr[-600:]
