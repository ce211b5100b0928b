"""A log line's time, where it states one, as seconds since the epoch (UTC when the line names no zone): Python
logging and ISO 8601 (`2024-05-01 12:00:00,123`, `2024-05-01T12:00:00.123456+02:00`, NCCL's and torch's
`[2024-05-01 12:00:00]`), glog (`E0501 12:00:00.123456`, also torch's C++ `[E501 12:00:00.123456000 ...]`, which
names no year: the year of the log file's mtime is taken) and an epoch at the start (`1714564800.123`).

Only the first 96 characters are looked at: a time is stated at the start of a line, after the prefixes."""

from __future__ import annotations

import calendar
import re

HEAD = 96
_ISO = re.compile(r"(?<!\d)(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
_GLOG = re.compile(r"(?<![A-Za-z0-9])[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})")
_EPOCH = re.compile(r"\[?(1[4-9]\d{8}|2\d{9})(\.\d{1,9})?\]?(?!\d)")


def _seconds(year: int, month: int, day: int, hour: int, minute: int, second: int, fraction: str | None,
             zone: str | None) -> float | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 60):
        return None
    try:
        base = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    value = base + (float("0." + fraction) if fraction else 0.0)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "+" else 1
        digits = zone[1:].replace(":", "")
        value += sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)
    return value


def parse(text: str, year: int = 1970) -> float | None:
    """The time `text` (a line without its launcher prefixes) states near its start, or None. `year`: for glog
    times, which name none."""
    head = text[:HEAD]
    m = _ISO.search(head)
    if m:
        y, mo, d, h, mi, s, frac, zone = m.groups()
        return _seconds(int(y), int(mo), int(d), int(h), int(mi), int(s), frac, zone)
    m = _GLOG.search(head)
    if m:
        mo, d, h, mi, s, frac = m.groups()
        return _seconds(year, int(mo), int(d), int(h), int(mi), int(s), frac, None)
    m = _EPOCH.match(head.lstrip())
    if m:
        return float(m.group(1) + (m.group(2) or ""))
    return None
