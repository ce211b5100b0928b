"""Built-in checks, one module per area. Each module is registered under the `dsv4_doctor.checks` entry-point group
in pyproject.toml, exactly as a third-party plugin would be."""
