"""Built-in checks, one module per area. Each module is registered under the `dsv4_doctor.checks` entry-point group
in pyproject.toml, exactly as a third-party plugin would be. An area's own probe scripts (dsv4probe_driver.py for
gpu.driver, dsv4probe_libs.py for te.import's library lookup) lie beside its checks (`Probe.beside`); the engine's
(static, import, torch, fleet, common) stay in dsv4_doctor/probes."""
