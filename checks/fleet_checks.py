"""The fleet rows: written by the fleet merge of a multi-rank run (`check --distributed` under torchrun or srun), never
by one rank. They are declared here so that `list`, `explain` and the rules table (docs/rules.md) show them with their
sources, like every other rule; their run functions are never called (only_with = "fleet")."""

from __future__ import annotations

from collections.abc import Callable

from dsv4_doctor.api import FLEET_DRIFT_TITLE, FLEET_RANKS_TITLE, FLEET_SOURCES, Check, Context, Result, check, errored

SOURCES = tuple(FLEET_SOURCES)


def _merged_only(ctx: Context) -> Result:
    return errored("fleet rows are written by the fleet merge, not by one rank")


def fleet_row(id: str, title: str, detects: str) -> Callable[[Callable[[Context], Result]], Check]:
    """A fleet row's declaration: every one applies in fleet mode only, with the fleet's sources."""
    return check(id, title, detects=detects, sources=SOURCES, only_with="fleet",
                 applies_when="fleet mode (check --distributed, torchrun or srun with more than one rank)")


@fleet_row("fleet.ranks", FLEET_RANKS_TITLE,
           "which ranks' reports reached rank 0 over torch.distributed before the deadline")
def fleet_ranks(ctx: Context) -> Result:
    """In fleet mode rank 0 publishes one timeline when its exchange starts: a report deadline (the run's time
    budget plus the launcher's skew), a verdict deadline and an acknowledgement deadline. It waits for every
    rank's report until the report deadline, then writes the report with what it has: every rank that did not
    report, whose report was rejected (too large, too deep, an unknown status, a wrong rank id, a failed
    authentication), or that did not acknowledge the verdict is named with its reason and, when the launcher
    or the rank said it, its host, and the check fails. A rank that misses a deadline exits 1 without
    starting anything and says why on its stderr.
    """
    return _merged_only(ctx)


@fleet_row("fleet.drift", FLEET_DRIFT_TITLE,
           "per-rank package versions and RECORD hashes, source hashes, driver, Python, check statuses")
def fleet_drift(ctx: Context) -> Result:
    """One node with a stale image is enough for a NaN or a hang (an older cudnn-frontend, another Megatron
    commit). Every rank reports a fingerprint: each inspected distribution's version and the hash of its RECORD
    (which lists every installed file's hash; entries about the install itself, such as direct_url.json and
    .pyc files, are left out), the hash of every source file the rules read with ast (Megatron,
    verl, the frontend), the driver and Python versions; and its checks' statuses. The check fails when ranks
    differ in any of them, naming the odd ranks, their hosts and both values. Ranks are compared one by one,
    not host by host, since two ranks on one host can have different PYTHONPATHs. For the same reason the
    import probes that only a host's local rank 0 runs answer for the host's other ranks only when their
    fingerprints match local rank 0's; a rank whose fingerprint differs runs those checks itself, within the
    fleet's timeline, so its rows say what is wrong there. An even split names both sides and assumes neither
    is healthy. A rank whose static facts did not arrive says so in its fingerprint, which then differs.
    """
    return _merged_only(ctx)


CHECKS = [fleet_drift, fleet_ranks]
