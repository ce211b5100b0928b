"""The data everything shares: checks, profiles, results and findings (core.py), the typed report (report.py), and
the readers of probe answers that checks use (facts.py, versions.py, located.py). Plain data and pure functions: it
imports hostio/, upstream/texts.py and fix/steps.py, and nothing that runs anything."""
