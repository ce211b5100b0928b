"""Hardening v4 (issue 43), item 4: redaction after every merge, and the per-node answer guard.

A merged report (a torchrun fleet's, a Ray fleet's) ends in one redaction pass over its whole wire form, after every
rank's and node's text is in: a secret in any text a node controls (its host, its `why`, the variables it saw, its
report, the helper's error, timings and runtime_env) is masked in every format, and `redactions.count` counts it
(rank 0's own masks once). A node whose answer is malformed (a field of the wrong type, a NaN, a non-object) is that
node's failing entry in fleet.ranks, saying which field; the other nodes are kept; no value in any field raises."""

from __future__ import annotations

import functools
import json
import os
import random
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from conftest import doctor_command, validate
from test_fleet import _report
from test_fleet_ray import CHECK, _env, ray_cluster  # noqa: F401  (the real cluster's module-wide fixture)

from dsv4_doctor.fleet import admit as fleetadmit, merge as fleetmerge, raycluster
from dsv4_doctor.fleet.rayjob import wanted
from dsv4_doctor.hostio.redact import MASK
from dsv4_doctor.model.report import Report

# Each secret's core (what must never appear) in the shape the redaction patterns know, so that a leak names its field.
LITERAL_SECRET = "LiteralValueOfTheDriversKey0042"  # this process's WANDB_API_KEY, in plain words elsewhere
SECRETS = {
    "node host": ("gpu-01-hf_", "NodeHostSecret00000000000"),
    "runtime_env_seen": ("hf_", "SeenVariableSecret00000000"),
    "node why": ("the node died: Authorization: Bearer ", "WhyBearerSecret12345"),
    "helper error": ("ray said API_TOKEN=", "HelperErrorSecret777"),
    "timings key": ("ghp_", "TimingKeySecret0000000000000"),
    "runtime_env env_vars": ("hf_", "EnvVarNameSecret000000000"),
    "runtime_env working_dir": ("/w/PASSWORD=", "WorkingDirSecret99"),
    "runtime_env py_executable": ("/usr/bin/python --token ", "PyExecutableSecret55"),
    "runtime_env py_modules": ("https://user:", "PyModulesSecret66@host/m.zip"),
    "runtime_env verl_defaults": ("SECRET_KEY=", "VerlDefaultsSecret11"),
    "env note": ("AUTH_TOKEN=", "EnvNoteSecret4444"),
    "report title": ("sk-", "ReportTitleSecret000000000000"),
    "report summary": ("frontend ok; HF_TOKEN=", "ReportSummarySecret00"),
    "report details": ("Bearer ", "ReportDetailsSecret123"),
    "report evidence": ("glpat-", "ReportEvidenceSecret00000000"),
    "report fix": ("https://u:", "ReportFixSecret77@pypi.example/simple"),
    "report fingerprint": ("1.27.0 xoxb-", "ReportFingerprintSecret0"),
    "report source": ("https://tok:", "ReportSourceSecret88@docs.example"),
    "literal": ("uses the key ", LITERAL_SECRET),
}
NODE_A, NODE_B = "a1" * 28, "b2" * 28  # Ray node ids: 56 hex characters
VERL = ["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]


def _secret(field: str) -> str:
    head, core = SECRETS[field]
    return head + core


def _core(secret: str) -> str:
    return secret.split("@")[0]


def _leaks(text: str) -> list[str]:
    return [field for field, (_, core) in SECRETS.items() if _core(core) in text]


@pytest.fixture(autouse=True)
def driver_secret(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", LITERAL_SECRET)


@functools.cache
def _driver(secrets: bool = False) -> Report:
    """The driver's own report (rank 0), as the doctor assembles it: redacted, with its count (a Report is never
    changed in place: one serves every merge). `secrets`: its own texts hold secrets too, and a fix command that
    holds one (withheld)."""
    import sys

    from dsv4_doctor.report.assemble import assemble, environment
    from dsv4_doctor.fix.steps import Fix
    from dsv4_doctor.model.core import CheckReport, Profile, Status

    rows = [CheckReport(id="cudnn-fe.version", title="t", status=Status.PASS, summary="frontend 1.27.0")]
    if secrets:
        rows.append(CheckReport(id="python.version", title="t", status=Status.FAIL,
                                summary="driver: " + _secret("helper error") + " " + _secret("literal"),
                                fixes=[Fix("reinstall", [["pip", "install", "--index-url", _secret("report fix"),
                                                          "x"]])]))
    env = dict(environment({}, None, sys.executable),
               fleet_rank={"rank": 0, "local_rank": 0, "host": "head (driver)", "node": "driver"},
               fingerprint={"packages": {"nvidia-cudnn-frontend": "1.27.0"}, "sources": {}, "platform": {}})
    return assemble(Profile(), rows, [], env, False, 0.0)


def _node_report(secrets: bool = False) -> dict:
    rep = _report(1, "ignored: the driver names the node", "1.27.0")
    if secrets:
        row = rep["checks"][0]
        row.update(title=_secret("report title"), summary=_secret("report summary"),
                   details=_secret("report details"), evidence={"note": _secret("report evidence")},
                   sources=[{"title": "t", "url": _secret("report source")}],
                   fixes=[{"description": "reinstall " + _secret("literal"),
                           "argv": [["pip", "install", "--index-url", _secret("report fix"), "x"]], "id": "",
                           "phase": "pin"}])
        rep["environment"]["fingerprint"]["packages"]["nvidia-cudnn-frontend"] = _secret("report fingerprint")
    return rep


def _node(node_id: str, **fields) -> dict:
    return {"index": 0, "node_id": node_id, "host": "gpu-02", "ip": "10.0.0.2", "gpus": 8.0, "ran": "doctor",
            "runtime_env_seen": ["FOO"], **fields}


def _ray_merge(tmp_path: Path, answer, reports: dict, env_notes=(), command=VERL):
    """raycluster._merged as take_part calls it: the helper's answer, the nodes' report files in its folder."""
    folder = tmp_path / "helper"
    (folder / "reports").mkdir(parents=True, exist_ok=True)
    for old in (folder / "reports").iterdir():
        old.unlink()
    for i, rep in reports.items():
        (folder / "reports" / f"{i}.json").write_text(rep if isinstance(rep, str) else json.dumps(rep))
    return raycluster._merged(_driver(), answer, str(folder), wanted(command), False, ("fleet.ranks", "fleet.drift"),
                              None, list(env_notes))


def _renderings(report: Report, tmp_path: Path) -> dict[str, str]:
    """The report in every format, with the GitHub annotations and step summary."""
    from dsv4_doctor.report.dispatch import render
    from dsv4_doctor.report.github import emit

    out = {fmt: render(report, fmt, verbosity=3) for fmt in ("text", "json", "markdown", "junit")}
    said: list[str] = []
    appended: list[str] = []
    emit(report, said.append, lambda path, body: appended.append(body) or None,
         {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    out["annotations"], out["step summary"] = "".join(said), "".join(appended)
    return out


def _entries(report: Report) -> dict[int, str]:
    row = report.row("fleet.ranks")
    assert row is not None
    return {e["rank"]: e["why"] for e in row.evidence["ranks"]}


# --- redaction after the merge -------------------------------------------------------------------------------------

def test_a_ray_merge_masks_every_text_a_node_controls_in_every_format(tmp_path):
    """Before: the nodes' host names, the variables they saw and the helper's runtime_env joined fleet.ranks'
    evidence after the merge's redaction, and appeared unmasked in the JSON report; the count did not move."""
    answer = {"nodes": [_node(NODE_A, host=_secret("node host"), runtime_env_seen=["FOO", _secret("runtime_env_seen")]),
                        _node(NODE_B, why=_secret("node why"))],
              "error": _secret("helper error"), "driver_node": NODE_A,
              "timings": {"join_s": 1.5, _secret("timings key"): 2.0},
              "runtime_env": {"env_vars": ["FOO", _secret("runtime_env env_vars")],
                              "working_dir": _secret("runtime_env working_dir"),
                              "py_executable": _secret("runtime_env py_executable"),
                              "py_modules": [_secret("runtime_env py_modules")],
                              "verl_defaults": _secret("runtime_env verl_defaults")}}
    own = _driver()
    report, _, checked = _ray_merge(tmp_path, answer, {0: _node_report(secrets=True)},
                                    env_notes=[_secret("env note")])
    wire = validate(report.to_dict())
    assert checked == [NODE_A]  # the node with the secrets' report was taken, so its texts are in the report
    for fmt, text in _renderings(report, tmp_path).items():
        assert not _leaks(text), (fmt, _leaks(text))
    evidence = report.row("fleet.ranks").evidence
    assert evidence["ran"][0]["host"].startswith(f"gpu-01-{MASK}") and MASK in evidence["ran"][0]["runtime_env_seen"]
    assert MASK in evidence["runtime_env"]["env_vars"] and MASK in evidence["runtime_env"]["verl_defaults"]
    assert MASK in _entries(report)[2] and MASK in wire["fleet"]["timings"] and MASK in evidence["exchange_error"]
    # The driver's own masks are counted once; each secret of the nodes' adds at least one (it is in one text or more).
    assert wire["redactions"]["count"] >= own.redactions + len(SECRETS), (wire["redactions"], own.redactions)


def _torchrun_ranks(secret_rank: bool) -> dict[int, dict]:
    """Ranks 1 and 2's reports (test_fleet's); with `secret_rank`, rank 2's texts and host hold secrets."""
    reports = {r: _report(r, f"node{r:02d}", "1.27.0") for r in (1, 2)}
    if secret_rank:
        reports[2]["checks"][0].update(summary="frontend 1.26.0; " + _secret("report summary"),
                                       details=_secret("report details") + " and " + _secret("literal"),
                                       evidence={"token": "plain", "seen": _secret("report evidence")})
        reports[2]["environment"]["fleet_rank"]["host"] = _secret("node host")
    return reports


def _torchrun_merge(own: Report, ranks: dict[int, dict]) -> Report:
    """Rank 0's merge as plan._rank0 does it: its own report admitted from its wire form, the others from bytes."""
    others = {r: fleetadmit.admit(r, json.dumps(rep).encode()) for r, rep in ranks.items()}
    merged, _ = fleetmerge.merge(fleetadmit.admit(0, own.to_dict()), others, 3, {}, False)
    return merged


def test_a_torchrun_merge_masks_a_rank_s_secret_in_every_format_and_counts_each_mask_once(tmp_path):
    """Before: the merge redacted the ranks' text but kept rank 0's count, so a merged report that masked another
    rank's secrets said it masked none of them. The driver's own masks (a withheld fix command among them) are seen
    again by the merge's pass and not counted twice."""
    own = _driver(secrets=True)  # its secrets masked, its fix command withheld
    assert own.redactions >= 3 and "(a command here held a secret" in json.dumps(own.to_dict())
    clean = _torchrun_merge(own, _torchrun_ranks(secret_rank=False))
    assert clean.redactions == own.redactions  # nothing new: rank 0's text redacted again, counted once
    merged = _torchrun_merge(own, _torchrun_ranks(secret_rank=True))
    wire = validate(merged.to_dict())
    for fmt, text in _renderings(merged, tmp_path).items():
        assert not _leaks(text), (fmt, _leaks(text))
    assert MASK in json.dumps(wire["checks"])
    assert merged.redactions >= own.redactions + 4, (merged.redactions, own.redactions)
    assert any(MASK in h for h in wire["fleet"]["hosts"])


def test_redacting_a_redacted_report_again_changes_nothing_and_counts_nothing():
    """The merge's pass goes over text that was redacted already (rank 0's): it is left as it is, and nothing in it
    is counted again. Before: each withheld fix command was counted once more by every pass."""
    from hostile import hostile_report

    from dsv4_doctor.hostio.redact import Redactor

    own, _ = hostile_report()  # every text hostile: secrets of each shape masked, a fix command withheld
    wire = own.to_dict()
    assert "(a command here held a secret" in json.dumps(wire)
    again = Redactor()
    assert again(wire) == wire and again.count == 0


# --- the per-node answer guard ---------------------------------------------------------------------------------------

def test_a_malformed_node_answer_fails_that_node_and_the_others_are_kept(tmp_path):
    """Before: a non-numeric `gpus` was taken as no count at all (the node passed unchecked against
    trainer.n_gpus_per_node), a node entry that is not an object vanished from the fleet, and a report whose
    fingerprint or fixes held a number, or whose duration was text, lost every node's result (TypeError/ValueError
    out of the merge)."""
    good = _node_report()
    odd_duration = dict(_node_report(), summary={"exit_code": 0, "duration_s": "eight"})
    bad_fingerprint = _node_report()
    bad_fingerprint["environment"]["fingerprint"]["packages"] = 5
    bad_fixes = _node_report()
    bad_fixes["checks"][0]["fixes"] = 7
    nodes = [_node(NODE_A),
             _node("c3" * 28, gpus="8"),
             _node("d4" * 28, gpus=float("nan"), host=5, runtime_env_seen="FOO", ran="everything"),
             "not a node",
             _node("e5" * 28),
             _node("f6" * 28),
             _node("a7" * 28, gpus=True, why=["died"]),
             _node("b8" * 28)]
    answer = {"nodes": nodes, "driver_node": NODE_A, "timings": {"join_s": float("nan"), "total_s": 3.0},
              "runtime_env": {"env_vars": 5, "py_modules": {"a": 1}, "working_dir": ["x"]}}
    files = {i: good for i in range(len(nodes))}
    files.update({4: odd_duration, 5: bad_fingerprint, 7: bad_fixes})
    report, verdict, checked = _ray_merge(tmp_path, answer, files, command=VERL[:3] + ["trainer.nnodes=8",
                                                                                         "trainer.n_gpus_per_node=8"])
    wire = validate(report.to_dict())
    json.dumps(wire, allow_nan=False)
    entries = _entries(report)
    assert verdict == 1 and sorted(entries) == [2, 3, 4, 6, 7, 8], entries
    assert entries[2] == 'its answer to the doctor is malformed: gpus is "8", not a number of GPUs', entries[2]
    for field in ("gpus is \"nan\"", "host is 5", 'runtime_env_seen is "FOO"', 'ran is "everything"'):
        assert field in entries[3], (field, entries[3])
    assert "the entry is \"not a node\", not an object" in entries[4]
    assert "its fingerprint's packages is 5, not an object" in entries[6]
    assert "gpus is true" in entries[7] and 'why is ["died"]' in entries[7]
    assert "its fixes is 7, not a list" in entries[8]
    # The others are kept: the driver and nodes 1 and 5 (whose report's duration, text, is no duration) reported.
    assert checked == [NODE_A, "e5" * 28] and wire["fleet"]["reported"] == 3 and wire["fleet"]["world_size"] == 9
    hosts = {e["rank"]: e["host"] for e in report.row("fleet.ranks").evidence["ranks"]}
    assert hosts[3] == "unknown (node d4d4d4d4)" and hosts[4] == "unknown (node ?)"
    fe = report.row("cudnn-fe.version")
    assert fe is not None and fe.status.value == "pass" and "all 3 reporting ranks" in fe.summary
    assert wire["fleet"]["timings"] == {"total_s": 3.0}


def test_a_helper_answer_of_the_wrong_shape_is_said_not_raised(tmp_path):
    """Before: `nodes` as a number raised TypeError (every node's result lost); an error that is not text was said
    as nothing ("not checked: "), and an answer with neither nodes nor an error read as a cluster of no nodes."""
    for answer, said in (({"nodes": 5}, "its nodes is 5, not a list"),
                         ({"nodes": [], "error": {"x": 1}}, 'its error is {"x": 1}, not text'),
                         ({}, "has neither nodes nor an error"),
                         ([1, 2], "is not an object")):
        report, verdict, checked = _ray_merge(tmp_path, answer, {})
        validate(report.to_dict())
        error = report.row("fleet.ranks").evidence.get("exchange_error", "")
        assert verdict == 1 and checked == [] and said in error and said in _entries(report)[1], (answer, error)


def test_the_ray_helper_takes_a_malformed_node_answer_as_that_node_s_entry(tmp_path):
    """The helper itself (probes/dsv4probe_ray_nodes.py), on each node's answer as it comes back from Ray. Before: a
    non-numeric `size` or a report that was text raised TypeError in the helper, which then answered nothing for any
    node ("the Ray helper could not check the cluster")."""
    from probe_modules import load

    helper = load("dsv4probe_ray_nodes")
    (tmp_path / "reports").mkdir()
    cases = [({"size": "8", "ran": "doctor"}, "size is '8'"),
             ({"report": "not bytes", "size": 9}, "report is 'not bytes'"),
             ({"runtime_env_seen": ["A", 1]}, "runtime_env_seen is ['A', 1]"),
             ({"exit_code": True}, "exit_code is True"),
             ("just text", "'just text', not an object")]
    for got, said in cases:
        entry = {"index": 0, "node_id": NODE_A, "gpus": 8.0}
        helper.take_answer(entry, got, str(tmp_path), 1000)
        assert said in entry.get("why", ""), (got, entry)
    entry = {"index": 1, "node_id": NODE_B, "gpus": 8.0}
    helper.take_answer(entry, {"host": "h", "ran": "doctor", "size": 2, "exit_code": 0, "report": b"{}"},
                       str(tmp_path), 1000)
    assert "why" not in entry and (tmp_path / "reports" / "1.json").read_bytes() == b"{}" and entry["host"] == "h"


# --- fuzz: random JSON in every field the merge reads ----------------------------------------------------------------

_ATOMS = [None, True, False, 0, -1, 8, 2 ** 70, -(10 ** 30), 1.5, float("nan"), float("inf"), -0.0, "", "8",
          "x" * 20000, "\x1b[31m\n::error::x", "\ud800", _secret("report summary"), "a1" * 28]


def _junk(rnd: random.Random, depth: int = 0):
    kind = rnd.randrange(14)
    if kind == 13 and depth == 0:
        deep: list = []
        for _ in range(300):
            deep = [deep]
        return deep
    if depth > 2 or kind < 8:
        return rnd.choice(_ATOMS)
    if kind < 11:
        return [_junk(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    return {rnd.choice(["a", "gpus", "host", _secret("node host")]): _junk(rnd, depth + 1)
            for _ in range(rnd.randrange(4))}


ANSWER_PATHS = [("nodes",), ("timings",), ("error",), ("runtime_env",), ("runtime_env", "env_vars"),
                ("runtime_env", "working_dir"), ("runtime_env", "py_executable"), ("runtime_env", "py_modules"),
                ("runtime_env", "verl_defaults"), ("nodes", 1), ("nodes", 1, "node_id"), ("nodes", 1, "host"),
                ("nodes", 1, "gpus"), ("nodes", 1, "ran"), ("nodes", 1, "why"), ("nodes", 1, "runtime_env_seen")]
REPORT_PATHS = [("summary",), ("summary", "duration_s"), ("environment",), ("environment", "fleet_rank"),
                ("environment", "fleet_rank", "host"), ("environment", "fleet_rank", "local_rank"),
                ("environment", "fleet_rank", "node"), ("environment", "fingerprint"),
                ("environment", "fingerprint", "packages"), ("environment", "fingerprint", "missing"),
                ("checks",), ("checks", 0), ("checks", 0, "fixes"), ("checks", 0, "sources"),
                ("checks", 0, "evidence"), ("checks", 0, "duration_s"), ("checks", 0, "summary"),
                ("checks", 0, "status"), ("checks", 0, "id"), ("redactions",), ("oversize",)]


def _valid(report: Report, schema: bool) -> str:
    """The report's wire form as strict JSON; with `schema`, checked against the schema too (one validator: checking
    the schema itself each time would be most of the fuzz's time)."""
    import jsonschema

    from conftest import SCHEMA

    if not _VALIDATOR:
        _VALIDATOR.append(jsonschema.validators.validator_for(SCHEMA)(SCHEMA))
    wire = report.to_dict()
    if schema:
        _VALIDATOR[0].validate(wire)
    return json.dumps(wire, allow_nan=False)


_VALIDATOR: list = []


def _put(tree, path, value):
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _base_answer() -> dict:
    return {"nodes": [_node(NODE_A), _node(NODE_B)], "driver_node": NODE_A, "timings": {"join_s": 1.0},
            "runtime_env": {"env_vars": ["FOO"], "working_dir": None, "py_executable": None, "py_modules": [],
                            "verl_defaults": None}}


def test_random_json_in_every_answer_and_report_field_never_raises(tmp_path):
    """Deterministic: each field of the helper's answer, of a node's entry and of a node's report (the Ray merge)
    and of a rank's report (the torchrun merge) gets random JSON values; the merge always gives a report (strict
    JSON, the schema's, checked on the first value of each field), with no secret in it, and a node-level fault never
    costs node 1 its result."""
    rnd = random.Random(43)
    for path in ANSWER_PATHS:
        for i in range(3):
            answer = _base_answer()
            _put(answer, path, _junk(rnd))
            report, _, _ = _ray_merge(tmp_path, answer, {0: _node_report(), 1: _node_report()})
            text = _valid(report, schema=i == 0)
            assert not _leaks(text), (path, _leaks(text))
            if path[0] == "nodes" and len(path) > 1:
                assert report.fleet["reported"] >= 2, (path, report.fleet)
    for path in REPORT_PATHS:
        for i in range(3):
            rep = _node_report()
            _put(rep, path, _junk(rnd))
            raw = json.dumps(rep)
            report, _, _ = _ray_merge(tmp_path, _base_answer(), {0: _node_report(), 1: raw})
            text = _valid(report, schema=i == 0)
            assert not _leaks(text) and report.fleet["reported"] >= 2, (path, report.fleet)
            try:
                others = {1: fleetadmit.admit(1, raw.encode())}
            except fleetadmit.BadReport:
                others = {}
            merged, _ = fleetmerge.merge(fleetadmit.admit(0, _driver().to_dict()), others, 2,
                                         {} if others else {1: "bad"}, False)
            assert not _leaks(_valid(merged, schema=i == 0)), path


# --- end to end: a real local Ray cluster ----------------------------------------------------------------------------

# A node whose Ray workers report a host name that holds a token (what node_check reads from socket.gethostname()).
LEAKY_HOST = f"""import sys
if sys.argv and sys.argv[0].endswith("default_worker.py"):
    import socket
    socket.gethostname = lambda: "{_secret('node host')}"
"""


@pytest.mark.slow
def test_a_real_ray_node_s_text_with_a_secret_is_masked_in_the_report(ray_cluster, tmp_path):  # noqa: F811
    """A real cluster (tests/test_fleet_ray.py's): one node's workers give a host name holding an HF token, and the
    job's runtime_env gives a variable whose name is one; each node's task reports what it saw. Before: both
    appeared unmasked in fleet.ranks' evidence."""
    started = time.monotonic()
    cluster = ray_cluster
    leaky = tmp_path / "leaky"
    leaky.mkdir()
    (leaky / "sitecustomize.py").write_text(LEAKY_HOST)
    node = cluster.add("leaky", f"{cluster.new}{os.pathsep}{leaky}")
    seen = _secret("runtime_env_seen")
    job = shlex.join([*VERL[:3], "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
                      f"+ray_kwargs.ray_init.runtime_env.env_vars.{seen}=1"])
    done = subprocess.run(doctor_command() + [*CHECK, "--job-args", job], env=_env(cluster), capture_output=True,
                          text=True, timeout=240)
    report = validate(json.loads(done.stdout))
    assert not _leaks(done.stdout + done.stderr), _leaks(done.stdout + done.stderr)
    evidence = next(c for c in report["checks"] if c["id"] == "fleet.ranks")["evidence"]
    ran = {r["host"]: r for r in evidence["ran"]}
    leaky_host = next(h for h in ran if f"(node {node[:8]})" in h)
    assert leaky_host.startswith(f"gpu-01-{MASK}"), ran
    assert all(MASK in r["runtime_env_seen"] for r in ran.values()), ran
    assert report["fleet"]["reported"] == 3 and report["redactions"]["count"] >= 3, report["fleet"]
    assert time.monotonic() - started < 120
