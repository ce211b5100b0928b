"""The doctor's own CuTe DSL kernels on the host side: the cache folder rules (cachedir.py), the per-user and
image-wide caches (cache.py) and `dsv4-doctor warm` (warm.py). The kernels themselves, their recipes and the store
that serves them are target-side code, beside the smoke (checks/smoke/). Imports hostio/ and model/ only (warm.py
also the engine's probe runner)."""
