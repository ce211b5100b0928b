"""The DSv4 rulebook against real published wheels (pip install --no-deps --target) and fakes for states no release
shows. Every verdict here is one the knowledge base predicts; every failing scenario's printed fix, applied to the
environment, turns its check green.

Most rules are judged in this process over real probe answers (probed.judge: the probes run, the CLI does not); the
tests that start the real console script are each area's end-to-end case: the probe and CLI contract."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import FakeSite
from dsv4_doctor.checks import gpu_checks, te_checks
from dsv4_doctor.model.core import Profile, Result
from dsv4_doctor.engine.probes import TORCH
from dsv4_doctor.testing import StubContext, dist, module, run_check, static_answer
from fakes import (Env, fake_cutedsl, fake_kernel, fake_megatron_dev, fake_old_verl, fake_te, fake_torch, healthy)
from probed import RUN_IDS, assert_same_rows, builds_on, judge, judge_all, judge_in_run

FE_FIX = "pip install --force-reinstall --no-deps nvidia-cudnn-frontend==1.27.0"
TVM_FIX = "pip install --no-deps apache-tvm-ffi==0.1.11"
CUTLASS_FIX = "pip install 'nvidia-cutlass-dsl[cu13]==4.5.2'"
NOT_GREEN = ("fail", "warn", "error")


def commands(check: dict) -> list[str]:
    return [cmd for fix in check["fixes"] for cmd in fix["commands"]]


def reaching(command: str, entry) -> str:
    """A `--no-deps` pip step aimed at the `pip install --target` folder on PYTHONPATH the job imports the package
    from (checks/_reach.py, install-into-entry): each Env component is such a folder, with the package's own
    dist-info, where `"$PY" -I -m pip install` (which ignores PYTHONPATH) would install behind it."""
    assert command.startswith("pip install ") and "--no-deps" in command.split(), command
    return command.replace("pip install ", f"pip install --upgrade --target {entry} ", 1)


def assert_moved_aside(check: dict, module: str, dist_info) -> None:
    """The by-hand step before an install-into-entry: the old version's dist-info in that folder moved aside (pip's
    --target --upgrade replaces the package but leaves it beside the new one), before the step aimed there."""
    kinds = [(f.get("action") or {}).get("kind") for f in check["fixes"]]
    moved = [f for f in check["fixes"] if (f.get("action") or {}).get("kind") == "move-aside"]
    assert [f["action"] for f in moved] == [{"kind": "move-aside", "module": module, "path": str(dist_info),
                                             "to": f"{dist_info}.aside"}], check["fixes"]
    assert moved[0]["phase"] == "path" and moved[0]["manual"] and moved[0]["commands"] == []
    aimed = [f for f in check["fixes"] if (f.get("action") or {}).get("kind") == "install-into-entry"]
    assert [f["action"]["entry"] for f in aimed] == [str(dist_info.parent)], check["fixes"]
    assert kinds.index("move-aside") < kinds.index("install-into-entry")


def assert_entry_dropped(check: dict, module: str, entry) -> None:
    """An install whose extras `--no-deps` would drop (TE's [pytorch,core_cu13]) is never aimed at the `--target`
    folder the job imports from: the by-hand step before it drops that PYTHONPATH entry, and the pip step stays the
    plain one site-packages takes."""
    kinds = [(f.get("action") or {}).get("kind") for f in check["fixes"]]
    dropped = [f["action"] for f in check["fixes"] if (f.get("action") or {}).get("kind") == "drop-pythonpath-entry"]
    assert [(a["module"], a["entry"], a["variable"]) for a in dropped] == [(module, str(entry), "PYTHONPATH")], kinds
    assert "install-into-entry" not in kinds and "move-aside" not in kinds, kinds
    assert not any("--target" in argv for f in check["fixes"] for argv in f["argv"]), check["fixes"]


def commands_of(result: Result) -> list[str]:
    return [c.shell() for fix in result.fixes for c in fix.commands]


def run(env: Env, python: str, *args: str):
    return env.doctor("check", "-f", "json", *args, python=python)


def apply(env: Env, command: str) -> None:
    """Env.apply, and the one command it has no component for: torch-c-dlpack-ext, which the tested set installs
    (its metadata alone, as healthy() has it)."""
    if command.startswith("pip install --no-deps torch-c-dlpack-ext=="):
        pinned = command.rsplit("==", 1)[1]
        env.fake("dlpack", lambda s: s.dist("torch-c-dlpack-ext", pinned))
        return
    env.apply(command)


def assert_fix_turns_green(env: Env, python: str, check_id: str, *args: str) -> None:
    """End to end: `check --only ID` prints a fix; carried out, the same command line passes."""
    before = run(env, python, "--only", check_id, *args).check(check_id)
    assert before["status"] in NOT_GREEN, before
    assert commands(before), f"{check_id} printed no fix command"
    for cmd in commands(before):
        apply(env, cmd)
    after = run(env, python, "--only", check_id, *args).check(check_id)
    assert after["status"] not in NOT_GREEN, after


def fix_turns_green(env: Env, python: str, check_id: str, **options) -> None:
    """assert_fix_turns_green in this process: the check judged alone over real probes, its fix carried out, judged
    again."""
    before = judge(env, python, check_id, **options)
    assert before["status"] in NOT_GREEN, before
    assert commands(before), f"{check_id} printed no fix command"
    for cmd in commands(before):
        apply(env, cmd)
    after = judge(env, python, check_id, **options)
    assert after["status"] not in NOT_GREEN, after


# --- the healthy stack: no false alarms ---------------------------------------------------------------------------

def test_healthy_stack_has_no_fail_and_no_warn_end_to_end(tmp_path, bare_python):
    """Every area's probes and the CLI on the healthy stack: a report with no false alarm, exit 0. The rows judged in
    this process (probed.judge_all, which the other rule tests use) are the CLI's, on the healthy stack and on an
    empty one."""
    env = healthy(tmp_path)
    result = run(env, bare_python, "--cp", "2", "--gpu-arch", "9.0")
    bad = {c["id"]: c["summary"] for c in result.report["checks"] if c["status"] in NOT_GREEN}
    assert bad == {}
    assert result.returncode == 0
    statuses = {c["id"]: c["status"] for c in result.report["checks"]}
    assert statuses["mcore.cp-partition-mode"] == statuses["verl.cp-layout"] == "pass"
    assert statuses["cutlass-dsl.import"] == "pass"
    assert_same_rows(result.report, judge_all(env, bare_python, RUN_IDS, cp=2, gpu_arch="9.0"))
    empty = Env(tmp_path / "empty")
    assert_same_rows(run(empty, bare_python, "--gpu-arch", "10.0").report,
                     judge_all(empty, bare_python, RUN_IDS, gpu_arch="10.0"))


@pytest.mark.parametrize("cp, arch", [(None, "10.0"), (4, "10.0"), (2, "10.3")])
def test_healthy_stack_has_no_fail_and_no_warn(tmp_path, bare_python, cp, arch):
    rows = judge_all(healthy(tmp_path), bare_python, RUN_IDS, cp=cp, gpu_arch=arch)
    bad = {i: r["summary"] for i, r in rows.items() if r["status"] in NOT_GREEN}
    assert bad == {}
    statuses = {i: r["status"] for i, r in rows.items()}
    if arch == "10.0" and cp is None:
        assert statuses["cudnn-fe.csa"] == "pass"  # the real 1.27.0 compressor resolves against the CuTe DSL
    if cp:
        assert statuses["mcore.cp-partition-mode"] == statuses["verl.cp-layout"] == "pass"
        assert statuses["cutlass-dsl.import"] == "pass"


# --- cuDNN frontend ------------------------------------------------------------------------------------------------

def test_frontend_1_26_on_sm100_fails_csa_with_the_1_27_fix(tmp_path, bare_python):
    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    csa = judge_in_run(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")
    assert csa["status"] == "fail"
    assert "has no cudnn.csa (added in 1.27.0)" in csa["summary"]
    assert "No module named 'cudnn.csa'" in csa["summary"]
    assert "keeping the eager compressor" in csa["details"]
    # The job imports frontend 1.26.0 from its `pip install --target` folder on PYTHONPATH: the pin goes there.
    fe = env.sites["fe"]
    assert commands(csa)[:2] == [TVM_FIX, reaching(FE_FIX, fe)]
    assert_moved_aside(csa, "cudnn", fe / "nvidia_cudnn_frontend-1.26.0.dist-info")
    fix_turns_green(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")


@pytest.mark.parametrize("megatron, options, status", [
    ("release", {"cp": 2}, "skip"), ("release", {}, "skip"), ("release", {"gpu_arch": "10.0"}, "skip"),
    ("dev", {"cp": 2, "gpu_arch": "10.0"}, "skip"), ("dev", {"gpu_arch": "9.0"}, "skip"),
    ("dev", {}, "warn"), ("dev", {"gpu_arch": "10.0"}, "fail"),
])
def test_frontend_1_26_without_cudnn_csa_is_said_on_every_profile(tmp_path, bare_python, megatron, options, status):
    """The real 1.26.0 wheel has no cudnn.csa: fail where the job would use it, warn where the CC is not known at CP
    1, and where it is not used (CP > 1, a CC the gate rejects, a release Megatron) a skip that says so in one line
    (evidence `notice`, shown by the default text report; a skip, so --strict gates are unchanged)."""
    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    if megatron == "release":
        env = env.wheel("megatron", "megatron-core-0.19.2")
    csa = judge_in_run(env, bare_python, "cudnn-fe.csa", **options)
    assert csa["status"] == status, csa
    said = csa["evidence"].get("notice", "") if status == "skip" else csa["summary"]
    assert "1.26.0 has no cudnn.csa" in said, csa
    version = judge(env, bare_python, "cudnn-fe.version", **options)
    assert version["status"] == "pass" and "it has no cudnn.csa" in version["summary"], version


def test_a_skip_with_a_notice_is_one_line_of_the_default_report(tmp_path, bare_python):
    from dsv4_doctor.report.terminal import render_terminal
    from probed import run_in_process

    env = healthy(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    report = run_in_process(env, bare_python, builds_on("cudnn-fe.csa"), cp=2, gpu_arch="10.0")
    text = render_terminal(report, 0, width=80)
    noted = [line for line in text.splitlines() if "NOTE  cudnn-fe.csa" in line]
    assert len(noted) == 1 and "1.26.0 has no cudnn.csa" in noted[0] and len(noted[0]) <= 80, text
    assert report.exit_code == 0 or "cudnn-fe.csa" not in " ".join(
        c.id for c in report.checks if c.status.value in ("fail", "warn"))


def test_frontend_1_27_without_cutlass_has_the_module_but_not_the_symbols(tmp_path, bare_python):
    env = healthy(tmp_path).drop("cutedsl")
    csa = judge_in_run(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")
    assert csa["status"] == "fail"
    assert csa["evidence"]["cudnn.csa_found"] is True
    assert "No module named 'cuda'" in csa["summary"]  # torch is there, so cuda.bindings is the first to fail
    unmet = " ".join(csa["evidence"]["unmet_cutedsl_requirements"])
    assert "nvidia-cutlass-dsl" in unmet and "cuda-python" in unmet
    assert CUTLASS_FIX in commands(csa)
    fix_turns_green(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")


def test_frontend_1_27_without_torch_names_every_missing_requirement(tmp_path, bare_python):
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").wheel("tvm", "apache-tvm-ffi-0.1.9")
    csa = judge_in_run(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")
    assert csa["status"] == "fail"
    assert "No module named 'torch'" in csa["summary"]
    unmet = csa["evidence"]["unmet_cutedsl_requirements"]
    assert "apache-tvm-ffi 0.1.9 (needs >=0.1.11)" in unmet
    assert {u.split()[0] for u in unmet} >= {"nvidia-cutlass-dsl", "cuda-python", "torch", "apache-tvm-ffi"}


@pytest.mark.parametrize("options, status, reason", [
    ({"gpu_arch": "9.0"}, "skip", "compute capability 9.0"),
    ({"gpu_arch": "10.0", "dsa_backend": "none"}, "skip", "dsa_kernel_backend=none"),
    # No Megatron to read the gate from: the known gates differ on 10.3 and under CP > 1, so it is not known.
    ({"gpu_arch": "10.3"}, "warn", "at compute capability 10.3 is not known"),
    ({"gpu_arch": "10.0", "cp": 2}, "warn", "with CP > 1 is not known"),
    ({}, "warn", "GPU arch not known"),
])
def test_csa_says_why_it_does_not_matter_or_is_not_known(tmp_path, bare_python, options, status, reason):
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    csa = judge_in_run(env, bare_python, "cudnn-fe.csa", **options)
    assert csa["status"] == status and reason in csa["summary"], csa


def test_dsa_wrapper_needs_its_dependencies_and_q_causal_offsets_under_cp(tmp_path, bare_python):
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0")
    dsa = judge_in_run(env, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")
    assert dsa["status"] == "fail" and "No module named 'torch'" in dsa["summary"]
    env.fake("torch", fake_torch).fake("cutedsl", fake_cutedsl)
    dsa = judge_in_run(env, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")
    assert dsa["status"] == "pass", dsa["summary"]
    # The real 1.27.0 wheel: every fallback wrapper resolves, and exactly the four Megatron may need take the offsets.
    wrappers = dsa["evidence"]["wrappers"]
    assert set(wrappers) >= {"indexer_forward_wrapper", "indexer_top_k_wrapper", "sparse_attention_backward_wrapper"}
    assert {w for w, v in wrappers.items() if v["q_causal_offsets"]} == {
        "indexer_forward_wrapper", "dense_indexer_score_recompute_wrapper", "dense_attn_score_recompute_wrapper",
        "dense_indexer_backward_wrapper"}


OLD_FRONTEND = """
__version__ = "1.25.0"
import types
def indexer_forward_wrapper(q, k, w, ratio=4, cu_seqlens_q=None, cu_seqlens_k=None{extra}):
    pass
def dense_wrapper(q, k, w, **kwargs):
    pass
DSA = types.SimpleNamespace(indexer_forward_wrapper=indexer_forward_wrapper, **{{
    name: dense_wrapper for name in ("indexer_top_k_wrapper", "indexer_backward_wrapper",
    "dense_attn_score_recompute_wrapper", "dense_indexer_backward_wrapper", "sparse_attention_backward_wrapper",
    "sparse_attn_score_recompute_wrapper", "dense_indexer_score_recompute_wrapper")}})
"""


def test_frontend_without_q_causal_offsets_fails_under_cp(tmp_path, bare_python):
    def old_frontend(site: FakeSite, extra: str = ""):  # like PyPI 1.25.0: DSA wrappers without q_causal_offsets
        site.dist("nvidia-cudnn-frontend", "1.25.0")
        site.file("cudnn/__init__.py", OLD_FRONTEND.format(extra=extra))
    env = Env(tmp_path).fake("fe", old_frontend)
    dsa = judge_in_run(env, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")
    assert dsa["status"] == "fail"
    assert dsa["summary"] == ("DSv4 CP with ratio-4 fused DSA requires cuDNN Frontend wrappers with q_causal_offsets "
                              "support; missing from: indexer_forward_wrapper. Install a compatible cuDNN Frontend "
                              "build or set dsa_kernel_backend='none'.")
    assert judge_in_run(env, bare_python, "cudnn-fe.dsa", gpu_arch="9.0")["status"] == "pass"  # CP 1: not needed
    # A **kwargs is not the parameter (Megatron tests inspect.signature(...).parameters): the dense wrappers here
    # take **kwargs only, which matters when the dense indexer loss is on; the job's settings are not known.
    named = Env(tmp_path / "n").fake("fe", old_frontend, ", q_causal_offsets=None")
    dense = judge_in_run(named, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")
    assert dense["status"] == "warn" and "dense indexer loss" in dense["summary"], dense["summary"]
    env.fake("torch", fake_torch).fake("cutedsl", fake_cutedsl)
    fix_turns_green(env, bare_python, "cudnn-fe.dsa", cp=2, gpu_arch="9.0")


def test_frontend_version_real_wheel_and_a_shadowing_copy(tmp_path, bare_python):
    """End to end for cudnn-fe: the real wheel through the CLI; the other states in this process."""
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0")
    row = run(env, bare_python).check("cudnn-fe.version")
    assert row["status"] == "pass" and row["evidence"]["import_version"] == "1.27.0"

    def git_build(site: FakeSite):  # Megatron dev's pinned frontend git build reports 1.25.0
        site.file("cudnn/__init__.py", "__version__ = '1.25.0'\n")
    shadowed = Env(tmp_path / "s").fake("shadow", git_build).wheel("fe", "nvidia-cudnn-frontend-1.27.0")
    row = judge_in_run(shadowed, bare_python, "cudnn-fe.version")
    assert row["status"] == "warn" and "metadata says 1.27.0 but import cudnn reports 1.25.0" in row["summary"]
    assert judge_in_run(Env(tmp_path / "n"), bare_python, "cudnn-fe.version")["status"] == "fail"
    assert judge_in_run(Env(tmp_path / "n"), bare_python, "cudnn-fe.version", dsa_backend="none")["status"] == "skip"


def test_two_dist_infos_for_one_distribution_are_a_warning(tmp_path, bare_python):
    def second(site: FakeSite):
        site.dist("nvidia-cudnn-frontend", "1.27.0")
    env = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").fake("extra", second)
    row = judge_in_run(env, bare_python, "cudnn-fe.version")
    assert row["status"] == "warn" and "installed 2 times" in row["summary"]


# --- tvm-ffi and the CuTe DSL --------------------------------------------------------------------------------------

def test_tvm_ffi_versions(tmp_path, bare_python):
    # Below what the installed frontend declares: a warning (a declared requirement unmet; no NaN is claimed).
    env = Env(tmp_path).wheel("tvm", "apache-tvm-ffi-0.1.9").wheel("fe", "nvidia-cudnn-frontend-1.27.0")
    old = judge_in_run(env, bare_python, "tvm-ffi.version", cp=2)
    assert old["status"] == "warn" and "does not meet what nvidia-cudnn-frontend 1.27.0 declares" in old["summary"]
    assert "apache-tvm-ffi>=0.1.11" in old["summary"] and "NaN" not in old["summary"] + old["details"]
    # 0.1.9 is imported from its `pip install --target` folder on PYTHONPATH: the pin is installed into it.
    tvm = env.sites["tvm"]
    assert commands(old) == [reaching(TVM_FIX, tvm)]
    assert_moved_aside(old, "tvm_ffi", tvm / "apache_tvm_ffi-0.1.9.dist-info")
    fix_turns_green(env, bare_python, "tvm-ffi.version", cp=2)
    # Frontend 1.26.0 declares no bound: 0.1.9 meets it.
    env = Env(tmp_path / "26").wheel("tvm", "apache-tvm-ffi-0.1.9").wheel("fe", "nvidia-cudnn-frontend-1.26.0")
    assert judge_in_run(env, bare_python, "tvm-ffi.version")["status"] == "pass"
    # Missing: a failure with the cudnn backend at any CP (the DSA kernels import tvm_ffi), and with CP > 1.
    for options in ({}, {"cp": 2}, {"cp": 2, "dsa_backend": "none"}):
        missing = judge_in_run(Env(tmp_path / "m"), bare_python, "tvm-ffi.version", **options)
        assert missing["status"] == "fail" and "No module named 'tvm_ffi'" in missing["details"], options
    skipped = judge_in_run(Env(tmp_path / "m"), bare_python, "tvm-ffi.version", dsa_backend="none")
    assert skipped["status"] == "skip"


def test_cutlass_stack_for_cp(tmp_path, bare_python):
    env = Env(tmp_path)
    row = judge_in_run(env, bare_python, "cutlass-dsl.import", cp=2)
    assert row["status"] == "fail" and "No module named 'cuda'" in row["summary"]
    assert "DSv4 CP compressor compaction requires CUDA tensors and CuTeDSL." in row["details"]
    assert judge_in_run(env, bare_python, "cutlass-dsl.import", cp=1)["status"] == "skip"

    def dist_only(site: FakeSite):  # installed with --target: the .pth that exposes `cutlass` was never processed
        site.dist("nvidia-cutlass-dsl", "4.5.2")
        site.file("cuda/__init__.py", "")
        site.file("cuda/bindings/__init__.py", "")
        site.file("cuda/bindings/driver.py", "")
    env.fake("cutedsl", dist_only)
    row = judge_in_run(env, bare_python, "cutlass-dsl.import", cp=2)
    assert row["status"] == "fail" and ".pth file" in row["details"]
    fix_turns_green(env, bare_python, "cutlass-dsl.import", cp=2)


# --- GPU arch ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile, status, text", [
    (Profile(cp=2, gpu_arch="8.0"), "fail", "Unsupported GPU compute capability 8.0 for CSA CP CuTe kernels"),
    (Profile(gpu_arch="8.0"), "fail", "requires SM90+"),
    (Profile(gpu_arch="8.0", dsa_backend="none"), "warn", "outside Megatron's DSv4 arch tables"),
    (Profile(cp=2, gpu_arch="9.0"), "pass", "fused CSA compressor never runs here"),
    (Profile(gpu_arch="10.0"), "pass", "used at CP 1 (d48bd6be's gate)"),
    (Profile(gpu_arch="12.0", cp=2), "fail", "sm_90a, sm_100a, sm_103a"),
    (Profile(), "skip", "GPU arch unknown"),
])
def test_gpu_arch_rules(profile, status, text):
    profile = replace(profile, gpu_arch_source="option" if profile.gpu_arch else "unknown")
    result = run_check(gpu_checks.gpu_arch, StubContext(profile=profile))
    assert result.status.value == status and text in result.summary, result.summary


def test_gpu_arch_end_to_end_reads_the_cli_s_profile(tmp_path, bare_python):
    row = run(Env(tmp_path), bare_python, "--only", "gpu.arch", "--cp", "2", "--gpu-arch", "8.0", "--dsa-backend",
              "none").check("gpu.arch")
    assert row["status"] == "fail" and "Unsupported GPU compute capability 8.0 for CSA CP CuTe kernels" in \
        row["summary"]
    assert run(Env(tmp_path), bare_python, "--only", "gpu.arch").check("gpu.arch")["status"] == "skip"


# --- Transformer Engine --------------------------------------------------------------------------------------------

PACKING_FAIL = ("SFT sequence packing requires Transformer Engine >= 2.9.0 but got {} "
                "(TE < 2.9.0 may have convergence issues).")


@pytest.mark.parametrize("version, cp, status", [
    ("2.8.0", 2, "fail"), ("2.9.0", 2, "pass"), ("2.9.0+5b3092a", 2, "pass"), ("2.9.0.dev0+abc", 2, "fail"),
    ("2.9.0.dev0+5b3092a", 2, "pass"), ("2.10.0.dev0+f031cf8", 2, "pass"), ("2.8.0", 1, "pass"),
])
def test_te_packing_gate_compares_like_megatron(version, cp, status):
    # A source build: one `transformer_engine` distribution, which the static probe names transformer-engine.
    facts = static_answer(distributions={"transformer-engine": dist("transformer-engine", version)},
                          modules={"transformer_engine": module("/site/transformer_engine/__init__.py")})
    result = run_check(te_checks.te_version, StubContext(profile=Profile(cp=cp), facts=facts))
    assert result.status.value == status, result.summary
    if status == "fail":
        assert result.summary == PACKING_FAIL.format(version)
        # The fix test_te_packing_gate_fix_turns_green carries out.
        assert commands_of(result) == [PACKING_FIX]


PACKING_FIX = "pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.12.0'"


def test_te_packing_gate_fix_turns_green(tmp_path, bare_python):
    env = Env(tmp_path).fake("te", fake_te, "2.8.0", dists={"transformer_engine": "2.8.0"})
    row = judge_in_run(env, bare_python, "te.version", cp=2)
    assert row["status"] == "fail" and row["summary"] == PACKING_FAIL.format("2.8.0")
    assert commands(row) == [PACKING_FIX]
    assert_entry_dropped(row, "transformer_engine", env.sites["te"])
    fix_turns_green(env, bare_python, "te.version", cp=2)


def test_te_mismatched_subpackages(tmp_path, bare_python):
    env = Env(tmp_path).fake("te", fake_te, "2.16.1", dists={"transformer-engine": "2.16.1",
                                                               "transformer-engine-cu13": "2.14.0"})
    row = judge_in_run(env, bare_python, "te.version")
    assert row["status"] == "fail"
    assert row["summary"] == ("Transformer Engine package version mismatch. Found transformer-engine v2.16.1 and "
                              "transformer-engine-cu13 v2.14.0.")
    assert commands(row)[0].startswith("pip uninstall -y transformer-engine")
    fix_turns_green(env, bare_python, "te.version")


def test_te_missing_and_corrupt_metadata(tmp_path, bare_python):
    rows = judge_all(Env(tmp_path), bare_python, ["te.version", "te.import"])
    assert rows["te.version"]["status"] == "fail" and rows["te.version"]["summary"] == \
        "Transformer Engine is not installed"
    assert rows["te.import"]["status"] == "skip"

    def corrupt(site: FakeSite):
        site.dist("transformer-engine", None, metadata=b"\x00\xff garbage")
        site.file("transformer_engine/__init__.py", "")
    rows = judge_all(Env(tmp_path / "c").fake("te", corrupt), bare_python, ["te.version", "deps.metadata"])
    assert rows["te.version"]["status"] == "warn" and "METADATA is unreadable" in rows["te.version"]["summary"]
    metadata = rows["deps.metadata"]
    assert metadata["status"] == "warn" and "transformer-engine" in metadata["summary"]


TE_2_16 = static_answer(distributions={**{name: dist(name, "2.16.1") for name in (
                            "transformer-engine", "transformer-engine-cu13", "transformer-engine-torch")},
                                       "torch": dist("torch", "2.11.0")},
                        modules={"transformer_engine": module("/site/transformer_engine/__init__.py")})


@pytest.mark.parametrize("error, hint, fix", [
    ("/site/transformer_engine_torch.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "ABI mismatch",
     "pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps transformer-engine-torch==2.16.1"),
    ("Could not find shared object file for Transformer Engine torch lib.", "[pytorch] extra",
     "pip install --no-build-isolation 'transformer-engine[pytorch,core_cu13]==2.16.1'"),
])
def test_te_import_errors_are_classified_and_fixed(error, hint, fix):
    answers = {te_checks.TE_IMPORT.key: {"results": [{"target": "transformer_engine.pytorch", "ok": False,
                                                      "error": {"type": "ImportError", "message": error}}]},
               TORCH.key: {"cuda_build": "13.0"}}
    result = run_check(te_checks.te_import, StubContext(facts=TE_2_16, answers=answers))
    assert result.status.value == "fail"
    assert error in result.summary and hint in result.details
    assert "HAVE_TE=False" in result.details
    assert commands_of(result) == [fix]


def test_te_import_error_end_to_end_and_its_fix_turns_green(tmp_path, bare_python):
    """End to end for te: a library TE cannot load, whose install (the fix) makes the import succeed, as on a real
    machine."""
    error = "libcudnn_adv.so.9: cannot open shared object file: No such file or directory"
    env = Env(tmp_path).fake("torch", fake_torch).fake("te", fake_te, "2.16.1", import_error=error,
                                                       needs="nvidia_cudnn_fake")
    row = run(env, bare_python).check("te.import")
    assert row["status"] == "fail"
    assert error in row["summary"] and "cannot load cuDNN" in row["details"]
    assert "HAVE_TE=False" in row["details"]
    assert_fix_turns_green(env, bare_python, "te.import")


# --- Megatron-core -------------------------------------------------------------------------------------------------

def test_megatron_core_release_with_cp(tmp_path, bare_python):
    env = Env(tmp_path).wheel("megatron", "megatron-core-0.19.2")
    # In a full run the release is stated once, by mcore.dsv4; the dependent checks point at it.
    for dependent in ("mcore.cp-partition-mode", "mcore.config"):
        row = judge_in_run(env, bare_python, dependent, cp=2, gpu_arch="9.0")
        assert row["status"] == "skip" and row["summary"].startswith("needs mcore.dsv4 (Megatron-core 0.19.2 has no")
    # Alone, each judges for itself: the exact upstream texts a crash log would show.
    result = judge_all(env, bare_python, ["mcore.cp-partition-mode", "mcore.config"], cp=2, gpu_arch="9.0")
    cpm = result["mcore.cp-partition-mode"]
    assert cpm["status"] == "fail"
    assert ("ValueError: cp_layout='contiguous' requires PackedSeqParams.cp_partition_mode, which this Megatron-core "
            "version does not provide.") in cpm["summary"]
    assert "DSv4 THD CP requires a contiguous CP partition." in cpm["details"]
    assert "pad_between_seqs" in cpm["evidence"]["fields"]  # read from the real 0.19.2 dataclass
    dsv4 = judge(env, bare_python, "mcore.dsv4", cp=2)
    assert dsv4["status"] == "fail" and "Megatron-core 0.19.2 has no dsv4_hybrid" in dsv4["summary"]
    config = result["mcore.config"]
    assert config["status"] == "fail"
    assert "cp_partition_mode, sequence_packing_scheduler" in config["summary"]
    assert config["evidence"]["fields"]["max_seqlen_per_dp_cp_rank"].startswith("ModelParallelConfig.")
    assert "cp_partition_mode=contiguous" in config["details"]
    at_cp1 = judge(env, bare_python, "mcore.cp-partition-mode", cp=1)
    assert at_cp1["status"] == "skip" and "CP = 1" in at_cp1["summary"]
    for check_id in ("mcore.cp-partition-mode", "mcore.dsv4", "mcore.config"):
        fresh = Env(tmp_path / check_id).wheel("megatron", "megatron-core-0.19.2")
        fix_turns_green(fresh, bare_python, check_id, cp=2)


def test_megatron_dev_fake_passes_and_reports_its_branch_evidence(tmp_path, bare_python):
    """End to end for mcore: the static probe's ast summaries of a Megatron tree, through the CLI."""
    env = Env(tmp_path).fake("megatron", fake_megatron_dev)
    result = run(env, bare_python, "--cp", "2")
    dsv4 = result.check("mcore.dsv4")
    assert dsv4["status"] == "pass"
    assert "dev at fd1121b8 (reports 0.19.0)" in dsv4["summary"]
    assert "fused CSA compressor (dev >= 108cb6bc)" in dsv4["summary"]
    cpm = result.check("mcore.cp-partition-mode")
    assert cpm["status"] == "pass" and "Literal['zigzag', 'contiguous'] = 'zigzag'" in cpm["summary"]
    assert result.check("mcore.config")["status"] == "pass"


def test_megatron_variants(tmp_path, bare_python):
    kwargs = Env(tmp_path).fake("megatron", fake_megatron_dev, cp_partition_mode=False, kwargs_init=True)
    assert judge_in_run(kwargs, bare_python, "mcore.cp-partition-mode", cp=2)["status"] == "pass"
    older = Env(tmp_path / "o").fake("megatron", fake_megatron_dev, backend_knob="apply_dsa_kernel_fusion")
    row = judge_in_run(older, bare_python, "mcore.config", cp=2)
    assert row["status"] == "warn" and "apply_dsa_kernel_fusion=True" in row["summary"]
    assert judge_in_run(older, bare_python, "mcore.config", cp=2, dsa_backend="none")["status"] == "pass"


def test_undecodable_megatron_source_is_an_error_finding(tmp_path, bare_python):
    def broken(site: FakeSite):
        fake_megatron_dev(site)
        site.file("megatron/core/packed_seq_params.py", b"class PackedSeqParams:\n    x = '\xff\xfe'\n")
    row = judge_in_run(Env(tmp_path).fake("megatron", broken), bare_python, "mcore.cp-partition-mode", cp=2)
    assert row["status"] == "error" and "cannot read" in row["summary"] and not row["internal_error"]


# --- verl ----------------------------------------------------------------------------------------------------------

def test_verl_0_9_0_has_the_layout_plumbing(tmp_path, bare_python):
    """End to end for verl: the real release through the CLI; CP 1 and no verl in this process."""
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")
    row = run(env, bare_python, "--cp", "2").check("verl.cp-layout")
    assert row["status"] == "pass" and row["summary"].startswith("verl 0.9.0: contiguous CP layout (#7221)")
    assert row["evidence"]["markers"]["#7407 int16 routed experts"] is False
    assert judge_in_run(env, bare_python, "verl.cp-layout", cp=1)["status"] == "skip"
    assert judge_in_run(Env(tmp_path / "n"), bare_python, "verl.cp-layout", cp=2)["summary"] == \
        "verl is not installed"


def test_old_verl_fails_under_cp_and_its_fix_turns_green(tmp_path, bare_python):
    env = Env(tmp_path).fake("verl", fake_old_verl)
    row = judge_in_run(env, bare_python, "verl.cp-layout", cp=2)
    assert row["status"] == "fail" and "lacks the contiguous CP layout (PR #7221)" in row["summary"]
    fix_turns_green(env, bare_python, "verl.cp-layout", cp=2)


# --- kernels -------------------------------------------------------------------------------------------------------

def test_kernels(tmp_path, bare_python):
    env = Env(tmp_path)
    kernel_ids = ["kernels.flash-mla", "kernels.fast-hadamard", "kernels.triton"]
    result = judge_all(env, bare_python, [i for k in ["cudnn-fe.version", *kernel_ids] for i in builds_on(k)])
    assert result["kernels.flash-mla"]["status"] == "fail"
    # Megatron's one dependency error, each part stated by the check it belongs to
    assert "flash_mla" not in result["cudnn-fe.version"]["summary"]
    assert "not available: flash_mla (" in result["kernels.flash-mla"]["summary"]
    assert result["kernels.fast-hadamard"]["status"] == "fail"
    assert result["kernels.triton"]["status"] == "warn"
    assert judge_in_run(env, bare_python, "kernels.flash-mla", dsa_backend="none")["status"] == "skip"
    for check_id in ("kernels.flash-mla", "kernels.fast-hadamard"):
        fix_turns_green(env, bare_python, check_id)
    # The triton fix pins what torch declares; without torch it says why it has no command.
    triton = judge(env, bare_python, "kernels.triton")
    assert "torch is not installed" in triton["fixes"][0]["description"] and not triton["fixes"][0]["commands"]
    env.fake("torch", lambda site: fake_torch(site, requires=('triton==3.6.0; platform_system == "Linux"',)))
    triton = judge(env, bare_python, "kernels.triton")
    assert commands(triton) == ["pip install triton==3.6.0"]


def test_fast_hadamard_missing_with_verl_shim_is_a_warning(tmp_path, bare_python):
    env = Env(tmp_path).wheel("verl", "verl-0.9.0")
    row = judge_in_run(env, bare_python, "kernels.fast-hadamard")
    assert row["status"] == "warn" and "pure-torch shim" in row["summary"]


def test_broken_flash_mla_import(tmp_path, bare_python):
    """End to end for kernels: an import probe of a kernel package through the CLI."""
    env = Env(tmp_path).fake("flash_mla", lambda s: fake_kernel(s, "flash_mla", "flash-mla", "something_else"))
    row = run(env, bare_python).check("kernels.flash-mla")
    assert row["status"] == "fail" and "flash_mla_sparse_fwd does not load" in row["summary"]


# --- every fix a bare environment gets, applied, turns its check green ----------------------------------------------

BARE_PROFILES = [{"cp": 2, "gpu_arch": "9.0"}, {"gpu_arch": "10.0"}, {"cp": 2, "gpu_arch": "10.0"}]


@pytest.mark.slow  # a dozen environments built and judged per profile
@pytest.mark.parametrize("profile", BARE_PROFILES)
def test_every_printed_fix_turns_its_check_green_from_an_empty_environment(tmp_path, bare_python, profile):
    report = judge_all(Env(tmp_path / "probe"), bare_python, RUN_IDS, **profile)
    # The frontend's feature checks defer to cudnn-fe.version in a full run; alone, they judge for themselves.
    alone = judge_all(Env(tmp_path / "probe"), bare_python, ["cudnn-fe.csa", "cudnn-fe.dsa"], **profile)
    failing = [c for c in [*report.values(), *alone.values()] if c["status"] in NOT_GREEN and commands(c)]
    assert len(failing) >= 8, [c["id"] for c in failing]
    for c in failing:
        env = Env(tmp_path / c["id"])
        for cmd in commands(c):
            apply(env, cmd)
        after = judge(env, bare_python, c["id"], **profile)
        assert after["status"] not in NOT_GREEN, (c["id"], commands(c), after["summary"])


def test_a_plan_converges_it_never_repeats_an_install_the_check_found_done(tmp_path, bare_python):
    """Once the frontend stack is right and only torch is missing, `fix` reinstalled frontend 1.27.0 again: a pip
    step whose pins the copy the job imports already has is dropped; a pin that differs stays."""
    from probed import fix_script

    ids = builds_on("cudnn-fe.csa") + ["cudnn-fe.dsa", "tvm-ffi.version"]
    right = Env(tmp_path / "right").wheel("fe", "nvidia-cudnn-frontend-1.27.0").wheel("tvm", "apache-tvm-ffi-0.1.11")
    script = fix_script(right, bare_python, ids, gpu_arch="10.0")
    assert "torch==2.11.0" in script  # what is still missing stays: the manual torch step
    assert "nvidia-cudnn-frontend==1.27.0" not in script and "apache-tvm-ffi==0.1.11" not in script, script
    old = Env(tmp_path / "old").wheel("fe", "nvidia-cudnn-frontend-1.26.0").wheel("tvm", "apache-tvm-ffi-0.1.11")
    script = fix_script(old, bare_python, ids, gpu_arch="10.0")
    assert "nvidia-cudnn-frontend==1.27.0" in script and "apache-tvm-ffi==0.1.11" not in script, script


def test_already_met_reads_only_plain_pins():
    from dsv4_doctor.fix.steps import Command
    from dsv4_doctor.fix.plan import already_met

    have = {"nvidia-cudnn-frontend": "1.27.0", "nvidia-cutlass-dsl": "4.5.2"}
    assert already_met(Command(("pip", "install", "--force-reinstall", "--no-deps", "nvidia-cudnn-frontend==1.27.0")),
                       have)
    assert not already_met(Command(("pip", "install", "nvidia-cudnn-frontend==1.28.0")), have)
    assert not already_met(Command(("pip", "install", "nvidia-cutlass-dsl[cu13]==4.5.2")), have)  # its extra's deps
    assert not already_met(Command(("pip", "install", "nvidia-cudnn-frontend>=1.27")), have)
    assert not already_met(Command(("pip", "install", "x @ git+https://example.invalid/x@abc")), have)


def test_apply_ends_with_the_verdict_after_what_still_fails_and_what_is_left_for_a_person(tmp_path, bare_python):
    """`fix --apply`'s end, once pip has done what it can and only torch is missing: the verdict after, then each row
    that still fails, then the steps left for a person (the manual torch step named), in that order."""
    from dsv4_doctor.fix.apply import after_apply
    from probed import run_in_process

    ids = builds_on("cudnn-fe.csa") + ["cudnn-fe.dsa", "tvm-ffi.version", "torch.install"]
    right = Env(tmp_path).wheel("fe", "nvidia-cudnn-frontend-1.27.0").wheel("tvm", "apache-tvm-ffi-0.1.11")
    again = run_in_process(right, bare_python, ids, gpu_arch="10.0", smoke="off")
    lines = after_apply(again, width=400)
    assert lines[0].startswith("after:  Verdict: FAIL"), lines
    failing = lines.index(next(x for x in lines if x.startswith("still failing (")))
    left = lines.index(next(x for x in lines if x.startswith("left for you (")))
    assert 0 < failing < left, lines
    assert "torch.install" in " ".join(lines[failing:left])
    assert any("(manual)" in x and "torch.install" in x for x in lines[left + 1:]), lines
    # Each item wrapped at the output width, continuation lines indented, every word whole (redact.shorten: a cut
    # at a word, marked with an ellipsis).
    narrow = after_apply(again, width=60)
    assert all(len(x) <= 60 or " " not in x.strip() for x in narrow[1:]), [x for x in narrow if len(x) > 60]
    items = [x for x in narrow if x.startswith("  ") and not x.startswith("    ")]
    assert all(x.startswith("  step ") or x.split(":")[0].strip() in ids for x in items), (items, ids)
    words = " ".join(lines).split()
    for item in items:  # the words of each item are the unwrapped line's words (none cut in two)
        assert all(w in words or w.endswith("…") for w in item.split()), item
    long = next(c for c in again.checks if c.id == "cudnn-fe.dsa").summary.split(". ")[0]
    assert len(long) > 160  # the summary the raw [:160] cut mid-word ("do not load e")
    said = " ".join(x.strip() for x in narrow[narrow.index(next(x for x in narrow if "cudnn-fe.dsa:" in x)):])
    shown = said.split("…")[0].split("cudnn-fe.dsa: ", 1)[1]
    assert shown.endswith(tuple("abcdefghijklmnopqrstuvwxyz)")) and long.startswith(shown), said
    assert long[len(shown)] in " ", (shown, long)  # the cut falls between words
