"""The target side: stdlib-only probe scripts run by path in the inspected interpreter, never imported by the
doctor. Every one starts through dsv4probe_launch.py, which loads the shared library (dsv4probe_common.py and its
parts) by path; the engine runs them through engine/probes.py."""
