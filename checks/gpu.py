"""GPUs: what the job will see, and whether the compute capability fits the profile."""

from __future__ import annotations

from dsv4_doctor.model import Check, Context, Result, Source, failed, passed, skipped, warned
from dsv4_doctor.probes import NVIDIA_SMI, TORCH

from . import fixes


def _gpu_devices(ctx: Context) -> Result:
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
        return skipped(reason, evidence=evidence)
    if gpus and torch_data.get("imported") and not torch_devices:
        raw_error = torch_data.get("cuda_error")
        cuda_error: dict = raw_error if isinstance(raw_error, dict) else {}
        why = ("torch is a CPU-only build" if not torch_data.get("cuda_build") else
               str(cuda_error.get("message", "")) or
               "torch.cuda.is_available() is False: CUDA_VISIBLE_DEVICES, a driver older than torch's CUDA build, or "
               "a container started without GPU access.")
        return failed(f"the driver lists {len(gpus)} GPU(s) but torch sees none", why, evidence=evidence)
    archs = sorted({str(d.get("compute_capability")) for d in devices if d.get("compute_capability")})
    names = sorted({str(d.get("name")) for d in devices})
    summary = f"{len(devices)} GPU(s): {', '.join(names)} (CC {', '.join(archs)})"
    if driver:
        summary += f", driver {driver}"
    if len(archs) > 1:
        return warned(summary + ": mixed compute capabilities; rules use device 0", evidence=evidence)
    return passed(summary, evidence=evidence)


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


CP_ARCHS = {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_103a"}


def _gpu_arch(ctx: Context) -> Result:
    profile = ctx.profile
    evidence = {"gpu_arch": profile.gpu_arch, "source": profile.gpu_arch_source, "cp": profile.cp,
                "dsa_backend": profile.dsa_backend}
    if profile.cc is None:
        return skipped("GPU arch unknown: no GPU detected and no --gpu-arch; the arch rules were skipped "
                       "(pass --gpu-arch 9.0, 10.0 or 10.3 for the GPU the job runs on)", evidence=evidence)
    cc, arch = profile.cc, profile.gpu_arch
    detected = [g.get("compute_capability") for g in ctx.gpus()]
    evidence["detected"] = detected
    if profile.cp > 1 and cc not in CP_ARCHS:
        return failed(
            f"Unsupported GPU compute capability {arch} for CSA CP CuTe kernels; supported architectures: "
            "sm_90a, sm_100a, sm_103a.",
            "Megatron's CP layout kernels compile only for these; the first CP forward raises this RuntimeError.",
            fixes=[fixes.SUPPORTED_GPU], evidence=evidence)
    if profile.dsa_backend == "cudnn" and cc[0] < 9:
        return failed(f"dsa_kernel_backend=cudnn requires SM90+ (Hopper or later); CC {arch}",
                      "Megatron rejects the config at build time.", fixes=[fixes.BACKEND_NONE], evidence=evidence)
    if profile.gpu_arch_source == "option" and detected and detected[0] != arch:
        return warned(f"--gpu-arch {arch} fits the profile, but this host's GPU 0 is CC {detected[0]}: the rules "
                      f"describe the --gpu-arch machine, not this one", evidence=evidence)
    notes = {
        (9, 0): "SM90: the fused CSA compressor never runs here (CC 10.0 only); fused DSA with the dense indexer "
                "loss is rejected on SM90 (use dsa_indexer_use_sparse_loss=True), and FlashMLA needs an SM90 build",
        (10, 0): "SM100: the fused CSA compressor is used with CP = 1 (see cudnn-fe.csa)",
        (10, 3): "SM103: Megatron's fused CSA compressor gate is CC == 10.0, so the eager compressor runs",
    }
    if cc not in notes:
        return warned(f"compute capability {arch} is outside Megatron's DSv4 arch tables (9.0, 10.0, 10.3)",
                      evidence=evidence)
    return passed(f"compute capability {arch} ({profile.gpu_arch_source}): {notes[cc]}", evidence=evidence)


gpu_arch = Check(
    id="gpu.arch",
    title="Compute capability fits the profile",
    explanation="""
        Megatron compares compute capabilities exactly. CP > 1 needs the CuTe-DSL CP layout kernels, compiled only
        for sm_90a, sm_100a and sm_103a (CC 9.0, 10.0, 10.3); the cudnn DSA backend needs SM90 or newer; the fused
        CSA compressor runs only on CC 10.0 (Megatron's gate is `== (10, 0)` and cuDNN frontend 1.27.0 refuses
        anything else), which explains why cudnn-fe.csa is skipped elsewhere. The arch comes from --gpu-arch or
        nvidia-smi; with neither, arch rules are skipped with that reason.
    """,
    applies_when="always (skips when the arch is unknown)",
    detects="profile compute capability (--gpu-arch or nvidia-smi) against the DSv4 arch tables",
    sources=(
        Source("Megatron-LM dev cp_layout_kernels.py L617-623 (sm_90a, sm_100a, sm_103a)",
               "https://github.com/NVIDIA/Megatron-LM/blob/d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1/megatron/core/"
               "transformer/experimental_attention_variant/csa_utils/cp_layout_kernels.py#L617-L623"),
        Source("Megatron-LM dev fused_compressor.py L74 (_SUPPORTED_COMPUTE_CAPABILITY = (10, 0))",
               "https://github.com/NVIDIA/Megatron-LM/blob/d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1/megatron/core/"
               "transformer/experimental_attention_variant/csa_utils/fused_compressor.py#L74"),
        Source("Megatron-LM dev transformer_config.py L1773-1818 (SM90+ for fused DSA; SM90 dense indexer loss)",
               "https://github.com/NVIDIA/Megatron-LM/blob/d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1/megatron/core/"
               "transformer/transformer_config.py#L1773-L1818"),
    ),
    fixes=(fixes.SUPPORTED_GPU, fixes.BACKEND_NONE),
    probes=(NVIDIA_SMI,),
    run=_gpu_arch,
)

CHECKS = [gpu_devices, gpu_arch]
