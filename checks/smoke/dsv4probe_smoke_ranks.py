"""The smoke's multi-rank harness: tier 1 (and tier 2 at CP N) in N real processes, NCCL on N GPUs or gloo on the
CPU, each a child running dsv4probe_smoke.py with a `worker` request.

A part of the smoke probe (dsv4probe_smoke.py), loaded by path (dsv4probe_common.load_module).
"""

import os
import subprocess
import sys
import time

from dsv4probe_common import (  # in sys.modules: it loads this part
    ANSWER_LIMIT, LIB, ReadRefused, cache_fds, launch_argv, load_json, load_module, read_tail, request_beside,
    tail_text)

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_smoke_batch", "dsv4probe_smoke_tier2", "dsv4probe_device"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_smoke_batch import WINDOW, Attention, judge, make_batch, per_rank_errors, rank_forward, reference
from dsv4probe_smoke_tier2 import tier2_run
from dsv4probe_device import free_port


# --------------------------------------------------------------------------------------------------- tier 1, real CP

def process_count(cp, backend, n_gpus, cpus):
    """How many real processes run the CP ranks: the largest divisor of cp the machine can hold (one per GPU with
    NCCL; at most the CPU count, and 8, with gloo). Each process simulates cp / P consecutive ranks."""
    limit = n_gpus if backend == "nccl" else max(2, min(cpus or 2, 8))
    return max(d for d in range(1, min(cp, limit) + 1) if cp % d == 0)


def launch_workers(request, cp, procs, backend, deadline, tier2_reference):
    """`procs` real processes for `cp` ranks; rank 0 answers. Every child is in this probe's process group, so a
    timeout kills them."""
    port = free_port()
    here = os.path.join(HERE, "dsv4probe_smoke.py")  # the probe script: a worker request makes it a rank
    outdir = os.path.dirname(os.path.abspath(sys.argv[1]))
    children, outs = [], []
    env = dict(os.environ, DSV4_DOCTOR_PROBE_LIB=LIB, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1",
               GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    env.pop("DSV4_DOCTOR_PROBE_TIMEOUT", None)
    for rank in range(procs):
        out = os.path.join(outdir, "rank%d.json" % rank)
        worker = dict(request, worker={"rank": rank, "world": procs, "cp": cp, "backend": backend,
                                       "init": "tcp://127.0.0.1:%d" % port, "tier2_reference": tier2_reference})
        log = open(os.path.join(outdir, "rank%d.log" % rank), "wb")
        children.append(subprocess.Popen(launch_argv(here, out, request_beside(out, worker)), stdout=log,
                                         stderr=subprocess.STDOUT, env=env, pass_fds=cache_fds()))
        outs.append(out)
    codes = []
    for p in children:
        remaining = max(1.0, deadline - time.monotonic())
        try:
            codes.append(p.wait(timeout=remaining))
        except subprocess.TimeoutExpired:
            for q in children:
                q.kill()
            return {"ok": False, "error": "the %d-process run did not finish in time" % procs}
    try:
        answer = load_json(outs[0], ANSWER_LIMIT)
    except ReadRefused:
        tail = ""
        try:
            raw, size = read_tail(os.path.join(outdir, "rank0.log"), 16384)  # the probe's own log
            text = raw.decode("utf-8", "backslashreplace")
            # Cut where a word ends: a secret's part would pass the doctor's redaction.
            tail = tail_text(text, 1500) if size <= 16384 else tail_text(text, min(1500, len(text) - 1))
        except ReadRefused:
            pass
        return {"ok": False, "error": "rank 0 gave no answer (exit codes %s)" % codes, "log_tail": tail}
    answer["exit_codes"] = codes
    return answer


def worker_main(request, store=None):
    """One process of the multi-process run: a child of launch_workers (`init`), or a fleet rank's own probe on its
    CP group's store (`store`, fleet_run), with its device (`device_index`) and a timeout on every collective."""
    import torch
    import torch.distributed as dist

    w = request["worker"]
    rank, world = w["rank"], w["world"]
    device = torch.device("cpu")
    if w["backend"] == "nccl" or w.get("device") == "cuda":
        index = int(w.get("device_index", rank))
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    kwargs = {"init_method": w["init"]} if store is None else {"store": store}
    if w.get("timeout_s"):
        from datetime import timedelta

        kwargs["timeout"] = timedelta(seconds=max(1.0, float(w["timeout_s"])))
    t0 = time.monotonic()
    dist.init_process_group(w["backend"], rank=rank, world_size=world, **kwargs)
    init_s = time.monotonic() - t0
    try:
        return worker_tier1(torch, dist, device, request, rank, world, int(w.get("cp", world)), init_s)
    finally:
        try:
            dist.barrier()
            dist.destroy_process_group()
        except Exception:
            pass


def worker_tier1(torch, dist, device, request, proc, nprocs, cp, init_s):
    """Process `proc` of `nprocs` holds CP ranks [proc*k, (proc+1)*k), k = cp / nprocs: a contiguous block of rows."""
    batch = make_batch(torch, cp, device)  # every process builds the same batch and keeps only its rows
    rows = batch["total"] // cp
    k = cp // nprocs
    ranks = range(proc * k, (proc + 1) * k)
    lo, hi = proc * k * rows, (proc + 1) * k * rows
    k_local, v_local = batch["k"][lo:hi].contiguous(), batch["v"][lo:hi].contiguous()
    attention = Attention(torch, device)
    answer = {"rank": proc, "world": nprocs, "cp": cp, "ranks_per_process": k, "backend": dist.get_backend(),
              "init_s": round(init_s, 3), "comparisons": {}, "attention_backend": attention.backend}
    # All-gather of K/V for causal attention.
    gathered_k = [torch.empty_like(k_local) for _ in range(nprocs)]
    gathered_v = [torch.empty_like(v_local) for _ in range(nprocs)]
    dist.all_gather(gathered_k, k_local)
    dist.all_gather(gathered_v, v_local)
    full_k, full_v = torch.cat(gathered_k), torch.cat(gathered_v)
    # Boundary exchange for the window: the first rank of a block needs the previous block's last W-1 rows.
    tail = WINDOW - 1
    tails_k = [torch.empty_like(k_local[-tail:]) for _ in range(nprocs)]
    tails_v = [torch.empty_like(v_local[-tail:]) for _ in range(nprocs)]
    dist.all_gather(tails_k, k_local[-tail:].contiguous())
    dist.all_gather(tails_v, v_local[-tail:].contiguous())
    if proc > 0:
        win_k, win_v = torch.cat([tails_k[proc - 1], k_local]), torch.cat([tails_v[proc - 1], v_local])
        offset = lo - tail
    else:
        win_k, win_v, offset = k_local, v_local, lo
    local = {
        "causal": torch.cat([rank_forward(torch, attention, batch, "causal", r, rows, full_k, full_v, 0)
                             for r in ranks]),
        "window": torch.cat([rank_forward(torch, attention, batch, "window", r, rows, win_k, win_v, offset)
                             for r in ranks]),
    }
    # A fleet rank judges the gathered output too, and its own rows apart (each rank reports its own CP rank).
    judge_here = proc == 0 or request["worker"].get("judge_all")
    for kind in ("causal", "window"):
        parts = [torch.empty_like(local[kind]) for _ in range(nprocs)]
        dist.all_gather(parts, local[kind].contiguous())
        if judge_here:
            out = torch.cat(parts)
            ref = reference(torch, batch, kind)
            cmp_ = judge(torch, out, ref, batch["real"], cp)
            cmp_["per_rank"] = per_rank_errors(torch, out, ref, batch["real"], rows, cp)
            answer["comparisons"][kind] = cmp_
        if proc == 0:
            simulated = torch.cat([rank_forward(torch, attention, batch, kind, r, rows, batch["k"], batch["v"], 0)
                                   for r in range(cp)])
            cmp_["max_abs_diff_vs_single_device"] = float((out[:batch["real"]].float().cpu() -
                                                           simulated[:batch["real"]].float().cpu()).abs().max().item())
    if request.get("tier2") and request["worker"].get("tier2_reference") and k == 1:
        answer["tier2"] = tier2_run(torch, device, cp, proc, request, request["worker"]["tier2_reference"], dist)
    answer["ok"] = all(c["ok"] for c in answer["comparisons"].values()) if judge_here else True
    return answer
