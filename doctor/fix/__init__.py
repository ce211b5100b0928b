"""Fixes: what a fix is (steps.py: argv lists with validated environments and a phase), the plan that orders and
de-duplicates a run's fixes (plan.py), the commands the job's copy already satisfies (met.py), and the installer
policy for an externally managed interpreter (pep668.py). steps.py, met.py and pep668.py import only hostio/ and
model/; plan.py reads a finished report."""
