"""The toolchain probe: what a build against torch would find (CUDA_HOME as torch.utils.cpp_extension resolves it,
its nvcc and version, CUDA 13's CCCL headers, the linkable libcudart, a C++ compiler, ninja), in this process's
environment, which is the doctor's: the one `fix --apply` runs pip in and the shell that runs the fix script.

Stdlib only, Python 3.8+; the work is in dsv4probe_toolchain_facts.py.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_toolchain_facts", HERE).answer)
