"""The driver probe: the CUDA driver API version libcuda reports (cuDriverGetVersion), without torch.

It reflects what a job will get, forward-compatibility libraries (cuda-compat on LD_LIBRARY_PATH) included, which
nvidia-smi's driver version does not. Stdlib only (ctypes), Python 3.8+; it calls no other CUDA function.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under PYTHONSAFEPATH / -P
from dsv4probe_common import serve


def answer(request):
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"loaded": False, "error": str(exc)[:500]}
    path = None
    try:
        with open("/proc/self/maps") as fh:
            path = next((line.split()[-1] for line in fh if "libcuda.so" in line), None)
    except OSError:
        pass
    version = ctypes.c_int(0)
    try:
        rc = lib.cuDriverGetVersion(ctypes.byref(version))
    except AttributeError:
        return {"loaded": True, "path": path, "error": "libcuda has no cuDriverGetVersion"}
    if rc != 0:
        return {"loaded": True, "path": path, "error": "cuDriverGetVersion returned CUDA error %d" % rc}
    return {"loaded": True, "path": path, "version": version.value}


if __name__ == "__main__":
    serve(answer)
