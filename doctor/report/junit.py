"""JUnit XML: one testcase per check, exactly one status child each (GitLab shows a testcase with two as failed)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from .shown import shown

if TYPE_CHECKING:
    from ..model.report import Report, Row

# Characters XML 1.0 cannot carry, even escaped; they become visible escapes.
_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text) -> str:
    return _ILLEGAL.sub(lambda m: "\\u%04x" % ord(m.group(0)), shown(text, ""))


def _fix_text(c: Row) -> str:
    lines = [c.summary]
    if c.details:
        lines += ["", c.details]
    for fix in c.fixes:
        lines += ["", "Fix: " + fix.description, *("  " + cmd for cmd in fix.commands)]
    return xml_safe("\n".join(lines))


def _el(parent, tag: str, attrs: dict) -> ET.Element:
    return ET.SubElement(parent, tag, {k: xml_safe(v) for k, v in attrs.items()})


def render_junit(report: Report) -> str:
    checks = report.checks
    summary = report.summary
    failures = summary.count("fail") + (sum(1 for c in checks if c.status.value == "warn" and not c.accepted)
                                        if summary.strict else 0)
    suite = ET.Element("testsuite", {
        "name": "dsv4-doctor", "tests": str(max(1, len(checks))), "failures": str(failures),
        "errors": str(summary.count("error")), "skipped": str(summary.count("skip")),
        "time": f"{summary.duration_s:.3f}",
    })
    props = ET.SubElement(suite, "properties")
    for key, value in report.profile.items():
        if value is not None and not isinstance(value, dict):
            shown = ("true" if value else "false") if isinstance(value, bool) else value  # not Python's spelling
            _el(props, "property", {"name": f"profile.{key}", "value": shown})
    _el(props, "property", {"name": "schema", "value": report.schema})
    for c in checks:
        area = c.id.split(".")[0]
        case = _el(suite, "testcase", {"classname": f"dsv4_doctor.{area}", "name": c.id,
                                       "time": f"{c.duration_s:.3f}"})
        status = c.status.value
        if status == "fail" or (status == "warn" and summary.strict and not c.accepted):
            _el(case, "failure", {"message": c.summary, "type": status}).text = _fix_text(c)
        elif status == "error":
            _el(case, "error", {"message": c.summary, "type": "error"}).text = _fix_text(c)
        elif status == "skip":
            _el(case, "skipped", {"message": c.summary})
        elif status == "warn":
            ET.SubElement(case, "system-out").text = "WARN: " + _fix_text(c)
    if not checks:  # Jenkins fails a report with no testcase
        _el(suite, "testcase", {"classname": "dsv4_doctor", "name": "no checks selected", "time": "0"})
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
