"""A rank's own side of the fleet's deadlines and bounds: its report within the limit rank 0 applies before it
crosses the store, its process's own acknowledgement of the verdict before the acknowledgement deadline, and the
rank that came back too late (exit 5: it does not start)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .torchstore import Exchange, _now

if TYPE_CHECKING:
    from ..model.report import Report
    from .env import FleetEnv


def say(message: str) -> None:
    from ..report.output import say as out

    for line in message.split("\n"):
        out(line)


def _obj(value) -> dict:
    return value if isinstance(value, dict) else {}


def bounded_report(report: Report) -> bytes:
    """This rank's report as it crosses the store, within the limit rank 0 applies (admit.MAX_REPORT_BYTES): one
    over it is replaced by a short typed report that says so, so the store never carries it and rank 0 names this
    rank and the reason."""
    import json

    from .admit import MAX_REPORT_BYTES, oversize_report

    payload = json.dumps(report.to_dict(), separators=(",", ":")).encode("utf-8", "surrogateescape")
    if len(payload) <= MAX_REPORT_BYTES:
        return payload
    fleet_rank = _obj(report.environment.get("fleet_rank"))
    say(f"dsv4-doctor: this rank's report is {len(payload):,} bytes, over the fleet's {MAX_REPORT_BYTES:,}-byte "
         "limit: it sends a short report saying so instead")
    return json.dumps(oversize_report(len(payload), fleet_rank)).encode()


def _take_verdict(exchange: Exchange, ack_by: float) -> bool:
    """This process's own acknowledgement: the helper passes the verdict on (verdict.json) and acknowledges it on
    the store only when this process took it (the `taken` file) before the acknowledgement deadline. A process
    stopped (SIGSTOP, a swapped-out node) until after the deadline finds it passed and takes nothing. The wait is the
    gate's (signals.GATE.poll): a stop signal ends it."""
    from ..hostio.signals import GATE

    taken: list[bool] = []

    def verdict_or_exit() -> bool:
        data = exchange.read("verdict.json")
        if data is not None and isinstance(data.get("exit_code"), int):
            if _now() < ack_by:
                exchange.touch("taken")
                taken.append(True)
            return True
        return exchange.exited()

    GATE.poll(verdict_or_exit, ack_by, every=0.02)
    return bool(taken)


def _late(env: FleetEnv, report: Report) -> int:
    """A rank that came back after the acknowledgement deadline (it was stopped or starved): the fleet did not
    count it, so it does not start, whatever the verdict was."""
    from ..model.core import ExitCode
    from ..report.dispatch import output_width, render
    from ..report.output import write_stderr

    say(f"dsv4-doctor (rank {env.rank} of {env.world_size}): not starting: this rank's process took the fleet's "
         "verdict only after the acknowledgement deadline (it was stopped or starved), so rank 0 did not count it; "
         "its own report follows")
    write_stderr(render(report, "text", width=output_width(False)))
    say(f"dsv4-doctor (rank {env.rank}): exit {int(ExitCode.LATE)}, because this rank missed the fleet's "
         "acknowledgement deadline")
    return int(ExitCode.LATE)
