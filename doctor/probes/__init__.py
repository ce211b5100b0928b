"""The target side: stdlib-only probe scripts run by path in the inspected interpreter, never imported by the
doctor. Every one starts through dsv4probe_launch.py, which loads the shared library (dsv4probe_common.py and its
parts) by path; the engine runs them through engine/probes.py. Each entry script is a few lines that serve the answer
of a library module beside it, named by its concern (dsv4probe_static_answer, dsv4probe_fleet_exchange, ...)."""
