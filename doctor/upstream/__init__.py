"""Upstream's own words: what an upstream source and an error or warning text are, as a rule declares them
(texts.py, imports nothing of the doctor), and the registry that says which rule a message belongs to (registry.py:
`classify`), read by the settings probe's reader, the smoke's causes and triage. The registry imports model/."""
