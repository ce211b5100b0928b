"""The torch probe: import torch and report its build, the CUDA devices it sees, and the cuDNN and NCCL libraries it
really loaded (from /proc/self/maps) beside the copies on disk. Stdlib besides torch."""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_torch_facts", HERE).answer)
