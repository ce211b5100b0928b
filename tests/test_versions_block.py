"""The versions block (report/versions.py): what was found, first in every report and alone for `check --versions`;
at most 4 lines at 80 columns, broken only between values, whatever the environment holds."""

from __future__ import annotations

import json
import sys

import jsonschema
from markdown_it import MarkdownIt

from conftest import REPO, SCHEMA, run_doctor
from wheels import ensure

from dsv4_doctor.model.report import SCHEMA as SCHEMA_NAME, Report
from dsv4_doctor.report.markdown import render_markdown
from dsv4_doctor.report.terminal import render_terminal
from dsv4_doctor.report.versions import LABELS, gather, of_report, report_lines, text_lines

COMPLETE = REPO / "docs" / "gpu-runs" / "2026-12-04-h200-truth" / "complete.json"
VERSIONS_SCHEMA = {"$defs": SCHEMA["$defs"], **SCHEMA["properties"]["environment"]["properties"]["versions"]}


def _fits(lines: list[str], width: int = 80) -> None:
    """At most 4 lines at 80 columns or more; narrower, as many characters on more lines (8 at 40)."""
    assert 1 <= len(lines) <= (4 if width >= 80 else -(-320 // width)), lines
    assert all(len(line) <= width for line in lines), lines
    assert not any(ch in "".join(lines) for ch in "\x1b\n\r\x07"), lines


def test_the_complete_stack_s_block_says_every_version_in_4_lines_at_80_columns():
    """The committed complete-stack run on an H100 (read back through the typed report, so the block comes from its
    rows' evidence): every fact in place, each value whole on one line."""
    report = Report.from_wire(json.loads(COMPLETE.read_text()))
    lines = report_lines(report)
    _fits(lines)
    fields = [field for line in lines for field in line.split("; ")]
    for said in ("Python 3.12.3", "torch 2.11.0+cu130", "CUDA 13.0", "cuDNN 9.19.0", "NCCL 2.28.9",
                 "driver 580.159.04", "GPU 1x NVIDIA H100 80GB HBM3", "TE 2.12.0", "cuDNN-FE 1.27.0",
                 "CuTe-DSL 4.5.2", "tvm-ffi 0.1.11", "mcore 0.19.0 (/root/mcore)", "mbridge 0.6.2", "verl 0.9.1",
                 "FlashMLA 1.0.0+2026.12.6.17.15.54 sm_90a"):
        assert said in fields, (said, lines)
    block = of_report(report)
    jsonschema.validate(block, VERSIONS_SCHEMA)
    assert block["megatron_core"]["commit"] is None  # no git, no direct_url: not known, never a guess
    text = render_terminal(report, 0, width=100)
    assert text.splitlines()[0].startswith("Python 3.12.3; torch 2.11.0+cu130")


def test_every_committed_gpu_report_s_block_fits():
    """Every report of the GPU runs (single hosts, fleets, broken stacks), at 40, 80 and 120 columns."""
    reports = [data for path in sorted((REPO / "docs" / "gpu-runs").rglob("*.json"))
               if isinstance(data := json.loads(path.read_text()), dict) and data.get("schema") == SCHEMA_NAME]
    assert len(reports) > 20
    for data in reports:
        for width in (40, 80, 120):
            _fits(report_lines(Report.from_wire(data), width), width)


class _Row:
    def __init__(self, evidence, status="pass", summary=""):
        from dsv4_doctor.model.core import Status

        self.evidence, self.status, self.summary = evidence, Status(status), summary


HOSTILE = "2.0\x1b[31m\x1b]0;title\x07 **bold** `code` ```fence <b>x</b> [l](http://e.x) @user\n## head\r" + "9" * 5000


def _hostile_block() -> dict:
    rows = {"torch.install": _Row({"version": HOSTILE, "cuda_build": HOSTILE, "cudnn_version": 91900,
                                   "nccl_version": HOSTILE}),
            "te.version": _Row({"version": HOSTILE}), "cudnn-fe.version": _Row({"import_version": HOSTILE}),
            "mcore.dsv4": _Row({"files_version": HOSTILE, "checkout": "/" + "deep/" * 400 + HOSTILE,
                                "git_commit": HOSTILE, "megatron.core": HOSTILE}),
            "kernels.flash-mla": _Row({"version": HOSTILE, "device_code": {"objects": [
                {"cubins": [{"arch": HOSTILE}, {"arch": "sm_90a"}], "ptx": [{"arch": "compute_90"}]}]}}),
            "verl.cp-layout": _Row({"version": HOSTILE}), "mbridge.dsv4": _Row({"version": HOSTILE}),
            "gpu.devices": _Row({"nvidia_smi": [{"name": HOSTILE, "driver_version": HOSTILE}] * 8})}
    return gather(rows, {"version": HOSTILE, "executable": HOSTILE})


def test_hostile_values_stay_inert_and_the_block_still_fits():
    """Escapes, control characters, markup, newlines and 5,000-character versions (a dist-info is attacker-written):
    the text block has none of them live, in 4 lines of 80 columns; the JSON keeps every value whole."""
    block = _hostile_block()
    jsonschema.validate(block, VERSIONS_SCHEMA)
    assert block["torch"]["version"] == HOSTILE  # the wire form keeps the value; only the text cuts it
    for width in (40, 80, 100, 400):
        lines = text_lines(block, width)
        _fits(lines, max(40, min(width, 120)))
    report = Report.from_wire({"environment": {"versions": block, "target_python": {}}, "summary": {"status": "pass"}})
    text = render_terminal(report, 0, width=80)
    assert "\x1b" not in text and "\x07" not in text
    markdown = render_markdown(report)
    tokens = MarkdownIt("commonmark").parse(markdown)
    fences = [t for t in tokens if t.type == "fence"]
    first = fences[0]
    assert first.info == "text" and first.content.splitlines() == report_lines(report)
    # Nothing of the values became markup outside the fence: no emphasis, link, heading or HTML from them.
    inline = [c.type for t in tokens if t.map and t.map[0] < first.map[0] for c in (t.children or [])]
    assert not {"strong_open", "em_open", "link_open", "html_inline"} & set(inline)
    assert sum(t.type == "heading_open" for t in tokens if t.map and t.map[0] < first.map[0]) == 1  # the title


def test_eight_gpus_are_counted_and_a_mixed_host_names_each_kind():
    same = gather({}, {"version": "3.12.3"}, static={"python": {}},
                  gpus=[{"name": "NVIDIA H200", "driver_version": "580.1"}] * 8)
    assert "GPU 8x NVIDIA H200" in " ".join(text_lines(same))
    mixed = gather({}, {"version": "3.12.3"}, static={"python": {}},
                   gpus=[{"name": "NVIDIA H200", "driver_version": "580.1"}, {"name": "NVIDIA B200"}])
    assert "GPU 1x NVIDIA H200, 1x NVIDIA B200" in " ".join(text_lines(mixed))
    assert mixed["gpus"]["count"] == 2 and mixed["driver"]["version"] == "580.1"


def test_check_versions_on_an_empty_venv_prints_the_block_alone(bare_python):
    """The real CLI: nothing installed is said once, short; the driver is not known where nvidia-smi lists no GPU;
    exit 0 (the block is no verdict); -f json is environment.versions, which the full report carries too."""
    run = run_doctor("check", "--versions", python=bare_python, env={"COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    _fits(lines)
    assert lines[0].startswith("Python ") and "none of the stack installed" in run.stdout
    assert "Verdict" not in run.stdout and "dsv4-doctor" not in run.stdout
    as_json = run_doctor("check", "--versions", "-f", "json", python=bare_python)
    block = json.loads(as_json.stdout)
    jsonschema.validate(block, VERSIONS_SCHEMA)
    assert list(block) == list(LABELS) and block["torch"]["state"] == "absent"
    assert all(block[k]["state"] == "absent" for k in ("transformer_engine", "megatron_core", "flash_mla"))
    report = run_doctor("check", "--static-only", "-f", "json", python=bare_python).report
    assert next(iter(report["environment"])) == "versions"  # the environment starts with it
    assert report["environment"]["versions"]["megatron_core"]["state"] == "absent"
    markdown = run_doctor("check", "--versions", "-f", "markdown", python=bare_python).stdout
    assert markdown.splitlines()[1:-1] == lines and markdown.startswith("```text\n")


def test_check_versions_reads_real_wheels_and_says_what_it_did_not_check():
    """Published wheels on PYTHONPATH and this test environment's CPU torch: the versions of the copies the job
    imports; with --static-only torch is not imported, so its CUDA, cuDNN and NCCL are "not checked", never
    guessed from its version string."""
    sites = (ensure("megatron-core-0.19.2"), ensure("nvidia-cudnn-frontend-1.26.0"), ensure("apache-tvm-ffi-0.1.9"))
    static = run_doctor("check", "--versions", "--static-only", sites=sites, python=sys.executable)
    assert static.returncode == 0, static.stderr
    _fits(static.stdout.splitlines())
    fields = static.stdout.replace("\n", "; ").split("; ")
    assert "cuDNN-FE 1.26.0" in fields and "tvm-ffi 0.1.9" in fields
    assert next(f for f in fields if f.startswith("mcore ")).startswith("mcore 0.19.2 ("), static.stdout
    assert "not checked: CUDA, cuDNN, NCCL" in static.stdout.replace("\n", " ")
    block = json.loads(run_doctor("check", "--versions", "--static-only", "-f", "json", sites=sites,
                                  python=sys.executable).stdout)
    assert block["megatron_core"]["place"] == "pythonpath" and block["megatron_core"]["path"].endswith(
        "megatron-core-0.19.2")
    assert block["cuda"]["state"] == "not_checked" and "static-only" in block["cuda"]["why"]
    torch_version = block["torch"]["version"]
    imported = run_doctor("check", "--versions", "-f", "json", sites=sites, python=sys.executable)
    got = json.loads(imported.stdout)
    assert got["torch"]["version"] == torch_version and got["cuda"]["state"] in ("found", "absent")


def test_check_versions_takes_no_verdict_options():
    for extra in (["--only", "python.version"], ["--strict"], ["-f", "junit"]):
        run = run_doctor("check", "--versions", *extra)
        assert run.returncode == 2 and "--versions" in run.stderr, (extra, run.stderr)
