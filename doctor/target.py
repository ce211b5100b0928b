"""The target interpreter named by --python, resolved as every run resolves it, and how many probes run at a time:
what the early start needs before it imports the session (earlystart.py), so base-layer and light."""

from __future__ import annotations

import os
import sys

from .model import UsageError


def workers() -> int:
    return max(4, min(8, 2 * (os.cpu_count() or 2)))


def resolve_python(value: str | None) -> str:
    if value is None:
        return sys.executable
    import shutil

    from .fix import plain_value

    if not plain_value(value):
        # The path is printed in reports and in the fix script: it must stay one plain line.
        raise UsageError(f"--python {value!r}: the path has control or line-break characters")

    if os.path.isdir(value):  # a virtual environment's folder: name its interpreter
        inside = [os.path.join(value, *p) for p in (("bin", "python"), ("bin", "python3"), ("Scripts", "python.exe"))]
        hint = next((p for p in inside if os.access(p, os.X_OK)), None)
        raise UsageError(f"--python {value!r} is a folder, not an interpreter" + (
            f": pass --python {hint}" if hint else ": pass the interpreter's path (a venv's bin/python)"))
    found = value if os.sep in value else shutil.which(value)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise UsageError(f"--python: no executable interpreter at {value!r}")
    found = os.path.abspath(found)
    if not plain_value(found):
        raise UsageError(f"--python {found!r}: the path has control or line-break characters")
    try:
        found.encode("utf-8")  # the fix script's PY= and the reports must name these exact bytes
    except UnicodeEncodeError:
        raise UsageError(f"--python {found!r}: the path is not valid UTF-8") from None
    return found
