"""The torch probe: import torch and report its build and the CUDA devices it sees. Stdlib besides torch."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under PYTHONSAFEPATH / -P
from dsv4probe_common import error_info, serve


def answer(request):
    start = time.monotonic()
    try:
        import torch
    except BaseException as exc:
        return {"imported": False, "error": error_info(exc)}
    if getattr(torch, "__file__", None) is None:  # a leftover directory without __init__.py: a namespace package
        return {"imported": False, "error": {
            "type": "ImportError", "where": [],
            "message": "torch resolves to a directory without __init__.py (%s): a leftover of an uninstall?"
                       % ", ".join(getattr(torch, "__path__", []) or ["?"])}}
    out = {
        "imported": True,
        "import_s": round(time.monotonic() - start, 3),
        "version": getattr(torch, "__version__", None),
        "origin": getattr(torch, "__file__", None),
        "cuda_build": getattr(torch.version, "cuda", None),
        "hip_build": getattr(torch.version, "hip", None),
        "git_version": getattr(torch.version, "git_version", None),
    }
    try:
        out["cudnn_version"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except BaseException as exc:
        out["cudnn_version"] = None
        out["cudnn_error"] = error_info(exc)["message"]
    try:
        nccl = torch.cuda.nccl.version() if out["cuda_build"] else None
        out["nccl_version"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else nccl
    except BaseException as exc:
        out["nccl_version"] = None
        out["nccl_error"] = error_info(exc)["message"]
    devices = []
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
        for i in range(out["device_count"]):
            props = torch.cuda.get_device_properties(i)
            devices.append({
                "index": i,
                "name": props.name,
                "compute_capability": "%d.%d" % (props.major, props.minor),
                "memory_mib": int(props.total_memory // (1024 * 1024)),
            })
    except BaseException as exc:
        out.setdefault("cuda_available", False)
        out.setdefault("device_count", 0)
        out["cuda_error"] = error_info(exc)
    out["devices"] = devices
    return out


if __name__ == "__main__":
    serve(answer)
