"""Shared by the triage tests: the real CLI in a subprocess, and the contract's JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCHEMA = Path(__file__).resolve().parent.parent / "doctor" / "schema" / "triage-1.schema.json"


def triage(*args: str, stdin: bytes | None = b"", timeout: float = 60, env: dict | None = None
           ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsv4_doctor", "triage", *args], input=stdin, capture_output=True,
                          timeout=timeout, env=env)


def triage_json(*args: str, **kw) -> dict:
    done = triage("-f", "json", *args, **kw)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result = json.loads(done.stdout)
    validate(result)
    return result


def validate(result: dict) -> None:
    import jsonschema

    jsonschema.validate(result, json.loads(SCHEMA.read_text(encoding="utf-8")))
