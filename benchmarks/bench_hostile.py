"""How long hygiene takes on hostile text: inputs of two sizes through sanitize, redaction and every renderer,
in-process, and whether each shape stays linear.

    python benchmarks/bench_hostile.py [--repeat 5] [--sizes 1000000,8000000]
    python benchmarks/bench_hostile.py --sources [--repeat 3]

--sources times, instead, a whole `dsv4-doctor check --static-only --only mcore.cp-partition-mode` whose
`megatron/core/packed_seq_params.py` is a large source: 10 MB of small functions (cut at the 8 MiB read limit and
parsed up to a whole statement), 7.9 MB of them (read whole), and 9 MB ending in one unterminated string (every cut
inside it fails to parse).

Each input is a worst case for one of the patterns (long runs that a backtracking pattern would rescan from every
position). Hygiene is linear: for each shape the ratio of the times (largest size over smallest, median of the
runs) tracks the ratio of the sizes; a quadratic pattern would show the square of it.
"""

from __future__ import annotations

import argparse
import statistics
import time

from dsv4_doctor.model.core import CheckReport, Profile, Status
from dsv4_doctor.hostio.redact import Redactor, sanitize
from dsv4_doctor.report.dispatch import render
from dsv4_doctor.report.assemble import assemble


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


def measure(text: str, repeat: int) -> tuple[float, float]:
    """(median seconds of the redaction alone, median seconds of sanitize + report + the four renderers)."""
    raw, full = [], []
    for _ in range(repeat):
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
    return statistics.median(raw), statistics.median(full)


def other_paths(size: int) -> dict[str, object]:
    """The other places hostile text of this size reaches: a job command shown by shape, a stderr line, a METADATA
    file read to its headers (its non-ASCII description cut by the read limit)."""
    from dsv4_doctor.job.shape import shape
    from dsv4_doctor.probes.dsv4probe_static_installed import parse_metadata
    from dsv4_doctor.report.output import line_text

    huge = ["python3", "--token=" + "a" * size]
    words = ["--hf-token", "hf_" + "a" * 30, "actor.password=x", "++k=v", "train.py"] * (size // 60)
    metadata = (b"Name: x\nVersion: 1\nRequires-Python: >=3.10\n\n" + "\u00e9".encode() * (size // 2))[: size - 1]
    return {"job command by shape (words)": lambda: shape(words),
            "one huge job word by shape": lambda: shape(huge),
            "stderr line (cap, redact, clean)": lambda: line_text("--token " + "a=" * (size // 2)),
            "METADATA headers, cut description": lambda: parse_metadata(metadata, truncated=True)}


def large_sources() -> dict[str, bytes]:
    functions = b"".join(b"def f%d(x):\n    return x + %d\n\n" % (i, i) for i in range(400000))
    open_string = b"def real():\n    pass\n\nTEXT = '''" + b"x" * 9_000_000
    return {"10 MB of functions (cut at 8 MiB)": functions[:10_000_000].rsplit(b"\n\n", 1)[0] + b"\n",
            "7.9 MB of functions (read whole)": functions[:7_900_000].rsplit(b"\n\n", 1)[0] + b"\n",
            "9 MB ending in an open string": open_string}


def time_sources(repeat: int) -> None:
    """The doctor's whole static check of a Megatron whose packed_seq_params.py is one of large_sources()."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    print(f"{'megatron/core/packed_seq_params.py':<40} {'median s':>9}  row")
    for name, data in large_sources().items():
        with tempfile.TemporaryDirectory() as tmp:
            core = os.path.join(tmp, "megatron", "core")
            os.makedirs(core)
            for init in (os.path.join(tmp, "megatron", "__init__.py"), os.path.join(core, "__init__.py")):
                open(init, "w").close()
            with open(os.path.join(core, "packed_seq_params.py"), "wb") as fh:
                fh.write(data)
            env = dict(os.environ, PYTHONPATH=tmp)
            argv = [sys.executable, "-m", "dsv4_doctor", "check", "--static-only", "--only", "mcore.cp-partition-mode",
                    "-f", "json", "--python", sys.executable]
            runs, row = [], {}
            for _ in range(repeat):
                start = time.perf_counter()
                done = subprocess.run(argv, capture_output=True, env=env, timeout=600)
                runs.append(time.perf_counter() - start)
                row = json.loads(done.stdout)["checks"][0]
        print(f"{name:<40} {statistics.median(runs):>9.2f}  {row['status']}: {row['summary'][:90]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="1000000,8000000", help="comma-separated input sizes in characters")
    ap.add_argument("--size", type=int, help="one size only (no ratio)")
    ap.add_argument("--sources", action="store_true", help="time the static check of large source files instead")
    args = ap.parse_args()
    if args.sources:
        time_sources(args.repeat)
        return
    sizes = [args.size] if args.size else [int(s) for s in args.sizes.split(",")]
    head = "".join(f" {'redact s @' + format(n, ','):>18} {'report s @' + format(n, ','):>18}" for n in sizes)
    ratio = f"  {'size x':>6} {'redact x':>8} {'report x':>8}" if len(sizes) > 1 else ""
    print(f"{'input':<34}{head}{ratio}")
    for name in inputs(1):
        times = [measure(inputs(n)[name], args.repeat) for n in sizes]
        cells = "".join(f" {r:>18.3f} {f:>18.3f}" for r, f in times)
        if len(sizes) > 1:
            (r0, f0), (r1, f1) = times[0], times[-1]
            cells += f"  {sizes[-1] / sizes[0]:>6.1f} {r1 / max(r0, 1e-9):>8.1f} {f1 / max(f0, 1e-9):>8.1f}"
        print(f"{name:<34}{cells}", flush=True)
    print(f"\n{'other paths':<34}" + "".join(f" {'s @' + format(n, ','):>18}" for n in sizes)
          + (f"  {'size x':>6} {'time x':>8}" if len(sizes) > 1 else ""))
    for name in other_paths(1):
        times = []
        for n in sizes:
            fn = other_paths(n)[name]
            runs = []
            for _ in range(args.repeat):
                calls, start = 0, time.perf_counter()
                while calls == 0 or time.perf_counter() - start < 0.05:  # a fast path is timed over many calls
                    fn()  # type: ignore[operator]
                    calls += 1
                runs.append((time.perf_counter() - start) / calls)
            times.append(statistics.median(runs))
        cells = "".join(f" {t:>18.5f}" for t in times)
        if len(sizes) > 1:
            cells += f"  {sizes[-1] / sizes[0]:>6.1f} {times[-1] / max(times[0], 1e-9):>8.1f}"
        print(f"{name:<34}{cells}", flush=True)


if __name__ == "__main__":
    main()
