"""A data-parallel step on several ranks (gloo; with a GPU, every rank on the one GPU): each rank loads its own data
shard (DATA_DIR/shard-<rank>.pt, torch.load), then joins the process group (timeout: PG_TIMEOUT_S, default 15) and
all-reduces. The case leaves one shard out, so that rank dies of its own error before it joins, and the other ranks
wait for it until their process-group timeout. (With NCCL the waiting ranks would print the NCCL watchdog's lines
instead; those need two GPUs, which are not lent, so that class stays covered by the public excerpts only.) Nothing
here prints an error text itself."""

import datetime
import os

import torch
import torch.distributed as dist

rank = int(os.environ.get("RANK", "0"))
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1)) \
    if torch.cuda.is_available() else torch.device("cpu")
print(f"rank {rank}: loading {os.environ['DATA_DIR']}/shard-{rank}.pt", flush=True)
shard = torch.load(os.path.join(os.environ["DATA_DIR"], f"shard-{rank}.pt"))
print(f"rank {rank}: {shard.numel()} samples; joining the process group (gloo, {device})", flush=True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT_S", "15"))))
grad = shard.to(device).float().mean().reshape(1)
dist.all_reduce(grad)
print(f"rank {rank}: step 1 done: mean gradient {grad.item() / dist.get_world_size():.4f}", flush=True)
dist.destroy_process_group()
