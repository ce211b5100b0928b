"""`dsv4-doctor triage`: read a failed job's logs (one stream per rank, node or Ray worker), find where it failed first,
and name the known cause from the upstream-text registry, or say honestly that it is only a symptom.

It reads text and never runs or imports the stack. Modules, in the order the data flows:
streams (paths, folders, stdin -> streams; what is not read is named), layouts (rank and host from the path and from
line prefixes), timestamps, symptoms (ordered named rules: failure lines, consequences, symptom classes), scan (one
pass over a stream, bounded), locate (the first failure across streams), match (causes from the registry), verdict
(the result as data), doctorreport (a doctor JSON report found among the files), render (text and JSON) and command
(what the CLI calls).

What it may import: the doctor's host-io helpers (safeio, redact, validtext, signals, model), the upstream-text
registry (upstream_texts, registry), and the output layer to write; nothing of the checks, no rich.
"""
