"""Shared by the probe scripts. Stdlib only, Python 3.8+: it runs inside the inspected interpreter.

A probe script that lives elsewhere (beside its check, in a plugin) imports this module from the folder the doctor
names in DSV4_DOCTOR_PROBE_LIB:

    sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
    from dsv4probe_common import error_info, serve
"""

import faulthandler
import json
import os
import sys
import traceback


def error_info(exc, frames=3):
    """An exception as data: type, message, the missing module's name, and the last frames."""
    try:
        message = str(exc)[:2000]
    except BaseException:  # an exception whose __str__ raises
        message = "<unprintable %s>" % type(exc).__name__
    info = {"type": type(exc).__name__, "message": message}
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
