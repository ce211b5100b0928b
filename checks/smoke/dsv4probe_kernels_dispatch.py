"""The kernel smoke probe's dispatch (its entry, dsv4probe_kernels.py, says what each sub-run calls and answers): the
request's sub-run on the device asked for, run by its part, timed, its kernels' evidence gathered, and an exception
turned into the answer's status (a CPU refusal of a real kernel is a skip). Stdlib besides torch (and the stack under
test); loaded by path (dsv4probe_common.load_module).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import cut_text, error_info, load_module, stage

HERE = os.path.dirname(os.path.realpath(__file__))

import time

for _part in ("dsv4probe_device", "dsv4probe_kernels_base", "dsv4probe_kernels_ran", "dsv4probe_kernels_cudnn",
              "dsv4probe_kernels_layout", "dsv4probe_kernels_flashmla", "dsv4probe_kernels_rope",
              "dsv4probe_kernelstore"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_device import cuda_available, peak_memory_mib, select
from dsv4probe_kernels_base import Skip
from dsv4probe_kernels_cudnn import run_csa, run_dsa
from dsv4probe_kernels_flashmla import run_flashmla
from dsv4probe_kernels_layout import INDEX_MODES, run_layout, run_layout_part
from dsv4probe_kernels_rope import run_rope
from dsv4probe_kernels_ran import CACHE_EVENTS, _cache_files, kernels_ran, watch_cute_dsl_cache
import dsv4probe_kernelstore as kernelstore


def _needs_cuda(exc):
    """A real kernel refusing CPU tensors. A missing module is never that, though its name may say cuda
    ("No module named 'cuda'" is a missing cuda-python: the rule of that module reports it)."""
    if isinstance(exc, ImportError):
        return False
    text = "%s: %s" % (type(exc).__name__, exc)
    return "CUDA" in text or "cuda" in text


SUBRUNS = {"dsa": (run_dsa, "nvidia-cudnn-frontend"), "layout": (run_layout, "megatron-core"),
           "csa": (run_csa, "nvidia-cudnn-frontend"), "flashmla": (run_flashmla, "flash-mla"),
           "rope": (run_rope, "megatron-core")}


def answer(request):
    name = request["subrun"]
    fn, package = SUBRUNS[name]
    if name == "layout" and request.get("layout_part") in INDEX_MODES:
        fn = run_layout_part
    start = time.monotonic()
    stage("importing torch")
    try:
        import torch
    except BaseException as exc:
        return {"status": "skip", "summary": "torch does not import", "rule": "torch.install", "error": error_info(exc)}
    want = request.get("device", "auto")
    has_cuda = cuda_available(torch)
    if want == "cuda" and not has_cuda:
        # Asked for the GPU (nvidia-smi lists one, or --device cuda): no CPU fallback, the doctor names the cause.
        return {"status": "fail", "summary": "torch sees no GPU, so the kernel was not run", "no_gpu": True,
                "package": package}
    device = select(torch, request, has_cuda)
    # What this process paid before any kernel: `import torch` and the device's set-up (a split sub-run's extra
    # processes each pay it again, overlapped).
    torch_start_s = round(time.monotonic() - start, 3)
    out = {"package": package, "device": {"type": device.type, "capability": "%d.%d" %
                                          torch.cuda.get_device_capability(device) if device.type == "cuda" else None,
                                          "name": torch.cuda.get_device_name(device) if device.type == "cuda"
                                          else "cpu"}, "torch_start_s": torch_start_s}
    cache_dir = os.environ.get("CUTE_DSL_CACHE_DIR")
    files_before = _cache_files(cache_dir) if cache_dir else None
    watch_cute_dsl_cache()
    store_note = kernelstore.install(kernelstore.arch_of(torch, device), events=CACHE_EVENTS)
    stage("%s: loading %s" % (name, package))
    try:
        status, summary, evidence = fn(torch, device, request)
        if isinstance(evidence, dict):
            evidence["kernels_ran"] = ran = kernels_ran(cache_dir, files_before)
            evidence["aot_kernel_store"] = dict(kernelstore.summary(), note=store_note)
            for mode, part in (evidence.get("index_mode_processes") or {}).items():
                ran["kernels"].extend(dict(k, process="its own (%s)" % mode) for k in part.get("kernels_ran") or [])
        out.update(status=status, summary=summary, evidence=evidence)
    except Skip as why:
        out.update(status="skip", summary=str(why), rule=why.rule)
        if why.exc is not None:
            out["error"] = error_info(why.exc)
    except BaseException as exc:
        err = error_info(exc, frames=6)
        if device.type != "cuda" and _needs_cuda(exc):
            out.update(status="skip", summary="needs CUDA: the real kernel refuses CPU tensors (%s: %s)"
                       % (err["type"], cut_text(str(err["message"]), 200)), error=err)
        else:
            out.update(status="fail", summary="%s raised %s: %s" % (name, err["type"], err["message"]), error=err)
    if device.type == "cuda":
        out["gpu_memory_peak_mib"] = peak_memory_mib(torch, device)
    out["total_s"] = round(time.monotonic() - start, 3)
    return out

