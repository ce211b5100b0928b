"""Accepted warnings: a warning the team has looked at and accepts, so that a `--strict` gate passes a healthy image
and still fails on anything new. An acceptance names a check id and why; it comes from `--accept ID[:REASON]`
(repeatable), the `DSV4_DOCTOR_ACCEPT` variable (entries separated by `;`), or `accept = [...]` under
`[tool.dsv4-doctor]` in the first `dsv4-doctor.toml` or `pyproject.toml` holding that table, found from the working
directory upward. The report names where each acceptance came from, since an upward search can find a file someone
planted.

An accepted warning stays in the report, marked accepted with its reason. A failure is never accepted. An id that
matches no check is a usage error; an acceptance that matched no warning in this run is said in the report, so a
stale one is visible."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..hostio.safeio import NoTomlParser, ReadRefused, load_toml
from ..model.core import CheckReport, Status, UsageError

VARIABLE = "DSV4_DOCTOR_ACCEPT"
FILES = ("dsv4-doctor.toml", "pyproject.toml")
TABLE = "dsv4-doctor"
MAX_ACCEPTANCES = 100
MAX_REASON = 200
MAX_FILE = 1 << 20
MAX_LEVELS = 64  # folders looked at upward
CHECK_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,40}\.[a-z0-9][a-z0-9_.-]{0,60}")


@dataclass(frozen=True)
class Acceptance:
    id: str
    reason: str
    origin: str  # "--accept", "DSV4_DOCTOR_ACCEPT", or the file's path

    def to_dict(self) -> dict:
        return {"id": self.id, "reason": self.reason, "from": self.origin}


def parse(entry: object, origin: str) -> Acceptance:
    """`ID[:REASON]` (or a table {id, reason} from a file): the id a check id, the reason printable and short."""
    if isinstance(entry, Mapping):
        check_id, reason = entry.get("id"), entry.get("reason", "")
    elif isinstance(entry, str):
        check_id, _, reason = entry.partition(":")
    else:
        raise UsageError(f"{origin}: an acceptance is 'CHECK_ID[:REASON]', got {type(entry).__name__}")
    if not isinstance(check_id, str) or not CHECK_ID.fullmatch(check_id.strip()):
        raise UsageError(f"{origin}: {str(check_id)[:80]!r} is not a check id (`dsv4-doctor list` shows them)")
    if not isinstance(reason, str) or len(reason) > MAX_REASON or not reason.isprintable():
        raise UsageError(f"{origin}: the reason for {check_id} must be printable text of at most {MAX_REASON} "
                         "characters")
    return Acceptance(check_id.strip(), reason.strip(), origin)


def config_file(start: str) -> str | None:
    """The first dsv4-doctor.toml, or pyproject.toml with a [tool.dsv4-doctor] table, from `start` upward."""
    found = _config(start)
    return found[0] if found is not None else None


def _config(start: str) -> tuple[str, dict] | None:
    """That file and its table, each file read once."""
    folder = os.path.abspath(start)
    for _ in range(MAX_LEVELS):
        for name in FILES:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                table = _table(path)
                if table is not None or name == FILES[0]:
                    return path, table or {}
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    return None


def _table(path: str) -> dict | None:
    """The [tool.dsv4-doctor] table of a TOML file (a dsv4-doctor.toml may also hold `accept` at its top), or None.
    A file that cannot be read or parsed is a usage error naming it: a gate must not pass on a broken config."""
    try:
        data = load_toml(path, MAX_FILE)
    except NoTomlParser:
        raise UsageError(f"{path}: reading it needs tomllib (Python 3.11+) or tomli") from None
    except ReadRefused as exc:
        raise UsageError(f"{path}: not read as TOML ({exc})") from None
    table = data.get("tool", {}).get(TABLE) if isinstance(data.get("tool"), dict) else None
    if table is None and os.path.basename(path) == FILES[0] and "accept" in data:
        table = data
    return table if isinstance(table, dict) else None


def gather(given: Sequence[str] | None, environ: Mapping[str, str], cwd: str) -> tuple[Acceptance, ...]:
    """Every acceptance of this run, the command line's first, each id once (the first source wins)."""
    found = [parse(entry, "--accept") for entry in given or ()]
    found += [parse(entry, VARIABLE) for entry in environ.get(VARIABLE, "").split(";") if entry.strip()]
    config = _config(cwd)
    if config is not None:
        path, table = config
        entries = table.get("accept", [])
        if not isinstance(entries, list):
            raise UsageError(f"{path}: [tool.{TABLE}] accept must be a list of 'CHECK_ID[:REASON]'")
        found += [parse(entry, path) for entry in entries]
    if len(found) > MAX_ACCEPTANCES:
        raise UsageError(f"at most {MAX_ACCEPTANCES} acceptances")
    seen: dict[str, Acceptance] = {}
    for acceptance in found:
        seen.setdefault(acceptance.id, acceptance)
    return tuple(seen.values())


def check_known(acceptances: Sequence[Acceptance], known: Sequence[str]) -> None:
    """An acceptance for no check of this doctor (a typo, a plugin not installed) is a usage error."""
    ids = set(known)
    for acceptance in acceptances:
        if acceptance.id not in ids:
            raise UsageError(f"{acceptance.origin}: no check {acceptance.id!r} to accept; see `dsv4-doctor list`")


def apply(rows: Sequence[CheckReport], acceptances: Sequence[Acceptance]) -> tuple[list[CheckReport], list[dict]]:
    """The rows with each accepted warning marked, and what each acceptance did (`applied`: it matched a warning;
    else the status it found, so a stale acceptance, or one that met a failure, is said)."""
    from dataclasses import replace

    by_id = {a.id: a for a in acceptances}
    marked = [replace(row, accepted={"reason": by_id[row.id].reason, "from": by_id[row.id].origin})
              if row.id in by_id and row.status is Status.WARN else row for row in rows]
    status = {row.id: row.status.value for row in rows}
    said = [{**a.to_dict(), "applied": status.get(a.id) == Status.WARN.value, "status": status.get(a.id, "not run")}
            for a in acceptances]
    return marked, said
