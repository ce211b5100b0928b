"""The warm probe (`dsv4-doctor warm`): compiles the doctor's own CuTe DSL kernels from their recipes for one arch,
without a GPU, into the image-wide kernel store, each under the key a check on that GPU looks it up by.

Request: {"arch": "sm_90a", "recipes": [recipe, ...]} (dsv4probe_kernelrecipe). The doctor hands the store's
directory over as descriptor 212 (DSV4_DOCTOR_AOT_IMAGE, with DSV4_DOCTOR_AOT_WARM=1: it is written) and sets
CUTE_DSL_ARCH to the arch. For each recipe: checked whole, its recorded key compared with all it says and its source
file found and hashed, before anything of it is imported, built or called (dsv4probe_kernelrecipe: any failure is "not
warmed"); then the callable and its arguments built again; the call's key computed as a check computes it, and
compared with the recipe's in everything but the stack's identity (this image's DSL is what a check here will have);
then compiled and stored. Answer: {"status", "summary", "evidence": {"kernels": [...]}}.
Stdlib besides the stack under test. Run as `python dsv4probe_warm.py OUT REQUEST_FILE`.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_warm_compile", HERE).answer)
