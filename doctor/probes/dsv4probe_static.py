"""The static probe: facts that need no heavy import.

Distribution metadata (the .dist-info/.egg-info folders on sys.path, found by name as importlib.metadata finds them,
read without importing it: that import alone costs 50 ms, most of this probe's time), module locations (found without
importing any package: importing megatron.core alone takes about 14 s), and `ast` summaries of source files (classes,
their fields and methods, functions and their parameters). Stdlib only, Python 3.8+. Every fact that cannot be read
becomes an error value.

Its dispatch (dsv4probe_static_answer) and its parts, loaded by path: dsv4probe_static_installed (the interpreter,
distributions, module locations, requirements), dsv4probe_static_locate (where the job imports a module from),
dsv4probe_static_sources (the `ast` summaries) and dsv4probe_static_fatbin (the cubin archs and PTX versions in compiled
extensions' `.nv_fatbin` sections, read without loading them).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_static_answer", HERE).answer)
