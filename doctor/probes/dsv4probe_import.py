"""The import probe: import modules and resolve attributes in this (isolated) interpreter.

A target is ``module`` or ``module:attr.path``. Each target is tried on its own, so one failure does not hide the
next; every outcome is data. A target named in `signatures` also reports its call signature's parameter names.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_import_targets", HERE).answer)
