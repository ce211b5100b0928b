"""JUnit XML: one testcase per check, exactly one status child each (GitLab shows a testcase with two as failed)."""

from __future__ import annotations

import xml.etree.ElementTree as ET


def _fix_text(c: dict) -> str:
    lines = [c["summary"]]
    if c.get("details"):
        lines += ["", c["details"]]
    for fix in c.get("fixes", []):
        lines += ["", "Fix: " + fix["description"], *("  " + cmd for cmd in fix["commands"])]
    return "\n".join(lines)


def render_junit(report: dict) -> str:
    checks = report["checks"]
    counts = report["summary"]["counts"]
    strict = report["summary"].get("strict", False)
    failures = counts.get("fail", 0) + (counts.get("warn", 0) if strict else 0)
    suite = ET.Element("testsuite", {
        "name": "dsv4-doctor",
        "tests": str(max(1, len(checks))),
        "failures": str(failures),
        "errors": str(counts.get("error", 0)),
        "skipped": str(counts.get("skip", 0)),
        "time": f"{report['summary'].get('duration_s', 0):.3f}",
    })
    props = ET.SubElement(suite, "properties")
    for key, value in report.get("profile", {}).items():
        ET.SubElement(props, "property", {"name": f"profile.{key}", "value": str(value)})
    ET.SubElement(props, "property", {"name": "schema", "value": report["schema"]})
    for c in checks:
        area = c["id"].split(".")[0]
        case = ET.SubElement(suite, "testcase", {
            "classname": f"dsv4_doctor.{area}", "name": c["id"], "time": f"{c.get('duration_s', 0):.3f}",
        })
        status = c["status"]
        if status == "fail" or (status == "warn" and strict):
            ET.SubElement(case, "failure", {"message": c["summary"], "type": status}).text = _fix_text(c)
        elif status == "error":
            ET.SubElement(case, "error", {"message": c["summary"], "type": "error"}).text = _fix_text(c)
        elif status == "skip":
            ET.SubElement(case, "skipped", {"message": c["summary"]})
        elif status == "warn":
            ET.SubElement(case, "system-out").text = "WARN: " + _fix_text(c)
    if not checks:  # Jenkins fails a report with no testcase
        ET.SubElement(suite, "testcase", {"classname": "dsv4_doctor", "name": "no checks selected", "time": "0"})
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
