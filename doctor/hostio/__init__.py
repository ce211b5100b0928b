"""Everything between the doctor and its host: the one read path for paths the environment names (safeio.py), text
that must encode (validtext.py), redaction (redact.py), child processes and temporary folders that never outlive the
doctor (procs.py), and the one signal policy (signals.py). The lowest layer: it imports nothing of the doctor but
model/core.py's types, and only for annotations."""
