"""Hardening v4, one read path: every reader of a file the doctor does not control, fed what hostile input gives it.

Each reader (the engine's safeio, the probes' dsv4probe_common, and the probe functions that read through them:
verl's constants_ppo.py in the Ray helper, the Hydra probe's entry module, the static probe's checkout version,
METADATA and RECORD, git's files, logs, a rank's stored values) gets a FIFO with no writer, a FIFO whose writer never
closes it, a 100,000-deep nest (JSON and Python, in the shapes CPython answers with RecursionError, MemoryError or a
SyntaxError) and an oversize file. None may block past its bound, and none may raise anything but its typed refusal
(safeio.ReadRefused; dsv4probe_common.ReadRefused, an OSError) or answer "not read" as its caller documents.
The probe side runs in subprocesses of real interpreters (this one; Python 3.8 and 3.13 where pyenv has them, slow),
each case under an alarm, so a reader that blocks is a failing case, never a hung test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsv4_doctor.engine.probes import LAUNCHER

from dsv4_doctor.hostio import safeio
from dsv4_doctor.engine.probes import PROBE_DIR

REPO = Path(__file__).resolve().parent.parent
DEPTH = 100_000
DEEP_JSON = b"[" * DEPTH + b"]" * DEPTH
# CPython 3.8-3.13 on these: MemoryError (unary minus; 3.8 prints "s_push: parser stack overflow"), RecursionError
# during ast construction (3.11+: attributes, additions; 3.8-3.10 parse them), SyntaxError (brackets: 200 levels).
DEEP_PYTHON = {
    "unary": b"x = " + b"-" * DEPTH + b"1\n",
    "attributes": b"x = a" + b".b" * DEPTH + b"\n",
    "additions": b"x = 1" + b"+1" * DEPTH + b"\n",
    "lists": b"x = " + b"[" * DEPTH + b"]" * DEPTH + b"\n",
}
BOUND_S = 3.0  # each read: a refusal is immediate; this leaves room for a loaded machine


@pytest.fixture
def hostile(tmp_path):
    """The hostile files: a FIFO nobody writes, a FIFO whose writer (this process) never closes it, a deep JSON file,
    deep Python sources, an oversize file (2 MiB + 1 byte: past every limit these tests give)."""
    files = {"fifo": tmp_path / "fifo", "fifo_writer": tmp_path / "fifo_writer", "deep_json": tmp_path / "deep.json",
             "oversize": tmp_path / "oversize.json"}
    os.mkfifo(files["fifo"])
    os.mkfifo(files["fifo_writer"])
    writer = os.open(files["fifo_writer"], os.O_RDWR | os.O_NONBLOCK)  # a writer that never closes while we read
    os.write(writer, b'{"partial": ')
    files["deep_json"].write_bytes(DEEP_JSON)
    files["oversize"].write_bytes(b'{"a": "' + b"x" * (2 << 20) + b'"}')
    for shape, source in DEEP_PYTHON.items():
        files[f"deep_py_{shape}"] = tmp_path / f"deep_{shape}.py"
        files[f"deep_py_{shape}"].write_bytes(source)
    try:
        yield files
    finally:
        os.close(writer)


def _bounded(call):
    """(what `call` returned or the exception it raised, seconds)."""
    start = time.monotonic()
    try:
        got = call()
    except BaseException as exc:  # noqa: BLE001 - every exception is judged by the caller
        got = exc
    return got, time.monotonic() - start


# --- the engine: doctor/hostio/safeio.py ----------------------------------------------------------------------------

ENGINE_LIMIT = 1 << 20


def _engine_readers(path: str) -> dict:
    return {
        "read_file": lambda: safeio.read_file(path, ENGINE_LIMIT, strict_size=True),
        "read_file_fifo_allowed": lambda: safeio.read_file(path, ENGINE_LIMIT, fifo_s=0.2, strict_size=True),
        "load_json": lambda: safeio.load_json(path, ENGINE_LIMIT),
        "load_json_fifo_allowed": lambda: safeio.load_json(path, ENGINE_LIMIT, fifo_s=0.2),
        "parse_python": lambda: safeio.parse_python(safeio.read_file(path, ENGINE_LIMIT, strict_size=True), path),
    }


KINDS = ["fifo", "fifo_writer", "deep_json", "oversize", *[f"deep_py_{shape}" for shape in DEEP_PYTHON]]


@pytest.mark.parametrize("kind", KINDS)
def test_each_engine_reader_refuses_hostile_files_at_once_with_a_reason(hostile, kind):
    """Before: no load_json, decode_json or parse_python: each caller decoded on its own, and json.loads on a deep
    nest raised RecursionError (MemoryError: not caught anywhere)."""
    for name, call in _engine_readers(str(hostile[kind])).items():
        got, seconds = _bounded(call)
        assert seconds < BOUND_S, (name, kind, seconds)
        if name.startswith("read_file") and kind.startswith("deep"):
            assert got == hostile[kind].read_bytes(), (name, kind)  # bytes are bytes: only a decoder refuses a nest
            continue
        assert isinstance(got, safeio.ReadRefused), (name, kind, type(got), str(got)[:200])
        why = str(got)
        assert why and len(why) < 600, (name, kind, why)
        assert _engine_reason(name, kind) in why, (name, kind, why)


def _engine_reason(reader: str, kind: str) -> str:
    if kind == "fifo":
        return "FIFO"
    if kind == "fifo_writer":  # the first reader takes what the writer wrote; none sees the text end
        return "within 0.2 s" if reader.endswith("fifo_allowed") else "it is a FIFO, not a regular file"
    if kind == "oversize":
        return "larger than"
    if reader.startswith("load_json"):
        return "nested too deeply to decode" if kind == "deep_json" else "it is not JSON"
    if kind in ("deep_json", "deep_py_lists"):
        return "too many nested parentheses"
    return "nested too deeply to parse"


@pytest.mark.parametrize("raw, why", [
    (DEEP_JSON, "its JSON is nested too deeply to decode (RecursionError)"),
    (b'{"a": 1', "it is not JSON (Expecting"),
    (b"\xff\xfe{}", "it is not UTF-8 text"),
    (b"1" * 5000, "it is not JSON (Exceeds the limit"),  # int_max_str_digits (3.11+): a ValueError of its own
])
def test_decode_json_turns_every_decoder_error_into_one_refusal(raw, why):
    with pytest.raises(safeio.ReadRefused, match="^" + __import__("re").escape(why)):
        safeio.decode_json(raw)
    assert safeio.decode_json(b'{"a": [1]}') == {"a": [1]}


@pytest.mark.parametrize("source, why", [
    *[(src, "nested too deeply to parse" if shape != "lists" else "too many nested parentheses")
      for shape, src in DEEP_PYTHON.items()],
    (b"def broken(:\n", "it does not parse as Python (SyntaxError"),
    (b"x = 1\0", "it does not parse as Python"),
    (b"x = '\xff'\n", "(unicode error)"),
    ("".join(" " * i + "if 1:\n" for i in range(120)).encode(), "IndentationError: too many levels of indentation"),
])
def test_parse_python_turns_every_decoder_error_into_one_refusal(source, why):
    with pytest.raises(safeio.ReadRefused) as refused:
        safeio.parse_python(source, "constants_ppo.py")
    assert why in str(refused.value), str(refused.value)
    assert safeio.parse_python(b"A = 1\n").body[0].targets[0].id == "A"  # type: ignore[attr-defined]


def test_the_engine_s_node_report_and_ray_answer_decoders_survive_a_deep_nest():
    """A Ray node's report (raynode.as_node, probe_report) and the helper's answer are decoded by decode_json: a
    100,000-deep nest is that node's rejected report, never an exception out of the merge."""
    from dsv4_doctor.fleet import admit, raynode

    with pytest.raises(admit.BadReport, match="its report is not read: its JSON is nested too deeply"):
        raynode.as_node(DEEP_JSON, 1, "node-a (node 1234)", "1234")
    assert raynode.probe_report(DEEP_JSON, None, None) is None  # type: ignore[arg-type]


# --- the probes: dsv4probe_common and the probe functions that read through it ---------------------------------------

# Runs in the target interpreter under test: loads dsv4probe_common and the probe parts by path, as the probe scripts
# do, and runs each case under an alarm (a case that blocks is reported "blocked", the next case still runs).
PROBE_CASES = r'''
import importlib.util, json, os, signal, sys, time
probe_dir, checks_dir, smoke_dir, cases_file = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(probe_dir, "dsv4probe_common.py"))
common = sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)
common.load_module("dsv4probe_static_installed", probe_dir)
checkout = common.load_module("dsv4probe_static_checkout", probe_dir)
fatbin = common.load_module("dsv4probe_static_fatbin", probe_dir)
files = common.load_module("dsv4probe_files", smoke_dir)
libs = common.load_module("dsv4probe_libs_exports", checks_dir)
fleet = common.load_module("dsv4probe_fleet_exchange", probe_dir)
hydra = common.load_module("dsv4probe_hydra_compose", probe_dir)
installed = sys.modules["dsv4probe_static_installed"]

def folder_with(path, name):
    """A folder whose file `name` (a relative path) is a link to the hostile file: the reader opens `name`, and
    follows the link."""
    folder = path + "." + name.replace("/", "_") + ".d"
    link = os.path.join(folder, name)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if not os.path.lexists(link):
        os.symlink(path, link)
    return folder

def version_in(folder):
    """installed_version of a distribution whose METADATA is the hostile file (its folder on sys.path)."""
    sys.path.insert(0, folder)
    try:
        return common.installed_version("hostile_pkg")
    finally:
        sys.path.remove(folder)

LIMIT = 1 << 20
READERS = {
    "common.installed_version": lambda p: version_in(folder_with(p, "hostile_pkg-1.0.dist-info/METADATA")),
    "common.read_bounded": lambda p: common.read_bounded(p, LIMIT),
    "common.read_tail": lambda p: common.read_tail(p, 4096),
    "common.open_regular": lambda p: common.open_regular(p).close(),
    "common.load_json": lambda p: common.load_json(p, LIMIT),
    "common.parse_python": lambda p: common.parse_python(common.read_bounded(p, 4 * LIMIT)[0], p),
    "static_installed.read_bounded": lambda p: installed.read_bounded(p, LIMIT),
    "static_checkout.files_version": lambda p: checkout.files_version(folder_with(p, "package_info.py")),
    "static_fatbin.read_object": lambda p: fatbin.read_object(p),
    "common.read_text": lambda p: common.read_text(p),
    "files.log_tail": lambda p: files.log_tail(p),
    "static_checkout.git_commit": lambda p: (checkout.git_commit(folder_with(p, ".git/HEAD"), 1) or {}).get("commit"),
    "libs._name_version": lambda p: libs._name_version(folder_with(p, "METADATA")),
    "fleet._read_file": lambda p: fleet._read_file(p),
    "hydra.decorator_config": lambda p: hydra.decorator_config(p),
}

class Blocked(Exception):
    pass

def alarm(signum, frame):
    raise Blocked()

signal.signal(signal.SIGALRM, alarm)
out = {}
for kind, path in json.load(open(cases_file)).items():
    for name, reader in READERS.items():
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        try:
            got = reader(path)
            result = {"returned": repr(got)[:300]}
        except Blocked:
            result = {"raised": "blocked"}
        except BaseException as exc:
            result = {"raised": type(exc).__name__, "typed": isinstance(exc, common.ReadRefused),
                      "why": str(exc)[:300]}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        result["s"] = round(time.monotonic() - start, 3)
        out["%s %s" % (kind, name)] = result
print(json.dumps(out))
'''

# What a reader answers for "not read" when it does not raise: its documented value.
NOT_READ = {"common.installed_version": "None", "static_checkout.files_version": "None", "common.read_text": "''",
            "files.log_tail": "''",
            "static_checkout.git_commit": "None", "libs._name_version": "{'distribution':", "fleet._read_file": "None",
            "static_fatbin.read_object": "{'path':"}
# Readers of bytes (bounded), which decode nothing: a regular file of any content is read, up to their limit.
BYTE_READERS = {"common.installed_version", "common.read_bounded", "common.read_tail", "common.open_regular",
                "static_installed.read_bounded", "common.read_text", "files.log_tail", "static_checkout.git_commit",
                "fleet._read_file", "libs._name_version",
                "static_fatbin.read_object"}
# A decoder's answer to hostile content when it does not refuse it: Python 3.8-3.10 parse 100,000 attributes or
# additions (3.11+ refuse them); no entry module's decorator and no version is found in them.
DECODED = {"common.parse_python": ("<ast.Module", "<_ast.Module"), "hydra.decorator_config": ("(None, None)",),
           "static_checkout.files_version": ("None",)}


def _probe_cases(python: str, hostile: dict, tmp_path: Path) -> dict:
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({k: str(v) for k, v in hostile.items()}))
    checks = REPO / "checks"
    run = subprocess.run([python, "-c", PROBE_CASES, str(PROBE_DIR), str(checks), str(checks / "smoke"), str(cases)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=""))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _judge_probe_cases(results: dict) -> list[str]:
    wrong = []
    for case, got in results.items():
        kind, reader = case.split(" ", 1)
        if got["s"] > BOUND_S or got.get("raised") == "blocked":
            wrong.append(f"{case}: blocked ({got})")
        elif "raised" in got and not got.get("typed"):
            wrong.append(f"{case}: raised {got['raised']}: {got.get('why')}")
        elif "returned" in got:
            value = got["returned"]
            if kind.startswith("fifo"):
                expected = (NOT_READ[reader],) if reader in NOT_READ else None
            elif reader in BYTE_READERS:
                continue  # bytes are bytes, bounded: only a decoder refuses a nest
            else:
                expected = DECODED.get(reader)
            if expected is None or not value.startswith(expected):
                wrong.append(f"{case}: returned {value}")
    return wrong


def test_each_probe_reader_refuses_hostile_files_at_once(hostile, tmp_path):
    """Before: files.log_tail, libs._name_version, fleet._read_file and hydra.decorator_config opened with open()
    and blocked on a FIFO until their probe's timeout (so did importlib.metadata's version, behind installed_version);
    static_checkout.files_version raised MemoryError or
    RecursionError out of the whole static probe; there was no common reader or decoder."""
    results = _probe_cases(sys.executable, hostile, tmp_path)
    assert len(results) == len(hostile) * 15
    assert not _judge_probe_cases(results), "\n".join(_judge_probe_cases(results))
    assert "it is a FIFO, not a regular file" in results["fifo hydra.decorator_config"]["why"]
    assert "nested too deeply to parse" in results["deep_py_unary hydra.decorator_config"]["why"]
    assert "larger than 1048576 bytes" in results["oversize common.load_json"]["why"]


def _pyenv(version: str) -> str | None:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    path = root / "versions" / version / "bin" / "python"
    return str(path) if path.exists() else None


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.8.18", "3.13.0"])  # the probes' oldest Python (the old parser), the newest
def test_the_probe_readers_hold_on_the_oldest_and_newest_python(hostile, tmp_path, version):
    python = _pyenv(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    results = _probe_cases(python, hostile, tmp_path)
    assert not _judge_probe_cases(results), "\n".join(_judge_probe_cases(results))


# --- the Ray helper: verl's constants_ppo.py -------------------------------------------------------------------------

RAY_DEFAULTS = r'''
import importlib.util, json, os, sys
# The library first, by path, as the launcher (dsv4probe_launch.py) loads it before any probe script.
lib = importlib.util.spec_from_file_location("dsv4probe_common",
                                             os.path.join(os.path.dirname(sys.argv[1]), "dsv4probe_common.py"))
sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(lib)
lib.loader.exec_module(sys.modules["dsv4probe_common"])
spec = importlib.util.spec_from_file_location("dsv4probe_ray_nodes", sys.argv[1])
ray_helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ray_helper)
print(json.dumps(ray_helper.compose_runtime_env({"verl_defaults": True, "runtime_env": {"env_vars": {"A": "1"}}})))
'''


def _planted_verl(root: Path, constants: bytes | None) -> Path:
    """A verl tree whose trainer/constants_ppo.py is `constants` (None: a FIFO nobody writes)."""
    trainer = root / "verl" / "trainer"
    trainer.mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text("")
    if constants is None:
        os.mkfifo(trainer / "constants_ppo.py")
    else:
        (trainer / "constants_ppo.py").write_bytes(constants)
    return trainer / "constants_ppo.py"


@pytest.mark.parametrize("shape", ["fifo", "fifo_writer", "oversize", *DEEP_PYTHON])
def test_the_ray_helper_reads_verl_s_defaults_as_hostile_input(tmp_path, shape):
    """Before: a FIFO blocked the Ray helper in open() for minutes, and a 100,000-deep expression raised MemoryError
    (RecursionError on 3.11+ for other shapes) out of the helper: the whole cluster check was lost. Now the file is
    "not read" with its reason, and the runtime_env is composed without verl's defaults (the command's own still
    apply)."""
    body = {"fifo": None, "fifo_writer": None, "oversize": b"#" * ((1 << 20) + 1) + b"\n"}.get(
        shape, DEEP_PYTHON.get(shape, b"").replace(b"x = ", b"PPO_RAY_RUNTIME_ENV = {'env_vars': {'A': ", 1)
        .replace(b"\n", b"}}\n"))
    path = _planted_verl(tmp_path, body)
    writer = os.open(path, os.O_RDWR | os.O_NONBLOCK) if shape == "fifo_writer" else None
    try:
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-c", RAY_DEFAULTS, str(PROBE_DIR / "dsv4probe_ray_nodes.py")],
                             capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
        seconds = time.monotonic() - start
    finally:
        if writer is not None:
            os.close(writer)
    assert run.returncode == 0, run.stderr[-2000:]
    assert seconds < 10, seconds
    runtime_env, where = json.loads(run.stdout.strip().splitlines()[-1])
    assert runtime_env == {"env_vars": {"A": "1"}}  # the command's own variable; none of verl's
    assert where.startswith(f"verl's defaults not applied: {path} was not read (")
    assert {"fifo": "it is a FIFO, not a regular file", "fifo_writer": "it is a FIFO, not a regular file",
            "oversize": "it is larger than 1048576 bytes", "lists": "does not parse as Python"}.get(
        shape, "nested too deeply to parse") in where, where


@pytest.fixture
def ray_head():
    """A one-node local Ray cluster of this test's own (a logical GPU), as tests/test_fleet_ray.py makes one: the
    helper joins it by its address, never another test's cluster that `auto` could find."""
    import shutil
    import tempfile

    pytest.importorskip("ray", reason="the Ray helper needs ray (the test extra installs it)")
    from ray.cluster_utils import Cluster

    # A short folder: Ray's Unix sockets live under it (AF_UNIX paths end at 107 bytes); its ray/ folder is where
    # Cluster writes its address file.
    ray_dir = Path(tempfile.mkdtemp(prefix="dsv4ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
    (ray_dir / "ray").mkdir()
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(RAY_TMPDIR=str(ray_dir), RAY_USAGE_STATS_ENABLED="0")
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "num_gpus": 1, "include_dashboard": False, "temp_dir": str(ray_dir)})
        yield cluster.address
    finally:
        if cluster is not None:
            cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(ray_dir, ignore_errors=True)


@pytest.mark.slow
def test_the_ray_helper_checks_the_cluster_when_verl_s_defaults_are_not_read(tmp_path, ray_head):
    """The real helper script, as the doctor starts it (answer file, request file), joining a real Ray cluster, with
    verl's constants_ppo.py a FIFO and then a 100,000-deep expression. Before: it blocked in open() until the
    doctor's deadline, or answered a MemoryError probe_error; the cluster was not checked. Now every node is checked
    and the answer's runtime_env says why verl's defaults were not applied."""
    for shape, body in (("fifo", None), ("unary", DEEP_PYTHON["unary"])):
        root = tmp_path / shape
        path = _planted_verl(root, None if body is None else body.replace(b"x = ", b"PPO_RAY_RUNTIME_ENV = "))
        request = root / "request.json"
        request.write_text(json.dumps({"dir": str(root), "verl_defaults": True, "argv": ["--version"],
                                       "limit": 1 << 20, "task_s": 60}))
        answer = root / "answer.json"
        start = time.monotonic()
        run = subprocess.run([sys.executable, str(LAUNCHER),
                              str(PROBE_DIR / "dsv4probe_ray.py"), str(answer), str(request)],
                             capture_output=True, text=True, timeout=150,
                             env=dict(os.environ, PYTHONPATH=str(root), RAY_ADDRESS=ray_head))
        assert run.returncode == 0 and time.monotonic() - start < 120, (shape, run.stderr[-2000:])
        got = json.loads(answer.read_text())
        assert "probe_error" not in got and "error" not in got, (shape, got)
        assert len(got["nodes"]) == 1 and got["nodes"][0].get("exit_code") == 0, (shape, got)
        why = got["runtime_env"]["verl_defaults"]
        assert why.startswith(f"verl's defaults not applied: {path} was not read ("), why
        assert ("it is a FIFO, not a regular file" if shape == "fifo" else "nested too deeply to parse") in why


# --- Hydra: the composition probe -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_composition_never_waits_on_a_fifo_in_the_entry_or_the_config_dir(tmp_path):
    """The entry module (read with ast by the doctor's probe) as a FIFO blocked the probe in open() before; now it
    is "cannot read the entry module" at once. A FIFO among the configs of --config-dir is Hydra's to read: its
    FileConfigSource takes only what os.path.isfile accepts, so a FIFO named as the primary config or as a group
    option is not found (a FIFO is never opened), and the composition goes on or fails with Hydra's own error."""
    from fakes import ensure

    sites = os.pathsep.join(str(ensure(k)) for k in ("hydra-core-1.3.2", "verl-0.9.1"))
    verl = ensure("verl-0.9.1") / "verl"
    extra = tmp_path / "extra"
    (extra / "mygroup").mkdir(parents=True)
    os.mkfifo(extra / "ppo_trainer.yaml")
    os.mkfifo(extra / "mygroup" / "fifo.yaml")
    fifo_entry = tmp_path / "main_ppo.py"
    os.mkfifo(fifo_entry)

    def compose(entry: Path, overrides: list[str]) -> tuple[dict, float]:
        request = tmp_path / "request.json"
        request.write_text(json.dumps({"entry_file": str(entry), "words": {"overrides": overrides},
                                       "select": ["trainer.nnodes"], "extra_config_dir": str(extra)}))
        answer = tmp_path / "answer.json"
        start = time.monotonic()
        run = subprocess.run([sys.executable, str(LAUNCHER),
                              str(PROBE_DIR / "dsv4probe_hydra.py"), str(answer), str(request)],
                             capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=sites))
        assert run.returncode == 0, run.stderr[-2000:]
        return json.loads(answer.read_text()), time.monotonic() - start

    got, seconds = compose(fifo_entry, ["trainer.nnodes=1"])
    assert seconds < 10 and got["error"]["kind"] == "entry", got
    assert "cannot read the entry module: ReadRefused: it is a FIFO, not a regular file" in got["error"]["message"]
    got, seconds = compose(verl / "trainer" / "main_ppo.py", ["trainer.nnodes=2"])
    assert seconds < 20 and got["error"] is None and got["settings"]["trainer.nnodes"]["value"] == 2, got
    got, seconds = compose(verl / "trainer" / "main_ppo.py", ["trainer.nnodes=2", "+mygroup=fifo"])
    assert seconds < 20 and "Could not find 'mygroup/fifo'" in got["error"]["message"], got
