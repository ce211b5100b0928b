"""Built-in checks, one module per area. The package is one entry point of the `dsv4_doctor.checks` group in
pyproject.toml, exactly as a third-party plugin would be; its `CHECKS` are every area's checks, in report order.
An area's own probe scripts (dsv4probe_driver.py for gpu.driver, dsv4probe_libs.py for te.import's library lookup)
lie beside its checks (`Probe.beside`); the engine's (static, import, torch, fleet, common) stay in
dsv4_doctor/probes. Each check carries its area (`Check.area`, stamped here): the engine reads the areas and their
order from the checks it loads through the entry point and never imports this package.

`CHECKS` is computed on first use, so that importing a helper module (`dsv4_doctor.checks.fixes.catalogue`) does
not import every area."""

from __future__ import annotations

import importlib
from typing import Any

# area (the prefix of its check ids) -> module, in report order
AREAS = {
    "python": "python_checks",
    "torch": "torch_checks",
    "gpu": "gpu_checks",
    "te": "te_checks",
    "deps": "deps_checks",
    "cudnn-fe": "cudnn_fe_checks",
    "tvm-ffi": "tvm_ffi_checks",
    "cutlass-dsl": "cutlass_dsl_checks",
    "mcore": "mcore_checks",
    "verl": "verl_checks",
    "mbridge": "mbridge_checks",
    "libs": "libs_checks",
    "kernels": "kernels_checks",
    "build": "build_checks",
    "smoke": "smoke",
    "job": "job.job_checks",
    "fleet": "fleet_checks",
}


def __getattr__(name: str) -> Any:
    if name != "CHECKS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._reach import route

    checks = []
    for area, module in AREAS.items():
        listed = importlib.import_module(f"{__name__}.{module}").CHECKS
        for c in listed:
            # Its area is the one whose module lists it: the registry holds its id to that prefix, and the areas' order
            # in a report and in docs/checks.md is the order of CHECKS. The engine reads it here and never imports
            # this package.
            object.__setattr__(c, "area", area)
        checks.extend(listed)
    for c in checks:  # every built-in fix reaches the copy the job imports, by the target's installer
        object.__setattr__(c, "route_fixes", route)
    globals()["CHECKS"] = checks
    return checks
