"""The import probe's answer (its entry: dsv4probe_import.py): each target imported and resolved on its own, its
outcome (and, where asked, its call signature) as data. Stdlib only, Python 3.8+; loaded by path
(dsv4probe_common.load_module).
"""

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import error_info

import importlib
import inspect
import time


def resolve(target, want_signature):
    module_name, _, attr_path = target.partition(":")
    start = time.monotonic()
    outcome = {"target": target, "ok": False}
    try:
        obj = importlib.import_module(module_name)
        outcome["origin"] = getattr(obj, "__file__", None)
        version = getattr(obj, "__version__", None)
        if isinstance(version, str):
            outcome["version"] = version
        for part in filter(None, attr_path.split(".")):
            obj = getattr(obj, part)
        outcome["ok"] = True
        outcome["kind"] = type(obj).__name__
        if want_signature:
            try:
                sig = inspect.signature(obj)
                outcome["params"] = list(sig.parameters)
                outcome["varkw"] = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
            except (TypeError, ValueError) as exc:
                outcome["signature_error"] = str(exc)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a broken package are findings too
        outcome["error"] = error_info(exc)
    outcome["duration_s"] = round(time.monotonic() - start, 4)
    return outcome


def answer(request):
    wanted = set(request.get("signatures", []))
    return {"results": [resolve(t, t in wanted) for t in request.get("targets", [])]}

