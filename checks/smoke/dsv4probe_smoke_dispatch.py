"""The smoke probe's dispatch (its entry, dsv4probe_smoke.py, says what tier 1 and tier 2 compare): the request makes it
the smoke (tier 1 on one device, simulated or in N processes, or across fleet ranks; tier 2 and its fused builds, the
prewarm beside them), one rank of its multi-process run (`worker`) or one of tier 2's builds (`tier2_build`), each
done by its part. Stdlib besides torch (and Megatron for tier 2); loaded by path (dsv4probe_common.load_module).
"""

import os
import sys

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import error_info, load_module, stage

HERE = os.path.dirname(os.path.realpath(__file__))

import time

for _part in ("dsv4probe_device", "dsv4probe_smoke_batch", "dsv4probe_smoke_tolerances", "dsv4probe_smoke_tier2",
              "dsv4probe_smoke_ranks", "dsv4probe_smoke_fleet", "dsv4probe_smoke_fused"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_device import cuda_available, peak_memory_mib, select
from dsv4probe_smoke_batch import tier1_simulated
from dsv4probe_smoke_fleet import fleet_run, fleet_store
from dsv4probe_smoke_fused import finish_fused_builds, fused_not_run, start_fused_builds, tier2_build
from dsv4probe_smoke_ranks import launch_workers, process_count, worker_main
from dsv4probe_smoke_tier2 import tier2_run
from dsv4probe_smoke_tolerances import FUSED_BUILD_TIMEOUT_S


DSV4_MODULE = "megatron.core.transformer.experimental_attention_variant.deepseek_v4_hybrid_attention"


def dsv4_installed():
    """Megatron-core's DSv4 attention file exists (found without importing Megatron, as the static probe does)."""
    try:
        return bool(load_module("dsv4probe_static_installed").locate_module(DSV4_MODULE).get("found"))
    except Exception:
        return False


def answer(request):
    if "worker" in request:
        return worker_main(request)
    if "tier2_build" in request:
        return tier2_build(request)
    start = time.monotonic()
    timeout = float(os.environ.get("DSV4_DOCTOR_PROBE_TIMEOUT", "60") or 60)
    deadline = start + timeout - 3.0
    stage("importing torch")
    try:
        import torch
    except BaseException as exc:
        return {"imported": False, "error": error_info(exc)}
    cp = int(request.get("cp", 1))
    want = request.get("device", "auto")
    has_cuda = cuda_available(torch)
    if want == "cuda" and not has_cuda:
        return {"imported": True, "torch": torch.__version__, "device_error": "--device cuda but torch sees no GPU"}
    if want == "auto" and int(request.get("gpus", 0)) > 0 and not has_cuda:
        return {"imported": True, "torch": torch.__version__,
                "device_error": "nvidia-smi lists %d GPU(s) but torch %s cannot use CUDA (CUDA build: %s), so the "
                                "smoke forward would not test the GPU" % (request["gpus"], torch.__version__,
                                                                          torch.version.cuda)}
    device = select(torch, request, has_cuda)
    load_s = time.monotonic() - start
    served = fleet_store(torch, request["fleet_cp"], deadline) if cp > 1 and request.get("fleet_cp") else (None, None)
    out = {"imported": True, "torch": torch.__version__, "cp": cp,
           "device": {"type": device.type, "name": torch.cuda.get_device_name(device) if device.type == "cuda" else
                      "cpu", "capability": "%d.%d" % torch.cuda.get_device_capability(device)
                      if device.type == "cuda" else None,
                      "count": torch.cuda.device_count() if has_cuda else 0}}
    out["timing"] = {"library_load_s": round(load_s, 4)}
    if request.get("tier2") == "auto":
        request = dict(request, tier2=dsv4_installed())
        out["dsv4_layer_found"] = request["tier2"]
    elif request.get("level") == "default":
        # The default level builds no DSv4 layer; whether --deep would find one (a file lookup, no import) is said.
        out["dsv4_layer_found"] = dsv4_installed()
    fused_builds, fused_skip = None, fused_not_run(request, device)
    # Each build's hard limit: the probe's remaining budget (--timeout), at least FUSED_BUILD_TIMEOUT_S.
    build_timeout = float(request.get("build_timeout_s") or max(FUSED_BUILD_TIMEOUT_S, deadline - time.monotonic()))
    prewarm = None
    if request.get("tier2") and fused_skip is None:
        outdir = os.path.dirname(os.path.abspath(sys.argv[1]))
        stage("tier 2: starting the fused and the unfused build")
        prewarm = start_prewarm(torch, device, request, outdir)
        fused_builds = start_fused_builds(dict(request, build_device=str(device), build_timeout_s=build_timeout),
                                          outdir, prewarm.get("build_env"))
    stage("tier 1: CP %d THD attention on %s against the float32 reference" % (cp, device.type))
    try:
        tier1, _ = tier1_simulated(torch, device, cp)
    except BaseException as exc:
        out["tier1"] = {"ok": False, "error": error_info(exc, frames=5)}
        return out
    tier1.pop("outputs")
    tier1["ok"] = all(c["ok"] for c in tier1["comparisons"].values())
    tier1["ranks"] = "simulated in one process"
    out["tier1"] = tier1
    out["timing"]["first_kernel_call_s"] = tier1.pop("first_call_s")
    out["timing"]["compute_s"] = tier1.pop("compute_s")
    reference_path = None
    out["tier2_attempted"] = bool(request.get("tier2"))
    if request.get("tier2"):
        reference_path = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "tier2_cp1.pt")
        stage("tier 2: the DSv4 layer at CP 1")
        out["tier2"] = {"cp1": tier2_run(torch, device, 1, 0, request, reference_path)}
    n_gpus = torch.cuda.device_count() if has_cuda else 0
    distributed = request.get("distributed", "auto")
    if cp > 1 and request.get("fleet_cp"):
        tier2_ref = reference_path if (out.get("tier2", {}).get("cp1", {}).get("ok")) else None
        t0 = time.monotonic()
        stage("CP %d across fleet ranks" % cp)
        run = fleet_run(torch, request, device, deadline, tier2_ref, served)
        run["wall_s"] = round(time.monotonic() - t0, 3)
        out["distributed"] = run
        if "tier2" in run:
            out["tier2"]["cpN"] = run.pop("tier2")
        elif tier2_ref and device.type == "cuda" and run.get("process_backend") != "nccl":
            # Found on the H200 (two ranks sharing one GPU): tier 2 at CP=N was left out without a word.
            out["tier2"]["cpN"] = {"cp": cp, "skipped": "not run across these fleet ranks (%s; Megatron's CP groups "
                                   "need NCCL)" % run.get("backend_reason", "they exchange over gloo")}
    elif cp > 1 and request.get("simulated_because"):
        out["distributed"] = {"ran": False, "reason": str(request["simulated_because"])}
    elif cp > 1 and distributed != "off":
        backend = "nccl" if device.type == "cuda" and n_gpus >= 2 else ("gloo" if device.type == "cpu" else None)
        if backend is None:
            out["distributed"] = {"ran": False, "reason": "CP %d with real NCCL ranks needs at least 2 GPUs; %d "
                                                          "visible, so the ranks were simulated" % (cp, n_gpus)}
        else:
            nprocs = process_count(cp, backend, n_gpus, os.cpu_count())
        if backend is not None and nprocs < 2:
            out["distributed"] = {"ran": False, "reason": "CP %d cannot be split over the %d GPUs or CPUs here, so the "
                                                          "ranks were simulated" % (cp, n_gpus or os.cpu_count())}
        elif backend is not None:
            t0 = time.monotonic()
            tier2_ref = reference_path if (out.get("tier2", {}).get("cp1", {}).get("ok")) else None
            stage("CP %d in %d %s processes" % (cp, nprocs, backend))
            run = launch_workers(request, cp, nprocs, backend, deadline, tier2_ref)
            run["ran"] = True
            run["process_backend"] = backend
            run["processes"] = nprocs
            run["ranks_per_process"] = cp // nprocs
            run["wall_s"] = round(time.monotonic() - t0, 3)
            out["distributed"] = run
            if "tier2" in run:
                out["tier2"]["cpN"] = run.pop("tier2")
    if fused_builds is not None:
        out.setdefault("tier2", {})["fused"] = finish_fused_builds(torch, fused_builds, deadline, build_timeout)
        out["tier2"]["fused"]["prewarm"] = finish_prewarm(prewarm)
    elif request.get("tier2"):
        out.setdefault("tier2", {})["fused"] = {"skipped": fused_skip}
    if device.type == "cuda":
        out["gpu_memory_peak_mib"] = peak_memory_mib(torch, device)
    out["timing"]["total_s"] = round(time.monotonic() - start, 4)
    return out


def start_prewarm(torch, device, request, outdir):
    """The fused build's kernels compiled ahead beside it (dsv4probe_prewarm); never fails the smoke."""
    try:
        arch = load_module("dsv4probe_kernelstore", HERE).arch_of(torch, device)
        return load_module("dsv4probe_prewarm", HERE).start(request, outdir, arch)
    except Exception as exc:
        return {"skipped": "the prewarm did not start: %s: %s" % (type(exc).__name__, str(exc)[:200])}


def finish_prewarm(prewarm):
    """The prewarm's evidence; its processes stopped. Never fails the smoke."""
    try:
        return load_module("dsv4probe_prewarm", HERE).finish(prewarm)
    except Exception as exc:
        return {"error": "%s: %s" % (type(exc).__name__, str(exc)[:200])}

