"""docs/security.md (the output layer, job commands) and the exit codes (docs/usage.md), tried with the generator in
tests/hostile.py: every command and format against every output fault, the same hostile inputs through every command and
the fleet merge. Most run in-process (the run itself replaced by a hostile report); the end-to-end ones are
`-m slow`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import doctor_command
from fakes import Env
from hostile import (FILE_FAULTS, REPORTING, RUNS, SECRET_ENV, STDOUT_FAULTS, TOKENS, fifo_nobody_reads, fleet_merge,
                     full_pipe, hostile_report, run_in_process)

SECRETS = TOKENS + list(SECRET_ENV.values()) + ["hunter2secret", "abcdefgh12345678"]


def assert_clean(text: str) -> None:
    """No secret, no terminal escape, no line GitHub Actions would read as a workflow command."""
    for secret in SECRETS:
        assert secret not in text, secret
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    for line in text.splitlines():
        assert not line.lstrip().startswith("##[") and "##[" not in line, line
        # the doctor's own annotations are the one exception: `::error title=dsv4-doctor (...)::`
        assert not line.lstrip().startswith("::") or line.startswith(("::error title=dsv4-doctor",
                                                                      "::warning title=dsv4-doctor")), line


_baseline: dict[tuple[str, str], int] = {}


def baseline(command: str, fmt: str, tmp_path: Path) -> int:
    """The exit code with every stream working (preflight's report passes, so that its dry run is reached)."""
    key = (command, fmt)
    if key not in _baseline:
        run = run_in_process(command, fmt, tmp_path, passing=command == "preflight")
        assert "Traceback" not in run.stderr, run.stderr
        _baseline[key] = run.code
    return _baseline[key]


@pytest.mark.parametrize("command, fmt", RUNS)
def test_every_command_and_format_is_inert_and_secret_free(command, fmt, tmp_path):
    run = run_in_process(command, fmt, tmp_path, passing=command == "preflight")
    assert run.code in (0, 1), run.stderr
    assert "Traceback" not in run.stderr
    assert_clean(run.stdout)
    assert_clean(run.stderr)
    if fmt == "json":
        json.loads(run.stdout, parse_constant=lambda token: pytest.fail(f"non-standard JSON {token}"))
    if command == "preflight":
        assert "dry run, not starting: python3 train.py --hf-token " in run.stderr


@pytest.mark.parametrize("fault", STDOUT_FAULTS)
@pytest.mark.parametrize("command, fmt", RUNS)
def test_a_full_closed_or_unread_stdout_exits_4(command, fmt, fault, tmp_path):
    """Exit 4 when the report (the plan, the listing) could not be written, for every command whose output is
    stdout; preflight's report goes to stderr, so stdout does not change its code. Never a traceback."""
    expected = baseline(command, fmt, tmp_path)
    start = time.monotonic()
    run = run_in_process(command, fmt, tmp_path, stdout=fault, passing=command == "preflight")
    assert time.monotonic() - start < 10
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert run.code == (expected if command == "preflight" else 4), run.stderr
    if command != "preflight":
        assert "could not write" in run.stderr


@pytest.mark.parametrize("fault", STDOUT_FAULTS)
@pytest.mark.parametrize("command, fmt", RUNS)
def test_a_full_closed_or_unread_stderr_changes_no_exit_code(command, fmt, fault, tmp_path):
    expected = baseline(command, fmt, tmp_path)
    start = time.monotonic()
    run = run_in_process(command, fmt, tmp_path, stderr=fault, passing=command == "preflight")
    assert time.monotonic() - start < 10
    assert run.code == expected
    if fmt == "json":
        json.loads(run.stdout)  # what went to stdout is whole


@pytest.mark.parametrize("fault", FILE_FAULTS)
@pytest.mark.parametrize("command, fmt", REPORTING + [("preflight", "text")])
def test_an_output_file_that_cannot_be_written(command, fmt, fault, tmp_path):
    """A directory, a FIFO, a socket, a place no one can write or a relative path in a deleted working directory:
    usage error 2, before any work. A device that fails the write (/dev/full): check and smoke exit 4 with the
    report on stdout; preflight says so and goes on (its --report is a copy for the job's logs)."""
    run = run_in_process(command, fmt, tmp_path, file_fault=fault, passing=command == "preflight")
    assert "Traceback" not in run.stderr, run.stderr
    if fault != "full":
        assert run.code == 2, run.stderr
        assert "error:" in run.stderr
    elif command == "preflight":
        assert run.code == 0 and "could not write the report to /dev/full" in run.stderr
    else:
        assert run.code == 4 and "could not write the report to /dev/full" in run.stderr
        assert run.stdout.strip()
    if fault == "deleted-cwd":
        assert "working directory no longer exists" in run.stderr


def test_fix_apply_with_a_broken_stdout_applies_nothing(tmp_path):
    """Nobody could read the plan, so none of it runs (a stub pip logs whether it was started)."""
    log = tmp_path / "pip.log"
    stub = tmp_path / "python"
    stub.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\n')
    stub.chmod(0o755)
    run = run_in_process("fix", "script", tmp_path, stdout="full",
                         argv=["fix", "--apply", "--yes", "--python", str(stub)])
    assert run.code == 4 and "could not write the plan" in run.stderr and "nothing applied" in run.stderr
    assert not log.exists()


def test_the_readme_dry_run_example_is_what_the_doctor_prints(tmp_path):
    run = run_in_process("preflight", "text", tmp_path, passing=True, argv=[
        "preflight", "--dry-run", "--python", sys.executable, "--", "python3", "train.py", "--hf-token", TOKENS[0],
        "trainer.run=x", "actor_rollout_ref.actor.megatron.context_parallel_size=2"])
    assert run.code == 0, run.stderr
    assert ("dry run, not starting: python3 train.py --hf-token ***REDACTED*** trainer.run=… "
            "actor_rollout_ref.actor.megatron.context_parallel_size=2") in run.stderr


def test_a_step_summary_fifo_nobody_reads_is_given_up(tmp_path):
    keep = fifo_nobody_reads(tmp_path / "summary")
    try:
        start = time.monotonic()
        run = run_in_process("check", "json", tmp_path, environ={"GITHUB_ACTIONS": "true",
                                                                 "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")})
        assert time.monotonic() - start < 5
    finally:
        os.close(keep)
    assert run.code == 1 and "could not write the step summary: nothing was read from it" in run.stderr
    assert json.loads(run.stdout)["summary"]["exit_code"] == 1
    assert "::error title=dsv4-doctor (hostile.fail)::" in run.stderr
    assert_clean(run.stderr)


def test_a_step_summary_fifo_without_a_reader_never_blocks_the_open(tmp_path):
    os.mkfifo(tmp_path / "summary")
    run = run_in_process("check", "text", tmp_path, environ={"GITHUB_ACTIONS": "true",
                                                             "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")})
    assert run.code == 1 and "could not write the step summary: it is a FIFO that no process reads" in run.stderr


def test_the_layer_gives_up_a_stuck_stream_once_and_a_stuck_write_in_bounded_time(monkeypatch):
    from dsv4_doctor.report import output

    monkeypatch.setattr(output, "_given_up", {})
    r, w = full_pipe()
    try:
        start = time.monotonic()
        assert output.write_fd(w, b"report", idle=0.3) == "nothing was read from it for 0.3 s"
        assert 0.25 < time.monotonic() - start < 2
        start = time.monotonic()
        assert output.write_fd(w, b"more") is not None and time.monotonic() - start < 0.1  # given up: no new wait
        os.read(r, 1 << 20)  # a reader that drains the pipe: a fresh fd number is written again
    finally:
        os.close(r)
        os.close(w)


def test_a_stop_signal_during_a_stuck_write_leaves_it_one_grace_period(monkeypatch):
    from dsv4_doctor.report import output
    from dsv4_doctor.hostio.signals import GATE

    monkeypatch.setattr(output, "_given_up", {})
    r, w = full_pipe()
    try:
        GATE.late = signal.SIGTERM
        start = time.monotonic()
        assert output.write_fd(w, b"report", idle=30) == "a stop signal arrived"
        assert time.monotonic() - start < output.SIGNAL_GRACE + 1
    finally:
        GATE.late = None
        os.close(r)
        os.close(w)


def test_lines_said_on_stderr_are_capped_redacted_and_cleaned():
    from dsv4_doctor.report.output import MAX_LINE, line_text

    line = line_text("x" * (MAX_LINE * 2) + " --hf-token " + TOKENS[0] + "\n::error::x \x1b[31m")
    assert len(line) < MAX_LINE + 200 and TOKENS[0] not in line
    parts = ["\n::error::x", "\x1b]0;t\x07", "--token " + TOKENS[1], "password=hunter2secret"]
    assert_clean(line_text(" ".join(parts)))


def test_an_ascii_only_stdout_still_gets_the_whole_report_as_valid_json(tmp_path, monkeypatch):
    from dsv4_doctor.report import output

    monkeypatch.setattr(output, "_given_up", {})
    report, _ = hostile_report()
    path = tmp_path / "ascii.out"
    with open(path, "w", encoding="ascii") as fh:
        monkeypatch.setattr(sys, "stdout", fh)
        from dsv4_doctor.report.dispatch import render

        assert output.write_stdout(render(report, "json"))
    assert json.loads(path.read_text(encoding="ascii")) == json.loads(render(report, "json"))


# --- job commands are shown by shape ---------------------------------------------------------------------------

SYNTAXES = {
    "--flag value": ["python3", "train.py", "--hf-token", TOKENS[0]],
    "--flag=value": ["python3", "train.py", f"--api-key={TOKENS[2]}"],
    "key=value": ["python3", "-m", "verl.trainer.main_ppo", f"trainer.wandb_key={TOKENS[1]}"],
    "+key=value": ["python3", "-m", "verl.trainer.main_ppo", f"+actor.password={TOKENS[3]}"],
    "++key=value": ["python3", "-m", "verl.trainer.main_ppo", f"++data.hf_token={TOKENS[0]}"],
    "env K=V": ["env", f"HF_TOKEN={TOKENS[4]}", "torchrun", "--nproc-per-node", "8", "train.py"],
    "an unknown flag's value": ["bash", "run.sh", "--remote", f"https://user:{TOKENS[1]}@example.invalid/x"],
    "a bare word": ["python3", "train.py", TOKENS[2]],
    "python -c": ["python3", "-c", f"import os; os.environ['T'] = '{TOKENS[0]}'"],
    "a secret-looking program": [f"/opt/{TOKENS[0]}/python"],
}


@pytest.mark.parametrize("syntax", sorted(SYNTAXES))
def test_a_job_command_is_shown_without_its_values(syntax):
    from dsv4_doctor.job.shape import shape

    line = shape(SYNTAXES[syntax])
    for secret in SECRETS:
        assert secret not in line, line
    assert "…" in line, line


def test_the_keys_the_doctor_reads_keep_their_plain_values():
    from dsv4_doctor.job.shape import shape

    line = shape(["torchrun", "--nproc-per-node", "8", "-m", "verl.trainer.main_ppo",
                  "actor_rollout_ref.actor.megatron.context_parallel_size=2", "trainer.project_name=secret-ish",
                  "--context-parallel-size", "4", "--cp-partition-mode=contiguous", "--use-varlen-dataset"])
    assert line == ("torchrun --nproc-per-node 8 -m verl.trainer.main_ppo "
                    "actor_rollout_ref.actor.megatron.context_parallel_size=2 trainer.project_name=… "
                    "--context-parallel-size 4 --cp-partition-mode=contiguous --use-varlen-dataset")


@pytest.mark.parametrize("syntax", sorted(SYNTAXES))
def test_the_dry_run_line_shows_the_command_by_shape(syntax, tmp_path):
    run = run_in_process("preflight", "text", tmp_path, passing=True,
                         argv=["preflight", "--dry-run", "--python", sys.executable, "--", *SYNTAXES[syntax]])
    assert run.code == 0, run.stderr
    assert "dry run, not starting: " in run.stderr
    for secret in SECRETS:
        assert secret not in run.stderr, run.stderr


def test_a_command_given_before_the_double_dash_is_named_by_shape(tmp_path):
    run = run_in_process("preflight", "text", tmp_path,
                         argv=["preflight", "--python", sys.executable, TOKENS[0], "--hf-token", TOKENS[1]])
    assert run.code == 2 and "put the training command after `--`" in run.stderr, run.stderr
    assert TOKENS[0] not in run.stderr and TOKENS[1] not in run.stderr and "Traceback" not in run.stderr


def test_an_argument_no_command_takes_is_not_echoed_with_its_secret(tmp_path):
    run = run_in_process("check", "text", tmp_path, argv=["check", "--hf-token", TOKENS[0]])
    assert run.code == 2 and "unrecognized arguments: --hf-token" in run.stderr and TOKENS[0] not in run.stderr


@pytest.mark.parametrize("command", [[""], ["", "train.py"]])
def test_an_empty_program_is_a_usage_error(command, tmp_path):
    """What an unset "$PY" gives: `preflight -- '' train.py` (it was a ValueError traceback and exit 1)."""
    run = run_in_process("preflight", "text", tmp_path, passing=True,
                         argv=["preflight", "--python", sys.executable, "--", *command])
    assert run.code == 2 and "program is an empty word" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("program, code", [("/nonexistent/python", 127), ("{tmp}", 126)])
def test_an_unrunnable_job_is_126_or_127_and_named_by_shape(program, code, tmp_path):
    run = run_in_process("preflight", "text", tmp_path, passing=True,
                         argv=["preflight", "--python", sys.executable, "--", program.format(tmp=tmp_path),
                               "--hf-token", TOKENS[0]])
    assert run.code == code and "could not start" in run.stderr and TOKENS[0] not in run.stderr


def test_an_internal_error_is_one_line_and_exit_3(tmp_path, monkeypatch):
    from dsv4_doctor.report import rules

    def broken(*a, **k):
        raise RuntimeError("listing broke " + TOKENS[0])

    monkeypatch.setattr(rules, "render_listing", broken)
    run = run_in_process("list", "text", tmp_path)
    assert run.code == 3 and "internal error: RuntimeError: listing broke" in run.stderr
    assert "Traceback" not in run.stderr and TOKENS[0] not in run.stderr


# --- the fleet merge --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_hostile_rank_reports_through_the_fleet_merge_stay_inert(fmt):
    from dsv4_doctor.report.dispatch import render

    a, b = hostile_report()[0].to_dict(), hostile_report(passing=True)[0].to_dict()
    for rank, rep in ((0, a), (1, b)):
        rep["environment"]["fleet_rank"] = {"rank": rank, "host": "node\n::error::x " + TOKENS[0]}
    text = render(fleet_merge({0: a, 1: b}), fmt)
    assert_clean(text)


# --- bounded reads keep their meaning ---------------------------------------------------------------------------

def test_metadata_over_the_read_limit_with_a_non_ascii_description_keeps_its_headers(tmp_path, bare_python):
    """It became "unreadable" (the cut split a character), its Requires-Python was lost, python.version passed."""
    body = ("Beschreibung: Größe ✓ " * 400_000).encode("utf-8")  # ~9 MB, over the 4 MiB read limit
    metadata = (b"Metadata-Version: 2.1\nName: megatron-core\nVersion: 0.17.0\nRequires-Python: >=3.99\n\n" + body)

    def mcore(site):
        site.dist("megatron-core", "0.17.0", metadata=metadata)
    run = Env(tmp_path).fake("mcore", mcore).doctor("check", "-f", "json", "--only", "python.version,deps.metadata",
                                                   python=bare_python)
    row = run.check("python.version")
    assert row["status"] == "fail" and "declares Requires-Python >=3.99" in row["summary"], row
    meta = run.check("deps.metadata")
    assert meta["status"] == "pass" and "headers read" in meta["summary"]
    assert any("megatron-core" in k for k in meta["evidence"]["headers_only"])


def test_metadata_whose_headers_pass_the_read_limit_is_unreadable_not_passed():
    import probe_modules

    parse_metadata = probe_modules.load("dsv4probe_static_installed").parse_metadata

    with pytest.raises(ValueError, match="headers go on past"):
        parse_metadata(b"Name: x\nVersion: 1\nRequires-Dist: " + b"a" * 100, truncated=True)


def test_a_source_over_the_read_limit_is_said_truncated_and_not_judged(tmp_path, monkeypatch):
    import probe_modules

    static = probe_modules.load("dsv4probe_static_sources")

    (tmp_path / "bigmod.py").write_text("def gate(x):\n    return x\n" + "PAD = 0\n" * 2000)
    monkeypatch.setattr(static, "SOURCE_LIMIT", 1024)
    monkeypatch.syspath_prepend(str(tmp_path))
    facts = static.source_facts("bigmod", ["gate", "absent_needle"])
    assert facts["truncated"] is True and "source truncated" in facts["error"] and "rest not judged" in facts["error"]
    # The signature before the bound is read; a needle not seen there is not said to be absent.
    assert facts["functions"]["gate"]["params"] == ["x"]
    assert facts["contains"] == {"gate": True}
    assert "sha256" not in facts  # not the file's hash: the file was not read whole


def test_a_source_cut_inside_a_long_string_backs_off_to_a_cut_that_parses(tmp_path, monkeypatch):
    import probe_modules

    static = probe_modules.load("dsv4probe_static_sources")

    body = 'def flash_mla_sparse_fwd(q, kv, indexer_topk):\n    pass\n\n\nDOC = """\n' + "x = 1\n" * 5000 + '"""\n'
    (tmp_path / "cutmod.py").write_text(body + "def later():\n    pass\n" * 50)
    monkeypatch.setattr(static, "SOURCE_LIMIT", len(body) - 100)  # the cut falls inside DOC's string
    monkeypatch.syspath_prepend(str(tmp_path))
    facts = static.source_facts("cutmod", [])
    assert facts["functions"]["flash_mla_sparse_fwd"]["params"] == ["q", "kv", "indexer_topk"]
    assert "later" not in facts["functions"] and facts["read_bytes"] < len(body)


def test_a_source_with_no_whole_statement_before_the_bound_is_not_judged(tmp_path, monkeypatch):
    import probe_modules

    static = probe_modules.load("dsv4probe_static_sources")

    (tmp_path / "onebig.py").write_text("X = [\n" + "    1,\n" * 500 + "]\n")
    monkeypatch.setattr(static, "SOURCE_LIMIT", 1024)
    monkeypatch.syspath_prepend(str(tmp_path))
    facts = static.source_facts("onebig", ["X"])
    assert "parsed; not judged" in facts["error"] and "functions" not in facts and "contains" not in facts


def test_verl_markers_not_found_in_a_truncated_source_are_not_known_missing():
    """A verl file over the read limit failed as "lacks the contiguous CP layout" on markers it never read."""
    import types

    from dsv4_doctor.model.facts import StaticFacts
    from dsv4_doctor.model.core import Profile
    from dsv4_doctor.checks.verl_checks import ENGINE, REPLAY, UTIL, verl_cp_layout

    whole = {"found": True, "path": "x.py", "error": None, "classes": {}, "functions": {}, "names": [],
             "contains": {}}
    cut = dict(whole, truncated=True, error="source truncated: larger than the 8388608-byte read limit")
    static = StaticFacts({"modules": {"verl": {"found": True}},
                          "sources": {UTIL: cut, ENGINE: whole, REPLAY: whole}})
    result = verl_cp_layout.run(types.SimpleNamespace(profile=Profile(cp=2), static=static))
    assert result.status.value == "error" and "cannot tell" in result.summary, result


def test_mbridge_dispatcher_not_found_in_an_unread_source_is_not_known():
    """A bridge file not read whole was said to default to alltoall on a needle it never saw."""
    import types

    from dsv4_doctor.model.facts import StaticFacts
    from dsv4_doctor.model.core import Profile
    from dsv4_doctor.checks.mbridge_checks import BRIDGES, mbridge_dsv4

    cut = {"found": True, "path": "b.py", "truncated": True, "error": "source truncated: larger than the read limit",
           "classes": {}, "functions": {}, "names": [], "contains": {}}
    static = StaticFacts({"modules": {"verl": {"found": True}, "megatron.bridge": {"found": True},
                                      BRIDGES[0]: {"found": True}},
                          "sources": {BRIDGES[0]: cut}})
    result = mbridge_dsv4.run(types.SimpleNamespace(profile=Profile(), static=static))
    assert result.evidence["default_dispatcher"].startswith("not known"), result
    assert "alltoall" not in result.summary


def test_the_report_carries_the_job_entry_and_env_values_by_shape():
    """profile.job.env listed `env K=V` values verbatim (report-wide redaction masks only secret-looking ones), and
    profile.job.entry the program word whatever it held."""
    from dsv4_doctor.job.command import parse
    from dsv4_doctor.report.assemble import assemble

    job = parse(["env", "SIGNED_URL=https://h/x?sig=abc123def", "NCCL_NVLS_ENABLE=0",
                          "/opt/my dir/\x1b[31mtrain.py", "x=1"]).to_dict()
    report = assemble({"cp": 1, "job": job}, [], [], {}, False, 0.0)
    shown = report.profile["job"]
    assert shown["env"] == {"SIGNED_URL": "…", "NCCL_NVLS_ENABLE": "0"} and shown["entry"] == "…"
    assert "abc123def" not in json.dumps(report.to_dict()) and "train.py" not in json.dumps(report.to_dict())
    assert job["env"]["SIGNED_URL"].endswith("abc123def")  # the checks still read the parsed job


def test_apply_echoes_a_withheld_command_with_the_secret_masked_and_runs_the_real_one(tmp_path, monkeypatch, capfd):
    """docs/security.md: a step whose command holds a secret is withheld in the script, echoed masked, run with its
    value."""
    from dsv4_doctor.fix import apply as fixapply, plan as fixplan
    from dsv4_doctor.report.script import render_script
    from dsv4_doctor.model.core import CheckReport, Fix, Status
    from dsv4_doctor.hostio.procs import Processes
    from dsv4_doctor.hostio.redact import Redactor

    record = tmp_path / "argv"
    target = tmp_path / "python"  # stands in for the target interpreter: records the argv pip would get
    target.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\n")
    target.chmod(0o755)
    url = "https://builder:ghp_abcdefghijklmnopqrstuvwxyz0123456789@pypi.example.com/simple"
    reports = [CheckReport(id="tvm-ffi.version", title="t", status=Status.FAIL, summary="s",
                           fixes=[Fix("tvm", [["pip", "install", "--index-url", url, "apache-tvm-ffi==0.1.11"]])])]
    plan = fixplan.build_plan(reports)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    redact = Redactor()
    script = render_script(plan, str(target), {}, "0", redact)
    assert "ghp_abc" not in script and "held a secret" in script
    done = fixapply.apply(plan, str(target), Processes(), redact)
    assert (done.ran, done.code) == (1, 0)
    echo = capfd.readouterr().err
    assert "+ " in echo and "ghp_abc" not in echo and "REDACTED" in echo, echo
    assert url in record.read_text().split("\n")  # run with the real value

def test_a_fix_command_whose_environment_holds_a_secret_is_withheld_in_the_script_and_masked_in_the_echo(
        tmp_path, monkeypatch, capfd):
    """The script checked only a command's argv for secrets and printed its `NAME=value` prefix as it was."""
    from dsv4_doctor.fix import apply as fixapply, plan as fixplan
    from dsv4_doctor.report.script import render_script
    from dsv4_doctor.model.core import CheckReport, Command, Fix, Status
    from dsv4_doctor.hostio.procs import Processes

    token = "hf_abcdefghijklmnopqrstuvwxyz0123"
    fix = Fix("tvm", [Command(("pip", "install", "apache-tvm-ffi==0.1.11"), env=(("HF_TOKEN", token),))])
    plan = fixplan.build_plan([CheckReport(id="tvm-ffi.version", title="t", status=Status.FAIL, summary="s",
                                           fixes=[fix])])
    script = render_script(plan, "/py", {}, "0")
    assert token not in script and "held a secret" in script
    target = tmp_path / "python"
    target.write_text("#!/bin/sh\nexit 0\n")
    target.chmod(0o755)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    done = fixapply.apply(plan, str(target), Processes())
    assert (done.ran, done.code) == (1, 0)
    echo = capfd.readouterr().err
    assert "+ HF_TOKEN=" in echo and token not in echo, echo


def test_csa_at_cp_2_with_the_compressor_source_not_read_whole_is_not_known_not_failed():
    """The pre-grouping marker not found in a fused_compressor.py over the read limit read as "takes the fused path"."""
    import types

    from dsv4_doctor.model.facts import StaticFacts
    from dsv4_doctor.model.core import Profile
    from dsv4_doctor.checks._gates import FUSED_COMPRESSOR
    from dsv4_doctor.checks.cudnn_fe_checks import cudnn_fe_csa

    cut = {"found": True, "path": "fused_compressor.py", "truncated": True, "classes": {}, "functions": {},
           "names": [], "contains": {}, "error": "source truncated: larger than the 8388608-byte read limit",
           # its gate (major >= 10) was read before the bound
           "capability": {"constants": {"_MIN_MAJOR": {"value": 10, "lineno": 3}},
                          "compares": [{"constant": "_MIN_MAJOR", "op": ">=", "subject": "capability[0]",
                                        "lineno": 9}]}}
    static = StaticFacts({"modules": {"megatron.core": {"found": True}}, "sources": {FUSED_COMPRESSOR[0]: cut}})
    ctx = types.SimpleNamespace(profile=Profile(cp=2, gpu_arch="10.0", gpu_arch_source="option"), static=static,
                                outcome=lambda check_id: None)
    result = cudnn_fe_csa.run(ctx)
    assert result.status.value == "warn" and "could not be read whole" in result.summary, result


def test_hadamard_missing_with_verl_patch_not_read_whole_is_not_known_not_failed():
    """verl's shim not found in a patch.py over the read limit read as "no shim: every CSA layer asserts"."""
    import types

    from dsv4_doctor.model.facts import StaticFacts
    from dsv4_doctor.model.core import Profile
    from dsv4_doctor.checks.kernels_checks import kernels_fast_hadamard

    cut = {"found": True, "path": "patch.py", "truncated": True, "classes": {}, "functions": {}, "names": [],
           "contains": {}, "error": "source truncated: larger than the 8388608-byte read limit"}
    static = StaticFacts({"modules": {}, "sources": {"verl.models.mcore.patch": cut}})
    result = kernels_fast_hadamard.run(types.SimpleNamespace(profile=Profile(cp=2), static=static))
    assert result.status.value == "warn" and "could not be read whole" in result.summary, result


def test_mcore_dsv4_class_not_in_what_was_read_of_a_huge_module_is_not_known_not_failed():
    """A deepseek_v4_hybrid_attention.py over the read limit failed as "it could not be read" (and asked for a
    reinstall) on a class it never reached; the class found before the bound still passes."""
    import types

    from dsv4_doctor.model.facts import StaticFacts
    from dsv4_doctor.model.core import Profile
    from dsv4_doctor.checks.mcore_checks import DSV4_CLASS, DSV4_MOD, MARKERS, mcore_dsv4

    cut = {"found": True, "path": "deepseek_v4_hybrid_attention.py", "truncated": True, "classes": {},
           "functions": {}, "names": [], "contains": {}, "error": "source truncated: larger than the read limit"}
    modules = {"megatron.core": {"found": True, "origin": "/site/megatron/core/__init__.py"},
               **{name: {"found": True} for name in MARKERS}}
    ctx = types.SimpleNamespace(profile=Profile(cp=2), static=StaticFacts({"modules": modules,
                                                                            "sources": {DSV4_MOD: cut}}))
    result = mcore_dsv4.run(ctx)
    assert result.status.value == "error" and "not known" in result.summary, result
    cut["classes"] = {DSV4_CLASS: {"bases": [], "methods": {}}}
    ctx.static = StaticFacts({"modules": modules, "sources": {DSV4_MOD: cut}})
    assert mcore_dsv4.run(ctx).status.value == "pass"


# --- end to end -------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_fix_with_a_full_or_closed_stdout_exits_4_without_noise(bare_python):
    """It exited 120 (or 0) with Python's "Exception ignored ... BrokenPipeError"."""
    for how in ("full", "closed"):
        with open("/dev/full", "w") as full:
            done = subprocess.run(doctor_command() + ["fix", "--python", bare_python], stderr=subprocess.PIPE,
                                  text=True, timeout=120, stdout=full if how == "full" else None,
                                  preexec_fn=(lambda: os.close(1)) if how == "closed" else None)
        assert done.returncode == 4, (how, done.stderr)
        assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_sigterm_while_the_step_summary_blocks_ends_143_with_the_report_file_whole(tmp_path, bare_python):
    keep = fifo_nobody_reads(tmp_path / "summary")
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(tmp_path / "summary"))
    try:
        proc = subprocess.Popen(doctor_command() + ["check", "-f", "json", "-o", str(report), "--only",
                                                    "python.version", "--python", bare_python],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not report.exists() or not report.stat().st_size:  # the report file is out: the summary is next
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(keep)
    assert proc.returncode == 143, err
    assert time.monotonic() - sent < 4
    assert json.loads(report.read_text())["summary"]["exit_code"] == 0
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_stdout_pipe_nobody_reads_exits_4_in_bounded_time(bare_python):
    r, w = full_pipe()
    try:
        start = time.monotonic()
        done = subprocess.run(doctor_command() + ["check", "--only", "python.version", "--python", bare_python],
                              stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
        took = time.monotonic() - start
    finally:
        os.close(r)
        os.close(w)
    assert done.returncode == 4 and "not read" in done.stderr, done.stderr
    assert took < 20

