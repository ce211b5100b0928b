"""The torch probe's answer (its entry: dsv4probe_torch.py): torch imported, its build and the CUDA devices it sees, the
cuDNN and NCCL libraries it mapped (/proc/self/maps) and their copies on disk. Stdlib besides torch; loaded by path
(dsv4probe_common.load_module).
"""

import os
import sys

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import error_info, read_bounded, stage

import glob
import time


LIBRARIES = ("libcudnn.so", "libnccl.so")
MAPS_LIMIT = 64 << 20  # /proc/self/maps: about 1 MB with torch and CUDA loaded
SYSTEM_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
               "/usr/local/cuda/lib64", "/lib/x86_64-linux-gnu")


def loaded_libraries():
    """The cuDNN and NCCL files mapped into this process, by family."""
    out = dict((name, []) for name in LIBRARIES)
    try:
        maps = read_bounded("/proc/self/maps", MAPS_LIMIT)[0].decode("utf-8", "replace")
    except OSError:  # ReadRefused
        return out
    paths = set(line.split()[-1] for line in maps.splitlines() if ".so" in line and "/" in line)
    for path in sorted(paths):
        base = os.path.basename(path)
        for name in LIBRARIES:
            if base == name or base.startswith(name + "."):
                out[name].append(path)
    return out


def copies_on_disk():
    """Every copy of the cuDNN and NCCL libraries this process could find: wheels, LD_LIBRARY_PATH, system folders."""
    dirs = []
    for entry in sys.path:
        dirs += glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib"))
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDNN_PATH")
    if home:
        dirs += [os.path.join(home, "lib64"), os.path.join(home, "lib")]
    dirs += list(SYSTEM_DIRS)
    out = dict((name, []) for name in LIBRARIES)
    seen = set()
    for d in dirs:
        for name in LIBRARIES:
            for path in sorted(glob.glob(os.path.join(d, name + ".*"))):
                real = os.path.realpath(path)
                if real not in seen and not path.endswith(".py"):
                    seen.add(real)
                    out[name].append({"path": path, "realpath": real})
    return out


def answer(request):
    start = time.monotonic()
    stage("importing torch")
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
    # What CUDA was told to show (the doctor's own environment is not always the probe's: preflight, fleets).
    out["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    stage("asking torch for its CUDA devices")
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
    if out.get("cuda_build"):
        stage("reading the cuDNN and NCCL libraries torch loaded")
        try:
            out["loaded_libraries"] = loaded_libraries()
            out["libraries_on_disk"] = copies_on_disk()
        except BaseException as exc:
            out["libraries_error"] = error_info(exc)["message"]
    return out

