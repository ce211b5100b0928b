"""The driver probe: the CUDA driver API version libcuda reports (cuDriverGetVersion), without torch.

It reflects what a job will get, forward-compatibility libraries (cuda-compat on LD_LIBRARY_PATH) included, which
nvidia-smi's driver version does not. Stdlib only (ctypes), Python 3.8+; it calls no other CUDA function.
"""


# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import cut_text, read_bounded, serve

import ctypes


def answer(request):
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"loaded": False, "error": cut_text(str(exc), 500)}
    path = None
    try:
        maps = read_bounded("/proc/self/maps", 64 << 20)[0].decode("utf-8", "replace")
        path = next((line.split()[-1] for line in maps.splitlines() if "libcuda.so" in line), None)
    except OSError:  # ReadRefused
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
