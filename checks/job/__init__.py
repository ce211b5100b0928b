"""The job area: the checks of the job's own settings (job_checks.py lists them) and their rules, one module each:
the CP layout (cp.py), the MoE dispatch (dispatch.py), the DSA backend and indexer loss (dsa.py), how a command is
read (settings.py), the stack-built config (stack.py) and the closing verdict (verdict.py). Imports only
dsv4_doctor.api and its own modules."""
