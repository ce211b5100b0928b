"""Plugins: real entry points on a temporary sys.path. Third-party code runs in a plugin host subprocess, so that no
plugin can hang, kill, corrupt or crash the doctor; each misbehaving plugin or check is its own `error` row."""

from __future__ import annotations

import json
import time

import pytest

from conftest import run_doctor, validate

CHECK = """
from dsv4_doctor.model.core import Check, passed
def _run(ctx):
{body}
CHECKS = [Check(id="bad.check", title="t", explanation="x", applies_when="always", detects="x", run=_run)]
"""


def plugin(site, name: str, module: str, code: str) -> None:
    site.dist(f"{name}-plugin", "1.0", entry_points=f"[dsv4_doctor.checks]\n{name} = {module}\n")
    site.file(f"{module}.py", code)


def check_run(site, bare_python, *args, timeout=60):
    return run_doctor("check", "-f", "json", *args, sites=(site.root,), python=bare_python, timeout=timeout)


@pytest.mark.parametrize("body, summary", [
    ("    import os\n    os._exit(0)", "while this check ran"),
    ("    import ctypes\n    ctypes.string_at(0)", "killed by SIGSEGV while this check ran"),
    ("    import sys\n    sys.exit(0)", "the check crashed: SystemExit"),
    ("    ev = {}\n    ev['self'] = ev\n    return passed('ok', evidence=ev)", None),
    ("    return passed(123)", "a one-line summary"),
    ("    return passed('ok', evidence=[1, 2])", "evidence must be a dict"),
    ("    print('{\"not\": \"the report\"}')\n    return passed('printed')", None),
])
def test_a_misbehaving_plugin_check_is_its_own_error_row(body, summary, site, bare_python):
    plugin(site, "bad", "bad_checks", CHECK.format(body=body))
    run = check_run(site, bare_python, "--only", "bad.check,python.version")
    report = run.report  # valid JSON, schema-checked: nothing the plugin did reached stdout
    row = run.check("bad.check")
    assert run.check("python.version")["status"] == "pass"
    if summary is None:
        assert row["status"] == "pass", row
        assert run.returncode == 0
        if "self" in body:
            assert "…[cycle]" in json.dumps(row["evidence"], ensure_ascii=False)
    else:
        assert row["status"] == "error" and row["internal_error"] and summary in row["summary"], row
        assert run.returncode == 3 and "bad.check" in report["summary"]["internal_errors"]


@pytest.mark.slow
def test_a_plugin_whose_import_hangs_cannot_hang_check_or_list(site, bare_python):
    plugin(site, "slow", "slow_checks", "import time\ntime.sleep(600)\n")
    start = time.monotonic()
    run = check_run(site, bare_python, "--only", "python.version", "--timeout", "3", timeout=90)
    assert run.returncode == 3
    row = run.check("plugin.slow")
    assert row["status"] == "error" and "before the plugin loaded" in row["summary"]
    listed = run_doctor("list", "-f", "json", "--timeout", "3", sites=(site.root,), timeout=90)
    assert listed.returncode == 0 and "python.version" in listed.stdout
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("code, expected", [
    ("import os\nos._exit(0)\n", "before the plugin loaded"),
    ("raise ImportError('plugin dependency missing')\n", "plugin dependency missing"),
    ("import ctypes\nctypes.string_at(0)\n", "killed by SIGSEGV"),
])
def test_a_plugin_that_dies_at_import_is_an_error_row(code, expected, site, bare_python):
    plugin(site, "dies", "dying_checks", code)
    run = check_run(site, bare_python, "--only", "python.version")
    row = run.check("plugin.dies")
    assert row["status"] == "error" and row["internal_error"] and expected in row["summary"] + row["details"]
    assert run.returncode == 3 and run.check("python.version")["status"] == "pass"


def test_plugin_api_1_and_2_and_a_probe_beside_the_plugin(site, bare_python):
    # API 1: every Check in the module, evidence as keyword arguments, commands as strings.
    plugin(site, "old", "old_checks", """
from dsv4_doctor.model.core import Check, Fix, failed
from dsv4_doctor.checks.python_checks import python_version  # a use of a built-in, not a second registration
FIX = Fix("do it", ["pip install 'thing[extra]==1.0'"])
old = Check(id="old.check", title="t", explanation="x", applies_when="always", detects="x", fixes=(FIX,),
            run=lambda ctx: failed("old style", fixes=[FIX], detail=42))
again = old  # the same object twice is registered once
""")
    # API 2: an explicit CHECKS list; a probe script shipped beside the plugin.
    site.file("new_plugin/__init__.py", """
from dsv4_doctor.model.core import Check, passed
from dsv4_doctor.engine.probes import Probe
PROBE = Probe.beside(__file__, "new:hello", "hello_probe.py", {"name": "world"})
def _run(ctx):
    return passed("probe said " + ctx.require(PROBE)["greeting"])
helper = Check(id="new.unlisted", title="t", explanation="x", applies_when="always", detects="x", run=_run)
CHECKS = [Check(id="new.probe", title="t", explanation="x", applies_when="always", detects="x", run=_run,
                probes=(PROBE,))]
""")
    site.file("new_plugin/hello_probe.py", """
import os, sys
sys.path.insert(0, os.environ["DSV4_DOCTOR_PROBE_LIB"])
from dsv4probe_common import serve
serve(lambda request: {"greeting": "hello " + request["name"]})
""")
    site.dist("new-plugin", "2.0", entry_points="[dsv4_doctor.checks]\nnew = new_plugin\n")
    run = check_run(site, bare_python, "--only", "old.*,new.*")
    old = run.check("old.check")
    assert old["status"] == "fail" and old["evidence"] == {"detail": 42}
    assert old["fixes"][0]["argv"] == [["pip", "install", "thing[extra]==1.0"]]
    assert run.check("new.probe")["summary"] == "probe said hello world"
    assert "new.unlisted" not in {c["id"] for c in run.report["checks"]}
    plugins = {p["name"]: p for p in run.report["plugins"]}
    assert plugins["old"]["checks"] == 1 and plugins["new"]["checks"] == 1 and plugins["new"]["loaded"]
    assert not plugins["old"]["error"] and run.report["summary"]["exit_code"] == 1  # old.check's fail, no crash
    explained = run_doctor("explain", "old.check", sites=(site.root,))
    assert explained.returncode == 0 and "pip install 'thing[extra]==1.0'" in explained.stdout


def test_a_plugin_reusing_a_builtin_id_is_reported(site, bare_python):
    plugin(site, "dup", "dup_checks", """
from dsv4_doctor.model.core import Check, passed
CHECKS = [Check(id="python.version", title="t", explanation="x", applies_when="always", detects="x",
                run=lambda ctx: passed("hijacked"))]
""")
    run = check_run(site, bare_python, "--only", "python.version")
    assert run.check("python.version")["summary"] != "hijacked"
    assert "duplicate check id 'python.version'" in run.check("plugin.dup")["summary"]
    text = run_doctor("check", "-v", "--only", "python.version", sites=(site.root,), python=bare_python).stdout
    assert "plugin.dup" in text and "duplicate check id" in text
    assert "Plugin dup from" not in text  # its row says it: not a second, trailing line


def test_list_and_explain_redact_plugin_errors(site):
    token = "hf_abcdefghijklmnopqrstuvwxyz0123"
    plugin(site, "leaky", "leaky_checks", f"raise RuntimeError('https://ci:{token}@example.invalid/x')\n")
    for fmt in ("text", "json"):
        run = run_doctor("list", "-f", fmt, sites=(site.root,), env={"HF_TOKEN": token})
        assert token not in run.stdout and run.returncode == 0
        if fmt == "json":
            leaky = next(p for p in json.loads(run.stdout)["plugins"] if p["name"] == "leaky")
            assert "***REDACTED***" in leaky["error"]


def test_plugin_rows_validate_against_the_schema(site, bare_python):
    plugin(site, "ok", "ok_checks", CHECK.format(body="    return passed('fine', evidence={'n': float('nan')})"))
    run = check_run(site, bare_python, "--only", "bad.check")
    validate(run.report)
    assert run.check("bad.check")["evidence"]["n"] == "nan"


def test_a_plugin_with_hundreds_of_long_check_ids_runs(site, bare_python):
    """700 checks with ~190-character ids overflowed the plugin host's argv (128 KiB per argument
    on Linux) and the report was only doctor.internal."""
    plugin(site, "many", "many_checks", """
from dsv4_doctor.model.core import Check, passed
CHECKS = [Check(id="many.c%03d." % i + ".".join(ch * 60 for ch in "xyz"), title="t", explanation="x",
                applies_when="always", detects="x", run=lambda ctx: passed("ok")) for i in range(700)]
""")
    run = check_run(site, bare_python, "--only", "many.*,python.version", timeout=120)
    ids = {c["id"] for c in run.report["checks"]}
    assert "doctor.internal" not in ids and "python.version" in ids
    assert sum(1 for i in ids if i.startswith("many.")) == 700


@pytest.mark.parametrize("check_id", ["a.hijack", "zz.hijack"])
def test_a_plugin_fix_cannot_take_over_a_builtin_fix_step(check_id, site, bare_python):
    """A plugin fix keyed like a built-in one ("torch", "te:2.16.1:13:False") replaced the
    built-in command in the plan, which de-duplicates on keys. Plugin fix keys are namespaced by distribution."""
    plugin(site, "hijack", "hijack_checks", f"""
from dsv4_doctor.model.core import Check, Fix, failed
F = Fix("reinstall torch", [["pip", "install", "evil-torch==6.6.6"]], key="torch", phase="runtime")
CHECKS = [Check(id={check_id!r}, title="t", explanation="x", applies_when="always", detects="x",
                run=lambda ctx: failed("broken", fixes=[F]), fixes=(F,))]
""")
    run = check_run(site, bare_python, "--only", f"torch.install,{check_id}")
    ids = [f["id"] for f in run.check(check_id)["fixes"]]
    assert ids == ["plugin:hijack-plugin:torch"], ids
    assert [f["id"] for f in run.check("torch.install")["fixes"]] == ["torch"]
    script = run_doctor("fix", "--only", f"torch.install,{check_id}", sites=(site.root,), python=bare_python).stdout
    assert "torch==2.11.0" in script and "evil-torch==6.6.6" in script, script  # two steps: neither replaced


def test_a_plugin_check_that_breaks_a_registry_rule_loads_and_list_warns(site, bare_python):
    plugin(site, "lax", "lax_checks", """
from dsv4_doctor.model.core import Check, Source, passed
CHECKS = [Check(id="lax.bare", title="t", explanation="", applies_when="always", detects="x",
                run=lambda ctx: passed("ran"), needs=("torch.install",), after=("lax.missing",)),
          Check(id="lax.good", title="t", explanation="why", applies_when="always", detects="x",
                run=lambda ctx: passed("ran"), sources=(Source("s", "https://example.invalid"),),
                needs=("lax.bare",))]
""")
    listed = run_doctor("list", sites=(site.root,))
    assert listed.returncode == 0 and "lax.bare" in listed.stdout and "lax.good" in listed.stdout
    warnings = [line for line in listed.stdout.splitlines() if line.startswith("plugin lax (lax-plugin) warning: ")]
    assert [w.split("warning: ", 1)[1] for w in warnings] == [
        "'lax.bare' after an unknown check id 'lax.missing'", "'lax.bare' has no explanation (its docstring)",
        "'lax.bare' names no source"], listed.stdout
    as_json = json.loads(run_doctor("list", "-f", "json", sites=(site.root,)).stdout)
    lax = next(p for p in as_json["plugins"] if p["name"] == "lax")
    assert lax["error"] is None and lax["checks"] == 2 and len(lax["warnings"]) == 3
    run = check_run(site, bare_python, "--only", "lax.*")
    assert run.check("lax.bare")["status"] == "pass" and run.check("lax.good")["status"] == "pass"
    assert run.returncode == 0 and "plugin.lax" not in {c["id"] for c in run.report["checks"]}
    explained = run_doctor("explain", "lax.bare", sites=(site.root,)).stdout.splitlines()
    assert "needs (skipped when one fails): torch.install" in explained and "runs after: lax.missing" in explained


# --- plugin hosts and the probes' concurrency limit -------------------------------------------------------------

SPANNING = """
import os, time
from dsv4_doctor.model.core import Check, passed
spans = os.environ["DSV4_TEST_SPANS"]
with open(spans, "a") as fh:
    fh.write("start {name}\\n")
# Held until the test releases it (an event, not a sleep): the test decides when this host's slot comes free.
release, waited = spans + ".release-{name}", 0.0
while not os.path.exists(release) and waited < 120:
    time.sleep(0.01)
    waited += 0.01
with open(spans, "a") as fh:
    fh.write("end {name}\\n")
def _run(ctx):
    return passed("ok")
CHECKS = [Check(id="{name}.check", title="t", explanation="x", applies_when="always", detects="x", run=_run)]
"""


def _spans(path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []


def _most_at_once(events) -> int:
    busy = most = 0
    for kind, _ in events:
        busy += 1 if kind == "start" else -1
        most = max(most, busy)
    return most


def _wait_for(predicate, what: str, limit_s: float = 120.0) -> None:
    """Poll until `predicate()` holds: the generous limit only ends a broken run, it never decides a passing one."""
    end = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.01)


class _FirstToThe:
    """A probe-slot semaphore whose first slot goes to the named plugin's host: the others' acquire attempts fail
    until that host has taken one (the order the hosts' threads happen to reach the pool, made fixed)."""

    def __init__(self, slots: int, first: str):
        import threading

        self.inner, self.first, self.went = threading.BoundedSemaphore(slots), first, threading.Event()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        import threading

        mine = threading.current_thread().name.endswith(self.first)
        if not mine and not self.went.is_set():
            time.sleep(min(timeout or 0.05, 0.05))
            return False
        got = self.inner.acquire(blocking, timeout)
        if got and mine:
            self.went.set()
        return got

    def release(self) -> None:
        self.inner.release()


def _describe(site, monkeypatch, tmp_path, slots, timeout: float = 300.0, taken: int = 0, hold_together: int = 0,
              first: str | None = None):
    """Every plugin of `site` described by a session's PluginHosts (in a thread of this process) with `slots` probe
    slots, of which `taken` are held by others; (the most hosts whose plugin was importing at one time, the
    PluginInfos). A host stays in its import until the test releases it: one at a time, each once it has started
    and no other started beside it (`hold_together` > 0: not before that many are importing at once)."""
    import sys
    import threading

    from dsv4_doctor.engine import plugins as plugin_hosts, registry
    from dsv4_doctor.engine.plugins import PluginHosts
    from dsv4_doctor.hostio.procs import Processes

    spans = tmp_path / f"spans-{slots}-{taken}"
    monkeypatch.syspath_prepend(str(site.root))
    monkeypatch.setenv("PYTHONPATH", str(site.root))
    monkeypatch.setenv("DSV4_TEST_SPANS", str(spans))
    monkeypatch.setattr(plugin_hosts, "DESCRIBE_BUDGET_S", timeout)  # the test's events pace it, not a budget
    semaphore = _FirstToThe(slots, first) if first else threading.BoundedSemaphore(slots)
    for _ in range(taken):
        semaphore.acquire()
    procs = Processes()
    loaded = registry.load()
    worker = threading.Thread(target=lambda: PluginHosts(procs, sys.executable, timeout, lambda: [],
                                                         semaphore).describe(loaded), daemon=True)
    try:
        worker.start()
        if taken < slots:
            names = [p.name for p in loaded.plugins]
            if hold_together:
                _wait_for(lambda: sum(k == "start" for k, _ in _spans(spans)) >= hold_together,
                          f"{hold_together} hosts importing at once")
            for _ in names:
                _wait_for(lambda: len([k for k, _ in _spans(spans) if k == "start"]) >
                          len([k for k, _ in _spans(spans) if k == "end"]) or not worker.is_alive(), "a host start")
                if not worker.is_alive():
                    break
                time.sleep(0.5)  # room for a host that ignores the limit to show itself (it cannot make a pass fail)
                for kind, name in _spans(spans):
                    if kind == "start" and ("end", name) not in _spans(spans):
                        (spans.parent / f"{spans.name}.release-{name}").touch()
                        _wait_for(lambda n=name: ("end", n) in _spans(spans), f"{name} to end")
        worker.join(timeout + 120)  # describe ends at its own deadline; this only ends a broken run
        assert not worker.is_alive(), "describe did not return"
    finally:
        procs.close()
    return _most_at_once(_spans(spans)), loaded.plugins


def test_plugin_hosts_start_within_the_probe_concurrency_limit(site, monkeypatch, tmp_path):
    """PluginHosts started every host at once whatever the probes' limit; now a host holds a probe slot."""
    for name in ("slowa", "slowb", "slowc"):
        plugin(site, name, f"{name}_checks", SPANNING.replace("{name}", name))
    most, plugins = _describe(site, monkeypatch, tmp_path, slots=1)
    assert most == 1 and [(p.loaded, p.checks, p.error) for p in plugins] == [(True, 1, None)] * 3
    most, _ = _describe(site, monkeypatch, tmp_path, slots=3, hold_together=3)
    assert most == 3  # the same plugins overlap when the limit allows it: the limit is what kept them apart


def test_a_host_that_took_its_slot_out_of_order_frees_it_when_it_exits(site, monkeypatch, tmp_path):
    """The last host gets the only slot first: once it has exited, the first (whose end the doctor waits for
    first) must get that slot, not wait for it until the describe deadline."""
    for name in ("slowa", "slowb", "slowc"):
        plugin(site, name, f"{name}_checks", SPANNING.replace("{name}", name))
    most, plugins = _describe(site, monkeypatch, tmp_path, slots=1, timeout=60.0, first="slowc")
    assert most == 1 and [(p.loaded, p.checks, p.error) for p in plugins] == [(True, 1, None)] * 3


def test_a_plugin_host_that_gets_no_slot_in_time_says_so(site, monkeypatch, tmp_path):
    plugin(site, "slowa", "slowa_checks", SPANNING.replace("{name}", "slowa"))
    most, plugins = _describe(site, monkeypatch, tmp_path, slots=1, timeout=1.0, taken=1)  # its slot never frees
    assert most == 0 and not plugins[0].loaded
    assert plugins[0].error == "the plugin host never started: no probe slot came free in time"


def test_list_names_a_plugin_check_s_origin(site):
    plugin(site, "lax", "lax_checks", """
from dsv4_doctor.model.core import Check, Source, passed
CHECKS = [Check(id="lax.good", title="t", explanation="why", applies_when="always", detects="x",
                run=lambda ctx: passed("ran"), sources=(Source("s", "https://example.invalid"),))]
""")
    listed = run_doctor("list", sites=(site.root,), env={"COLUMNS": "80"}).stdout
    row = next(line for line in listed.splitlines() if line.startswith("lax.good"))
    assert "(from lax" in row and "python.version" in listed
    assert not [line for line in listed.splitlines() if line.startswith("python.version") and "(from" in line]
