"""How long hygiene takes on hostile text: 1 MB inputs through sanitize, redaction and every renderer, in-process.

    python benchmarks/bench_hostile.py [--repeat 5] [--size 1000000]

Each input is a worst case for one of the patterns (long runs that a backtracking pattern would rescan from every
position). Hygiene is linear: the goal is well under a second for each input, median of the runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

from dsv4_doctor.model import CheckReport, Profile, Status
from dsv4_doctor.redact import Redactor, sanitize
from dsv4_doctor.render import render
from dsv4_doctor.report import assemble


def inputs(size: int) -> dict[str, str]:
    return {
        "assignment runs (a=a=...)": "a=" * (size // 2),
        "one long word": "a" * size,
        "URL without @": "https://" + "u" * size,
        "PEM begin markers": "-----BEGIN RSA PRIVATE KEY-----" * (size // 31),
        "unterminated OSC escapes": "\x1b]" * (size // 2),
        "lone surrogates": "\ud800" * (size // 2),
        "workflow commands": "\n::error::x" * (size // 11),
        "JWT-shaped runs (eyJaaaaaaaa-...)": "eyJaaaaaaaa-" * (size // 12),
        "scheme words (Token aaaa...)": "Token " * (size // 6),
        "URL userinfo with many @": "https://" + "u@" * (size // 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--size", type=int, default=1_000_000)
    args = ap.parse_args()
    print(f"{'input (' + str(args.size) + ' chars)':<32} {'redact raw s':>13} {'report+4 formats s':>19}")
    for name, text in inputs(args.size).items():
        raw, full = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            Redactor({})(text, limit=10 ** 9)  # no cap: the patterns alone
            raw.append(time.perf_counter() - start)
            start = time.perf_counter()
            row = CheckReport(id="x.y", title="t", status=Status.FAIL, summary=text, details=text,
                              evidence=sanitize({"stderr_tail": text}))
            report = assemble(Profile(), [row], [], {"target_python": {}}, False, 0.0)
            for fmt in ("text", "json", "markdown", "junit"):
                render(report, fmt)
            full.append(time.perf_counter() - start)
        print(f"{name:<32} {statistics.median(raw):>13.3f} {statistics.median(full):>19.3f}")


if __name__ == "__main__":
    main()
