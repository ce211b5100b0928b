"""GPUs: what the job will see, and whether the compute capability fits the profile."""

from __future__ import annotations

import re

from dsv4_doctor.api import (NVIDIA_SMI, TORCH, Context, Probe, Result, Source, StaticRequest, UpstreamText, check,
                             errored, failed, passed, skipped, warned)

from .fixes import catalogue as fixes
from ._upstream import EAV, MLM_VERL_TESTED, measured, mlm, mlm_at
from ._gpu_facts import (BUSY_FRACTION, CONTEXT_MIB, MEMORY_PROBES, PROCESS_MIB, SMOKE_TENSORS_MIB, hidden_cause,
                         holders, memory, others)


DEVICES_TEXTS = (
    UpstreamText("M8-cuda", "dsa_kernel_backend={backend} requires a CUDA device, but none is available.",
                 mlm("megatron/core/utils.py", "530-534"), "RuntimeError"),
)


@check(
    "gpu.devices",
    "GPUs visible to the job",
    texts=DEVICES_TEXTS,
    applies_when="always (skips without a GPU)",
    detects="nvidia-smi --query-gpu and torch.cuda device properties",
    sources=(
        Source("nvidia-smi --query-gpu", "https://docs.nvidia.com/deploy/nvidia-smi/index.html"),
        Source("NVIDIA gpu-operator #2685 (validator said Ready while CUDA failed)",
               "https://github.com/NVIDIA/gpu-operator/issues/2685"),
    ),
    fixes=(fixes.DRIVER,),
    probes=(NVIDIA_SMI, TORCH, *MEMORY_PROBES),
    per_gpu=True,
)
def gpu_devices(ctx: Context) -> Result:
    """Lists every GPU with its name, compute capability and memory, and the driver version from nvidia-smi.
    torch's view (CUDA enumeration order, CUDA_VISIBLE_DEVICES applied) is what the job sees; nvidia-smi's is
    what the driver sees, and the two can disagree. A host with no GPU is a skip, not a failure: the image can
    still be checked for the GPU it will run on with --gpu-arch. A driver that lists GPUs torch cannot use is a
    failure: a passing driver check does not prove CUDA works. Its cause is named from the facts, each with its own
    fix, in this order: CUDA_VISIBLE_DEVICES set empty or to ids no GPU has (unset or correct it), a driver older
    than torch's CUDA (the driver fix), a CPU build of torch (the only cause a torch reinstall fixes).
    """
    gpus = ctx.gpus()
    smi = ctx.probe(NVIDIA_SMI)
    torch_probe = ctx.probe(TORCH)
    torch_data = torch_probe.data if torch_probe.ok and isinstance(torch_probe.data, dict) else {}
    raw_devices = torch_data.get("devices") if torch_data.get("imported") else None
    torch_devices = [d for d in raw_devices if isinstance(d, dict)] if isinstance(raw_devices, list) else []
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
    if not torch_data.get("imported"):
        # nvidia-smi alone proves the driver, not that CUDA works: without torch's view this cannot be green.
        listed = f"the driver lists {len(gpus)} GPU(s), but torch's view is unavailable"
        if not torch_probe.ok:
            return errored(f"{listed}: the torch probe {torch_probe.error or 'failed'}", evidence=evidence)
        return skipped(f"{listed}: torch does not import (see torch.install), so whether CUDA works is not known",
                       evidence=evidence)
    if gpus and not torch_devices:
        why, cause_fixes = hidden_cause(ctx, driver_gets(ctx)[0])
        raw_error = torch_data.get("cuda_error")
        said = str(raw_error.get("message", "")) if isinstance(raw_error, dict) else ""
        evidence["cuda_visible_devices"] = torch_data.get("cuda_visible_devices")
        return failed(f"the driver lists {len(gpus)} GPU(s) but torch sees none: {why}",
                      f"torch says: {said}" if said else "", fixes=cause_fixes, evidence=evidence)
    archs = sorted({str(d.get("compute_capability")) for d in devices if d.get("compute_capability")})
    names = sorted({str(d.get("name")) for d in devices})
    summary = f"{len(devices)} GPU(s): {', '.join(names)} (CC {', '.join(archs)})"
    if driver:
        summary += f", driver {driver}"
    if len(archs) > 1:
        return warned(summary + ": mixed compute capabilities; rules use device 0", evidence=evidence)
    return passed(summary, evidence=evidence)


CP_ARCHS = {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_103a"}


ARCH_TEXTS = (
    UpstreamText("R6-any", "Unsupported GPU compute capability {capability} for CSA CP CuTe kernels{rest}",
                 mlm(EAV + "csa_utils/"), "RuntimeError", match=("CSA CP CuTe kernels",)),
    UpstreamText("M9", "dsa_kernel_backend='cudnn' requires SM90+ (Hopper or later), but current device has compute "
                 "capability {major}.{minor}.", mlm("megatron/core/transformer/transformer_config.py", "1773-1778"),
                 "AssertionError"),
    UpstreamText("M9-old", "apply_dsa_kernel_fusion requires SM90+ (Hopper or later), but current device has compute "
                 "capability {major}.{minor}.",
                 mlm_at(MLM_VERL_TESTED, "megatron/core/transformer/transformer_config.py",
                        "Megatron-LM dev fd1121b8 transformer_config.py L1604"), "AssertionError"),
    UpstreamText("R6", "Unsupported GPU compute capability {capability} for CSA CP CuTe kernels; supported "
                 "architectures: sm_90a, sm_100a, sm_103a.", mlm(EAV + "csa_utils/cp_layout_kernels.py", "617-623"),
                 "RuntimeError"),
)


@check(
    "gpu.arch",
    "Compute capability fits the profile",
    texts=ARCH_TEXTS,
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
)
def gpu_arch(ctx: Context) -> Result:
    """Megatron compares compute capabilities exactly. CP > 1 needs the CuTe-DSL CP layout kernels, compiled only
    for sm_90a, sm_100a and sm_103a (CC 9.0, 10.0, 10.3); the cudnn DSA backend needs SM90 or newer; the fused
    CSA compressor runs on the CCs the installed Megatron's gate admits (d48bd6be: `== (10, 0)`; 88a285f0:
    major >= 10) and cuDNN frontend 1.27.0 refuses all but 10.0 (1.28.0 accepts major >= 10; cudnn-fe.csa reads
    both gates from the installed files). The arch comes from --gpu-arch or
    nvidia-smi; with neither, arch rules are skipped with that reason.
    """
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
        (9, 0): "SM90: the fused CSA compressor never runs here (every Megatron gate needs CC >= 10); fused DSA with "
                "the dense indexer "
                "loss is rejected on SM90 (use dsa_indexer_use_sparse_loss=True), and FlashMLA needs an SM90 build",
        (10, 0): "SM100: the fused CSA compressor is used at CP 1 (d48bd6be's gate), at any CP with a Megatron whose "
                 "gate admits CC major >= 10 (88a285f0; see cudnn-fe.csa)",
        (10, 3): "SM103: the fused CSA compressor runs here only with a Megatron whose gate admits CC major >= 10 "
                 "(88a285f0; d48bd6be's is == 10.0) and needs cuDNN frontend >= 1.28.0 (see cudnn-fe.csa)",
    }
    if cc not in notes:
        return warned(f"compute capability {arch} is outside Megatron's DSv4 arch tables (9.0, 10.0, 10.3)",
                      evidence=evidence)
    return passed(f"compute capability {arch} ({profile.gpu_arch_source}): {notes[cc]}", evidence=evidence)

DRIVER = Probe.beside(__file__, "driver", "dsv4probe_driver.py")
# The newest CUDA each driver branch supports (NVIDIA's CUDA toolkit release notes, table 3), as driver API numbers.
BRANCH_CUDA = ((580, 13000), (575, 12090), (570, 12080), (565, 12070), (560, 12060), (555, 12050), (550, 12040),
               (545, 12030), (535, 12020), (530, 12010), (525, 12000), (520, 11080), (515, 11070), (510, 11060),
               (470, 11040), (450, 11000))
# CUDA-major markers among installed distributions: wheels built for one CUDA major carry it in their name.
CUDA_WHEELS = re.compile(r"-cu(1[0-9])$")
DRIVER_STATIC = StaticRequest(distributions=("torch",), distribution_prefixes=("nvidia-", "transformer-engine-"))


def _api(version: int | None) -> str:
    if version is None:
        return "unknown"
    return f"{version // 1000}.{version % 1000 // 10}"


def _smi_api(driver: str | None) -> int | None:
    m = re.match(r"(\d+)\.", driver or "")
    if not m:
        return None
    branch = int(m.group(1))
    return next((api for b, api in BRANCH_CUDA if branch >= b), None)


def built_for(ctx: Context) -> tuple[int | None, str]:
    """The CUDA major the stack was built for, and where that was read."""
    torch = ctx.probe(TORCH)
    cuda = (torch.data or {}).get("cuda_build") if torch.ok and isinstance(torch.data, dict) else None
    m = re.match(r"(\d+)\.", str(cuda or ""))
    if m:
        return int(m.group(1)), f"torch.version.cuda = {cuda}"
    static = ctx.static
    local = re.search(r"\+cu(\d\d)", static.version("torch") or "")
    if local:
        return int(local.group(1)[:2]), f"torch {static.version('torch')}"
    majors: dict[int, list[str]] = {}
    for name in static.installed():
        hit = CUDA_WHEELS.search(name)
        if hit:
            majors.setdefault(int(hit.group(1)), []).append(name)
    if majors:
        major = max(majors)
        return major, "wheels " + ", ".join(sorted(majors[major])[:4])
    return None, "no CUDA build of torch and no -cu12/-cu13 wheels installed"


def driver_gets(ctx: Context) -> tuple[int | None, str]:
    """The CUDA driver API version the job gets (cuDriverGetVersion, else the nvidia-smi driver's branch), and where
    it was read."""
    gpus = ctx.gpus()
    driver = gpus[0].get("driver_version") if gpus else None
    probe = ctx.probe(DRIVER)
    api = probe.data.get("version") if probe.ok and isinstance(probe.data, dict) else None
    if isinstance(api, int) and api > 0:
        return api, "cuDriverGetVersion"
    return _smi_api(driver), f"driver {driver}'s branch"


@check(
    "gpu.driver",
    "The driver supports the CUDA the stack was built for",
    applies_when="nvidia-smi lists a GPU",
    detects="nvidia-smi driver version; cuDriverGetVersion through ctypes; torch.version.cuda or -cuXX wheels",
    sources=(
        Source("NVIDIA CUDA Toolkit release notes, table 3 (minimum driver per CUDA release)",
               "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"),
        Source("NVIDIA CUDA forward compatibility", "https://docs.nvidia.com/deploy/cuda-compatibility/"),
        Source("verl docker/Dockerfile.stable.vllm (CUDA 13.0.2, torch 2.11.0 cu130)", "https://github.com/verl-project/verl"),
    ),
    fixes=(fixes.DRIVER,),
    static=DRIVER_STATIC,
    probes=(NVIDIA_SMI, TORCH, DRIVER),
)
def gpu_driver(ctx: Context) -> Result:
    """torch cu130, TE core_cu13 and nvidia-cutlass-dsl[cu13] need a driver that supports CUDA 13 (driver API
    13000: the R580 branch or newer, unless the image carries the CUDA forward-compatibility libraries). The CUDA
    major comes from torch.version.cuda, or from the -cu13/-cu12 wheels' names. The driver's capability comes from
    cuDriverGetVersion, read through ctypes in a probe (no torch), which includes forward compatibility; without
    libcuda, from nvidia-smi's driver branch. It fails only when what the job will get is too old, and states both
    numbers. On a host without nvidia-smi it skips, even with --gpu-arch: a build machine's driver says nothing
    about the runtime's.
    """
    gpus = ctx.gpus()
    smi = ctx.probe(NVIDIA_SMI)
    if not smi.ok or not gpus:
        return skipped("no nvidia-smi here (" + (smi.error or "it lists no GPU") + "): the driver of the machine the "
                       "job runs on cannot be read from this one, even with --gpu-arch")
    driver = gpus[0].get("driver_version")
    major, where = built_for(ctx)
    probe = ctx.probe(DRIVER)
    api = probe.data.get("version") if probe.ok and isinstance(probe.data, dict) else None
    evidence = {"nvidia_smi_driver": driver, "nvidia_smi_supports": _api(_smi_api(driver)), "cuDriverGetVersion": api,
                "libcuda": (probe.data or {}).get("path") if probe.ok else None,
                "libcuda_error": (probe.data or {}).get("error") if probe.ok else probe.error,
                "stack_cuda_major": major, "stack_from": where}
    gets, source = driver_gets(ctx)
    if major is None:
        return skipped(f"the CUDA version the stack was built for is unknown ({where}); driver {driver} supports "
                       f"CUDA {_api(gets)}", evidence=evidence)
    if gets is None:
        return warned(f"driver {driver}: the CUDA version it supports cannot be read (libcuda: "
                      f"{evidence['libcuda_error']})", evidence=evidence)
    need = major * 1000
    if gets < need:
        return failed(
            f"the stack is built for CUDA {major} ({where}), which needs driver API {need}; the job gets "
            f"{gets} (CUDA {_api(gets)}, from {source}; nvidia-smi driver {driver})",
            "CUDA 13 wheels (torch cu130, TE core_cu13, nvidia-cutlass-dsl[cu13]) need an R580 or newer driver; "
            "the first CUDA call fails with CUDA_ERROR_INSUFFICIENT_DRIVER (torch: 'The NVIDIA driver on your system "
            "is too old').", fixes=[fixes.DRIVER], evidence=evidence)
    compat = " (forward compatibility: newer than the driver's branch)" if api and _smi_api(driver) and \
        api > (_smi_api(driver) or 0) else ""
    return passed(f"driver {driver} gives CUDA {_api(gets)} ({source}){compat}; the stack needs CUDA {major} "
                  f"({where})", evidence=evidence)

@check(
    "gpu.memory",
    "GPU memory free for the smoke and the job",
    applies_when="nvidia-smi lists a GPU",
    detects="nvidia-smi --query-gpu=memory.used,memory.free,memory.total and --query-compute-apps (pid, name, used)",
    sources=(
        Source("nvidia-smi --query-gpu, --query-compute-apps", "https://docs.nvidia.com/deploy/nvidia-smi/index.html"),
        measured("docs/gpu-runs", "H200, 2026-12-04: with the GPU filled by another process the first CUDA context "
                 "failed at torch.cuda.set_device with 'CUDA error: out of memory'; each smoke process needs about "
                 "0.1 GiB plus a CUDA context of about 0.5 GiB"),
    ),
    probes=MEMORY_PROBES,
    per_gpu=True,
)
def gpu_memory(ctx: Context) -> Result:
    """Before the smoke: the free and total memory of every GPU nvidia-smi lists, and the processes holding it
    (pid, name, MiB; the doctor's own probes are told apart by their parent chain). It fails when the GPU the
    smoke runs on has less free memory than one smoke process needs (a CUDA context of about 0.5 GiB and about
    0.1 GiB of tensors: the first CUDA call then fails with "out of memory"); it warns when other processes hold
    more than half (0.5) of a GPU's total memory, since the job will need most of it. Used memory no listed
    process accounts for (1 GiB or more) is held outside this container: nvidia-smi in a container lists only
    its own processes.
    """
    facts = memory(ctx)
    gpus = facts["gpus"]
    evidence = {"gpus": gpus, "error": facts.get("error"), "apps_error": facts.get("apps_error"),
                "busy_fraction": BUSY_FRACTION, "smoke_process_mib": PROCESS_MIB}
    if not gpus:
        return skipped("no GPU memory to read: " + (facts.get("error") or "nvidia-smi lists no GPU"),
                       evidence=evidence)
    smoke_gpu = ctx.profile.device_index % len(gpus)
    lines, busy = [], []
    for g in gpus:
        free, total = g["free_mib"], g["total_mib"]
        held, _procs, _unseen = others(g)
        lines.append(f"GPU {g['index']}: {free} of {total} MiB free" + (f", {held} MiB held by {holders(g)}"
                                                                          if held else ""))
        if total and held > BUSY_FRACTION * total:
            busy.append(g)
    target = gpus[smoke_gpu]
    if target["free_mib"] is not None and target["free_mib"] < PROCESS_MIB and ctx.profile.smoke != "off":
        return failed(f"GPU {target['index']} has {target['free_mib']} MiB free of {target['total_mib']}: the smoke "
                      f"cannot start (each of its processes needs about {PROCESS_MIB} MiB: a {CONTEXT_MIB} MiB CUDA "
                      f"context and {SMOKE_TENSORS_MIB} MiB of tensors), nor can the job; held by {holders(target)}",
                      "\n".join(lines), evidence=evidence)
    if target["free_mib"] is not None and target["free_mib"] < PROCESS_MIB:
        return failed(f"GPU {target['index']} has {target['free_mib']} MiB free of {target['total_mib']}: the job "
                      f"cannot create a CUDA context there; held by {holders(target)}", "\n".join(lines),
                      evidence=evidence)
    if busy:
        g = busy[0]
        held, _procs, _unseen = others(g)
        return warned(f"GPU {g['index']}: other processes hold {held} of {g['total_mib']} MiB "
                      f"({held / g['total_mib']:.0%}, more than {BUSY_FRACTION:.0%}): the smoke fits in "
                      f"{g['free_mib']} MiB, the job will not; held by {holders(g)}", "\n".join(lines),
                      evidence=evidence)
    return passed("; ".join(lines), evidence=evidence)


CHECKS = [gpu_devices, gpu_arch, gpu_driver, gpu_memory]
