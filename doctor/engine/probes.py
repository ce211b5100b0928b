"""Probes: everything that touches the inspected environment runs in a subprocess with a timeout.

A Python probe is a stdlib-only script (here, or beside its check) run by the *target* interpreter through this
folder's launcher (launch_argv: ``python dsv4probe_launch.py SCRIPT OUT_JSON REQUEST_FILE``, every probe's bootstrap);
its request is a 0600 file of the doctor's 0700 folder. Output goes to a file, never a pipe a grandchild could hold; a
crash or hang is a `ProbeResult`, never an exception; the answer is sanitised where it enters (`redact.sanitize`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..hostio.procs import REQUEST_FILE, Processes, read_bounded, read_crash_tail, run_helper, write_request
from ..hostio.redact import decode, sanitize, shorten
from ..hostio.safeio import ReadRefused, decode_json

if TYPE_CHECKING:
    from ..job.syspath import JobPath

PROBE_DIR = Path(__file__).resolve().parent.parent / "probes"  # the probe scripts, beside the engine
LAUNCHER = PROBE_DIR / "dsv4probe_launch.py"  # every Python probe's start: sys.path hygiene, the library by path
STDERR_TAIL_BYTES = 2000
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # a probe that answers more than this is broken
# A Python probe announces its stage (dsv4probe_common.stage) in a file of its own temporary directory, named by this
# variable; the doctor reads at most STAGE_BYTES of it while it waits (ProbePool.stage).
STAGE_VARIABLE = "DSV4_DOCTOR_STAGE_FILE"
PENDING_VARIABLE = "DSV4_DOCTOR_AOT_PENDING"  # the smoke probe's prewarm markers (dsv4probe_kernelstore.PENDING_ENV)
STAGE_FILE = "stage.txt"
STAGE_BYTES = 512
STAGE_CHARS = 80
DEFAULT_TIMEOUT_S = 60.0  # each probe's limit when --timeout is not given
# ... and a long probe's (the GPU smoke and the kernel sub-runs): on an H200 tier 2's fused DSv4 layer build alone
# takes 46-53 s after 16-20 s of imports, beside the unfused build, inside the smoke probe.
LONG_TIMEOUT_S = 150.0


@dataclass(frozen=True)
class StaticRequest:
    """What a check wants from the one fast static probe: metadata, module locations, `ast` summaries."""

    distributions: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # located without importing any package
    sources: tuple[str, ...] = ()  # modules whose source is summarised with ast (classes, fields, functions)
    contains: tuple[str, ...] = ()  # strings searched for in those sources
    attributes_of: tuple[str, ...] = ()  # names whose attribute reads (`DSA.x`) those sources list
    distribution_prefixes: tuple[str, ...] = ()  # every installed distribution whose name starts so ("nvidia-")
    dependents_of: tuple[str, ...] = ()  # list the installed distributions that require one of these
    requirements_of: tuple[str, ...] = ()  # resolve these distributions' requirement targets: installed, version
    assignments_of: tuple[str, ...] = ()  # attribute names whose assignments (`x.attr = ...`) those sources list
    device_code: tuple[str, ...] = ()  # modules whose shared objects' fatbins are read (cubin archs, PTX versions)

    def __init__(self, distributions: Iterable[str] = (), modules: Iterable[str] = (),
                 sources: Iterable[str] = (), contains: Iterable[str] = (), attributes_of: Iterable[str] = (),
                 distribution_prefixes: Iterable[str] = (), dependents_of: Iterable[str] = (),
                 requirements_of: Iterable[str] = (), assignments_of: Iterable[str] = (),
                 device_code: Iterable[str] = ()):
        object.__setattr__(self, "distributions", tuple(distributions))
        object.__setattr__(self, "modules", tuple(modules))
        object.__setattr__(self, "sources", tuple(sources))
        object.__setattr__(self, "contains", tuple(contains))
        object.__setattr__(self, "attributes_of", tuple(attributes_of))
        object.__setattr__(self, "distribution_prefixes", tuple(distribution_prefixes))
        object.__setattr__(self, "dependents_of", tuple(dependents_of))
        object.__setattr__(self, "requirements_of", tuple(requirements_of))
        object.__setattr__(self, "assignments_of", tuple(assignments_of))
        object.__setattr__(self, "device_code", tuple(device_code))

    @staticmethod
    def merge(requests: Iterable[StaticRequest | None]) -> StaticRequest:
        parts: dict[str, dict[str, None]] = {k: {} for k in ("distributions", "modules", "sources", "contains",
                                                              "attributes_of", "distribution_prefixes",
                                                              "dependents_of", "requirements_of",
                                                              "assignments_of", "device_code")}
        for r in requests:
            if r is None:
                continue
            for name, seen in parts.items():
                seen.update(dict.fromkeys(getattr(r, name)))
        return StaticRequest(**{k: list(v) for k, v in parts.items()})

    def to_json(self) -> dict:
        return {"distributions": list(self.distributions), "modules": list(self.modules),
                "sources": list(self.sources), "contains": list(self.contains),
                "attributes_of": list(self.attributes_of),
                "distribution_prefixes": list(self.distribution_prefixes), "dependents_of": list(self.dependents_of),
                "requirements_of": list(self.requirements_of), "assignments_of": list(self.assignments_of),
                "device_code": list(self.device_code)}


@dataclass(frozen=True)
class Probe:
    """One isolated subprocess. Probes with the same key run once per doctor run and are shared by checks."""

    key: str
    script: str | None = None  # a file in this folder, or an absolute path (a probe beside its check)
    request: str = "{}"  # JSON text handed to the script (in a file: run_probe)
    argv: tuple[str, ...] = ()  # for a command probe (e.g. nvidia-smi), run as is
    timeout_s: float | None = None  # None: the run's default probe timeout
    long: bool = False  # seconds of work (a smoke, a kernel JIT): started before the short probes
    flags: tuple[str, ...] = ()  # interpreter flags before the script (the job's -I, -E, -s, -S, -P)
    env: tuple[tuple[str, str], ...] = ()  # variables set for it (the job's PYTHONPATH, PYTHONNOUSERSITE, ...)

    @staticmethod
    def python(key: str, script: str | os.PathLike, request: Any = None, timeout_s: float | None = None) -> Probe:
        return Probe(key=key, script=str(script), request=json.dumps(request or {}, sort_keys=True),
                     timeout_s=timeout_s)

    @staticmethod
    def beside(module_file: str, key: str, script: str, request: Any = None,
               timeout_s: float | None = None) -> Probe:
        """A probe script that lives next to the module that defines the check (`Probe.beside(__file__, ...)`)."""
        return Probe.python(key, Path(module_file).resolve().parent / script, request, timeout_s)

    @staticmethod
    def command(key: str, argv: Sequence[str], timeout_s: float | None = None) -> Probe:
        return Probe(key=key, argv=tuple(argv), timeout_s=timeout_s)

    @property
    def script_path(self) -> str | None:
        if not self.script:
            return None
        return self.script if os.path.isabs(self.script) else str(PROBE_DIR / self.script)


def launch_argv(python: str, script: str, *args: str, flags: Sequence[str] = ()) -> list[str]:
    """`script` run by `python` (with interpreter `flags`) through the launcher, never by its own path."""
    return [python, *flags, str(LAUNCHER), script, *args]


def import_probe(*targets: str, signatures: Sequence[str] = (), timeout_s: float | None = None) -> Probe:
    """Import modules and resolve ``module:attr.path`` targets in a fresh interpreter, reporting each separately."""
    request = {"targets": list(targets), "signatures": list(signatures)}
    return Probe.python("import:" + ",".join(targets), "dsv4probe_import.py", request, timeout_s)


@dataclass
class ProbeResult:
    key: str
    ok: bool  # the probe ran to the end and answered
    data: Any = None  # the JSON answer (Python probe) or stdout text (command probe)
    returncode: int | None = None
    signal: str | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    stderr_tail: str = ""
    error: str | None = None  # one line: why there is no answer

    def evidence(self) -> dict:
        """What a report shows about a probe that gave no answer."""
        return {"probe": self.key, "returncode": self.returncode, "signal": self.signal, "timed_out": self.timed_out,
                "duration_s": round(self.duration_s, 3), "stderr_tail": self.stderr_tail}


def _tail(path: str) -> str:
    return read_crash_tail(path, STDERR_TAIL_BYTES)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


# A launcher's variables describe the job's world, not a probe's: under torchrun, TORCHELASTIC_USE_AGENT_STORE makes
# any init_process_group in a probe join torchrun's store as a client and hang (seen on the H200 in fleet mode).
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")
LAUNCHER_PREFIXES = ("TORCHELASTIC_", "DSV4_DOCTOR_FLEET_")  # the fleet secret reaches only the exchange


def child_env(timeout: float, extra: dict | None = None, cache_fd: bool = False) -> dict:
    """A child's environment. `cache_fd`: the child is started with the kernel cache's descriptor (`cache_fds`), so
    its CuTe DSL folder is /proc/self/fd/N; any other child (a plugin host, a helper) gets the checked path."""
    # A stage file is the doctor's to name (run_probe, per probe): never one the caller's environment names.
    # Nor the prewarm's marker folder: the smoke probe names it for its own builds only (a folder of markers from
    # outside could make a build wait on them).
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARIABLES and k not in (STAGE_VARIABLE, PENDING_VARIABLE)
           and not k.startswith(LAUNCHER_PREFIXES)}
    env["DSV4_DOCTOR_PROBE_TIMEOUT"] = str(timeout)
    env["DSV4_DOCTOR_PROBE_LIB"] = str(PROBE_DIR)
    # The probe's answer goes to a file; these keep library output plain and the probe's own encoding fixed.
    env.setdefault("PYTHONIOENCODING", "utf-8")
    env["NO_COLOR"] = "1"
    env.pop("FORCE_COLOR", None)
    from ..kernels.cache import for_run

    for key, value in for_run().env_for(cache_fd).items():
        env.setdefault(key, value)
    env.update(extra or {})
    return env


def cache_fds(env: Mapping[str, str]) -> tuple[int, ...]:
    """The kernel cache's descriptor, for a probe whose environment names it (/proc/self/fd/N): the probe loads
    and stores its kernels through the directory the doctor opened and checked (kernelcache), never by a path."""
    from ..kernels.cache import AOT_ENV, AOT_IMAGE_ENV, IMAGE_PATH, PROBE_PATH, for_run

    names = (env.get("CUTE_DSL_CACHE_DIR"), env.get("CUTE_DSL_DUMP_DIR"), env.get(AOT_ENV), env.get(AOT_IMAGE_ENV))
    return for_run().pass_fds if PROBE_PATH in names or IMAGE_PATH in names else ()


def run_probe(probe: Probe, python: str, timeout_s: float, procs: Processes,
              on_stage_file: Callable[[str], None] | None = None) -> ProbeResult:
    """Run one probe; never raises, never outlives `timeout_s` (the probe's own timeout, or less). A Python probe's
    stage file is handed to `on_stage_file` before it starts (it is gone once this returns)."""
    start = time.monotonic()
    try:
        result = _run_probe(probe, python, timeout_s, procs, on_stage_file)
    except Exception as exc:  # no temp dir (disk full), fork failure, shutting down: still an answer
        return ProbeResult(probe.key, ok=False, duration_s=time.monotonic() - start,
                           error=f"could not run: {type(exc).__name__}: {exc}")
    # A Python probe whose own code broke answers {"probe_error": ...}: no answer a check can read.
    if result.ok and probe.script and (not isinstance(result.data, dict) or "probe_error" in result.data):
        raw = result.data.get("probe_error") if isinstance(result.data, dict) else None
        err: dict = raw if isinstance(raw, dict) else {}
        result.ok = False
        message = str(err.get("message") or "")
        # One line for the summary (torch's CUDA errors add lines of advice); the whole text joins the stderr tail.
        first = next((line.strip() for line in message.splitlines() if line.strip()), "")
        result.error = (f"stopped with {err.get('type')}: {shorten(first, 300)}" if err
                        else f"answered {type(result.data).__name__}, not an object")
        where: list = err["where"] if isinstance(err.get("where"), list) else []
        full = f"{err.get('type')}: {message}" if err and first != message.strip() else ""
        result.stderr_tail = "\n".join(x for x in (result.stderr_tail, full, "\n".join(map(str, where))) if x)
    return result


def _run_probe(probe: Probe, python: str, timeout: float, procs: Processes,
               on_stage_file: Callable[[str], None] | None = None) -> ProbeResult:
    start = time.monotonic()
    tmp = procs.tempdir()
    try:
        out_path = os.path.join(tmp, "answer.json")
        log_path = os.path.join(tmp, "output.log")
        script = probe.script_path
        argv, extra = list(probe.argv), None
        if script:  # its request: a file of this private folder, never a word of its command line (write_request)
            request = write_request(os.path.join(tmp, REQUEST_FILE), probe.request)
            argv = launch_argv(python, script, out_path, request, flags=probe.flags)
            extra = dict(probe.env, **{STAGE_VARIABLE: os.path.join(tmp, STAGE_FILE)})
            if on_stage_file is not None:
                on_stage_file(extra[STAGE_VARIABLE])
        try:
            # A Python probe answers in out_path, so its stdout joins stderr in the log; a command's stdout is
            # its answer and goes to out_path. The caller's cwd, as the job would have it: relative PYTHONPATH
            # entries resolve the same way.
            env = child_env(timeout, extra, cache_fd=bool(script))  # a Python probe: a command needs no cache
            end = run_helper(procs, argv, log_path, env, timeout, stdout_path=None if probe.script else out_path,
                             pass_fds=cache_fds(env))
        except FileNotFoundError:
            return ProbeResult(probe.key, ok=False, duration_s=time.monotonic() - start,
                               error=f"{argv[0]} not found")
        except OSError as exc:
            return ProbeResult(probe.key, ok=False, duration_s=time.monotonic() - start,
                               error=f"could not start {argv[0]}: {exc}")
        timed_out = end.timed_out
        duration = time.monotonic() - start
        rc = end.returncode
        sig = None if timed_out else signal_name(rc)
        result = ProbeResult(probe.key, ok=False, returncode=rc, signal=sig, timed_out=timed_out,
                             duration_s=duration, stderr_tail=_tail(log_path))
        if timed_out:
            result.error = f"timed out after {timeout:g} s and was killed"
            return result
        if sig:  # by the doctor when a stop signal ended its wait (procs.Helper.finish)
            result.error = f"stopped by the doctor on {end.stopped}" if end.stopped else f"killed by {sig}"
            return result
        if not probe.script and rc != 0:
            result.error = f"{argv[0]} exited with code {rc}"
            return result
        raw = read_bounded(out_path, MAX_ANSWER_BYTES + 1) or b""
        if len(raw) > MAX_ANSWER_BYTES:
            result.error = f"answered more than {MAX_ANSWER_BYTES} bytes"
            return result
        if not raw and probe.script:
            result.error = f"exited with code {rc} without an answer"
            return result
        if not probe.script:
            result.data = decode(raw, MAX_ANSWER_BYTES)
            result.ok = True
            return result
        try:
            result.data = sanitize(decode_json(raw, "surrogateescape"))
        except ReadRefused as exc:  # not JSON, a 100,000-deep nest, more than memory holds
            result.error = f"answered invalid JSON ({shorten(str(exc), 200)})"
            return result
        result.ok = True
        return result
    finally:
        procs.remove_dir(tmp)


def read_stage(path: str) -> str | None:
    """A probe's last stage line as the doctor may show it, or None: at most STAGE_BYTES of a regular file (never a
    FIFO, a device or a link the probe put there), its last line, cleaned of escapes and control characters, cut to
    STAGE_CHARS. Whatever the probe wrote cannot stall, flood or restyle the display."""
    raw = read_bounded(path, STAGE_BYTES, follow_links=False)
    lines = [line for line in (raw or b"").decode("utf-8", "replace").splitlines() if line.strip()]
    return stage_text(lines[-1]) if lines else None


def stage_text(text: str) -> str:
    """A stage as the live display may take it: one line, no escapes or control characters, at most STAGE_CHARS."""
    from ..hostio.redact import Redactor, clean_text, cut, shorten

    # Redacted before it is cut (a cut through a secret leaves a part redaction does not recognise), and cut only
    # where a word ends; the display shows it whole.
    text = " ".join(clean_text(Redactor().text(cut(text, 4 * STAGE_CHARS))).split())
    return shorten(text, STAGE_CHARS)


# The one GPU query that needs no torch; the profile's detected --gpu-arch comes from it.
NVIDIA_SMI = Probe.command(
    "nvidia-smi",
    ["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,driver_version",
     "--format=csv,noheader,nounits"],
    timeout_s=15,
)

STATIC_SCRIPT = "dsv4probe_static.py"
STATIC_TIMEOUT_S = 30.0


def static_probe_for(request: StaticRequest, probe_timeout_s: float, job: JobPath | None = None) -> Probe:
    """The static probe; with the job's start (`job`), it starts as the job's interpreter would: its sys.path[0] in
    front, its path flags and variables (doctor/job/syspath.py), so that it finds the copies the job will import."""
    body = request.to_json()
    timeout = min(STATIC_TIMEOUT_S, probe_timeout_s)
    if job is None:
        return Probe.python("static", STATIC_SCRIPT, body, timeout_s=timeout)
    body["job_path"] = job.request()
    probe = Probe.python("static:job", STATIC_SCRIPT, body, timeout_s=timeout)
    return Probe(key=probe.key, script=probe.script, request=probe.request, timeout_s=timeout,
                 flags=tuple(f for f in job.flags if f in ("-I", "-E", "-s", "-S")), env=job.env)


TORCH = Probe.python("torch", "dsv4probe_torch.py")

# The target handshake: runs on any Python (2.7 included), so an interpreter too old for the probes is still named.
HANDSHAKE_CODE = (
    # `-c` puts the cwd first on sys.path: drop it before importing anything, so ./platform.py cannot answer.
    "import sys\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
    "import platform\n"
    "v = sys.version_info\n"
    "sys.stdout.write('DSV4DOCTOR-HANDSHAKE %d %d %d %s\\n' % (v[0], v[1], v[2], platform.python_implementation()))\n"
    "sys.stdout.write(sys.executable + '\\n' + sys.prefix + '\\n')\n"
)


def parse_handshake(text: str) -> dict | None:
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        m = re.fullmatch(r"DSV4DOCTOR-HANDSHAKE (\d+) (\d+) (\d+) (\S+)", line.strip())
        if m:
            rest = lines[i + 1:i + 3] + ["", ""]
            major, minor, micro = (int(m.group(k)) for k in (1, 2, 3))
            return {"version": f"{major}.{minor}.{micro}", "version_info": [major, minor, micro],
                    "implementation": m.group(4), "executable": rest[0], "prefix": rest[1]}
    return None


def handshake_probe(python: str) -> Probe:
    return Probe.command("handshake", [python, "-S", "-E", "-c", HANDSHAKE_CODE], timeout_s=15)


PROBE_MIN_PYTHON = (3, 8)  # the probe scripts' own floor


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version` (csv, no units)."""
    gpus = []
    for line in (text or "").splitlines()[:64]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 5:
            continue
        index, name, cc, mem, driver = cells[:5]
        if not re.fullmatch(r"[0-9]{1,3}", index):
            continue
        gpus.append({
            "index": int(index),
            "name": name[:200],
            "compute_capability": cc if re.fullmatch(r"[0-9]{1,2}\.[0-9]", cc) else None,
            "memory_mib": int(mem) if re.fullmatch(r"[0-9]{1,9}", mem) else None,
            "driver_version": driver if re.fullmatch(r"[0-9]{1,4}(\.[0-9]{1,4}){0,3}", driver) else None,
        })
    return gpus
