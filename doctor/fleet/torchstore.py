"""The fleet exchange's transport: the doctor's side of the file conversation with the exchange helper.

The helper (probes/dsv4probe_fleet.py) runs in the target interpreter, since this process never imports torch; it
holds the store connection, and the doctor talks to it through files in a private folder (`Exchange`).
"""

from __future__ import annotations

import json
import os
import signal

from .env import FleetEnv
from ..hostio.procs import Helper

FLEET_SCRIPT = "dsv4probe_fleet.py"


class Exchange:
    """One run of the exchange helper; the doctor's side of the file conversation (see dsv4probe_fleet.py)."""

    def __init__(self, env: FleetEnv, python: str, request: dict, key: bytes | None, timeout_s: float):
        from ..engine.probes import child_env
        from ..hostio.procs import Processes

        self.env, self.procs = env, Processes()
        self.dir = self.procs.tempdir("dsv4-doctor-fleet-")
        self.log = os.path.join(self.dir, "helper.log")
        self.answer_path = os.path.join(self.dir, "answer.json")
        self.hard_deadline = _now() + timeout_s
        extra = {"DSV4_DOCTOR_FLEET_KEY": key.hex()} if key else {}
        self._request = dict(request, dir=self.dir)
        self._python = python
        self._env = child_env(timeout_s, extra)
        self.helper: Helper | None = None

    def start(self, hello: dict) -> None:
        from ..engine.probes import PROBE_DIR, launch_argv
        from ..hostio.procs import REQUEST_FILE, start_helper, write_request
        from ..hostio.signals import GATE

        self.write("hello.json", hello)
        # The request in a file of this private folder, as every child's (procs.write_request).
        argv = launch_argv(self._python, str(PROBE_DIR / FLEET_SCRIPT), self.answer_path,
                           write_request(self.path(REQUEST_FILE), self._request))
        with GATE.critical():  # started and tracked in one piece: a signal now interrupts once it is tracked
            self.helper = start_helper(self.procs, argv, self.log, self._env)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def write(self, name: str, data) -> None:
        tmp = self.path(name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.path(name))

    def write_bytes(self, name: str, data: bytes) -> None:
        tmp = self.path(name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, self.path(name))

    def touch(self, name: str) -> None:
        open(self.path(name), "wb").close()

    def read(self, name: str, limit: int = 1 << 22) -> dict | None:
        from ..hostio.procs import read_bounded
        from ..hostio.redact import sanitize
        from ..hostio.safeio import ReadRefused, decode_json

        raw = read_bounded(self.path(name), limit)
        try:
            data = decode_json(raw, "surrogateescape") if raw is not None else None
        except ReadRefused:
            return None
        return sanitize(data) if isinstance(data, dict) else None

    def exited(self) -> bool:
        return self.helper is None or self.helper.exited()

    def wait_for(self, name: str, until: float) -> dict | None:
        """The file's content once the helper wrote it, or None when the helper exited first, time ran out or a stop
        signal ended the wait (signals.GATE.poll)."""
        from ..hostio.signals import GATE

        found: dict = {}

        def written() -> bool:
            exited = self.exited()  # before the read: a helper that exits writes its files first
            found["data"] = self.read(name)
            return found["data"] is not None or exited

        GATE.poll(written, min(until, self.hard_deadline))
        return found.get("data")

    def finish(self, until: float) -> dict:
        """The helper's answer (waiting until `until`), or {"error": ...} when it did not exit by then or a stop
        signal ended the wait."""
        from ..hostio.signals import GATE

        GATE.poll(self.exited, min(until, self.hard_deadline))
        if self.helper is not None and not self.exited():
            self.helper.kill()
            why = (f"was stopped on {signal.Signals(GATE.stopping).name}" if GATE.stopping is not None
                   else "did not finish in time and was stopped")
            return {"error": f"the fleet exchange {why}", "stderr": self.tail()}
        data = self.read_answer()
        return data

    def read_answer(self) -> dict:
        from ..hostio.procs import read_bounded
        from ..hostio.safeio import ReadRefused, decode_json

        raw = read_bounded(self.answer_path, 1 << 20)
        try:
            data = decode_json(raw, "surrogateescape") if raw is not None else None
        except ReadRefused:
            data = None
        if not isinstance(data, dict) or "probe_error" in data:
            err = data.get("probe_error") if isinstance(data, dict) else None
            why = (f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else
                   f"exited with code {self.helper.proc.returncode if self.helper else '?'} without an answer")
            from ..hostio.redact import shorten

            return {"error": f"the fleet exchange failed ({shorten(str(why), 500)})", "stderr": self.tail()}
        return data

    def tail(self, limit: int = 3000) -> str:
        return _tail(self.log, limit)

    def close(self) -> None:
        if self.helper is not None and not self.helper.exited():
            self.helper.kill()
        self.procs.close()


def _tail(path: str, limit: int = 3000) -> str:
    from ..hostio.redact import read_tail

    return read_tail(path, limit)  # a cut first line is dropped: it may end a secret


def _now() -> float:
    import time

    return time.monotonic()
