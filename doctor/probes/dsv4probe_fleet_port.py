"""The fleet exchange's port and the job's identity on it (loaded by dsv4probe_fleet_exchange.py, in the target
interpreter; stdlib besides torch).

Rank 0 hosts the store on the fleet port. Where torchrun's own store is reachable (its agent's, on MASTER_PORT: every
agent of one job shares it, whatever address each was given), rank 0 publishes there the port it could bind (the
preferred one or, when another job holds it, EADDRINUSE, a free one) and the job's identity (its scope and digest),
and every other rank takes both from there: two spellings of one master address are one job. Without it (srun), a
port in use fails every rank before any job starts, with the reason.
"""

import json
import re
import secrets
import time

from dsv4probe_common import ReadRefused, decode_json  # loaded by path before this part (dsv4probe_fleet_exchange.py)

PROBE_FLEET_PORT = True
POLL_S = 0.1
CONNECT_S = 5.0  # one try to reach the port torchrun's store names (an earlier run's value names a closed port)
AGENT_SCOPE = "dsv4doctor/agent"
AGENT_KEY = "identity"
SEEN_SCOPE = "dsv4doctor/seen"  # each rank's identity as it saw it, so that a rank of another identity is named
_SCOPE = re.compile(r"dsv4doctor/[A-Za-z0-9._-]{1,120}")
_JOB = re.compile(r"[0-9a-f]{16}")


def _in_use(exc):
    text = str(exc).lower()
    return "eaddrinuse" in text or "address already in use" in text


def _timedelta(seconds):
    from datetime import timedelta

    return timedelta(seconds=max(1.0, seconds))


def read_agreed(agent):
    """Rank 0's entry in torchrun's store ({"scope", "job", "port", "nonce", "seen"}), or None (absent, malformed)."""
    raw = agent.get(AGENT_KEY)
    try:
        data = decode_json(raw) if raw is not None and len(raw) < 8192 else None
    except ReadRefused:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("scope"), str) or not _SCOPE.fullmatch(data["scope"]) \
            or not isinstance(data.get("job"), str) or not _JOB.fullmatch(data["job"]) \
            or not isinstance(data.get("port"), int) or not 0 < data["port"] < 65536 \
            or not isinstance(data.get("nonce"), str):
        return None
    return data


class Agreement:
    """This rank's view of rank 0's entry in torchrun's store. An entry left by an earlier run of the job (a restart:
    torchrun's store outlives its workers) is replaced when this run's rank 0 publishes; `refresh` reads it again."""

    def __init__(self, agent):
        self.agent, self.current = agent, None

    def refresh(self):
        """The entry when it is new since the last look, else None."""
        data = read_agreed(self.agent)
        if data is not None and (self.current is None or data["nonce"] != self.current["nonce"]):
            self.current = data
            return data
        return None


def connect(dist, addr, port, world, seconds):
    try:
        return dist.TCPStore(addr, port, world, False, _timedelta(seconds), wait_for_workers=False)
    except Exception:  # noqa: BLE001 - torch raises RuntimeError or DistNetworkError, by version
        return None


def fleet_store(dist, Channel, timeout, request, rank, world, scope, key, started):
    """(the fleet's store, a note on its port, the Agreement or None), or (None, why, None). The port is
    --fleet-port or MASTER_PORT + 1. Where torchrun's own store is reachable (its agent's, on MASTER_PORT), rank 0
    publishes there the port it could bind (the preferred one, or, when another job holds it, EADDRINUSE, a free
    one) and the job's scope and identity; the others take all three from there. Without it (srun), a port in use
    fails every rank before any job starts."""
    addr, port = request["master_addr"], int(request["port"])
    agent_port = request.get("agent_port")
    agent = None
    if agent_port:
        agent = Channel(dist.TCPStore(addr, int(agent_port), world, False, timeout, wait_for_workers=False),
                        AGENT_SCOPE, key)
    if rank != 0:
        if agent is None:
            return dist.TCPStore(addr, port, world, False, timeout, wait_for_workers=False), None, None
        give_up = started + float(request["connect_s"])
        agreement = Agreement(agent)
        while time.monotonic() < give_up:
            data = agreement.refresh() or agreement.current
            if data is not None:
                store = connect(dist, addr, data["port"], world, min(CONNECT_S, max(1.0, give_up - time.monotonic())))
                if store is not None:
                    return store, _port_note(port, data["port"]), agreement
                agreement.current = None  # an earlier run's port, closed: look again
            time.sleep(POLL_S)
        return None, ("rank 0 published no reachable fleet port in torchrun's store within %.0f s"
                      % float(request["connect_s"])), None
    note = None
    try:
        store = dist.TCPStore(addr, port, world, True, timeout, wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError or DistNetworkError, by version
        if not _in_use(exc):
            raise
        if agent is None:
            return None, ("the fleet port %d is already in use on rank 0's host (another job's port?), and this "
                          "launch has no torchrun store to agree another one through: no rank starts; give the job "
                          "a port of its own with --fleet-port (docs/fleet.md, \"Ports\")" % port), None
        store = dist.TCPStore(addr, 0, world, True, timeout, wait_for_workers=False)
        note = _port_note(port, store.port)
    if agent is not None:
        agent.set(AGENT_KEY, json.dumps({"scope": scope, "job": request.get("job"), "port": store.port,
                                         "nonce": secrets.token_hex(12),
                                         "seen": request.get("identity") or {}}).encode())
    return store, note, None


def _port_note(wanted, port):
    if int(port) == int(wanted):
        return None
    return "the fleet port %d was in use on rank 0's host: port %d, agreed through torchrun's store" % (wanted, port)


def note_seen(Channel, store, key, rank, identity):
    """This rank's identity as it saw it, under a name every job's ranks share, so that rank 0 can name a rank of
    another identity and that rank can name rank 0's."""
    Channel(store, SEEN_SCOPE, key).set(str(rank), json.dumps(identity or {})[:4096].encode())


def read_seen(Channel, store, key, rank):
    raw = Channel(store, SEEN_SCOPE, key).get(str(rank))
    try:
        data = decode_json(raw) if raw is not None and len(raw) <= 4096 else None
    except ReadRefused:
        return None
    return data if isinstance(data, dict) else None
