"""The static probe's answer (its entry: dsv4probe_static.py): the dispatch over the request's distributions, modules,
device code, sources, requirement targets and dependents, each read by its part; a fact that cannot be read is an
error value. Stdlib only, Python 3.8+; loaded by path (dsv4probe_common.load_module).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import error_info, load_module

HERE = os.path.dirname(os.path.realpath(__file__))

for _part in ("dsv4probe_static_installed", "dsv4probe_static_checkout", "dsv4probe_static_owner",
              "dsv4probe_static_locate", "dsv4probe_static_sources", "dsv4probe_static_fatbin"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_static_installed import (dependents, distribution_facts, distribution_index, locate_module, normalize,
                                        python_facts, requirement_targets)
from dsv4probe_static_locate import set_job_path
from dsv4probe_static_sources import source_facts
from dsv4probe_static_fatbin import device_code


def answer(request):
    set_job_path(request)  # before anything reads sys.path: the job's sys.path[0] comes first
    out = {"python": python_facts(), "distributions": {}, "modules": {}, "sources": {}}
    names = list(request.get("distributions", []))
    prefixes = tuple(normalize(p) for p in request.get("distribution_prefixes", []))
    if prefixes:
        asked = {normalize(n) for n in names}
        names += sorted(k for k in distribution_index() if k.startswith(prefixes) and k not in asked)
    for name in names:
        try:
            out["distributions"][name] = distribution_facts(name)
        except Exception as exc:
            out["distributions"][name] = {"error": error_info(exc)["message"]}
    for name in request.get("modules", []):
        try:
            out["modules"][name] = locate_module(name)
        except Exception as exc:
            out["modules"][name] = {"found": False, "error": error_info(exc)["message"]}
    for name in request.get("device_code", []):
        try:
            out.setdefault("device_code", {})[name] = device_code(name, locate_module)
        except Exception as exc:
            out.setdefault("device_code", {})[name] = {"found": False, "error": error_info(exc)["message"]}
    needles = request.get("contains", [])
    owners = request.get("attributes_of", [])
    for name in request.get("sources", []):
        try:
            out["sources"][name] = source_facts(name, needles, owners, request.get("assignments_of", []))
        except Exception as exc:
            # Not read is never "read": the error is never empty (a MemoryError has no message).
            info = error_info(exc)
            out["sources"][name] = {"found": False,
                                    "error": "%s: %s" % (info["type"], info["message"] or "(no message)")}
    if request.get("requirements_of"):
        try:
            out["requirement_targets"] = requirement_targets(request["requirements_of"])
        except Exception as exc:
            out["requirement_targets"] = {"error": error_info(exc)["message"]}
    if request.get("dependents_of"):
        try:
            out["dependents"] = dependents(request["dependents_of"])
        except Exception as exc:
            out["dependents"] = {"error": error_info(exc)["message"]}
    return out

