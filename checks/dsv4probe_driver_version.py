"""The driver probe's answer (its entry: dsv4probe_driver.py): libcuda loaded with ctypes, its path as this process
mapped it, and cuDriverGetVersion's answer. Stdlib only, Python 3.8+; loaded by path (dsv4probe_common.load_module).
"""

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import cut_text, read_bounded

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

