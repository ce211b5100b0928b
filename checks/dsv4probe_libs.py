"""The library probe: where a shared library is, which distribution ships it, and whether it exports a symbol.

Request: {"soname": "libcublasLt.so.13", "symbol": "cublasLtGroupedMatrixLayoutInit_internal", "version": "..."}.
It looks in the nvidia-* wheel folders on sys.path (site-packages/nvidia/*/lib), in LD_LIBRARY_PATH and in the usual
system folders; reads the owning distribution from the RECORD files of the .dist-info folders beside it; and reads
the ELF dynamic symbol table (and its GNU version definitions) of each copy, without loading it: a library that
fails to load, or crashes when loaded, can still be read. Stdlib only, Python 3.8+.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_libs_exports", HERE).answer)
