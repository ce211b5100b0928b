"""The fleet exchange: every rank's report to rank 0 over torch.distributed, one merged report back as the verdict.

Runs in the target interpreter (the doctor's CLI never imports torch), after the rank's own checks. It joins through
torch.distributed's TCPStore on its own port (MASTER_PORT + 1 by default, so `preflight` does not take the job's
port just before exec), hosted by rank 0:

1. Each rank announces itself (`joined/<rank>`). Rank 0 waits for all of them until its deadline: `wait_s` after
   its own import of torch and store are done, so that the whole window is the others' time to join.
2. Every rank also leaves its report in the store (`report/<rank>`): the fallback of step 3.
3. When every rank joined, they form a gloo process group on that store (no NCCL, no GPU needed) and rank 0 gathers
   the reports as byte tensors (no pickle: a rank's bytes are data, never code), merges them (fleetmerge.py), and
   broadcasts the exit code. The collectives have a short timeout of their own.
4. When some rank did not join in time, or the gloo exchange failed (a rank died or stalled after joining: found in
   review, it cost the whole report), rank 0 merges the reports the store holds, names the missing ranks
   (fleet.ranks), and leaves the verdict in the store, where the others read it.

Rank 0 then hands the merged report to its doctor (`merged_path`) and waits until the doctor has written it
(`released_path`) before it releases the other ranks (`released`): under torchrun a rank that exits non-zero makes
the launcher stop the others, which must not cut rank 0's report short. Every wait has a timeout; rank 0 keeps the
store up until the others have left (or a short grace). Answer: {"exit_code", "timings", "mode"}.
Stdlib besides torch. Run as `python dsv4probe_fleet.py OUT REQUEST_JSON`.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE)
sys.path.insert(0, HERE)
from dsv4probe_common import serve  # noqa: E402

import fleetmerge  # noqa: E402

POLL_S = 0.05
GRACE_S = 5.0
RELEASE_S = 60.0  # how long rank 0's doctor may take to write the report
COLLECTIVE_S = 20.0  # gathering a few MB over gloo takes well under a second; longer means a rank is gone
STORE_READ_S = 10.0  # reading the joined ranks' reports from the store, when the gloo exchange did not happen
EXCHANGE_S = COLLECTIVE_S + STORE_READ_S + 5.0  # after rank 0's join window: the exchange, the merge, the write


def _timedelta(seconds):
    from datetime import timedelta

    return timedelta(seconds=max(1.0, seconds))


def _wait_keys(store, keys, deadline):
    """Poll until every key exists or the deadline passes; the keys that exist."""
    while True:
        if store.check(keys):
            return list(keys)
        if time.monotonic() >= deadline:
            return [k for k in keys if store.check([k])]
        time.sleep(POLL_S)


def _gather_bytes(torch, dist, payload, rank, world):
    """Rank 0 receives every rank's bytes (lengths first, then padded uint8 tensors); others get None."""
    data = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else torch.zeros(0, dtype=torch.uint8)
    length = torch.tensor([data.numel()], dtype=torch.int64)
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(world)] if rank == 0 else None
    dist.gather(length, lengths, dst=0)
    size = torch.tensor([data.numel()], dtype=torch.int64)
    dist.all_reduce(size, op=dist.ReduceOp.MAX)
    padded = torch.zeros(int(size.item()), dtype=torch.uint8)
    padded[:data.numel()] = data
    chunks = [torch.zeros(int(size.item()), dtype=torch.uint8) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, chunks, dst=0)
    if rank != 0:
        return None
    return [bytes(chunks[r][:int(lengths[r].item())].tolist()) for r in range(world)]


def _parse(raw):
    try:
        value = json.loads(raw.decode("utf-8"))
        return value if isinstance(value, dict) else None
    except (ValueError, UnicodeDecodeError):
        return None


def answer(request):
    started = time.monotonic()
    rank, world = int(request["rank"]), int(request["world_size"])
    wait_s, grace_s = float(request["wait_s"]), float(request.get("verdict_grace_s", 30.0))
    with open(request["report_path"], "rb") as fh:
        payload = fh.read()
    import torch
    import torch.distributed as dist

    timings = {"import_s": round(time.monotonic() - started, 3)}
    # Rank 0 hosts the store at once; the others wait for it to come up as long as they would wait for its verdict.
    store = dist.TCPStore(request["master_addr"], int(request["port"]), world, rank == 0,
                          _timedelta(wait_s + grace_s), wait_for_workers=False)
    store.set("report/%d" % rank, payload)  # first: whatever happens later, rank 0 can read it from here
    store.set("joined/%d" % rank, b"1")
    t_join = time.monotonic()
    # The join window opens only now, once this rank has torch and the store (found in CI: on a loaded machine rank
    # 0's own import of torch took half of a 5 s --fleet-wait, and a slower rank missed the join): the window the
    # user gives is the window the others have to join. A rank connects only once rank 0 hosts the store, so rank
    # 0's window closes before this rank's leave_by.
    deadline = t_join + wait_s  # rank 0: how long it waits for the others to join
    leave_by = deadline + grace_s  # the others: how long they wait for rank 0's plan and verdict
    timings["setup_s"] = round(t_join - started, 3)
    # The fleet report's bound: rank 0's run time when its window opened, the window, and the exchange's timeouts
    # (the collectives', reading the store, the helper's start and the merge).
    bound_s = float(request.get("elapsed_s") or 0.0) + (t_join - started) + wait_s + EXCHANGE_S
    if rank == 0:
        present_keys = _wait_keys(store, ["joined/%d" % r for r in range(world)], deadline)
        present = sorted(int(k.split("/")[1]) for k in present_keys)
        mode = "gloo" if len(present) == world else "store"
        store.set("mode", json.dumps({"mode": mode, "present": present}))
    else:
        store.wait(["mode"], _timedelta(leave_by - time.monotonic()))
        plan = json.loads(store.get("mode").decode())
        mode, present = plan["mode"], plan["present"]
    timings["join_s"] = round(time.monotonic() - t_join, 3)
    out = {"mode": mode, "rank": rank}
    t_exchange = time.monotonic()
    if mode == "gloo":
        try:
            dist.init_process_group("gloo", store=dist.PrefixStore("dsv4doctor-pg", store), rank=rank,
                                    world_size=world,
                                    timeout=_timedelta(min(COLLECTIVE_S, leave_by - time.monotonic())))
            try:
                gathered = _gather_bytes(torch, dist, payload, rank, world)
                timings["gather_s"] = round(time.monotonic() - t_exchange, 4)
                code = torch.zeros(1, dtype=torch.int64)
                if rank == 0:
                    reports = {r: _parse(raw) for r, raw in enumerate(gathered)}
                    t_merge = time.monotonic()
                    merged, verdict = fleetmerge.merge({r: rep for r, rep in reports.items() if rep}, world,
                                                       [r for r, rep in reports.items() if not rep],
                                                       bool(request.get("strict")), wait_s, bound_s=bound_s)
                    timings["merge_s"] = round(time.monotonic() - t_merge, 5)
                    code[0] = verdict
                    out["merged"] = merged
                    store.set("verdict", str(verdict))  # for a rank whose broadcast fails
                dist.broadcast(code, src=0)
                out["exit_code"] = int(code.item())
            finally:
                dist.destroy_process_group()
        except Exception as exc:  # a rank died or stalled after joining: the store holds what there is
            timings["gloo_error"] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
            mode = out["mode"] = "store"
            if rank == 0 and "merged" in out:  # the merge was done; only the broadcast failed
                out["exit_code"] = int(out["merged"]["summary"]["exit_code"])
                mode = out["mode"] = "gloo"
    if mode != "gloo":
        if rank == 0:
            keys = _wait_keys(store, ["report/%d" % r for r in present], time.monotonic() + STORE_READ_S)
            reports = {}
            for key in keys:
                rep = _parse(store.get(key))
                if rep:
                    reports[int(key.split("/")[1])] = rep
            timings["gather_s"] = round(time.monotonic() - t_exchange, 4)
            t_merge = time.monotonic()
            missing = [r for r in range(world) if r not in reports]
            merged, verdict = fleetmerge.merge(reports, world, missing, bool(request.get("strict")), wait_s,
                                               bound_s=bound_s)
            timings["merge_s"] = round(time.monotonic() - t_merge, 5)
            store.set("verdict", str(verdict))
            out.update(exit_code=verdict, merged=merged)
        elif "exit_code" not in out:
            store.wait(["verdict"], _timedelta(leave_by - time.monotonic()))
            out["exit_code"] = int(store.get("verdict").decode())
    timings["total_s"] = round(time.monotonic() - started, 3)
    out["timings"] = timings
    if rank == 0:
        merged = out.pop("merged")
        merged.setdefault("fleet", {})["timings"] = timings
        merged["fleet"]["mode"] = mode
        merged["fleet"]["wait_s"] = wait_s
        tmp = request["merged_path"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(merged, fh, default=repr)
        os.replace(tmp, request["merged_path"])
        # The others stay until rank 0's report is out; then they may leave (and exit non-zero) without cutting it.
        release_by = time.monotonic() + RELEASE_S
        while not os.path.exists(request["released_path"]) and time.monotonic() < release_by:
            time.sleep(POLL_S)
        store.set("released", b"1")
        others = ["done/%d" % r for r in present if r != 0]
        if others:
            _wait_keys(store, others, time.monotonic() + GRACE_S)
    else:
        try:
            store.wait(["released"], _timedelta(RELEASE_S + GRACE_S))
        except Exception:  # rank 0 is gone: the verdict stands
            pass
        store.set("done/%d" % rank, b"1")
    return out


if __name__ == "__main__":
    serve(answer)
