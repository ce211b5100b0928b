"""Unit tests of the pure parts: the model, selection, the fix planner, renderers and probe parsers (in-process)."""

from __future__ import annotations

import json
import shlex
import subprocess
import xml.etree.ElementTree as ET

import pytest

from dsv4_doctor.fix.plan import build_plan
from dsv4_doctor.model.core import Check, CheckReport, Command, Fix, Phase, Profile, Status, needs_failed, passed
from dsv4_doctor.engine.probes import parse_handshake, parse_nvidia_smi
from dsv4_doctor.report.dispatch import render, verdict_line
from dsv4_doctor.report.markdown import code, fence, plain
from dsv4_doctor.report.script import render_script
from dsv4_doctor.report.assemble import assemble
from dsv4_doctor.engine.session import UsageError, select


def _check(check_id: str) -> Check:
    return Check(id=check_id, title="t", explanation="x", applies_when="always", detects="x",
                 run=lambda ctx: passed("ok"))


def _row(check_id: str, status: Status, fixes=(), summary: str = "s") -> CheckReport:
    return CheckReport(id=check_id, title="t", status=status, summary=summary, fixes=list(fixes))


# --- model ------------------------------------------------------------------------------------------------------

def test_commands_are_argv_lists_quoted_only_when_printed():
    cmd = Command(("pip", "install", "transformer-engine[pytorch]==2.16.1", "a b; c"))
    assert shlex.split(cmd.shell()) == list(cmd.argv)
    assert Command.parse("pip install 'x[y]==1'").argv == ("pip", "install", "x[y]==1")
    for bad in ((), ("pip", "a\nb"), ("pip", "nul\x00"), ("",), ("pip", "a\u2028b")):
        with pytest.raises(ValueError):
            Command(bad)
    fix = Fix("d", [["pip", "install", "a==1"], "pip install b==2"], key="k", phase="build")
    again = Fix.from_dict(json.loads(json.dumps(fix.to_dict())))
    assert again == fix and again.phase is Phase.BUILD
    assert Fix("torch", [["pip", "install", "torch==2.11.0"]], phase=Phase.RUNTIME).manual


def test_needs_failed_points_at_the_prerequisite():
    class Ctx:
        def __init__(self, row):
            self.row = row

        def outcome(self, check_id):
            return self.row
    assert needs_failed(Ctx(None), "a.b") is None
    assert needs_failed(Ctx(_row("a.b", Status.WARN)), "a.b") is None
    skip = needs_failed(Ctx(_row("a.b", Status.FAIL, summary="x is not installed")), "a.b")
    assert skip.status is Status.SKIP and skip.summary == "needs a.b (x is not installed)"


# --- selection ----------------------------------------------------------------------------------------------------

def test_selection_by_id_and_glob_and_its_usage_errors():
    checks = [_check(i) for i in ("a.one", "a.two", "b.one")]
    assert [c.id for c in select(checks, ["a.*"], [])] == ["a.one", "a.two"]
    assert [c.id for c in select(checks, [], ["a.*"])] == ["b.one"]
    with pytest.raises(UsageError, match="no check matches"):
        select(checks, ["c.*"], [])
    with pytest.raises(UsageError, match="select no check"):
        select(checks, ["a.one"], ["a.one"])


# --- the fix plan -------------------------------------------------------------------------------------------------

TORCH = Fix("torch", [["pip", "install", "torch==2.11.0"]], key="torch", phase=Phase.RUNTIME,
            notes=["rebuild transformer_engine_torch after it"])
TE = Fix("te", [["pip", "install", "--no-build-isolation", "transformer-engine[pytorch,core_cu13]==2.16.1"]], key="te",
         phase=Phase.BUILD)
FE = Fix("fe", [["pip", "install", "--no-deps", "apache-tvm-ffi==0.1.11"],
                ["pip", "install", "--no-deps", "nvidia-cudnn-frontend==1.27.0"]], key="fe")
TVM = Fix("tvm", [["pip", "install", "--no-deps", "apache-tvm-ffi==0.1.11"]], key="tvm")
SETTING = Fix("set dsa_kernel_backend=none", key="setting", phase=Phase.SETTING)


def test_plan_orders_by_dependency_and_deduplicates():
    plan = build_plan([_row("z.fe", Status.FAIL, [FE, SETTING]), _row("y.tvm", Status.WARN, [TVM]),
                       _row("x.te", Status.FAIL, [TE]), _row("w.torch", Status.FAIL, [TORCH]),
                       _row("v.fe2", Status.FAIL, [FE])])
    assert [s.fix.key for s in plan.steps] == ["torch", "te", "fe", "setting"]  # tvm's command came with fe
    # ... and the fe step answers for y.tvm too: every failing check is named by the step that fixes it.
    assert plan.steps[2].checks == ["z.fe", "v.fe2", "y.tvm"] and plan.exit_code == 0
    # TE builds against torch: while the manual torch step is pending it is held back, the pure-Python fe is not.
    assert [s.automatic for s in plan.steps] == [False, False, True, False]
    assert plan.steps[1].held_by == 1 and plan.steps[1].runnable
    without_torch = build_plan([_row("x.te", Status.FAIL, [TE])])
    assert without_torch.steps[0].automatic


def test_plan_exit_code_and_unfixable_failures():
    plan = build_plan([_row("a.b", Status.FAIL), _row("c.d", Status.WARN), _row("e.f", Status.PASS, [FE])])
    assert plan.unfixable == ["a.b"] and plan.exit_code == 1 and plan.steps == []


def test_the_script_is_safe_to_paste_whatever_the_text(tmp_path):
    evil = "x\n touch PWNED; $(touch PWNED2) `id` \r\u2028 ::error::y"
    arg = " ".join(evil.split())  # an argument holds no line break of any kind
    plan = build_plan([_row("a.b", Status.FAIL, [Fix(evil, [["pip", "install", arg]]), TORCH,
                                                 Fix(evil, [["touch", "PWNED3"]])])])
    script = render_script(plan, "/opt/py $(touch PWNED4)/python", {"cp": 2, "dsa_backend": evil}, "0")
    for line in script.splitlines():
        assert line == "" or line.startswith(("#", "set -eu", "PY=", '"$PY" -I -m pip ')), line
    # Executed with a pip that only logs: no injected command runs, the argument arrives whole.
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\nshift 3\nprintf "%s\\n" "$@" > "$(dirname "$0")/args"\n')
    stub.chmod(0o755)
    script = script.replace("PY='/opt/py $(touch PWNED4)/python'", f"PY={stub}")
    subprocess.run(["sh", "-c", script], cwd=tmp_path, check=True)
    assert not list(tmp_path.glob("PWNED*"))
    assert (tmp_path / "args").read_text().split("\n")[1] == arg


def test_redaction_cannot_unbalance_the_quotes_of_a_command(tmp_path):
    """Redacting a finished script would rewrite `TOKEN='...` inside a quoted word, whose quotes would then not
    close and the rest run as shell: redaction works on the words, before quoting."""
    word = "apache-tvm-ffi===a&/TOKEN='&touch${IFS}PWNED5&#"
    secret = ["pip", "install", "--index-url=https://user:s3cretpass@host/simple", "x==1"]
    plan = build_plan([_row("a.b", Status.FAIL, [Fix("d TOKEN='x' & touch PWNED6", [["pip", "install", word]]),
                                                 Fix("e", [secret])])])
    script = render_script(plan, str(tmp_path / "python"), {"cp": 2}, "0")
    (tmp_path / "python").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "python").chmod(0o755)
    subprocess.run(["sh", "-c", script], cwd=tmp_path, check=True)
    assert not list(tmp_path.glob("PWNED*")), script
    assert "held a secret and is not printed" in script and "s3cretpass" not in script


# --- renderers ----------------------------------------------------------------------------------------------------

def _report(rows, profile=None):
    return assemble(profile or Profile(), rows, [], {"target_python": {"executable": None, "version": None}},
                    False, 0.5)


def test_text_wraps_to_the_width_with_indented_continuations_and_short_sources():
    from dsv4_doctor.model.core import Source

    row = _row("a.b", Status.FAIL, [TE], summary="word " * 60)
    row.sources = [Source("one", "https://x.invalid/1"), Source("two", "https://x.invalid/2")]
    command = "pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.16.1'"
    for verbosity in (0, 3):  # the default report, and -vvv with the sources
        text = render(_report([row]), "text", width=60, verbosity=verbosity)
        assert max(len(line) for line in text.splitlines() if line.strip() != command) <= 60, text
        body = [line for line in text.splitlines() if "word" in line]
        assert body and all(line.startswith(" ") for line in body)
        assert any(line.strip() == command for line in text.splitlines())
    assert "source: one: https://x.invalid/1" in text and "source: two: https://x.invalid/2" in text


@pytest.mark.parametrize("width", [40, 60, 80])
def test_headers_verdict_and_narrow_widths_keep_to_the_width_without_breaking_words(width):
    """Detail headers and the verdict line were not wrapped, and at 40 columns a 7-character
    summary column broke words ("capabil" / "ity")."""
    row = _row("cudnn-fe.version", Status.FAIL, [TE], summary="the compute capability is unknown " * 4)
    row.title = "cuDNN frontend installed, and the imported copy is the installed one"
    rows = [row, _row("mcore.cp-partition-mode", Status.WARN, summary="zigzag is Megatron's default")]
    text = render(_report(rows), "text", width=width, verbosity=1)
    # Commands are never wrapped (copy-pastable): a fix's, and the `next:` hint's on its own line.
    lines = [line for line in text.splitlines() if not line.strip().startswith(("pip install", "dsv4-doctor fix"))]
    assert max(len(line) for line in lines) <= width, text
    assert "capabil\n" not in text and "capability" in text
    assert "FAIL cudnn-fe.version the compute capability" in " ".join(text.split())


@pytest.mark.parametrize("fmt", ["text", "markdown", "junit"])
def test_no_python_none_in_human_output(fmt):
    report = _report([_row("a.b", Status.FAIL, [SETTING])], Profile(gpu_arch=None))  # no executable, no version
    assert report.target_python == {"executable": None, "version": None}
    out = render(report, fmt)
    assert "None" not in out.replace("NoneType", "")


def test_markdown_helpers_keep_text_inert():
    from markdown_it import MarkdownIt

    md = MarkdownIt("gfm-like", {"linkify": True})  # GitHub's autolinks included
    for text in ("</details><b>x</b>", "# h", "![i](u)", "[l](u)", "`x``y`", "a | b", "***x***", "<!-- c -->",
                 "https://evil.example/x", "www.evil.example", "mail@evil.example"):
        for rendered in (plain(text), code(text), "\n".join(fence(text))):
            tokens = md.parse("| a |\n|---|\n| " + rendered + " |" if "\n" not in rendered else rendered)
            flat = [t for tok in tokens for t in [tok, *(tok.children or [])]]
            assert not [t for t in flat if t.type in ("html_inline", "html_block", "image", "link_open",
                                                       "heading_open", "em_open", "strong_open")], (text, rendered)


def test_junit_carries_xml_illegal_characters_as_escapes():
    report = _report([_row("a.b", Status.ERROR, summary="bad \ufffe\uffff\x01 chars")])
    root = ET.fromstring(render(report, "junit").split("\n", 1)[1])
    assert "\\ufffe" in root.find("testcase/error").get("message")


def test_verdict_line():
    report = _report([_row("a.b", Status.FAIL), _row("c.d", Status.PASS)])
    assert verdict_line(report) == "Verdict: FAIL (1 failed, 1 passed; exit 1)"


# --- probe parsers ------------------------------------------------------------------------------------------------

def test_parse_nvidia_smi_and_the_handshake():
    gpus = parse_nvidia_smi("0, NVIDIA H200, 9.0, 143771, 580.159.04\n1, x, 12.0;rm, 1, $(x)\ngarbage\n")
    assert gpus[0] == {"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "memory_mib": 143771,
                       "driver_version": "580.159.04"}
    assert gpus[1]["compute_capability"] is None and gpus[1]["driver_version"] is None
    info = parse_handshake("noise\nDSV4DOCTOR-HANDSHAKE 2 7 18 CPython\n/usr/bin/python2\n/usr\n")
    assert info["version"] == "2.7.18" and info["executable"] == "/usr/bin/python2"
    assert parse_handshake("") is None and parse_handshake("DSV4DOCTOR-HANDSHAKE x") is None


def test_long_probes_get_their_own_default_limit_and_an_explicit_timeout_sets_every_limit():
    from dsv4_doctor.engine.probes import DEFAULT_TIMEOUT_S, LONG_TIMEOUT_S, Probe
    from dsv4_doctor.engine.session import Session

    short, long_ = Probe(key="short"), Probe(key="long", long=True)
    own = Probe(key="own", timeout_s=7.0, long=True)
    default = Session(None, None)
    try:
        assert default.pool.timeout_for(short) == DEFAULT_TIMEOUT_S
        assert default.pool.timeout_for(long_) == LONG_TIMEOUT_S > DEFAULT_TIMEOUT_S
        assert default.pool.timeout_for(own) == 7.0
    finally:
        default.close()
    given = Session(None, 20.0)
    try:
        assert given.pool.timeout_for(short) == given.pool.timeout_for(long_) == 20.0
    finally:
        given.close()
