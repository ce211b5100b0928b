"""Probe modules for in-process tests, loaded by path as the probe scripts load each other (dsv4probe_common's
load_module): never through sys.path, which the probe scripts themselves never trust."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def probe_folders() -> list[Path]:
    """Where the probe scripts live: the engine's folder, then the checks' folders (beside their checks)."""
    import dsv4_doctor.checks as checks_pkg
    from dsv4_doctor.engine.probes import PROBE_DIR

    checks_dir = Path(checks_pkg.__file__).resolve().parent
    return [PROBE_DIR, checks_dir, *sorted(p for p in checks_dir.iterdir() if p.is_dir() and p.name != "__pycache__")]


def common() -> ModuleType:
    """dsv4probe_common, loaded once by path as a probe script's bootstrap loads it."""
    loaded = sys.modules.get("dsv4probe_common")
    if getattr(loaded, "PROBE_COMMON", None) is True:
        return loaded  # type: ignore[return-value]
    from dsv4_doctor.engine.probes import PROBE_DIR

    spec = importlib.util.spec_from_file_location("dsv4probe_common", PROBE_DIR / "dsv4probe_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dsv4probe_common"] = module
    spec.loader.exec_module(module)
    return module


def script(name: str) -> Path:
    """The file of probe module `name` (``dsv4probe_smoke``, ``dsv4ref``)."""
    for folder in probe_folders():
        if (folder / (name + ".py")).is_file():
            return folder / (name + ".py")
    raise FileNotFoundError(f"no probe module {name}")


def load(name: str) -> ModuleType:
    """Probe module `name`, by path."""
    return common().load_module(name, str(script(name).parent))
