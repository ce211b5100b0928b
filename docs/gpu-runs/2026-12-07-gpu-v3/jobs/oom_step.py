"""A training step that needs more GPU memory than is left: another process (filler.py of 2026-12-04, started by the
case) holds most of the GPU. The step allocates its weights, then one activation of ACT_GIB GiB (default 16: more
than an H100 or an H200 has free beside a filler holding 93 %). torch's caching allocator raises
torch.OutOfMemoryError, whose message names every process's usage on the GPU (c10/cuda/CUDACachingAllocator.cpp:
"Process N has X GiB memory in use"). Nothing here prints an error text itself."""

import os

import torch

rank = int(os.environ.get("RANK", "0"))
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
free, total = torch.cuda.mem_get_info()
print(f"rank {rank}: GPU {torch.cuda.get_device_name()}: {free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB",
      flush=True)
hidden = 4096
model = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden))
model = model.to(device="cuda", dtype=torch.bfloat16)
print(f"rank {rank}: model on the GPU: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters",
      flush=True)
tokens = int(float(os.environ.get("ACT_GIB", "16")) * 2**30) // (2 * hidden)  # bf16: 2 bytes each
print(f"rank {rank}: step 1: a micro-batch of {tokens} tokens", flush=True)
batch = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
loss = model(batch).float().pow(2).mean()
loss.backward()
print(f"rank {rank}: step 1 done: loss {loss.item():.4f}", flush=True)
