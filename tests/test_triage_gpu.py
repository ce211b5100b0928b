"""Triage on real failure logs made on a GPU (issue 50 item 4). tests/triage/gpu/NAME/ holds what one failing job's
launcher wrote (the torchrun `--log-dir` tree `logs/`, and `console.txt`, its stdout and stderr) beside `case.json`,
the verdict expected from the upstream texts the job prints, written before the device run (README.md there says how
each case was produced). Every input is triaged by the real command, each on its own.

Until the logs are committed (the device run has not been made yet), LOGS_COMMITTED is False: the triage tests are
skipped, and the switch test fails as soon as logs appear without it (or it is set without every case's logs), so
the switch cannot be forgotten."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from triage_helpers import triage_json

from dsv4_doctor.triage.match import check_of
from dsv4_doctor.triage.symptoms import CLASSES

LOGS_COMMITTED = False  # True in the change that commits the logs (docs/gpu-runs/2026-12-07-gpu-v3/collect-faillogs.sh)

GPU = Path(__file__).resolve().parent / "triage" / "gpu"
CASES = ("fail-wrong-arch", "fail-oom", "fail-nan", "fail-no-dsa", "fail-rank-dies")
VERDICTS = ("known-cause", "known-symptom", "not-recognised")
needs_logs = pytest.mark.skipif(not LOGS_COMMITTED, reason="the GPU failure logs are not committed yet (the "
                                "device run that makes them has not been made: tests/triage/gpu/README.md)")


def expected(name: str) -> dict:
    return json.loads((GPU / name / "case.json").read_text(encoding="utf-8"))


def log_files(name: str) -> list[Path]:
    return sorted(p for p in (GPU / name).rglob("*") if p.is_file() and p.name != "case.json")


@cache
def triaged(name: str, given: str) -> dict:
    return triage_json(str(GPU / name / given))


def test_every_case_is_there_with_an_expectation_written_from_upstream_texts():
    assert sorted(p.name for p in GPU.iterdir() if p.is_dir()) == sorted(CASES)
    readme = (GPU / "README.md").read_text(encoding="utf-8")
    for name in CASES:
        case = expected(name)
        assert case["case"] == name and name in readme and f"case_{name}" in case["produced_by"], name
        assert case["verdict"] in VERDICTS and case["first_failure"] and case["inputs"], name
        # a cause only with the check that names it, a class only from triage's own list
        assert (case["check"] is not None) == (case["verdict"] == "known-cause"), name
        assert case["check"] is None or check_of(case["check"]) is not None, name
        assert case["symptom"] is None or case["symptom"] in CLASSES, name
        assert case["verdict"] != "known-symptom" or case["symptom"], name
        assert case["upstream_texts"] and all(t["text"] and t["source"] for t in case["upstream_texts"]), name
        assert case["log_contains"], name
        assert (Path(__file__).resolve().parent.parent / case["job"]).is_file(), name


def test_the_logs_are_committed_exactly_when_the_switch_says_so():
    with_logs = [name for name in CASES if log_files(name)]
    if not LOGS_COMMITTED:
        assert with_logs == [], f"logs are committed for {with_logs}: set LOGS_COMMITTED = True"
        return
    for name in CASES:
        for given in expected(name)["inputs"]:
            path = GPU / name / given
            assert path.is_file() or (path.is_dir() and any(p.is_file() for p in path.rglob("*"))), (name, given)


@needs_logs
@pytest.mark.parametrize("name", CASES)
def test_the_job_failed_the_way_the_case_meant(name):
    """The run produced the failure it was written for (else the expectation below would test something else)."""
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in log_files(name))
    missing = [needle for needle in expected(name)["log_contains"] if needle not in text]
    assert not missing, missing


@needs_logs
@pytest.mark.parametrize("name,given", [(n, g) for n in CASES for g in ("logs", "console.txt")])
def test_triage_of_a_real_gpu_failure_gives_the_expected_verdict_check_and_class(name, given):
    case = expected(name)
    if given not in case["inputs"]:
        pytest.skip(f"{name} has no {given}")
    got = triaged(name, given)
    assert got["verdict"] == case["verdict"], (got["verdict"], got["first_failure"], got["causes"], got["symptoms"])
    if case["check"]:
        assert got["causes"][0]["check"] == case["check"], got["causes"]
        assert got["causes"][0]["evidence"], got["causes"]
    else:
        assert got["causes"] == [], got["causes"]  # never a cause the log does not support
    if case["symptom"]:
        assert case["symptom"] in [s["class"] for s in got["symptoms"]], got["symptoms"]
    first = got["first_failure"]
    assert first is not None and case["first_failure"] in first["text"], first
    if case.get("first_failure_rank") is not None:
        assert first["rank"] == case["first_failure_rank"], first
