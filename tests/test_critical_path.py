"""The run's long pole: the probe that ended last, in the JSON summary and in the -v text report."""

from __future__ import annotations

import json
import sys
import time

from conftest import run_doctor
from dsv4_doctor.engine.probes import Probe
from dsv4_doctor.hostio.procs import Processes
from dsv4_doctor.engine.runner import ProbePool


def test_the_probe_that_ends_last_is_the_long_pole_whatever_order_it_started_in():
    procs = Processes()
    pool = ProbePool(sys.executable, 30, 4, procs)
    try:
        since = time.monotonic()
        slow = Probe.command("slow", [sys.executable, "-c", "import time; time.sleep(0.6); print('{}')"])
        quick = Probe.command("quick", [sys.executable, "-c", "print('{}')"])
        for probe in (slow, quick):
            pool.submit(probe)
        assert pool.result(slow, 30).ok and pool.result(quick, 30).ok
        path = pool.critical_path(since)
        assert path is not None and path["probe"] == "slow" and path["probes"] == 2
        assert 0.5 <= path["ran_s"] <= path["ended_at_s"] and path["started_at_s"] >= 0
    finally:
        procs.close()
    assert ProbePool(sys.executable, 30, 4, Processes()).critical_path(0.0) is None


def test_a_check_reports_its_long_pole():
    """In the JSON summary of a real run; the text report read back from it says it with -v only."""
    from dsv4_doctor.report.dispatch import render
    from dsv4_doctor.model.report import Report

    done = run_doctor("check", "--no-smoke", "-f", "json")
    data = json.loads(done.stdout)
    path = data["summary"]["critical_path"]
    assert isinstance(path["probe"], str) and path["probes"] >= 2
    assert 0 < path["ran_s"] <= path["ended_at_s"] <= data["summary"]["duration_s"]
    report = Report.from_wire(data)
    assert f"Long pole: probe {path['probe']} ran " in render(report, "text", verbosity=2)  # -vv, with the evidence
    assert "Long pole" not in render(report, "text") and "Long pole" not in render(report, "text", verbosity=1)
