"""The Ray helper's launch, for `check --ray` / `fleet --ray` (raycluster): the stdlib-only probes a node without
the doctor runs, shipped with its task, the helper's request in a private file, and its bounded answer; and the
command's own py_modules, which --ray-hook's override keeps."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence

RAY_SCRIPT = "dsv4probe_ray.py"
SHIP_PACKAGE = "dsv4_doctor_shipped_probes"  # the py_modules folder a node without the doctor runs the probe from
# The launcher, the library and the static probe (and its dsv4probe_static_*.py).
SHIPPED = ("dsv4probe_launch.py", "dsv4probe_common.py", "dsv4probe_read.py", "dsv4probe_static.py")


def static_request() -> dict:
    """The static probe's request of every built-in check: what a node without the doctor answers."""
    from ..engine import registry
    from ..engine.probes import StaticRequest

    try:
        return StaticRequest.merge(c.static for c in registry.load().checks).to_json()
    except Exception:  # noqa: BLE001 - no request: a node without the doctor then reports nothing checked
        return {}


def report_limit() -> int:
    from .admit import MAX_REPORT_BYTES

    return MAX_REPORT_BYTES


def ship_probes(folder: str) -> str:
    """The py_modules folder a task ships to its node: the doctor's stdlib-only static probe (dsv4probe_common and
    dsv4probe_static*.py), as a package of its own name. Its path."""
    import shutil

    from ..engine.probes import PROBE_DIR

    target = os.path.join(folder, SHIP_PACKAGE)
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "__init__.py"), "w", encoding="utf-8") as fh:
        fh.write('"""dsv4-doctor\'s stdlib-only probes, shipped with a Ray fleet check\'s task."""\n')
    for path in sorted(PROBE_DIR.glob("dsv4probe_*.py")):
        if path.name in SHIPPED or path.name.startswith("dsv4probe_static_"):
            shutil.copyfile(path, os.path.join(target, path.name))
    return target


def run_helper(python: str, request: dict, timeout_s: float):
    from ..engine.probes import PROBE_DIR, child_env, launch_argv
    from ..hostio.procs import REQUEST_FILE, Processes, read_bounded, start_helper, write_request
    from ..hostio.safeio import ReadRefused, decode_json

    procs = Processes()
    folder = procs.tempdir("dsv4-doctor-ray-")
    answer_path, log = os.path.join(folder, "answer.json"), os.path.join(folder, "helper.log")
    try:
        shipped = ship_probes(folder)
    except OSError:
        shipped = ""
    try:
        # The request (the training command, the runtime_env's values) in a file of this private folder, as every
        # child's: never on the helper's command line (procs.write_request).
        argv = launch_argv(python, str(PROBE_DIR / RAY_SCRIPT), answer_path,
                           write_request(os.path.join(folder, REQUEST_FILE), dict(request, dir=folder, ship=shipped)))
        helper = start_helper(procs, argv, log, child_env(timeout_s))
    except OSError as exc:
        return {"error": f"the Ray helper could not start ({exc.strerror or exc})"}, folder, procs
    end = helper.finish(time.monotonic() + timeout_s)
    raw = read_bounded(answer_path, 16 << 20)
    try:
        answer = decode_json(raw, "replace") if raw else None
    except ReadRefused:  # not JSON, or nested too deeply
        answer = None
    if not isinstance(answer, dict) or "probe_error" in answer:
        from ..hostio.redact import read_tail, shorten

        err = answer.get("probe_error") if isinstance(answer, dict) else None
        why = (f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else
               "it did not finish in time" if end.timed_out else
               f"it exited with code {end.returncode} without an answer")
        tail = read_tail(log, 600).strip().splitlines()
        answer = {"error": f"the Ray helper could not check the cluster ({shorten(str(why), 400)})"
                  + (f"; its last line: {shorten(tail[-1], 300)}" if tail and not isinstance(err, dict) else "")}
    return answer, folder, procs


HOOK_SAFE_ENTRY = re.compile(r"[A-Za-z0-9_./:@+=~-]{1,4096}")


def job_py_modules(command: Sequence[str] | None) -> list[str]:
    """The py_modules the command gives verl's ray.init (its last word; entries as written, remote ones too), for
    the --ray-hook override, which replaces the list: the hook's module goes beside them, never instead. [] where the
    command states none. UsageError where an entry cannot be written back as a plain Hydra string, or where a config
    file or words the shell did not expand may set the list (the hook would then drop the job's modules)."""
    from ..job.keys import HYDRA_OVERRIDE
    from ..model.core import UsageError
    from .rayjob import MAX_LIST, RUNTIME_ENV_KEY, _hydra_list, read_command

    job = read_command(command)
    if job is None:
        return []
    if job.config_file or job.hidden:
        raise UsageError("--ray-hook replaces ray_init.runtime_env.py_modules, which a config file or words the shell "
                         "did not expand may set for this command: leave --ray-hook off")
    found: list[str] = []
    for arg in job.overrides:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if m is None or arg.startswith("-") or m.group("key") != f"{RUNTIME_ENV_KEY}.py_modules":
            continue
        if (m.group("prefix") or "") == "~":
            found = []
            continue
        items = _hydra_list(m.group("value") or "")
        if items is None or len(items) > MAX_LIST or not all(HOOK_SAFE_ENTRY.fullmatch(i) for i in items):
            raise UsageError("--ray-hook would replace the command's ray_init.runtime_env.py_modules, and an entry of "
                             "it is not a plain path or URI the doctor can write back: leave --ray-hook off")
        found = list(items)
    return found
