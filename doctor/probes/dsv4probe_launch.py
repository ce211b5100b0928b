"""The one start of every Python probe: ``python dsv4probe_launch.py ENTRY_SCRIPT OUT_JSON REQUEST_FILE``.

Stdlib only, Python 3.8+: it runs inside the inspected interpreter. Nothing beside a probe script is the job's, so
before any other import it drops its own folder and the entry script's folder from sys.path, then loads
dsv4probe_common by path from the folder the doctor names in DSV4_DOCTOR_PROBE_LIB (its own folder when unset). A
torch.py, a dsv4probe_common.py or any same-named package beside a probe or on PYTHONPATH cannot stand in for what it
imports. Then it runs the entry script by path as ``__main__`` with ``sys.argv`` = [ENTRY_SCRIPT, OUT_JSON,
REQUEST_FILE]: the entry imports what it needs from dsv4probe_common (already in sys.modules) and its sibling modules
through dsv4probe_common.load_module, and answers through serve.

A plugin's probe script is started the same way (the doctor's run_probe), so it needs no bootstrap of its own. A
script that still carries the copied bootstrap finds dsv4probe_common already loaded (its PROBE_COMMON flag) and
goes on.
"""

import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))


def _bootstrap(entry_folder):
    """sys.path without this folder or the entry's, and dsv4probe_common loaded by path (once)."""
    dropped = (HERE, entry_folder)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) not in dropped]
    if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
        import importlib.util

        spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
            os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
        sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["dsv4probe_common"])


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: dsv4probe_launch.py ENTRY_SCRIPT OUT_JSON REQUEST_FILE\n")
        return 2
    entry = os.path.realpath(argv[1])
    _bootstrap(os.path.dirname(entry))
    import runpy

    sys.argv[:] = [entry] + list(argv[2:])
    runpy.run_path(entry, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
