"""A training command's settings: read once (`command.parse`), typed (`model.Job`), judged by
checks/job/job_checks.py. The launch chain (chain.py, wrappers.py, peel.py), the grammars (syntax.py, shellwords.py,
keys.py), the composed verl config (compose.py, in the target interpreter) and the stack-built config (stackbuild.py).
Most of it imports only model/ and hostio/; compose.py and stackbuild.py also start probes (engine/probes.py)."""
