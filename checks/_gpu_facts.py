"""What the GPUs hold and why torch may not see them: nvidia-smi's memory and compute-process queries (bounded), the
doctor's own processes among the holders, and the cause of "nvidia-smi lists GPUs, torch sees none" from the facts."""

from __future__ import annotations

import os
import re

from dsv4_doctor.api import NVIDIA_SMI, TORCH, Context, Fix, Phase, Probe, cut, read_bounded

from .fixes import catalogue as fixes

GPU_MEMORY = Probe.command("nvidia-smi:memory", ["nvidia-smi", "--query-gpu=index,uuid,memory.used,memory.free,"
                                                 "memory.total", "--format=csv,noheader,nounits"], timeout_s=15)
GPU_APPS = Probe.command("nvidia-smi:compute-apps", ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,"
                                                     "used_memory", "--format=csv,noheader,nounits"], timeout_s=15)
MEMORY_PROBES = (GPU_MEMORY, GPU_APPS)
MAX_GPUS, MAX_APPS, NAME_CHARS = 64, 256, 120
# What one of the smoke's GPU processes needs (measured on an H200): a CUDA context of about 0.5 GiB, and about 0.1 GiB
# for its tensors and kernels.
CONTEXT_MIB, SMOKE_TENSORS_MIB = 512, 100
PROCESS_MIB = CONTEXT_MIB + SMOKE_TENSORS_MIB
BUSY_FRACTION = 0.5  # gpu.memory warns when other processes hold more than this fraction of a GPU's memory
UNSEEN_MIB = 1024  # used memory beyond the listed processes' that says the holders are outside this container
_UUID = re.compile(r"GPU-[0-9a-fA-F-]{8,64}|MIG-[0-9a-zA-Z/-]{8,80}")
_INT = re.compile(r"[0-9]{1,9}")


def _cells(text: object, limit: int) -> list[list[str]]:
    lines = text.splitlines()[:limit] if isinstance(text, str) else []
    return [[c.strip() for c in line.split(",")] for line in lines if line.strip()]


def _mib(cell: str) -> int | None:
    return int(cell) if _INT.fullmatch(cell) else None


def _name(cell: str) -> str:
    text = "".join(ch for ch in cell if ch.isprintable())[:NAME_CHARS]
    return text or "?"


def memory(ctx: Context) -> dict:
    """{"gpus": [{index, uuid, used_mib, free_mib, total_mib, processes: [...]}], "error": ...}: nvidia-smi's view,
    each process marked `own` when it is one of this doctor's own children (its probes)."""
    mem = ctx.probe(GPU_MEMORY)
    if not mem.ok:
        return {"gpus": [], "error": mem.error or "nvidia-smi failed"}
    gpus: list[dict] = []
    for row in _cells(mem.data, MAX_GPUS):
        if len(row) < 5 or not re.fullmatch(r"[0-9]{1,3}", row[0]):
            continue
        gpus.append({"index": int(row[0]), "uuid": row[1] if _UUID.fullmatch(row[1]) else None,
                     "used_mib": _mib(row[2]), "free_mib": _mib(row[3]), "total_mib": _mib(row[4]), "processes": []})
    apps = ctx.probe(GPU_APPS)
    by_uuid = {g["uuid"]: g for g in gpus if g["uuid"]}
    for row in _cells(apps.data if apps.ok else "", MAX_APPS):
        if len(row) < 4 or row[0] not in by_uuid:
            continue
        pid = int(row[1]) if _INT.fullmatch(row[1]) else None
        by_uuid[row[0]]["processes"].append({"pid": pid, "name": _name(",".join(row[2:-1])), "used_mib": _mib(row[-1]),
                                             "own": pid is not None and own_process(pid)})
    return {"gpus": gpus, "apps_error": None if apps.ok else apps.error}


def own_process(pid: int, me: int | None = None, depth: int = 16) -> bool:
    """Whether `pid` descends from this process (one of the doctor's probes), by /proc's parent links (bounded);
    False where /proc does not show it (another pid namespace: nvidia-smi in a container may show host pids)."""
    me = os.getpid() if me is None else me
    for _ in range(depth):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            stat = (read_bounded(f"/proc/{pid}/stat", 1024) or b"").decode("ascii", "replace")
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def others(gpu: dict) -> tuple[int, list[dict], int]:
    """(MiB held by processes other than the doctor's, those processes, MiB used that no listed process explains)."""
    procs = [p for p in gpu["processes"] if not p["own"]]
    listed = sum(p["used_mib"] or 0 for p in gpu["processes"])
    used = gpu["used_mib"] or 0
    unseen = max(0, used - listed)
    return sum(p["used_mib"] or 0 for p in procs) + unseen, procs, unseen


def holders(gpu: dict) -> str:
    """Who holds a GPU's memory, for a sentence: 'pid 4242 (python3, 139000 MiB)', or held outside this container."""
    _held, procs, unseen = others(gpu)
    parts = [f"pid {p['pid']} ({p['name']}, {p['used_mib']} MiB)" for p in
             sorted(procs, key=lambda p: -(p["used_mib"] or 0))[:3]]
    if len(procs) > 3:
        parts.append(f"{len(procs) - 3} more")
    if unseen >= UNSEEN_MIB:
        parts.append(f"{unseen} MiB by processes nvidia-smi does not list here (held outside this container)")
    return ", ".join(parts) or "no listed process"


# --- "nvidia-smi lists GPUs, torch sees none": the cause from the facts ---------------------------------------------

def _visible(value: str, gpus: list[dict], uuids: list[str]) -> str | None:
    """Why CUDA_VISIBLE_DEVICES=value hides every GPU, or None when its first entry names one (CUDA stops at the first
    entry that does not)."""
    if not value.strip():
        return "CUDA_VISIBLE_DEVICES is set empty, which hides every GPU from CUDA"
    first = value.split(",")[0].strip()
    if re.fullmatch(r"-?[0-9]{1,6}", first):
        if int(first) < 0 or int(first) >= len(gpus):
            return (f"CUDA_VISIBLE_DEVICES={value[:60]} names GPU {first}, which does not exist (nvidia-smi lists "
                    f"{len(gpus)} GPU(s), indexes 0-{len(gpus) - 1}), so CUDA sees none")
        return None
    if first.startswith(("GPU-", "MIG-")):
        if uuids and not any(u.startswith(first) for u in uuids):
            return (f"CUDA_VISIBLE_DEVICES={value[:60]} names {first[:40]}, a UUID no GPU here has, so CUDA sees none")
        return None
    return f"CUDA_VISIBLE_DEVICES={value[:60]} is not a GPU index or UUID, so CUDA sees none"


def visible_fix(gpus: list[dict]) -> Fix:
    ids = ",".join(str(g["index"]) for g in gpus[:16])
    return Fix(f"Unset CUDA_VISIBLE_DEVICES, or set it to the GPUs the job should use (nvidia-smi lists {ids}): "
               "torch itself is fine", [], key="cuda-visible-devices", phase=Phase.RUNTIME, manual=True)


def hidden_cause(ctx: Context, driver_api: int | None = None) -> tuple[str, list[Fix]]:
    """Why torch sees no GPU that nvidia-smi lists: a sentence and its fixes. In order: CUDA_VISIBLE_DEVICES (empty or
    naming no GPU), a driver older than torch's CUDA, a CPU build of torch (the only cause a torch reinstall fixes)."""
    from dsv4_doctor.api import parse_nvidia_smi

    smi = ctx.probe(NVIDIA_SMI)
    gpus = parse_nvidia_smi(smi.data) if smi.ok else []
    torch = ctx.probe(TORCH)
    data = torch.data if torch.ok and isinstance(torch.data, dict) else {}
    visible = data.get("cuda_visible_devices") if "cuda_visible_devices" in data else os.environ.get(
        "CUDA_VISIBLE_DEVICES")
    uuids = [g["uuid"] for g in memory(ctx)["gpus"] if g.get("uuid")]
    if isinstance(visible, str):
        why = _visible(visible, gpus, uuids)
        if why:
            return why, [visible_fix(gpus)]
    cuda = data.get("cuda_build")
    major = re.match(r"([0-9]{1,3})\.([0-9]{1,3})", str(cuda or ""))
    if major and driver_api is not None and driver_api < int(major.group(1)) * 1000:
        return (f"the driver supports CUDA {driver_api // 1000}.{driver_api % 1000 // 10}, older than the CUDA {cuda} "
                f"torch {data.get('version')} is built for"), [fixes.DRIVER]
    if data.get("imported") and not cuda:
        return f"torch {data.get('version')} is a CPU-only build", [fixes.torch(ctx.static)]
    raw = data.get("cuda_error")
    err: dict = raw if isinstance(raw, dict) else {}
    said = cut(str(err.get("message") or "torch.cuda.is_available() is False"), 300)
    return (f"torch {data.get('version')} (CUDA {cuda}) sees no GPU and no cause was found here ({said}): "
            "CUDA_VISIBLE_DEVICES is unset and the driver is new enough; a container started without GPU access "
            "(docker --gpus, the NVIDIA container runtime) shows this"), []
