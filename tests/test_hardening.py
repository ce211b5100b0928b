"""Every promise of docs/security.md (redaction and hygiene, commands, processes, hostile input), the exit codes
(docs/usage.md) and docs/plugins.md ("What a plugin can and cannot do"), tried as an attacker would: one test per class
of breakage, feeding the values the doctor reads from the environment (versions, paths, error texts, stderr tails,
environment variables, plugin results) through a set of hostile strings."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FakeSite, doctor_command, run_doctor, validate
from fakes import Env, fake_te, fake_torch
from probed import RUN_IDS, judge, judge_all, run_in_process

# Shell syntax, markup, workflow commands, terminal escapes, undecodable and XML-illegal text.
INJECT = ["$(touch {pwn}/a)", "`touch {pwn}/b`", "; touch {pwn}/c #", "' ; touch {pwn}/d ; '",
          "\n touch {pwn}/e \n", "&& touch {pwn}/f"]
MARKUP = ["[bold red]markup[/]", "</details><details open>", "\n# heading\n", "![img](http://x.invalid/a.png)",
          "<script>alert(1)</script>", "\n```\n# fence\n```\n", "[link](javascript:alert(1))"]
WORKFLOW = ["\n::error::injected", "\n  ::warning file=x::injected", "\n##[error]legacy command", "::stop-commands::x"]
ESCAPES = ["\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "bell\x07", "\ufffe\uffff", "\x01\x02"]
HOSTILE = INJECT + MARKUP + WORKFLOW + ESCAPES


def hostile(pwn: Path) -> str:
    return " ".join(s.format(pwn=pwn) for s in HOSTILE)


def no_workflow_command(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith(("::", "##[")), line


def strict_json(text: str) -> dict:
    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")
    return validate(json.loads(text, parse_constant=reject))


def markdown_is_inert(text: str) -> None:
    """Parsed as GitHub renders it: no HTML, heading, image or link comes from the environment's text."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("gfm-like", {"linkify": True})  # GitHub's autolinks included
    ours = {"<details><summary>Details and fixes</summary>", "<details><summary>Environment</summary>",
            "</details>", "<!-- Paste this whole block into your issue. Secrets were redacted. -->"}

    def walk(tokens):
        for t in tokens:
            if t.type in ("html_block", "html_inline"):
                assert t.content.strip() in ours, t.content
            assert t.type not in ("image", "link_open"), t
            if t.type == "heading_open":
                assert t.tag in ("h3", "h4"), t
            walk(t.children or [])
    walk(md.parse(text))
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert all(h.startswith(("### dsv4-doctor report", "#### ")) for h in headings), headings


@pytest.fixture
def pwn(tmp_path) -> Path:
    d = tmp_path / "pwn"
    d.mkdir()
    return d


@pytest.fixture
def stub_python(tmp_path) -> tuple[str, Path]:
    """An interpreter whose `-m pip` is a stub that logs its argv (one line per argument) and does nothing else."""
    log = tmp_path / "pip.log"
    py = tmp_path / "stubpy" / "python"
    py.parent.mkdir()
    py.write_text(f'#!/bin/sh\nif [ "$1" = "-I" ] && [ "$2" = "-m" ] && [ "$3" = "pip" ]; then\n  shift 3\n'
                  f'  for a in "$@"; do printf "%s\\n" "$a" >> "{log}"; done\n  echo "--" >> "{log}"\n  exit 0\nfi\n'
                  f'exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    return str(py), log


def hostile_env(tmp_path: Path, pwn: Path) -> Env:
    """torch, TE and an environment whose every readable value is hostile."""
    text = hostile(pwn)
    env = Env(tmp_path)

    def torch(site: FakeSite):
        site.dist("torch", "2.11.0")
        site.file("torch/__init__.py", f"""
            import sys, types
            __version__ = {("2.11.0" + text)!r}
            version = types.SimpleNamespace(cuda={("13; touch " + str(pwn) + "/cuda") !r}, hip=None, git_version="x")
            sys.stderr.write({text!r} + " nul\\x00 \\n")
            class _B:
                class cudnn:
                    is_available = staticmethod(lambda: False)
            backends = _B()
            class cuda:
                is_available = staticmethod(lambda: False)
                device_count = staticmethod(lambda: 0)
                class nccl:
                    version = staticmethod(lambda: (2, 27, 3))
        """)

    def te(site: FakeSite):
        fake_te(site, "2.16.1", import_error="undefined symbol: " + text)
        site.dist("transformer-engine-cu13", "2.16.1", metadata=(
            "Metadata-Version: 2.1\nName: transformer-engine-cu13\nVersion: 2.16.1\nSummary: " + text.replace("\n", " ")
            + "\n").encode("utf-8", "surrogatepass"))

    env.fake("torch", torch).fake("te", te)
    return env


# --- 1. shell injection through fixes ---------------------------------------------------------------------------

def test_fix_scripts_never_run_injected_commands(tmp_path, pwn, stub_python):
    py, log = stub_python
    env = hostile_env(tmp_path, pwn)
    env.fake("plugin", lambda s: (s.dist("evil-plugin", "1", entry_points="[dsv4_doctor.checks]\nevil = evil_checks\n"),
                                  s.file("evil_checks.py", f"""
        from dsv4_doctor.model.core import Check, Fix, failed
        F = Fix({hostile(pwn)!r}, [["pip", "install", {("x" + INJECT[0].format(pwn=pwn))!r}]])
        CHECKS = [Check(id="evil.fix", title={hostile(pwn)!r}, explanation="x", applies_when="always", detects="x",
                        run=lambda ctx: failed({hostile(pwn)!r}, fixes=[F]))]
    """)))
    run = env.doctor("fix", python=py, env={"NCCL_DEBUG": hostile(pwn)})
    script = run.stdout
    assert script.startswith("#!/bin/sh") and run.returncode in (0, 1)
    assert "command withheld" in script  # torch.version.cuda did not validate as a CUDA major
    for line in script.splitlines():
        # a build step's environment comes first: doctor-built names with plain values (FlashMLA's include path)
        bare = re.sub(r'^(?:[A-Z_][A-Z0-9_]*=(?:"\$\{CUDA_HOME:-/usr/local/cuda\}[A-Za-z0-9_./:+=,-]*"|'
                      r"[A-Za-z0-9_./:+=,-]+) )*", "", line)
        assert line == "" or bare.startswith(("#", "set -eu", "PY=", '"$PY" -I -m pip ')), line
    done = subprocess.run(["sh", "-c", script], env=dict(os.environ, PYTHONPATH=os.pathsep.join(
        str(p) for p in env.sites.values())), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    applied = env.doctor("fix", "--apply", "--yes", python=py, env={"NCCL_DEBUG": hostile(pwn)})
    assert applied.returncode in (0, 1, 3)
    assert list(pwn.iterdir()) == []  # nothing injected ran: not from the script, not from --apply
    args = log.read_text().split("--\n")
    assert any(("x" + INJECT[0].format(pwn=pwn)) in a.splitlines() for a in args)  # one argument, passed as is


# Argvs whose words are harmless one by one but whose redacted, quoted line was not (otherwise:
# `pip install 'PASSWORD=***REDACTED***"'x' '; touch /tmp/pwned #'` ran `touch` when pasted).
TRICKY_ARGVS = [["pip", "install", "PASSWORD='x", "; touch {pwn}/a #"],
                ["pip", "install", "API_KEY=\"y", "z\"", "; touch {pwn}/b #"],
                ["pip", "install", "--token", "'v", "; touch {pwn}/c #"],
                ["pip", "install", "https://u:'p@example.invalid/x", "; touch {pwn}/d #"],
                ["pip", "install", "plain; touch {pwn}/e #"]]


def _printed_commands(fmt: str, out: str) -> list[str]:
    if fmt == "json":
        return [cmd for c in strict_json(out)["checks"] for f in c["fixes"] for cmd in f["commands"]]
    if fmt == "junit":
        out = "\n".join(el.text or "" for el in ET.fromstring(out).iter())
    return [line.strip() for line in out.splitlines() if line.strip().startswith(("pip ", "# (a command"))]


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit", "explain"])
def test_printed_fix_commands_are_safe_to_paste_in_every_format(fmt, tmp_path, pwn, site, bare_python):
    argvs = [[w.format(pwn=pwn) for w in a] for a in TRICKY_ARGVS]
    site.dist("tricky-plugin", "1", entry_points="[dsv4_doctor.checks]\ntricky = tricky_checks\n")
    site.file("tricky_checks.py", f"""
        from dsv4_doctor.model.core import Check, Fix, failed
        F = [Fix("f%d" % i, [a]) for i, a in enumerate({argvs!r})]
        CHECKS = [Check(id="tricky.fix", title="t", explanation="x", applies_when="always", detects="x",
                        run=lambda ctx: failed("broken", fixes=F), fixes=tuple(F))]
    """)
    if fmt == "explain":
        run = run_doctor("explain", "tricky.fix", sites=(site.root,))
    else:
        run = run_doctor("check", "-f", fmt, "--only", "tricky.fix", sites=(site.root,), python=bare_python)
    commands = _printed_commands(fmt, run.stdout)
    assert len(commands) == len(argvs), run.stdout  # every fix's command is printed (or withheld) once
    assert commands[-1] == "pip install 'plain; touch " + str(pwn) + "/e #'"  # no secret: printed, quoted
    bin_dir = tmp_path / "stubbin"
    bin_dir.mkdir()
    (bin_dir / "pip").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "pip").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    for cmd in commands:
        subprocess.run(["sh", "-c", cmd], cwd=work, env=dict(os.environ, PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin"),
                       capture_output=True, timeout=30)
    assert list(pwn.iterdir()) == [] and list(work.iterdir()) == [], commands


def test_apply_without_a_terminal_needs_yes(tmp_path, bare_python):
    run = run_doctor("fix", "--apply", "--only", "python.version", python=bare_python)
    assert run.returncode == 2 and "--apply needs --yes when stdin is not a terminal" in run.stderr


# --- 2. workflow commands and 12. markdown injection, 11. JUnit, 6. surrogates, in every output -------------------

@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_hostile_environment_text_stays_inert_in_every_format(fmt, tmp_path, pwn):
    summary = tmp_path / "summary.md"
    env = hostile_env(tmp_path, pwn)
    run = env.doctor("check", "-f", fmt, "--only", "torch.install,te.*,deps.metadata", python=sys.executable,
                     env={"NCCL_DEBUG": hostile(pwn), "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary),
                          "COLUMNS": "61"})
    assert run.returncode == 1, run.stderr
    for stream in (run.stdout, run.stderr, summary.read_text()):
        no_workflow_command(stream.replace("::error title=dsv4-doctor", "", ).replace(
            "::warning title=dsv4-doctor", ""))
        assert "\x1b" not in stream and "\x00" not in stream and "\x07" not in stream
    markdown_is_inert(summary.read_text())
    if fmt == "json":
        report = strict_json(run.stdout)
        te = next(c for c in report["checks"] if c["id"] == "te.import")
        assert "command withheld" in json.dumps(te["fixes"])
    if fmt == "junit":
        ET.fromstring(run.stdout.split("\n", 1)[1])
    if fmt == "markdown":
        markdown_is_inert(run.stdout)
    assert list(pwn.iterdir()) == []


def test_wrapping_never_starts_a_line_with_a_workflow_command():
    from dsv4_doctor.report.dispatch import render
    from dsv4_doctor.model.report import Report

    checks = [{"id": f"x.c{i}", "title": "t", "status": "fail", "summary": "w " * i + "::error::pwn ##[error]x",
               "details": "d " * i + "::warning::x", "evidence": {}, "fixes": [], "sources": [], "duration_s": 0,
               "origin": "x", "internal_error": False} for i in range(0, 60)]
    report = {"schema": "dsv4-doctor.report/1", "doctor": {"version": "0"}, "profile": {"cp": 1}, "environment": {},
              "plugins": [], "checks": checks, "summary": {"status": "fail", "exit_code": 1, "strict": False,
                                                           "counts": {"fail": 60}, "duration_s": 0}}
    for width in range(40, 130, 7):
        for fmt in ("text", "markdown", "junit"):
            no_workflow_command(render(Report.from_wire(report), fmt, width=width))


# --- 3. signals, orphan probes, temporary directories; 4. late exit -------------------------------------------------

HANG = """
import os, time
open({marker!r}, "w").write("%d %d" % (os.getpid(), os.getpgid(0)))
time.sleep(600)
"""


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process is in the group. An orphaned child killed with its group can stay a zombie until
    init reaps it; that is no running probe."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_kills_every_probe_and_still_writes_the_report(sig, code, site, bare_python, tmp_path):
    marker = tmp_path / "pid"
    site.file("torch/__init__.py", HANG.format(marker=str(marker)))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site.root), TMPDIR=str(tmp))
    proc = subprocess.Popen(doctor_command() + ["check", "-f", "json", "--python", bare_python], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(marker.read_text().split() if marker.exists() else []) < 2:
        time.sleep(0.05)  # the hanging probe writes "pid pgid"; the file can exist before its content does
    _, pgid = map(int, marker.read_text().split())
    time.sleep(0.3)
    start = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - start < 5
    assert proc.returncode == code, err
    report = strict_json(out)
    assert report["summary"]["exit_code"] == code and report["summary"]["interrupted"] == sig.name
    torch_row = next(c for c in report["checks"] if c["id"] == "torch.install")
    assert torch_row["status"] == "error" and f"interrupted by {sig.name}" in torch_row["summary"]
    assert not _group_alive(pgid)
    assert list(tmp.iterdir()) == []  # no temporary directory left behind


def _wait_for_marker(marker: Path, proc: subprocess.Popen, seconds: float = 60) -> tuple[int, int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(marker.read_text().split() if marker.exists() else []) < 2:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    pid, pgid = map(int, marker.read_text().split())
    return pid, pgid


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
@pytest.mark.parametrize("where", ["probe", "plugin host"])
def test_a_sigkilled_doctor_leaves_no_probe_running(where, site, bare_python, tmp_path):
    """After `kill -9` of the doctor (or the OOM killer) the hung torch probe was reparented to
    PID 1 and ran on past its timeout. Every probe and plugin host watches its parent and kills its own group."""
    marker = tmp_path / "pid"
    if where == "probe":
        site.file("torch/__init__.py", HANG.format(marker=str(marker)))
        only = "torch.install"
    else:  # a plugin whose import hangs: the host itself, which runs in the doctor's interpreter
        site.dist("hang-plugin", "1", entry_points="[dsv4_doctor.checks]\nhang = hang_checks\n")
        site.file("hang_checks.py", HANG.format(marker=str(marker)))
        only = "python.version"
    proc = subprocess.Popen(doctor_command() + ["check", "-f", "json", "--only", only, "--timeout", "60",
                                                "--python", bare_python],
                            env=dict(os.environ, PYTHONPATH=str(site.root)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        pid, pgid = _wait_for_marker(marker, proc)
        assert pid == pgid  # the probe leads its own group (the doctor starts it in a new session)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.1)
        assert not _group_alive(pgid)  # gone within seconds, not at the 60 s timeout
    finally:
        proc.kill()
        if marker.exists():
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(marker.read_text().split()[1]), signal.SIGKILL)


# The doctor with one of its own functions slowed down (fault injection, in the test, never in the product): the
# wrapper announces, in a marker file, when the slowed function is entered, so the signal lands exactly there.
SLOWED = """
import sys, time, importlib
module, name, marker = sys.argv[1], sys.argv[2], sys.argv[3]
name, _, caller = name.partition("@")  # "plan@start_probes": slowed only when `start_probes` calls it
mod = importlib.import_module(module)
real = getattr(mod, name)
def slowed(*a, **k):
    if not caller or sys._getframe(1).f_code.co_name == caller:
        open(marker, "w").write("in")
        time.sleep(1.5)
    return real(*a, **k)
setattr(mod, name, slowed)
sys.argv = ["dsv4-doctor"] + sys.argv[4:]
from dsv4_doctor.cli.main import main
main()
"""


def _slowed_run(tmp_path, module, name, sig, *args, python):
    wrapper = tmp_path / "slowed.py"
    wrapper.write_text(SLOWED)
    marker = tmp_path / "entered"
    command, *rest = args
    proc = subprocess.Popen([sys.executable, str(wrapper), module, name, str(marker), command, "--python", python,
                             *rest],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.02)
    assert marker.exists(), proc.communicate(timeout=60)
    start = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return proc, out, err, time.monotonic() - start


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
def test_a_signal_while_probes_are_being_started_still_interrupts(tmp_path, bare_python):
    """A signal landing while the runner planned the checks was swallowed by an `except
    BaseException`, and the run went on to the probe timeout; every later signal was ignored too."""
    proc, out, err, took = _slowed_run(tmp_path, "dsv4_doctor.engine.runner", "plan@start_probes", signal.SIGTERM,
                                       "check", "-f", "json", "--only", "python.version,torch.install",
                                       python=bare_python)
    assert proc.returncode == 143, err
    assert strict_json(out)["summary"]["interrupted"] == "SIGTERM"
    assert took < 10


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_the_report_is_written_lets_it_finish(tmp_path, bare_python, sig, code):
    """A signal while the report is rendered must not leave a KeyboardInterrupt traceback and no report (SIGINT) or
    kill the doctor (SIGTERM): the report is completed, then the doctor exits 128 + the signal."""
    proc, out, err, _ = _slowed_run(tmp_path, "dsv4_doctor.report.dispatch", "render_json", sig, "check", "-f", "json",
                                    "--only", "python.version", python=bare_python)
    assert "Traceback" not in err
    assert strict_json(out)["summary"]["exit_code"] == 0  # the whole report
    assert proc.returncode == code


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
def test_preflight_does_not_start_the_job_after_a_signal_during_its_report(tmp_path, bare_python):
    ran = tmp_path / "ran"
    proc, _, err, _ = _slowed_run(tmp_path, "dsv4_doctor.cli.main", "_preflight_report", signal.SIGTERM, "preflight",
                                  "--no-smoke", "--only", "python.version", "--", "touch", str(ran),
                                  python=bare_python)
    assert proc.returncode == 143 and not ran.exists(), err
    assert "not starting the job" in err


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
def test_a_usage_error_after_the_early_probes_leaves_none_running(tmp_path, bare_python):
    """The nvidia-smi stub writes its marker first thing, and the selection (which raises the usage error) is slowed
    down until the stub has started: else the stub can be killed before its marker, and the test asserts nothing."""
    marker = tmp_path / "pid"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$$ $(ps -o pgid= $$)\" > {marker}.tmp && mv {marker}.tmp {marker}\n"
                   "exec sleep 600\n")
    smi.chmod(0o755)
    wrapper = tmp_path / "slowed.py"
    wrapper.write_text(SLOWED)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run([sys.executable, str(wrapper), "dsv4_doctor.engine.session", "select",
                           str(tmp_path / "entered"), "check", "--only", "no.such-check", "--python", bare_python],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, PATH=path))
    assert done.returncode == 2 and "no check matches" in done.stderr, done.stderr
    assert (tmp_path / "entered").exists() and marker.exists()  # the stub ran before the usage error
    pid, pgid = map(int, marker.read_text().split())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)
    assert not _group_alive(pgid)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]


@pytest.mark.slow
def test_the_doctor_exits_as_soon_as_the_report_is_out(site, bare_python, tmp_path):
    site.file("torch/__init__.py", "import time\ntime.sleep(600)\n")
    run = run_doctor("check", "-f", "json", "--timeout", "3", sites=(site.root,), python=bare_python, timeout=60)
    assert run.check("torch.install")["status"] == "error"
    assert run.seconds < 3 + 6, run.seconds  # one timeout, not a second wait for the given-up probe
    assert run.report["summary"]["budget_s"] >= run.seconds


# --- 5. linear hygiene ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_a_one_megabyte_version_string_is_capped_and_fast(fmt, site, bare_python):
    huge = "2.16.1" + "a=" * 250_000 + "https://" + "u" * 100_000 + "-----BEGIN RSA PRIVATE KEY-----" * 10_000
    site.dist("transformer-engine", huge, dirname="transformer_engine-2.16.1.dist-info")
    verbose = ["-v"] if fmt == "text" else []  # the default text report cuts a failure's summary to one line
    run = run_doctor("check", "-f", fmt, *verbose, "--only", "te.version", "--cp", "2", sites=(site.root,),
                     python=bare_python, timeout=60)
    assert run.seconds < 10, run.seconds
    assert len(run.stdout) < 200_000
    assert "more characters truncated by dsv4" in " ".join(run.stdout.split())


# --- 7. secrets ----------------------------------------------------------------------------------------------------

SECRETS_ENV = {"DB_PASS": "hunterpw", "MY_CREDS": "qwerty12", "NCCL_IB_PASSWD": "abcd", "AWS_SESSION_TOKEN": "sesstok1",
               "XDG_SESSION_ID": "c42", "PGPASSWORD": "pgpw1"}


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_secrets_never_reach_any_output(fmt, site, bare_python, tmp_path):
    leak = ("password hunterpw and qwerty12 and https://ghp_TOKENVALUE@github.com/org/repo.git "
            "https://user:pgpw1@db/x NCCL_IB_PASSWD=abcd sesstok1")
    site.file("torch/__init__.py", f"import sys\nsys.stderr.write({leak!r})\nraise RuntimeError({leak!r})\n")
    out, summary = tmp_path / "r.out", tmp_path / "s.md"
    env = dict(SECRETS_ENV, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary), NCCL_DEBUG="WARN")
    run = run_doctor("check", "-f", fmt, "-o", str(out), "--only", "torch.install", sites=(site.root,),
                     python=bare_python, env=env)
    texts = [run.stdout, run.stderr, out.read_text(), summary.read_text()]
    for secret in ("hunterpw", "qwerty12", "ghp_TOKENVALUE", "pgpw1", "abcd", "sesstok1"):
        assert not any(secret in t for t in texts), secret
    if fmt == "json":
        variables = strict_json(out.read_text())["environment"]["variables"]
        assert variables["NCCL_IB_PASSWD"] == "***REDACTED***" and variables["NCCL_DEBUG"] == "WARN"


# --- 8. broken metadata never lowers a verdict ----------------------------------------------------------------------

@pytest.mark.parametrize("metadata", [b"", b"\xff\xfe not utf-8 \x80"])
def test_unreadable_metadata_is_its_own_finding(metadata, tmp_path, bare_python):
    def te(site: FakeSite):
        fake_te(site, "2.8.0")
        site.dist("transformer-engine-torch", None, metadata=metadata,
                  dirname="transformer_engine_torch-2.8.0.dist-info")
    rows = judge_all(Env(tmp_path).fake("te", te), bare_python, ["te.version", "deps.metadata"], cp=2)
    assert rows["te.version"]["status"] == "fail" and "got 2.8.0" in rows["te.version"]["summary"]
    assert rows["deps.metadata"]["status"] == "warn"
    assert "transformer-engine-torch" in rows["deps.metadata"]["summary"]


# --- 9. plugins are in tests/test_plugins.py; 10. --output ----------------------------------------------------------

def test_an_unwritable_output_is_a_usage_error_before_any_work(tmp_path, bare_python):
    start = time.monotonic()
    run = run_doctor("check", "-o", str(tmp_path), python=bare_python)
    assert run.returncode == 2 and "is a directory" in run.stderr and "Traceback" not in run.stderr
    assert time.monotonic() - start < 5
    assert run_doctor("check", "-o", "/nonexistent/dir/r.json", python=bare_python).returncode == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_failing_write_still_prints_the_report(bare_python):
    run = run_doctor("check", "-f", "json", "--only", "python.version", "-o", "/dev/full", python=bare_python)
    assert run.returncode == 4
    assert strict_json(run.stdout)["checks"][0]["id"] == "python.version"
    assert "could not write the report to /dev/full" in run.stderr and "Traceback" not in run.stderr


# --- 13. smaller ones ------------------------------------------------------------------------------------------------

def test_undecodable_stderr_bytes_become_hex_escapes(site, bare_python):
    site.file("torch/__init__.py", "import os, sys\nos.write(2, b'bad \\xff\\xfe byte\\n')\nos.abort()\n")
    row = judge([site.root], bare_python, "torch.install")
    assert "bad \\xff\\xfe byte" in row["evidence"]["stderr_tail"] and "\ufffd" not in row["evidence"]["stderr_tail"]


def _pyenv(version: str) -> str | None:
    """An old or newer interpreter, where pyenv installed it (PYENV_ROOT, by default ~/.pyenv)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    path = root / "versions" / version / "bin" / "python"
    return str(path) if path.exists() else None


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.7.18", "3.7.16"])  # Python 2's handshake; the newest below the probes' 3.8
def test_an_interpreter_too_old_for_the_probes_fails_python_version(version, tmp_path):
    python = _pyenv(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    env = Env(tmp_path).fake("te", fake_te, "2.16.1")
    run = env.doctor("check", "-f", "json", python=python)
    assert run.returncode == 1
    py = run.check("python.version")
    assert py["status"] == "fail" and f"Python {version} is older than 3.10" in py["summary"]
    te = run.check("te.version")  # not inspected is not "does not apply": an error, never a skip
    assert te["status"] == "error" and "could not be inspected" in te["summary"]
    assert "not installed" not in te["summary"]
    assert run.report["environment"]["target_python"]["version"] == version


def test_absurd_cp_is_a_usage_error():
    assert run_doctor("check", "--cp", "1025").returncode == 2
    assert run_doctor("check", "--cp", "1024", "--only", "python.version").returncode == 0


# --- 6. lone surrogates ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_a_lone_surrogate_never_replaces_the_report(fmt, site, bare_python):
    site.file("torch/__init__.py", "raise RuntimeError('lone \\ud800 surrogate and \\udcff')\n")
    site.dist("odd-plugin", "1", entry_points="[dsv4_doctor.checks]\nodd = odd_checks\n")
    site.file("odd_checks.py", """
        from dsv4_doctor.model.core import Check, failed
        CHECKS = [Check(id="odd.surrogate", title="t \\ud800", explanation="x", applies_when="always", detects="x",
                        run=lambda ctx: failed("plugin says \\ud800", evidence={"k\\udcff": "\\ud800"}))]
    """)
    run = run_doctor("check", "-f", fmt, "--only", "torch.install,odd.surrogate", sites=(site.root,),
                     python=bare_python)
    assert run.returncode == 1 and "doctor.internal" not in run.stdout
    assert "\\ud800" in run.stdout.replace("\\\\ud800", "\\ud800")
    if fmt == "json":
        rows = {c["id"]: c for c in strict_json(run.stdout)["checks"]}
        assert rows["torch.install"]["status"] == "fail" and rows["odd.surrogate"]["status"] == "fail"


# --- 7. the fix path: incomplete runs, held-back builds, the interpreter path, redaction, the cwd, signals ---------

CRASHING_PLUGIN = """
    from dsv4_doctor.model.core import Check, failed
    def boom(ctx):
        raise RuntimeError("plugin bug")
    CHECKS = [Check(id="bad.crash", title="t", explanation="x", applies_when="always", detects="x", run=boom)]
"""


def test_fix_after_a_crash_or_a_signal_never_says_nothing_to_fix(site, bare_python, tmp_path):
    site.dist("bad-plugin", "1", entry_points="[dsv4_doctor.checks]\nbad = bad_checks\n")
    site.file("bad_checks.py", CRASHING_PLUGIN)
    run = run_doctor("fix", "--only", "bad.crash", sites=(site.root,), python=bare_python)
    assert run.returncode == 3 and "nothing to fix" not in run.stdout  # a crashed check is not a clean bill
    marker = tmp_path / "pid"
    site.file("torch/__init__.py", HANG.format(marker=str(marker)))
    proc = subprocess.Popen(doctor_command() + ["fix", "--python", bare_python], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(site.root)))
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "# INCOMPLETE: the run was interrupted by SIGTERM" in out and "nothing to fix" not in out
    assert "transformer-engine" in out  # what finished (te.version failed) is still in the plan


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
def test_apply_holds_build_steps_behind_a_manual_torch_step_and_keeps_the_report_code(tmp_path, stub_python):
    py, log = stub_python
    # torch older than megatron-core needs: its reinstall is manual; TE's rebuild is a pip step that builds against it.
    env = Env(tmp_path).fake("torch", fake_torch, "2.4.0+cu124", cuda="12.4").fake("te", fake_te, "2.8.0")
    run = env.doctor("fix", "--apply", "--yes", "--cp", "2", "--only", "torch.install,te.version", python=py)
    assert run.returncode == 1, run.stderr  # the report's code: failures remain
    assert "held back" in run.stdout and "held back: step(s)" in run.stderr
    assert not log.exists()  # TE's build against a torch about to be replaced did not run
    nothing = run_doctor("fix", "--apply", "--yes", "--only", "torch.install", python=py)
    assert nothing.returncode == 1 and "nothing to apply" in nothing.stderr


def test_an_interpreter_path_with_control_characters_is_a_usage_error(tmp_path, bare_python):
    evil = tmp_path / "evil\n::warning title=x::pwned\x1b[31m"
    evil.mkdir()
    (evil / "python").symlink_to(bare_python)
    for command in ("check", "fix"):
        run = run_doctor(command, "--only", "python.version", python=str(evil / "python"))
        assert run.returncode == 2 and "control or line-break characters" in run.stderr
        assert "\x1b" not in run.stderr and "\n::warning" not in run.stdout + run.stderr


def test_an_interpreter_path_that_is_not_utf8_is_a_usage_error(tmp_path, bare_python):
    """A non-UTF-8 --python path was written into the fix script as a different PY= path."""
    evil = Path(os.fsdecode(bytes(tmp_path) + b"/py\xff\xfe"))
    evil.mkdir()
    (evil / "python").symlink_to(bare_python)
    for command in ("check", "fix"):
        run = run_doctor(command, "--only", "python.version", python=str(evil / "python"))
        assert run.returncode == 2 and "not valid UTF-8" in run.stderr, run.stderr
        assert "PY=" not in run.stdout


def test_the_fix_script_and_the_apply_echo_are_redacted(site, stub_python):
    py, log = stub_python
    secret = "s3cr3tv4lue-in-a-fix"
    site.dist("leaky-plugin", "1", entry_points="[dsv4_doctor.checks]\nleak = leaky_checks\n")
    site.file("leaky_checks.py", f"""
        from dsv4_doctor.model.core import Check, Fix, failed
        F = Fix("use the mirror with {secret}", [["pip", "install", "--index-url",
                                                 "https://user:{secret}@mirror.invalid/simple", "leaky"]])
        CHECKS = [Check(id="leak.fix", title="t", explanation="x", applies_when="always", detects="x",
                        run=lambda ctx: failed("x", fixes=[F]))]
    """)
    run = run_doctor("fix", "--apply", "--yes", "--only", "leak.fix", sites=(site.root,), python=py,
                     env={"MY_TOKEN": secret})
    assert secret not in run.stdout + run.stderr
    assert "***REDACTED***" in run.stdout and "+ " in run.stderr
    assert any(secret in line for line in log.read_text().splitlines())  # pip itself got the real argument


def test_the_current_directory_cannot_stand_in_for_pip_or_the_handshake(tmp_path, stub_python, bare_python):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "pip.py").write_text("open('RAN_LOCAL_PIP', 'w').write('x')\n")
    (cwd / "platform.py").write_text("raise SystemExit('shadowed platform')\n")
    run = run_doctor("check", "--only", "python.version", python=bare_python, cwd=cwd)
    assert run.returncode == 0, run.stderr
    # The real interpreter with -I: a pip.py in the cwd is not pip (this one would write RAN_LOCAL_PIP).
    applied = run_doctor("fix", "--apply", "--yes", "--only", "kernels.triton", python=bare_python, cwd=cwd)
    assert not (cwd / "RAN_LOCAL_PIP").exists(), applied.stderr


@pytest.mark.slow  # signals and process groups, torch probes: the default suite stays near 120 s on 2 cores
def test_a_signal_during_apply_stops_pip_and_exits_128_plus_n(tmp_path, site):
    site.dist("pip-plugin", "1", entry_points="[dsv4_doctor.checks]\npipfix = pipfix_checks\n")
    site.file("pipfix_checks.py", """
        from dsv4_doctor.model.core import Check, Fix, failed
        F = Fix("install it", [["pip", "install", "some-package"]])
        CHECKS = [Check(id="needs.pip", title="t", explanation="x", applies_when="always", detects="x",
                        run=lambda ctx: failed("missing", fixes=[F]))]
    """)
    pidfile = tmp_path / "pip.pid"
    stub = tmp_path / "slowpip" / "python"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\nif [ "$1" = "-I" ]; then echo $$ > {pidfile}; exec sleep 60; fi\n'
                    f'exec "{sys.executable}" "$@"\n')
    stub.chmod(0o755)
    proc = subprocess.Popen(doctor_command() + ["fix", "--apply", "--yes", "--only", "needs.pip", "--python",
                                                str(stub)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(site.root)))
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    pid = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 143 and "Traceback" not in err
    assert "interrupted by SIGTERM" in err
    assert not _group_alive(pid)  # pip (its own session) was killed with the doctor


# --- 8. outputs that cannot be written -----------------------------------------------------------------------------

def test_a_fifo_output_is_refused_at_once(tmp_path, bare_python):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    run = run_doctor("check", "--only", "python.version", "--output", str(fifo), python=bare_python, timeout=20)
    assert run.returncode == 2 and "not a regular file" in run.stderr


def test_closed_stdout_or_stdin_is_no_traceback(bare_python):
    def run(*args, close):
        done = subprocess.run(doctor_command() + list(args), stderr=subprocess.PIPE, text=True, timeout=60,
                              preexec_fn=lambda: os.close(close))
        assert "Traceback" not in done.stderr, done.stderr
        return done

    out = run("check", "-f", "json", "--only", "python.version", "--python", bare_python, close=1)
    assert out.returncode == 4 and "stdout is closed" in out.stderr
    assert run("list", close=1).returncode == 4
    fix = run("fix", "--apply", "--only", "python.version", "--python", bare_python, close=0)
    assert fix.returncode == 2 and "needs --yes" in fix.stderr


# --- 9. nothing inspected is not a pass; driver alone is not CUDA --------------------------------------------------

def test_a_run_that_inspected_nothing_is_not_green(bare_python):
    run = run_doctor("check", "-f", "json", "--only", "smoke.thd-cp", "--no-smoke", python=bare_python)
    assert run.report["summary"]["status"] == "skip" and run.returncode == 0
    text = run_doctor("check", "--only", "smoke.thd-cp", "--no-smoke", python=bare_python).stdout
    assert "Verdict: SKIP (nothing was checked" in text


@pytest.mark.slow
def test_an_uninspectable_target_is_an_error_not_a_skip():
    python = _pyenv("3.7.16")
    if python is None:
        pytest.skip("no Python 3.7 on this machine")
    run = run_doctor("check", "-f", "json", "--skip", "python.version", python=python)
    assert run.returncode == 1 and run.report["summary"]["status"] == "error"


@pytest.mark.slow
def test_gpu_devices_is_not_green_on_nvidia_smi_alone(tmp_path, site, bare_python):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "0, NVIDIA H200, 9.0, 143771, 570.86.15"\n')
    smi.chmod(0o755)
    path = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    missing = judge(None, bare_python, "gpu.devices", probe_env=path)
    assert missing["status"] == "skip"
    assert "torch does not import" in missing["summary"]
    site.file("torch/__init__.py", "import time\ntime.sleep(600)\n")
    hung = run_in_process([site.root], bare_python, ["gpu.devices"], probe_env=path, timeout=2)
    assert hung.to_dict()["checks"][0]["status"] == "error" and hung.exit_code == 1


# --- 10. green needs the feature, not the file ----------------------------------------------------------------------

def test_a_namespace_triton_or_an_empty_dsv4_module_is_not_green(site, bare_python):
    (site.root / "triton").mkdir(parents=True)
    triton = judge([site.root], bare_python, "kernels.triton")
    assert triton["status"] == "warn" and "namespace" in triton["summary"]
    site.dist("megatron-core", "0.19.0", direct_url='{"url": "file:///x", "vcs_info": {"vcs": "git", '
                                                    '"commit_id": 12345678901}}')
    site.file("megatron/core/__init__.py", "")
    eav = "megatron/core/transformer/experimental_attention_variant/"
    site.file(eav + "__init__.py", "")
    site.file(eav + "deepseek_v4_hybrid_attention.py", "")
    report = run_in_process([site.root], bare_python, ["mcore.dsv4"])
    dsv4 = report.to_dict()["checks"][0]
    assert report.exit_code == 1, dsv4  # a finding, not a doctor crash (an int commit id is malformed data)
    assert dsv4["status"] == "fail" and "defines no DSv4HybridAttention" in dsv4["summary"]


# --- 11. target markers and Requires-Python ---------------------------------------------------------------------------

def test_requirement_markers_and_requires_python_are_judged_for_the_target(site):
    python = _pyenv("3.12.1")
    if python is None:
        pytest.skip("no Python 3.12 on this machine")
    from dsv4_doctor.model.facts import extra_requirements

    line = 'nvidia-cutlass-dsl>=4.5; extra == "cutedsl" and python_version >= "3.12"'
    target = {"requires": [line], "marker_env": {"python_version": "3.12", "python_full_version": "3.12.1"}}
    assert [r.name for r in extra_requirements(target, "cutedsl")] == ["nvidia-cutlass-dsl"]
    target["marker_env"] = {"python_version": "3.11", "python_full_version": "3.11.9"}
    assert extra_requirements(target, "cutedsl") == []
    site.dist("megatron-core", "0.19.2", requires_python=">=3.13")
    row = judge([site.root], python, "python.version")
    assert row["status"] == "fail" and "megatron-core 0.19.2 declares Requires-Python >=3.13" in row["summary"]


# --- 12. malformed probe answers are findings, never doctor crashes ---------------------------------------------------

@pytest.mark.slow
def test_probe_answers_of_the_wrong_type_never_crash_a_check(tmp_path):
    """Every probe answer is rewritten with values of the wrong type (a seeded fuzzer standing in for a hostile
    interpreter); no check may crash (exit 3): StaticFacts, outcome() and the checks read them defensively."""
    env = Env(tmp_path)
    for key in ("nvidia-cudnn-frontend-1.32.0", "apache-tvm-ffi-0.1.11", "megatron-core-0.19.2", "verl-0.9.0",
                "megatron-bridge-0.3.1", "nvidia-cutlass-dsl-4.5.2"):
        env.wheel(key, key)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).parent / "fuzz_answers.py"}" "$@"\n')
    wrapper.chmod(0o755)
    crashed, unanswered = {}, {}
    for seed in range(1, 13):
        report = run_in_process(env, str(wrapper), RUN_IDS, cp=2, smoke="off", crash_ok=True,
                                probe_env={"FUZZ_REAL_PYTHON": sys.executable, "FUZZ_SEED": str(seed)})
        bad = [(c.id, c.summary) for c in report.checks if c.internal_error]
        if bad or report.exit_code == 3:
            crashed[seed] = bad
        # The fuzzer rewrites answers, it never stops a probe: a probe without an answer fuzzed nothing.
        unanswered[seed] = [c.id for c in report.checks if "without an answer" in c.summary]
    assert crashed == {}
    assert not any(unanswered.values()), unanswered


@pytest.mark.parametrize("module", ["packaging/__init__.py", "textwrap.py", "json/__init__.py"])
def test_a_module_on_pythonpath_cannot_run_inside_the_doctor(tmp_path, bare_python, module):
    """PYTHONPATH comes before the standard library, so a `packaging` or `textwrap` there would run inside the
    doctor; one that calls os._exit(0) would make `check -f json` exit 0 with nothing on stdout (a CI gate passes).
    The doctor restarts ignoring PYTHONPATH for its own imports; the probes still see it."""
    shadow = tmp_path / "shadow"
    (shadow / module).parent.mkdir(parents=True, exist_ok=True)
    (shadow / module).write_text("import os\nos._exit(0)\n")
    run = run_doctor("check", "-f", "json", "--only", "python.version,torch.install", sites=(shadow,),
                     python=bare_python)
    report = strict_json(run.stdout)
    assert run.returncode == 1 and report["summary"]["exit_code"] == 1  # torch.install fails: no torch there
