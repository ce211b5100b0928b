"""The driver probe: the CUDA driver API version libcuda reports (cuDriverGetVersion), without torch.

It reflects what a job will get, forward-compatibility libraries (cuda-compat on LD_LIBRARY_PATH) included, which
nvidia-smi's driver version does not. Stdlib only (ctypes), Python 3.8+; it calls no other CUDA function.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_driver_version", HERE).answer)
