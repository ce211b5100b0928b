"""Another process that holds GPU memory, for the doctor's GPU-memory cases: `filler.py READY_FILE full|GIB`.
full: allocates in chunks from 16 GiB down to 1 MiB, each size until it fails, so the GPU is held to its last MiB;
GIB: holds that many GiB (1 GiB chunks); PCT%: holds that share of the GPU's total memory (so a case means the
same on an 80 GiB H100 and a 140 GiB H200). Then writes READY_FILE (what it holds, what is left free) and sleeps until
killed. The caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so every chunk is one cudaMalloc."""

import json
import os
import signal
import sys
import time

os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
import torch  # noqa: E402

ready, mode = sys.argv[1], sys.argv[2]
t = time.time()
torch.cuda.init()
torch.zeros(1, device="cuda")  # the context first: its memory is this process's too
held, chunks = 0, []
MIB = 1 << 20
if mode == "full":
    size = 16 << 30
    while size >= MIB:
        try:
            chunks.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
            held += size
        except (torch.cuda.OutOfMemoryError, RuntimeError):  # torch raises either, by where the failure comes
            size //= 2
else:
    want = int(float(mode[:-1]) / 100 * torch.cuda.mem_get_info()[1]) if mode.endswith("%") \
        else int(float(mode) * (1 << 30))
    while held < want:
        n = min(1 << 30, want - held)
        chunks.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        held += n
free, total = torch.cuda.mem_get_info()
info = {
    "pid": os.getpid(),
    "mode": mode,
    "held_mib": held // MIB,
    "chunks": len(chunks),
    "free_mib": free // MIB,
    "total_mib": total // MIB,
    "seconds": round(time.time() - t, 1),
}
with open(ready + ".tmp", "w") as f:
    json.dump(info, f)
os.replace(ready + ".tmp", ready)
print("filler ready:", json.dumps(info), flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
