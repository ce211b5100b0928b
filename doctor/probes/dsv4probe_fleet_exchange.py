"""The fleet exchange itself (its entry, dsv4probe_fleet.py, says what it moves, when and how it is signed): rank 0's
side (_rank0: the plan and its heartbeat, the reports gathered, the verdict published, the acknowledgements) and every
other rank's (_other: the plan read, the report sent, the verdict taken and acknowledged, the release awaited), over
the store fleet_store opens (dsv4probe_fleet_port) with signed values (dsv4probe_fleet_channel). Stdlib besides
torch; loaded by path (dsv4probe_common.load_module).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path; so are the
# exchange's parts (load_module, from the library's folder).
from dsv4probe_common import ReadRefused, decode_json, load_module, read_bounded

load_module("dsv4probe_fleet_port")
load_module("dsv4probe_fleet_channel")
from dsv4probe_fleet_port import connect, fleet_store, note_seen, read_seen
from dsv4probe_fleet_channel import MAX_PLAN_S, MAX_VALUE, Channel, _seconds, _timedelta  # noqa: F401
from dsv4probe_fleet_channel import wait_for_acks

import json
import secrets
import time


POLL_S = 0.05
OTHERS_POLL_S = 0.1  # the other ranks' polling of rank 0's store: 1,000 ranks make 10,000 requests a second
SWEEP_S = 2.0
HEARTBEAT_S = 0.5
GRACE_S = 5.0
RELEASE_S = 60.0  # how long rank 0's doctor may take to write the report after the acknowledgements


def _write(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _json(raw):
    try:
        value = decode_json(raw)
        return value if isinstance(value, dict) else None
    except (ReadRefused, TypeError):  # TypeError: no bytes at all
        return None


def _read_file(path):
    try:
        return read_bounded(path, MAX_VALUE + 1)[0]
    except ReadRefused:
        return None


def answer(request):
    started = time.monotonic()
    rank, world = int(request["rank"]), int(request["world_size"])
    folder = request["dir"]
    key = bytes.fromhex(os.environ.pop("DSV4_DOCTOR_FLEET_KEY", "") or "")
    hello = _read_file(os.path.join(folder, "hello.json")) or b"{}"
    import torch.distributed as dist

    timings = {"import_s": round(time.monotonic() - started, 3)}
    scope = request["scope"]
    store, port_note, agreement = fleet_store(dist, Channel, _timedelta(float(request["connect_s"])), request, rank,
                                              world, scope, key, started)
    if store is None:
        _write(os.path.join(folder, "plan.json"), {"error": port_note})
        return {"error": port_note, "port_in_use": int(request["port"]), "timings": timings}
    timings["store_s"] = round(time.monotonic() - started, 3)
    if port_note:
        timings["port_note"] = port_note
    note_seen(Channel, store, key, rank, dict(request.get("identity") or {}, job=request.get("job")))
    root = Channel(store, scope, key)
    if rank == 0:
        return _rank0(request, root, store, key, hello, started, timings)
    return _other(request, root, store, key, hello, started, timings, agreement)


def _rank0(request, root, store, key, hello, started, timings):
    world, folder = int(request["world_size"]), request["dir"]
    t0 = time.monotonic()
    nonce = secrets.token_hex(12)
    report_by = t0 + float(request["join_s"])
    verdict_by = report_by + float(request["verdict_s"])
    ack_by = verdict_by + float(request["ack_s"])
    seq = [0]

    def beat():
        now = time.monotonic()
        seq[0] += 1
        root.set("plan", json.dumps({"v": 1, "nonce": nonce, "world_size": world, "seq": seq[0],
                                     "job": request.get("job"),
                                     "report_left": report_by - now, "verdict_left": verdict_by - now,
                                     "ack_left": ack_by - now}).encode())
        return now

    ch = Channel(store, root.scope + "/" + nonce, key)
    ch.set("hello/0", hello)
    if request.get("fingerprint_node"):
        info = _json(hello) or {}
        ch.set("fp/" + request["fingerprint_node"], json.dumps(info.get("fingerprint")).encode())
    last = beat()
    _write(os.path.join(folder, "plan.json"), {"nonce": nonce, "report_by": report_by, "verdict_by": verdict_by,
                                               "ack_by": ack_by, "port_note": timings.get("port_note")})
    os.makedirs(os.path.join(folder, "reports"), exist_ok=True)
    pending, hellos, rejected = set(range(1, world)), {}, {}

    read_s = [0.0]

    def take(r):
        before = ch.rejected
        t_read = time.monotonic()
        value = ch.get("report/%d" % r)
        read_s[0] += time.monotonic() - t_read
        if value is None:
            if ch.rejected > before:
                rejected[r] = "its report failed the authentication or size check"
            return
        path = os.path.join(folder, "reports", "%d.json" % r)
        with open(path + ".tmp", "wb") as fh:  # whole or not at all: the doctor reads them as they come
            fh.write(value)
        os.replace(path + ".tmp", path)
        pending.discard(r)
        rejected.pop(r, None)

    # Each rank, once its report is in, takes a ticket (`count`) and names itself under it (`arrival/<n>`): rank 0
    # reads each arrival once, O(N) store requests in all. A sweep over the pending ranks every SWEEP_S covers a
    # ticket someone overwrote.
    next_ticket, last_sweep = 1, time.monotonic()
    while pending and time.monotonic() < report_by:
        if time.monotonic() - last >= HEARTBEAT_S:
            last = beat()
        count = ch.store.add(ch.scope + "/count", 0)
        while next_ticket <= count and ch.has("arrival/%d" % next_ticket):
            raw = ch.get("arrival/%d" % next_ticket)
            next_ticket += 1
            try:
                r = int(raw) if raw is not None else -1
            except ValueError:
                r = -1
            if r in pending:
                take(r)
        if time.monotonic() - last_sweep >= SWEEP_S:
            for r in sorted(pending):
                if ch.has("report/%d" % r):
                    take(r)
            last_sweep = time.monotonic()
        time.sleep(POLL_S)
    for r in range(1, world):
        raw = ch.get("hello/%d" % r)
        if raw is not None:
            hellos[r] = _json(raw)
    # A rank not heard from that left its identity on this port under another one: named with the values it saw.
    seen = {}
    for r in sorted(pending)[:64]:
        theirs = read_seen(Channel, store, key, r)
        if theirs is not None and theirs.get("job") != request.get("job"):
            seen[str(r)] = theirs
    timings["gather_s"] = round(time.monotonic() - t0, 4)
    timings["read_s"] = round(read_s[0], 4)  # rank 0's own time reading reports from its store
    _write(os.path.join(folder, "gathered.json"), {"missing": sorted(pending), "hellos": {str(r): h for r, h in
                                                                                          hellos.items()},
                                                   "rejected": {str(r): w for r, w in rejected.items()},
                                                   "seen": seen, "timings": dict(timings)})
    verdict = None
    while time.monotonic() < verdict_by - 2 * HEARTBEAT_S:
        if time.monotonic() - last >= HEARTBEAT_S:
            last = beat()
        raw = _read_file(os.path.join(folder, "verdict.json"))
        data = _json(raw) if raw else None
        if data and isinstance(data.get("exit_code"), int):
            verdict = int(data["exit_code"])
            break
        time.sleep(POLL_S)
    # Published early enough that a rank whose deadline is a heartbeat early still reads it in time.
    published = verdict is not None and time.monotonic() < verdict_by - 2 * HEARTBEAT_S
    present = [r for r in range(1, world) if r not in pending]
    # Per rank, with the challenge from its hello: the verdict of this run, not one replayed from an earlier run.
    messages = {r: json.dumps({"exit_code": verdict, "nonce": nonce,
                               "challenge": (hellos.get(r) or {}).get("challenge")}).encode() for r in present}

    def publish():
        for r, message in messages.items():
            ch.set("verdict/%d" % r, message)

    if published:
        publish()
    timings["verdict_s"] = round(time.monotonic() - t0, 4)
    acked = wait_for_acks(ch, present, ack_by, verdict_by, publish, POLL_S, HEARTBEAT_S) if published else set()
    _write(os.path.join(folder, "acks.json"), {"published": published, "acknowledged": sorted(acked),
                                               "not_acknowledged": [r for r in range(1, world) if r not in acked],
                                               "rejected_values": root.rejected + ch.rejected})
    release_by = time.monotonic() + RELEASE_S
    while not os.path.exists(os.path.join(folder, "released")) and time.monotonic() < release_by:
        time.sleep(POLL_S)
    ch.set("released", b"1")
    done_by = time.monotonic() + GRACE_S
    while time.monotonic() < done_by and not all(ch.has("done/%d" % r) for r in present):
        time.sleep(POLL_S)
    timings["total_s"] = round(time.monotonic() - started, 3)
    return {"exit_code": verdict if published else 1, "published": published, "timings": timings}


def _other(request, root, store, key, hello, started, timings, agreement=None):
    rank, world, folder = int(request["rank"]), int(request["world_size"]), request["dir"]
    give_up = started + float(request["connect_s"])
    challenge = secrets.token_hex(12)
    plan, t_read = None, None
    job, looked = request.get("job"), 0.0
    while plan is None:
        if agreement is not None and time.monotonic() - looked >= 1.0:
            # The job's identity is rank 0's, from torchrun's store; read again while no plan comes (an earlier
            # run's entry is replaced when this run's rank 0 publishes).
            looked = time.monotonic()
            agreement.refresh()
            agreed = agreement.current
            if agreed is not None and (agreed["scope"] != root.scope or agreed["job"] != job):
                if agreed["port"] != int(getattr(store, "port", 0) or 0):
                    moved = connect(torch_dist(), request["master_addr"], agreed["port"], world, 5.0)
                    store = moved if moved is not None else store
                root, job = Channel(store, agreed["scope"], key), agreed["job"]
        raw = root.get("plan")
        t = time.monotonic()
        data = _json(raw) if raw else None
        # Another job's plan is never this rank's, whatever its world size.
        if data and data.get("v") == 1 and data.get("world_size") == world and isinstance(data.get("nonce"), str) \
                and data.get("job") == job:
            plan, t_read = data, t
            break
        if agreement is None and t - looked >= 1.0:
            # No launcher store to agree through: rank 0, which hosts this port, left its identity here. Another
            # one is this job's rank 0 under other values (or another job's): said now, with both sides' values.
            looked = t
            theirs = read_seen(Channel, store, key, 0)
            if theirs is not None and theirs.get("job") != job:
                why = "rank 0 is on the fleet port under another job identity"
                split = {"rank0": theirs, "own": dict(request.get("identity") or {}, job=job)}
                _write(os.path.join(folder, "plan.json"), {"error": why, "identity_split": split})
                return {"missed": why, "identity_split": split, "timings": timings}
        if t >= give_up:
            why = ("no valid plan from rank 0 within %.0f s (when rank 0's report says the fleet port was in use, "
                   "give the job a port of its own with --fleet-port)" % float(request["connect_s"])
                   + (" (%d value(s) failed the authentication check)" % root.rejected if root.rejected else ""))
            _write(os.path.join(folder, "plan.json"), {"error": why})
            return {"missed": why, "timings": timings}
        time.sleep(OTHERS_POLL_S)
    # Early by at most one heartbeat, never late: the plan was written at most HEARTBEAT_S before it was read.
    report_by = t_read + _seconds(plan.get("report_left")) - HEARTBEAT_S
    verdict_by = t_read + _seconds(plan.get("verdict_left")) - HEARTBEAT_S
    ack_by = t_read + _seconds(plan.get("ack_left")) - HEARTBEAT_S
    nonce = plan["nonce"]
    ch = Channel(store, root.scope + "/" + nonce, key)
    info = _json(hello) or {}
    if "job" in info:
        info["job"] = job  # the job's identity as agreed (rank 0's, through torchrun's store), as its report says
    ch.set("hello/%d" % rank, json.dumps(dict(info, challenge=challenge)).encode())
    node = request.get("fingerprint_node")
    leader_fp, leader_state = None, "not needed"
    if node and request.get("leader"):
        ch.set("fp/" + node, json.dumps(info.get("fingerprint")).encode())
    elif node:
        # Half of the report window at most: a rank whose leader never comes needs the rest for its own checks.
        leader_state, fp_by = "absent", t_read + max(0.0, report_by - t_read) / 2
        while time.monotonic() < fp_by:
            raw = ch.get("fp/" + node)
            if raw is not None:
                leader_fp, leader_state = _json(b'{"fp": %s}' % raw), "read"
                leader_fp = (leader_fp or {}).get("fp")
                break
            time.sleep(OTHERS_POLL_S)
    _write(os.path.join(folder, "plan.json"), {"nonce": nonce, "report_by": report_by, "verdict_by": verdict_by,
                                               "ack_by": ack_by, "leader_fingerprint": leader_fp,
                                               "leader": leader_state, "job": job,
                                               "agreed": agreement is not None})
    timings["plan_s"] = round(time.monotonic() - started, 3)
    report = None
    while time.monotonic() < report_by:
        if os.path.exists(os.path.join(folder, "report.json.ready")):
            report = _read_file(os.path.join(folder, "report.json"))
            break
        time.sleep(POLL_S)
    if report is None:
        why = "this rank's report was not ready by rank 0's report deadline"
        return {"missed": why, "timings": timings}
    ch.set("report/%d" % rank, report)
    ticket = ch.store.add(ch.scope + "/count", 1)
    ch.set("arrival/%d" % ticket, str(rank).encode())
    timings["reported_s"] = round(time.monotonic() - started, 3)
    verdict = None
    while time.monotonic() < verdict_by:
        raw = ch.get("verdict/%d" % rank)
        data = _json(raw) if raw else None
        if data and data.get("nonce") == nonce and data.get("challenge") == challenge and \
                isinstance(data.get("exit_code"), int):
            if time.monotonic() < verdict_by:
                verdict = int(data["exit_code"])
            break
        time.sleep(OTHERS_POLL_S)
    if verdict is None:
        why = ("no verdict from rank 0 by the fleet's verdict deadline"
               + (" (%d value(s) failed the authentication check)" % ch.rejected if ch.rejected else ""))
        _linger(ch, rank, ack_by + RELEASE_S)
        return {"missed": why, "timings": timings}
    # The rank's own process acknowledges, not this helper's read: it takes the verdict from verdict.json and
    # says so (`taken`) before the acknowledgement deadline, or it is not acknowledged (and does not start).
    _write(os.path.join(folder, "verdict.json"), {"exit_code": verdict, "ack_by": ack_by})
    taken = False
    while time.monotonic() < ack_by:
        if os.path.exists(os.path.join(folder, "taken")):
            taken = True
            break
        time.sleep(POLL_S)
    timings["verdict_s"] = round(time.monotonic() - started, 3)
    if not taken:
        _linger(ch, rank, ack_by + RELEASE_S)
        return {"late": "this rank's process did not take the verdict before the acknowledgement deadline",
                "timings": timings}
    ch.set("ack/%d" % rank, b"1")
    ch.store.add(ch.scope + "/acks", 1)
    _linger(ch, rank, ack_by + RELEASE_S)
    timings["total_s"] = round(time.monotonic() - started, 3)
    return {"exit_code": verdict, "acknowledged": True, "timings": timings}


def torch_dist():
    import torch.distributed as dist

    return dist


def _linger(ch, rank, until):
    """Stay until rank 0 released the fleet (its report is written) or the bound passed."""
    while time.monotonic() < until:
        try:
            if ch.has("released"):
                break
        except Exception:  # rank 0 is gone: nothing more to wait for
            break
        time.sleep(OTHERS_POLL_S)
    try:
        ch.set("done/%d" % rank, b"1")
    except Exception:
        pass

