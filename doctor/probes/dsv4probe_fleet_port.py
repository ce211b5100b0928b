"""The fleet exchange's port (loaded by dsv4probe_fleet.py, in the target interpreter; stdlib besides torch).

Rank 0 hosts the store on the fleet port. Where torchrun's own store is reachable (its agent's, on MASTER_PORT), the
ranks agree on the port through it: rank 0 binds the preferred one or, when another job holds it (EADDRINUSE), a free
one, and publishes it; the others read it there. Without it (srun), a port in use fails every rank before any job
starts, with the reason.
"""

import time

PROBE_FLEET_PORT = True
POLL_S = 0.1


def _in_use(exc):
    text = str(exc).lower()
    return "eaddrinuse" in text or "address already in use" in text


def fleet_store(dist, Channel, timeout, request, rank, world, scope, key, started):
    """(the fleet's store, a note on its port), or (None, why). The port is --fleet-port or MASTER_PORT + 1. Where
    torchrun's own store is reachable (its agent's, on MASTER_PORT), rank 0 publishes the port it could bind there:
    the preferred one, or, when another job holds it (EADDRINUSE), a free one; the others read it there. Without
    it (srun), a port in use fails every rank before any job starts."""
    addr, port = request["master_addr"], int(request["port"])
    agent_port = request.get("agent_port")
    agent = None
    if agent_port:
        agent = Channel(dist.TCPStore(addr, int(agent_port), world, False, timeout, wait_for_workers=False),
                        scope, key)
    if rank != 0:
        note = None
        if agent is not None:
            give_up = started + float(request["connect_s"])
            raw = None
            while raw is None and time.monotonic() < give_up:
                raw = agent.get("fleet-port")
                if raw is None:
                    time.sleep(POLL_S)
            if raw is None or not raw.isdigit() or not 0 < int(raw) < 65536:
                return None, ("rank 0 published no fleet port in torchrun's store within %.0f s"
                              % float(request["connect_s"]))
            if int(raw) != port:
                note = "the fleet port %d was in use on rank 0's host: port %s, agreed through torchrun's store" % (
                    port, raw.decode())
            port = int(raw)
        return dist.TCPStore(addr, port, world, False, timeout, wait_for_workers=False), note
    note = None
    try:
        store = dist.TCPStore(addr, port, world, True, timeout, wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError or DistNetworkError, by version
        if not _in_use(exc):
            raise
        if agent is None:
            return None, ("the fleet port %d is already in use on rank 0's host (another job's port?), and this "
                          "launch has no torchrun store to agree another one through: no rank starts; give the job "
                          "a port of its own with --fleet-port (docs/fleet.md, \"Ports\")" % port)
        store = dist.TCPStore(addr, 0, world, True, timeout, wait_for_workers=False)
        note = "the fleet port %d was in use on rank 0's host: port %d, agreed through torchrun's store" % (
            port, store.port)
    if agent is not None:
        agent.set("fleet-port", str(store.port).encode())
    return store, note
