"""The console script's first step: the doctor's own imports never come from the inspected PYTHONPATH.

The inspected environment's PYTHONPATH is also this interpreter's, and it comes before the standard library: a
`textwrap.py` or `packaging/` there would run inside the doctor (otherwise: a fake `packaging` that called
os._exit(0) made `check` exit 0 with no report). So when PYTHONPATH is set, the doctor starts again in the same
process (exec: same pid, same environment) with `-E`, which ignores it, and puts its entries back at the end of
sys.path: found (plugins' entry points, a doctor run from a checkout), never shadowing. The probes, plugin hosts
and the job still get PYTHONPATH, from the unchanged environment. What Python runs before any doctor code (a
`sitecustomize` on PYTHONPATH, at the first start) cannot be prevented from here; `python -I -m dsv4_doctor`
avoids even that.

Only os and sys are imported here: both are loaded before PYTHONPATH is consulted.
"""

import os
import sys

BOOT = ("import os, sys; del sys.path[0]; "
        "sys.path += [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]; "
        "from dsv4_doctor.cli.main import main; main()")


def main() -> None:
    if os.environ.get("PYTHONPATH") and not sys.flags.ignore_environment and not sys.flags.isolated \
            and sys.executable:
        try:
            os.execv(sys.executable, [sys.executable, "-E", "-c", BOOT, *sys.argv[1:]])
        except OSError:
            pass  # no re-exec possible: carry on in this process
    elif sys.flags.ignore_environment or sys.flags.isolated:  # `python -I -m dsv4_doctor`: the same, by hand
        sys.path += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    from .cli.main import main as cli_main

    cli_main()
