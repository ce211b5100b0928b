"""The smoke across fleet ranks: each of N consecutive fleet ranks' probes plays one CP rank of its group, joined
through fleet rank 0's store.

A part of the smoke probe (dsv4probe_smoke.py), loaded by path (dsv4probe_common.load_module).
"""

import json
import os
import socket
import time

from dsv4probe_common import (  # in sys.modules: it loads this part
    ReadRefused, cut_text, decode_json, load_module, stage)

HERE = os.path.dirname(os.path.realpath(__file__))
load_module("dsv4probe_smoke_ranks", HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_smoke_ranks import worker_main


# ------------------------------------------------------------------------------------- tier 1, across fleet ranks

FLEET_POLL_S = 0.05
FLEET_FORWARD_S = 10.0  # of the probe's time, what is kept for the forward after the join wait


def _timedelta(seconds):
    from datetime import timedelta

    return timedelta(seconds=max(1.0, seconds))


def _ranges(ranks):
    out, ranks = [], sorted(ranks)
    for r in ranks:
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in out)


def fleet_store(torch, plan, deadline):
    """Fleet rank 0 serves the store every CP group joins through (its key prefix per group), from the start of its
    probe: the others reach their forward at their own pace. None on the other ranks."""
    if plan.get("rank") != 0:
        return None, None
    import torch.distributed as dist

    try:
        return dist.TCPStore(plan["store_host"], int(plan["store_port"]), None, True,
                             _timedelta(deadline - time.monotonic()), wait_for_workers=False), None
    except Exception as exc:
        return None, "fleet rank 0 could not serve the smoke's rendezvous on port %s: %s: %s" % (
            plan["store_port"], type(exc).__name__, cut_text(str(exc), 300))


def _peer(raw):
    """A member's `joined` value: {} when it is no JSON object (every member reads the same values, so all agree)."""
    try:
        value = decode_json(raw)
    except ReadRefused:
        return {}
    return value if isinstance(value, dict) else {}


def _choose_backend(device, peers):
    """NCCL when every member of the group is on its own GPU; gloo on the CPU, or when two members share one GPU
    (NCCL refuses two ranks on one device). Every member decides from the same list, so they agree."""
    if device.type != "cuda" or not all(p.get("cuda") for p in peers):
        return "gloo", ("--device cpu" if device.type != "cuda" else "a member of the group runs on the CPU")
    seats = [(p.get("host"), p.get("device")) for p in peers]
    if len(set(seats)) < len(seats):
        return "gloo", "members of the group share a GPU, and NCCL refuses two ranks on one device"
    return "nccl", "every member on its own GPU"


def fleet_run(torch, request, device, deadline, tier2_reference, served):
    """This fleet rank plays CP rank `cp_rank` of its group of `cp` consecutive fleet ranks: the role one process of
    launch_workers plays (worker_main), joined through fleet rank 0's store. Every wait has a deadline: a member that
    does not join is named, not waited for past the probe's time."""
    import torch.distributed as dist

    plan = request["fleet_cp"]
    cp, cp_rank, first = int(request["cp"]), int(plan["cp_rank"]), int(plan["first_rank"])
    members = list(range(first, first + cp))
    out = {"ran": True, "fleet": {"rank": plan["rank"], "world": plan["world"], "group": plan["group"],
                                  "cp_rank": cp_rank, "members": _ranges(members)},
           "processes": cp, "ranks_per_process": 1, "process_backend": None}
    store, why = served
    t0 = time.monotonic()
    join_by = max(t0 + 1.0, deadline - FLEET_FORWARD_S)
    if why:
        out["join_error"] = why
        return out
    try:
        if store is None:
            store = dist.TCPStore(plan["store_host"], int(plan["store_port"]), None, False,
                                  _timedelta(join_by - time.monotonic()), wait_for_workers=False)
    except Exception as exc:
        out["join_error"] = ("the smoke's rendezvous on fleet rank 0 (port %s) did not answer: %s: %s"
                             % (plan["store_port"], type(exc).__name__, cut_text(str(exc), 300)))
        return out
    try:
        group = dist.PrefixStore("dsv4doctor-smoke/%d" % int(plan["group"]), store)
        group.set("joined/%d" % cp_rank, json.dumps({"cuda": device.type == "cuda", "host": socket.gethostname(),
                                                     "device": device.index}))
        keys = ["joined/%d" % i for i in range(cp)]
        stage("CP rank %d of %d: waiting for fleet ranks %s to join" % (cp_rank, cp, _ranges(members)))
        while not group.check(keys) and time.monotonic() < join_by:
            time.sleep(FLEET_POLL_S)
        missing = [members[i] for i, k in enumerate(keys) if not group.check([k])]
        out["join_s"] = round(time.monotonic() - t0, 3)
        if missing:
            out["join_error"] = "CP group incomplete: rank %s did not join (within %.0f s)" % (
                _ranges(missing), join_by - t0)
            return out
        backend, reason = _choose_backend(device, [_peer(group.get(k)) for k in keys])
        out["process_backend"], out["backend_reason"] = backend, reason
        if backend == "nccl":
            # A collective that waits past the timeout raises instead of hanging (the watchdog alone would abort).
            for key, value in (("TORCH_NCCL_BLOCKING_WAIT", "1"), ("NCCL_NVLS_ENABLE", "0"),
                               ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
                os.environ.setdefault(key, value)
        if dist.is_initialized():  # tier 2's CP=1 run left its one-process group
            dist.destroy_process_group()
        worker = {"rank": cp_rank, "world": cp, "cp": cp, "backend": backend, "device": device.type,
                  "device_index": device.index or 0, "judge_all": True,
                  "timeout_s": max(1.0, deadline - time.monotonic() - 1.0),
                  # Megatron's CP groups on gloo CUDA tensors are not what a job runs: tier 2 CP=N only with NCCL
                  # or on the CPU.
                  "tier2_reference": tier2_reference if (backend == "nccl" or device.type == "cpu") else None}
        stage("CP rank %d of %d on fleet ranks %s (%s)" % (cp_rank, cp, _ranges(members), backend))
        run = worker_main(dict(request, worker=worker), dist.PrefixStore("pg", group))
        out.update(run)
        out["fleet"]["cp_rank"] = cp_rank
    except Exception as exc:
        out["error"] = "%s: %s" % (type(exc).__name__, cut_text(str(exc), 500))
    finally:
        try:
            store.add("done", 1)
            if plan.get("rank") == 0:  # the others may still be joining: keep the store up until all are done
                stage("keeping the smoke's rendezvous up until all %s fleet ranks are done" % plan["world"])
                while store.add("done", 0) < int(plan["world"]) and time.monotonic() < deadline:
                    time.sleep(FLEET_POLL_S)
        except Exception:
            pass
    return out
