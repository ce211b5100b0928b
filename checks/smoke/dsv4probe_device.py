"""The device a torch probe runs on (the smoke and the kernel smoke alike): chosen from the request, prepared, and
synchronised; and a free local port for a one-host process group.

Loaded by path (dsv4probe_common.load_module) by the probe scripts beside it. Stdlib only; torch is handed in.
"""

import socket


def cuda_available(torch):
    """torch.cuda.is_available(), False when asking raises (a broken driver)."""
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def select(torch, request, has_cuda):
    """The device the request asks for (`device`: auto, cuda or cpu; `device_index`, modulo the visible GPUs), made
    current and initialised, with its peak-memory counter reset."""
    want = request.get("device", "auto")
    index = int(request.get("device_index", 0) or 0)
    device = torch.device("cuda", index % max(1, torch.cuda.device_count())) if (want != "cpu" and has_cuda) \
        else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)
    return device


def peak_memory_mib(torch, device):
    return round(torch.cuda.max_memory_allocated(device) / 2 ** 20, 2)


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
