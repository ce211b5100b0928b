"""Shared by the probe scripts. Stdlib only, Python 3.8+: it runs inside the inspected interpreter.

Nothing beside a probe script is the job's: every Python probe starts through the launcher beside this module
(``python dsv4probe_launch.py SCRIPT OUT_JSON REQUEST_FILE``, the doctor's run_probe), which drops the launcher's and
the script's folders from sys.path, loads this module by path from the folder the doctor names in
DSV4_DOCTOR_PROBE_LIB (its own folder when unset), then runs the script as ``__main__``. A torch.py, a
dsv4probe_common.py or any same-named package beside it or on PYTHONPATH cannot stand in for what it imports. A probe
script (an engine's, an area's or a plugin's) so needs no bootstrap of its own; it imports what it needs from here and
loads its sibling modules by path through load_module:

    import os

    from dsv4probe_common import error_info, load_module, serve  # loaded by path by dsv4probe_launch.py

    HERE = os.path.dirname(os.path.realpath(__file__))
    helper = load_module("my_probe_helper", HERE)  # only where it has modules of its own beside it


    def answer(request):
        return {"ok": True}


    if __name__ == "__main__":
        serve(answer)

A probe that starts a probe script of its own in a child process starts it the same way: launch_argv(script, ...).
"""

import faulthandler
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import traceback

# The job's sys.path[0] (its script's folder, or its working directory for -m/-c), where the doctor knows the job:
# a probe imports what the job will import (doctor/job/syspath.py).
JOB_PATH_VARIABLE = "DSV4_DOCTOR_JOB_PATH"
if os.environ.get(JOB_PATH_VARIABLE):
    sys.path[:] = [os.environ[JOB_PATH_VARIABLE]] + [p for p in sys.path if p != os.environ[JOB_PATH_VARIABLE]]

PROBE_COMMON = True  # this module, loaded by a probe's bootstrap (never a same-named stand-in imported by name)
LIB = os.path.dirname(os.path.realpath(__file__))  # the engine's probe modules: dsv4probe_static, dsv4probe_fleet
LAUNCHER = os.path.join(LIB, "dsv4probe_launch.py")  # every Python probe's start (its bootstrap)
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


MAX_TIMEOUT_S = 86400.0


def _probe_timeout():
    """DSV4_DOCTOR_PROBE_TIMEOUT, within 0-MAX_TIMEOUT_S (0: not known); never inf or nan."""
    try:
        value = float(os.environ.get("DSV4_DOCTOR_PROBE_TIMEOUT", "0") or 0)
    except (ValueError, OverflowError):
        return 0.0
    return min(value, MAX_TIMEOUT_S) if value > 0 else 0.0  # nan > 0 is False


# Every probe script imports this module first thing: the watchdog runs before anything of the target's is imported.
WATCHDOG = watch_parent(_probe_timeout())

STAGE_VARIABLE = "DSV4_DOCTOR_STAGE_FILE"  # set by the doctor: a file in this probe's own temporary directory
STAGE_CHARS = 120  # the doctor reads a few hundred bytes and shows less than this
# Taken out of the environment, so that the probe's own children (rank workers, builds) never overwrite the line:
# the probe that waits for them says what they do.
_STAGE_FILE = os.environ.pop(STAGE_VARIABLE, None)


def stage(text):
    """Say what this probe does now ("importing torch"), for the doctor's live display: one short line that replaces
    the last one whole (written beside the file, then renamed over it, so the doctor never reads half a line).
    Cosmetic: never raises, and does nothing when the doctor named no file (a probe run by hand)."""
    if not _STAGE_FILE:
        return
    tmp = "%s.%d.%d.tmp" % (_STAGE_FILE, os.getpid(), threading.get_ident())
    try:
        with open(tmp, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(cut_text(" ".join(str(text)[:4 * STAGE_CHARS].split()), STAGE_CHARS) + "\n")
        os.replace(tmp, _STAGE_FILE)
    except Exception:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_module(name, folder=LIB):
    """The probe module `name` (a file name.py in `folder`), loaded by path, once: never whatever a same-named module
    on sys.path would give. It is registered under `name`, so the modules it loads by path share it."""
    path = os.path.join(folder, name + ".py")
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.realpath(getattr(loaded, "__file__", None) or "") == os.path.realpath(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("no probe module %s at %s" % (name, path), name=name, path=path)
    return run_spec(name, spec)


def run_spec(name, spec):
    """The module `spec` finds, run and registered under `name`; a module that raises while it runs is taken out of
    sys.modules again (a later import must not see it half made)."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def launch_argv(script, *args):
    """The command line of probe script `script` (a path) in a child of this interpreter, started as the doctor starts
    a probe: through the launcher, never by its own path (its folder would lead sys.path)."""
    return [sys.executable, LAUNCHER, script] + [str(a) for a in args]


# The probes' one read path (dsv4probe_read.py, beside this module, loaded by path): bounded, never blocking, every
# decoder's error one ReadRefused. Every probe imports it from here.
_READ = load_module("dsv4probe_read")
ANSWER_LIMIT, ReadRefused, open_regular = _READ.ANSWER_LIMIT, _READ.ReadRefused, _READ.open_regular
read_bounded, read_text, read_tail, decode_json, load_json, parse_python, installed_version = (
    _READ.read_bounded, _READ.read_text, _READ.read_tail, _READ.decode_json, _READ.load_json, _READ.parse_python,
    _READ.installed_version)


MESSAGE_CHARS = 16384  # of an error message: the doctor's own limit for a string from a probe


def cut_text(text, limit):
    """At most `limit` characters of `text`, never part of a word: when the cut goes through a run of non-space
    characters, the whole run goes. A secret is recognised by its start (`TOKEN=`, `hf_`, `Bearer`) and its
    length, so a part left by a cut would pass the doctor's redaction (the same rule as the doctor's redact.cut)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    if limit and not text[limit].isspace():
        i = limit
        while i > 0 and not head[i - 1].isspace():
            i -= 1
        head = head[:i]
    # A value of this process's environment that holds spaces (a pass phrase) and that the cut goes through goes
    # too: the doctor replaces such values wherever they appear, but only whole.
    for value in os.environ.values():
        if len(value) >= 4 and " " in value and len(value) <= 4096:
            start = text.rfind(value, max(0, limit - len(value) + 1), limit + len(value) - 1)
            if 0 <= start < len(head) < start + len(value) or 0 <= start < limit < start + len(value):
                head = head[:start]
    return head.rstrip() + " …"


def tail_text(text, limit):
    """At most the last `limit` characters of `text` (a log's end), never part of a word: the run of non-space
    characters the cut goes through goes whole, and so does a value of this process's environment that holds
    spaces (cut_text's rule, from the other end). Call it with more than `limit` characters whenever the text
    itself starts in the middle of a log, so that its first, possibly partial, word goes too."""
    if len(text) <= limit:
        return text
    start = len(text) - limit
    if limit and not text[start - 1].isspace():
        while start < len(text) and not text[start].isspace():
            start += 1
    for value in os.environ.values():
        if len(value) >= 4 and " " in value and len(value) <= 4096:
            found = text.find(value, max(0, start - len(value) + 1))
            if 0 <= found < start < found + len(value):
                start = found + len(value)
    return "… " + text[start:].lstrip()


CACHE_FD = 211  # the kernel cache directory the doctor opened and checked (doctor/kernels/cache.py PROBE_FD)
IMAGE_FD = 212  # the image-wide AOT kernel store, read only (doctor/kernels/cache.py IMAGE_FD)


def cache_fds():
    """pass_fds for a child this probe starts: the kernel cache's descriptor, when this probe's CuTe DSL cache or
    dump folder or its AOT kernel store is /proc/self/fd/CACHE_FD, and the image-wide store's, when it was handed
    over; each only while it is open here as a directory. Otherwise ()."""
    import stat

    named = (os.environ.get("CUTE_DSL_CACHE_DIR"), os.environ.get("CUTE_DSL_DUMP_DIR"),
             os.environ.get("DSV4_DOCTOR_AOT_CACHE"), os.environ.get("DSV4_DOCTOR_AOT_IMAGE"))
    out = []
    for fd in (CACHE_FD, IMAGE_FD):
        if "/proc/self/fd/%d" % fd not in named:
            continue
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                out.append(fd)
        except OSError:
            pass
    return tuple(out)


def error_info(exc, frames=3):
    """An exception as data: type, message, the missing module's name, and the last frames."""
    try:
        message = cut_text(str(exc), MESSAGE_CHARS)  # the doctor redacts it, then cuts what it shows
    except BaseException:  # an exception whose __str__ raises
        message = "<unprintable %s>" % type(exc).__name__
    info: dict = {"type": type(exc).__name__, "message": message}
    name = getattr(exc, "name", None)
    if isinstance(exc, ImportError) and isinstance(name, str):
        info["missing_module"] = name
    tb = traceback.extract_tb(exc.__traceback__)[-frames:]
    info["where"] = ["%s:%s in %s" % (f.filename, f.lineno, f.name) for f in tb]
    return info


# A request never travels on the command line: /proc/PID/cmdline is world-readable, and Linux caps one argument at
# 128 KiB. It is a file of its own, made by its writer (the doctor, or a probe for its child) in a folder only its
# user can enter, mode 0600, created exclusively and never through a link; its path is the second argument.
MAX_REQUEST_BYTES = 64 << 20
REQUEST_SUFFIX = ".request.json"


class RequestUnreadable(ValueError):
    """A request file that is not read or not JSON: its reason, in words."""


def request_beside(answer_path, request):
    """Write `request` (JSON text, or a value to encode) for a child whose answer goes to `answer_path`, beside that
    answer (ANSWER.request.json): 0600, O_EXCL (an existing file or link there is refused, never followed). Its
    path, the child's second argument."""
    text = request if isinstance(request, str) else json.dumps(request)
    path = (answer_path[:-5] if answer_path.endswith(".json") else answer_path) + REQUEST_SUFFIX
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(text.encode("utf-8", "surrogateescape"))
    return path


def read_request(path):
    """The request in the file at `path`, through the probes' one read path: a regular file (never a FIFO, a device
    or a link), at most MAX_REQUEST_BYTES, read without blocking, decoded as JSON. Raises RequestUnreadable,
    whatever is wrong with it (a 100,000-deep nest included)."""
    try:
        raw, size = read_bounded(path, MAX_REQUEST_BYTES + 1, follow_links=False)
        if max(size, len(raw)) > MAX_REQUEST_BYTES:
            raise ReadRefused("it is larger than %d bytes" % MAX_REQUEST_BYTES)
        return decode_json(raw)
    except ReadRefused as exc:
        raise RequestUnreadable("the request file %s is not read: %s" % (path, exc)) from None


def serve(answer_fn):
    """Run answer_fn(request) and write its JSON answer atomically; skip interpreter teardown. Run as
    `python SCRIPT ANSWER_PATH REQUEST_PATH` (read_request; without REQUEST_PATH the request is {}): a request that
    cannot be read is a probe_error answer, never a traceback.

    CUDA libraries can crash at exit; os._exit after the answer is written keeps a good answer good.
    """
    out_path = sys.argv[1]
    faulthandler.enable()  # a segfault prints the Python stack to stderr, which the doctor keeps
    timeout = _probe_timeout()
    if timeout > 2:
        # Just before the doctor kills a hung probe, dump where it hangs.
        faulthandler.dump_traceback_later(timeout - 1.0, exit=False)
    try:
        request = read_request(sys.argv[2]) if len(sys.argv) > 2 else {}
        answer = answer_fn(request)
    except BaseException as exc:  # the probe itself broke, or its request is unreadable: still answer
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
