"""The commands as use cases: check, smoke, preflight and fix (usecases.py), list and explain (catalog.py), the
job's hand-over (execjob.py) and the generated docs (gendocs.py). A command takes parsed options and returns data
or an exit code; it may import engine/, report/, fix/, job/, fleet/, kernels/ and everything below them, never cli/."""
