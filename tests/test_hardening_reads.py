"""Hardening, by class of breakage: no read that can block, no number that can blow up, redaction before any cut.

Each test here failed on the code before it: a FIFO as the fleet secret or a probe's log hung the doctor (plain open()
waits for a writer, and SIGTERM was only noted), WORLD_SIZE=100000000 and COLUMNS=1000000000 ended a run without a
report, and a cut through a secret left 12-14 of its characters in the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import doctor_command, free_port, run_doctor, validate
import probe_modules

from dsv4_doctor.fleet import env as fleetenv
from dsv4_doctor.model.core import UsageError
from dsv4_doctor.hostio import redact as redaction
from dsv4_doctor.hostio.redact import MASK, Redactor
from dsv4_doctor.hostio.safeio import ReadRefused, read_bounded, read_file, read_tail

# --- reads that block ---------------------------------------------------------------------------------------------


def test_a_fifo_a_device_or_a_directory_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device"), (tmp_path, "a directory")):
        with pytest.raises(ReadRefused, match=kind):
            read_file(str(path), 100)
        assert read_bounded(str(path), 100) is None and read_tail(str(path), 100) == (b"", 0)
    with pytest.raises(ReadRefused, match="no process wrote to within 0.3 s"):
        read_file(str(fifo), 100, fifo_s=0.3)  # a FIFO allowed: only until its deadline
    assert time.monotonic() - start < 3
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    assert read_file(str(big), 100) == b"x" * 100
    with pytest.raises(ReadRefused, match="larger than 100 bytes"):
        read_file(str(big), 100, strict_size=True)


def _fifo_writer(path, data: bytes, delay: float = 0.2) -> threading.Thread:
    def write():
        time.sleep(delay)
        with open(path, "wb") as fh:  # blocks until the reader opened it: the doctor's read is under way
            fh.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_the_fleet_secret_is_read_once_from_a_pipe_and_kept(tmp_path, monkeypatch):
    """A pipe (`<(...)`, a FIFO) gives its text once: the secret was read three times, and the run failed with
    "the file is empty" after the checks."""
    monkeypatch.setattr(fleetenv, "_SECRETS", {})
    fifo = tmp_path / "secret"
    os.mkfifo(fifo)
    writer = _fifo_writer(fifo, b"s3cr3t-value\n")
    env = {"DSV4_DOCTOR_FLEET_SECRET_FILE": str(fifo)}
    first = fleetenv.fleet_key(env)
    writer.join(5)
    assert first == fleetenv.fleet_key({"DSV4_DOCTOR_FLEET_SECRET": "s3cr3t-value"})
    assert fleetenv.fleet_key(env) == first and fleetenv.fleet_key(env) == first  # no second read


def test_a_fifo_as_the_fleet_secret_file_that_nobody_writes_ends_at_sigterm(tmp_path):
    """Before: open() of the FIFO waited for a writer forever, and SIGTERM was only noted."""
    fifo = tmp_path / "secret"
    os.mkfifo(fifo)
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), DSV4_DOCTOR_FLEET_SECRET_FILE=str(fifo))
    proc = subprocess.Popen(doctor_command() + ["check", "--no-smoke", "--only", "python.version"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(2.0)
        assert proc.poll() is None  # it waits for the pipe's writer (within its deadline)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-600:]
    assert time.monotonic() - sent < 5 and "interrupted" in err, err[-600:]


SWAP_LOG_FOR_FIFO = """
import os
try:
    log = os.readlink("/proc/self/fd/2")
    if log.endswith("output.log") and os.path.isfile(log):
        os.unlink(log)
        os.mkfifo(log)  # the doctor reads the probe's log when it ends: a FIFO nobody writes
except Exception:
    pass
"""


def test_a_probe_that_replaces_its_log_with_a_fifo_does_not_hang_the_doctor(site):
    """The inspected environment runs code in every probe (a sitecustomize.py on its PYTHONPATH); one that put a
    FIFO where the probe's log was made the doctor's read of that log wait forever."""
    site.file("sitecustomize.py", SWAP_LOG_FOR_FIFO)
    run = run_doctor("check", "--no-smoke", "--only", "python.version", "-f", "json", sites=(site.root,),
                     timeout=90)
    report = validate(json.loads(run.stdout))
    assert run.returncode in (0, 1), run.stderr[-600:]
    assert any(c["id"] == "python.version" for c in report["checks"])


def test_a_fifo_named_as_the_kernel_cache_is_refused_at_once(tmp_path):
    from dsv4_doctor.kernels import cache as kernelcache

    fifo = tmp_path / "cache"
    os.mkfifo(fifo)
    start = time.monotonic()
    for env in ({"DSV4_DOCTOR_KERNEL_CACHE": str(fifo)}, {"XDG_CACHE_HOME": str(fifo)}):
        cache = kernelcache.prepare(env)
        assert cache.source == "refused" and cache.directory is None, cache
    assert time.monotonic() - start < 2


# --- numbers with no bound ------------------------------------------------------------------------------------------

TORCHRUN = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
MAX_WORLD = 131072  # MAX_WORLD


@pytest.mark.parametrize("name, at_limit, past, far_past", [
    ("WORLD_SIZE", str(MAX_WORLD), str(MAX_WORLD + 1), "100000000"),
    ("RANK", str(MAX_WORLD - 1), str(MAX_WORLD), "9" * 400),
    ("LOCAL_RANK", "0", "-1", "9" * 5000),
    ("LOCAL_WORLD_SIZE", str(MAX_WORLD), str(MAX_WORLD + 1), "1" * 400),
    ("MASTER_PORT", "65534", "65535", "9" * 400),
])
def test_each_launcher_number_at_its_limit_and_past_it(name, at_limit, past, far_past):
    assert fleetenv.MAX_WORLD_SIZE == MAX_WORLD
    base = dict(TORCHRUN, RANK="1", WORLD_SIZE=str(MAX_WORLD))
    env = fleetenv.detect(dict(base, **{name: at_limit}))
    assert env is not None and env.world_size == int(dict(base, **{name: at_limit})["WORLD_SIZE"])
    for value in (past, far_past):
        start = time.monotonic()
        with pytest.raises(UsageError, match=r"out of range \(a whole number in \d+-\d+"):
            fleetenv.detect(dict(base, **{name: value}))
        assert time.monotonic() - start < 0.5


def test_an_absurd_world_size_is_a_usage_error_before_any_rank_is_waited_for():
    """WORLD_SIZE=100000000 made rank 0 build one entry per missing rank and end with exit 3, no report."""
    run = run_doctor("check", "--no-smoke", "--only", "python.version",
                     env=dict(TORCHRUN, RANK="0", WORLD_SIZE="100000000", MASTER_PORT=str(free_port())), timeout=60)
    assert run.returncode == 2, run.stderr[-600:]
    assert "WORLD_SIZE=100000000 is out of range (a whole number in 0-131072)" in run.stderr
    assert run.seconds < 30


@pytest.mark.parametrize("args, why", [
    (("--fleet-port", "65535"), "must be a port between 1 and 65534"),
    (("--fleet-port", "9" * 5000), "must be a port between 1 and 65534"),
    (("--cp", "9" * 5000), "--cp must be between 1 and 1024"),
    (("--timeout", "1" + "0" * 400), "must be between 1 and 3600 seconds"),
])
def test_option_numbers_far_past_their_range_are_usage_errors(args, why):
    run = run_doctor("check", "--no-smoke", *args, timeout=60)
    assert run.returncode == 2 and why in run.stderr, run.stderr[-600:]


def test_columns_is_clamped_not_refused(monkeypatch):
    from dsv4_doctor.report.dispatch import MAX_WIDTH, MIN_WIDTH, output_width

    for value, width in (("1000000000", MAX_WIDTH), ("9" * 5000, MAX_WIDTH), ("400", 400), ("5", MIN_WIDTH),
                         ("-3", 100), ("abc", 100)):
        monkeypatch.setenv("COLUMNS", value)
        assert output_width(False) == width and output_width(True) <= MAX_WIDTH


def test_a_huge_columns_still_gives_the_text_report_at_a_sane_width():
    """COLUMNS=1000000000 ended the run with a MemoryError and no report."""
    run = run_doctor("check", "--no-smoke", "--only", "python.version", env={"COLUMNS": "1000000000",
                                                                              "FORCE_COLOR": "1"}, timeout=90)
    assert run.returncode in (0, 1) and "Verdict: PASS" in run.stdout, run.stderr[-600:]
    assert max(len(line) for line in run.stdout.splitlines()) <= 400


def test_the_kernel_cache_size_and_the_probe_timeout_are_clamped():
    from dsv4_doctor.kernels import cache as kernelcache

    assert kernelcache._limit_mib({"DSV4_DOCTOR_KERNEL_CACHE_MIB": "9" * 5000}) == kernelcache.MAX_LIMIT_MIB
    assert kernelcache._limit_mib({"DSV4_DOCTOR_KERNEL_CACHE_MIB": "0"}) == 1
    common = probe_modules.common()
    for raw, seconds in (("inf", common.MAX_TIMEOUT_S), ("nan", 0.0), ("1e400", common.MAX_TIMEOUT_S), ("-5", 0.0),
                         ("30", 30.0)):
        os.environ["DSV4_DOCTOR_PROBE_TIMEOUT"] = raw
        try:
            assert common._probe_timeout() == seconds
        finally:
            del os.environ["DSV4_DOCTOR_PROBE_TIMEOUT"]


# --- redaction before any cut --------------------------------------------------------------------------------------

SPACED_SECRET = "correct horse battery staple zebra"
SECRETS = [
    ("hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("HF_TOKEN=QwErTyUiOpAsDfGhJkLzXcVbNm1234567890", "QwErTyUiOpAsDfGhJkLzXcVbNm1234567890"),
    ("Authorization: Bearer ZxCvBnMaSdFgHjKlQwErTy0987654321", "ZxCvBnMaSdFgHjKlQwErTy0987654321"),
    ("https://user:PaSsWoRd9876543210xyz@host.example/x", "PaSsWoRd9876543210xyz"),
    ("the value " + SPACED_SECRET + " was set", SPACED_SECRET),
]


def _fragments(secret: str, n: int = 8) -> set[str]:
    return {secret[i:i + n] for i in range(len(secret) - n + 1)}


def _leaks(text: str, secret: str) -> list[str]:
    return sorted(f for f in _fragments(secret) if f in text)


@pytest.mark.parametrize("shape, secret", SECRETS)
def test_a_secret_at_every_cut_offset_leaves_no_fragment(shape, secret, monkeypatch):
    """Probe errors were cut at 2,000 characters inside the probe and stage lines at 80, before redaction: a secret
    straddling the cut was never seen whole, and 12-14 of its 40 characters reached the report."""
    monkeypatch.setenv("SOME_PASSWORD", SPACED_SECRET)
    monkeypatch.setattr("dsv4_doctor.hostio.redact._SPACED", [-1.0, []])
    redact = Redactor()
    common = probe_modules.common()
    from dsv4_doctor.engine.probes import stage_text
    from dsv4_doctor.report.output import line_text

    prefix = "word " * 30
    text = prefix + shape + " and the rest of the message"
    start = len(prefix)
    for limit in range(start - 1, start + len(shape) + 2):
        shown = {
            "cap then redact": redact.text(redaction.cap(text, limit)),
            "cut then redact": redact.text(redaction.cut(text, limit)),
            "shorten then redact": redact.text(redaction.shorten(text, limit)),
            "redact_then_cap": redact.redact_then_cap(text, limit),
            "probe cut_text then redact": redact.text(common.cut_text(text, limit)),
            "probe error_info then redact": redact.text(common.error_info(RuntimeError(text))["message"]),
        }
        for where, out in shown.items():
            assert not _leaks(out, secret), (where, limit, out[-120:])
        assert len(redaction.cut(text, limit)) <= limit
    for offset in range(0, 80):  # a stage line: the probe cuts at 120, the doctor at 80 after redaction
        line = "x" * offset + " " + shape
        for out in (stage_text(common.cut_text(line, common.STAGE_CHARS)), line_text(line)):
            assert not _leaks(out, secret), (offset, out)


def test_redaction_does_not_eat_ordinary_words():
    redact = Redactor({})
    message = "DSV4_DOCTOR_FLEET_SECRET_FILE: the file is empty"
    assert redact.text(message) == message
    assert redact.text("password: hunter2") == f"password: {MASK}"
    assert redact.text("PASSWORD=the rest") == f"PASSWORD={MASK} rest"  # `=` always takes the value
    assert redact.text('TOKEN: "two words"') == f"TOKEN: {MASK}"


@pytest.mark.parametrize("shape, secret", SECRETS)
def test_a_probe_error_s_first_line_is_cut_never_through_a_secret(shape, secret, monkeypatch):
    """The doctor's one-line summary of a probe that stopped (`stopped with T: <first line>`) cut that line at 300
    characters before redaction: a token straddling the cut left up to 17 of its characters in the report."""
    from dsv4_doctor.engine import probes

    monkeypatch.setenv("SOME_PASSWORD", SPACED_SECRET)
    monkeypatch.setattr("dsv4_doctor.hostio.redact._SPACED", [-1.0, []])
    redact = Redactor()
    for offset in range(300 - len(shape) - 2, 302):
        message = "x" * offset + " " + shape + " and more"
        monkeypatch.setattr(probes, "_run_probe", lambda *a, message=message, **k: probes.ProbeResult(
            "k", ok=True, data={"probe_error": {"type": "RuntimeError", "message": message}}))
        result = probes.run_probe(probes.Probe.python("k", "x.py"), "python", 5, None)
        assert result.ok is False and result.error.startswith("stopped with RuntimeError: ")
        assert not _leaks(redact.text(result.error), secret), (offset, result.error[-80:])
