"""Shared by the probe scripts. Stdlib only, Python 3.8+: it runs inside the inspected interpreter.

A probe script that lives elsewhere (beside its check, in a plugin) imports this module from the folder the doctor
names in DSV4_DOCTOR_PROBE_LIB:

    sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
    from dsv4probe_common import error_info, serve
"""

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback

PARENT_VARIABLE = "DSV4_DOCTOR_PARENT_PID"  # set by the doctor's Processes.spawn: the pid that started this process
WATCH_INTERVAL_S = 0.5
TIMEOUT_GRACE_S = 5.0


def _kill_own_group():
    """SIGKILL this process's group when it leads one (the doctor starts every child in its own session), else only
    this process: never the group of whoever ran a probe script by hand."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(timeout=0.0, interval=WATCH_INTERVAL_S, grace=TIMEOUT_GRACE_S):
    """A daemon thread that kills this process's group when the process that started it is gone (its parent pid
    changed: the doctor was SIGKILLed or OOM-killed, so nothing else would end a hung probe), or `grace` seconds
    after `timeout` when one is known. Not PR_SET_PDEATHSIG: that fires when the spawning *thread* exits, and the
    doctor starts probes from worker threads. Only in a process the doctor started (PARENT_VARIABLE names its
    parent), and only once: the variable is removed, so this process's own children do not inherit it."""
    raw = os.environ.pop(PARENT_VARIABLE, None)
    try:
        parent = int(raw) if raw else 0
    except ValueError:
        parent = 0
    if parent <= 1:
        return None
    end = time.monotonic() + timeout + grace if timeout and timeout > 0 else None

    def loop():
        while True:
            if os.getppid() != parent or end is not None and time.monotonic() > end:
                _kill_own_group()
            time.sleep(interval)

    thread = threading.Thread(target=loop, name="dsv4-doctor-watchdog", daemon=True)
    thread.start()
    return thread


def _probe_timeout():
    try:
        return float(os.environ.get("DSV4_DOCTOR_PROBE_TIMEOUT", "0") or 0)
    except ValueError:
        return 0.0


# Every probe script imports this module first thing: the watchdog runs before anything of the target's is imported.
WATCHDOG = watch_parent(_probe_timeout())


def error_info(exc, frames=3):
    """An exception as data: type, message, the missing module's name, and the last frames."""
    try:
        message = str(exc)[:2000]
    except BaseException:  # an exception whose __str__ raises
        message = "<unprintable %s>" % type(exc).__name__
    info: dict = {"type": type(exc).__name__, "message": message}
    name = getattr(exc, "name", None)
    if isinstance(exc, ImportError) and isinstance(name, str):
        info["missing_module"] = name
    tb = traceback.extract_tb(exc.__traceback__)[-frames:]
    info["where"] = ["%s:%s in %s" % (f.filename, f.lineno, f.name) for f in tb]
    return info


def serve(answer_fn):
    """Run answer_fn(request) and write its JSON answer atomically; skip interpreter teardown.

    CUDA libraries can crash at exit; os._exit after the answer is written keeps a good answer good.
    """
    out_path, request = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    faulthandler.enable()  # a segfault prints the Python stack to stderr, which the doctor keeps
    timeout = float(os.environ.get("DSV4_DOCTOR_PROBE_TIMEOUT", "0") or 0)
    if timeout > 2:
        # Just before the doctor kills a hung probe, dump where it hangs.
        faulthandler.dump_traceback_later(timeout - 1.0, exit=False)
    try:
        answer = answer_fn(request)
    except BaseException as exc:  # the probe itself broke: still answer
        answer = {"probe_error": error_info(exc, frames=6)}
    tmp = out_path + ".tmp"
    try:
        text = json.dumps(answer, default=repr)
    except (ValueError, TypeError, RecursionError) as exc:
        text = json.dumps({"probe_error": {"type": type(exc).__name__, "message": "unserialisable answer: %s" % exc,
                                           "where": []}})
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
