"""GPUs: what the job will see, and whether the compute capability fits the profile."""

from __future__ import annotations

from dsv4_doctor.model import Check, Source, failed, passed, skipped, warned
from dsv4_doctor.probes import NVIDIA_SMI, TORCH


def _gpu_devices(ctx):
    gpus = ctx.gpus()
    smi = ctx.probe(NVIDIA_SMI)
    torch_probe = ctx.probe(TORCH)
    torch_data = torch_probe.data if torch_probe.ok and isinstance(torch_probe.data, dict) else {}
    torch_devices = torch_data.get("devices", []) if torch_data.get("imported") else []
    driver = gpus[0]["driver_version"] if gpus else None
    # CUDA enumeration order can differ from nvidia-smi's: torch's view is what the job sees.
    devices = torch_devices or gpus
    evidence = {
        "devices": devices,
        "nvidia_smi": gpus,
        "nvidia_smi_error": None if smi.ok else smi.error,
        "driver_version": driver,
        "torch_device_count": torch_data.get("device_count") if torch_data.get("imported") else None,
    }
    if not devices:
        reason = "no GPU visible: " + ("nvidia-smi lists none" if smi.ok else (smi.error or "nvidia-smi failed"))
        reason += "; torch sees no CUDA device" if torch_data.get("imported") else "; torch not importable"
        if ctx.profile.gpu_arch_source == "option":
            reason += f" (rules use --gpu-arch {ctx.profile.gpu_arch})"
        return skipped(reason, **evidence)
    if gpus and torch_data.get("imported") and torch_data.get("cuda_build") and not torch_devices:
        return failed(
            f"the driver lists {len(gpus)} GPU(s) but torch sees none",
            str((torch_data.get("cuda_error") or {}).get("message", "")) or
            "torch.cuda.is_available() is False: CUDA_VISIBLE_DEVICES, a driver older than torch's CUDA build, or a "
            "container started without GPU access.",
            **evidence,
        )
    archs = sorted({d.get("compute_capability") for d in devices if d.get("compute_capability")})
    names = sorted({d.get("name") for d in devices})
    summary = f"{len(devices)} GPU(s): {', '.join(names)} (CC {', '.join(archs)})"
    if driver:
        summary += f", driver {driver}"
    if len(archs) > 1:
        return warned(summary + ": mixed compute capabilities; rules use device 0", **evidence)
    return passed(summary, **evidence)


gpu_devices = Check(
    id="gpu.devices",
    title="GPUs visible to the job",
    explanation="""
        Lists every GPU with its name, compute capability and memory, and the driver version from nvidia-smi.
        torch's view (CUDA enumeration order, CUDA_VISIBLE_DEVICES applied) is what the job sees; nvidia-smi's is
        what the driver sees, and the two can disagree. A host with no GPU is a skip, not a failure: the image can
        still be checked for the GPU it will run on with --gpu-arch. A driver that lists GPUs torch cannot use is a
        failure: a passing driver check does not prove CUDA works.
    """,
    applies_when="always (skips without a GPU)",
    detects="nvidia-smi --query-gpu and torch.cuda device properties",
    sources=(
        Source("nvidia-smi --query-gpu", "https://docs.nvidia.com/deploy/nvidia-smi/index.html"),
        Source("NVIDIA gpu-operator #2685 (validator said Ready while CUDA failed)",
               "https://github.com/NVIDIA/gpu-operator/issues/2685"),
    ),
    probes=(NVIDIA_SMI, TORCH),
    run=_gpu_devices,
)
