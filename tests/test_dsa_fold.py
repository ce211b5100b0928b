"""The DSA backend of a verl job as Megatron folds it: Megatron-Bridge's DeepSeek-V4 provider always writes
`apply_dsa_kernel_fusion`, verl applies the command's `override_transformer_config` after it, and Megatron d48bd6be's
`TransformerConfig.__post_init__` folds the switch into `dsa_kernel_backend` (raise, override or keep). The doctor's
rows, and every job-setting fix it prints, are checked against Megatron's own config class run on the CPU
(tests/megatron_config.py: one subprocess for the module, every case batched)."""

from __future__ import annotations

import shlex
import sys

import pytest

from conftest import run_doctor
from fakes import Env, fake_flash_mla

from dsv4_doctor.checks.job.dsa import backend_none_fix
from dsv4_doctor.job.bridge_rule import fold
from dsv4_doctor.job.profile import fold_bridge, job_profile
from dsv4_doctor.model.core import Profile

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_job import job_rows_in_process  # noqa: E402

OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"
VERL = ["python3", "-m", "verl.trainer.main_ppo", "model_engine=megatron",
        "actor_rollout_ref.actor.megatron.context_parallel_size=2"]
SWITCHES = {"not stated": None, "True": "True", "False": "False", "null": "null"}
BACKENDS = {"not stated": None, "none": "none", "cudnn": "cudnn"}


def command(switch: str | None, backend: str | None) -> list[str]:
    return VERL + ([f"++{OTC}.apply_dsa_kernel_fusion={switch}"] if switch else []) + \
        ([f"++{OTC}.dsa_kernel_backend={backend}"] if backend else [])


def settings(argv: list[str]) -> dict:
    """The actor's override_transformer_config as verl passes it on: each `++key=value` in order, the last one
    winning (Hydra), `null` None, True/False bools. Read here, not by the doctor's reader."""
    out: dict = {}
    for arg in argv:
        head, sep, value = arg.partition("=")
        if sep and head.startswith(f"++{OTC}."):
            out[head[len(f"++{OTC}."):]] = {"True": True, "False": False, "null": None}.get(value, value)
    return out


def megatron_case(argv: list[str], cc: str, bridge_switch: bool) -> dict:
    """Megatron's input for the job: the bridge's switch, then the command's overrides over it (verl's order)."""
    case = {"apply_dsa_kernel_fusion": bridge_switch, **settings(argv)}
    return {"cc": [int(part) for part in cc.split(".")], **case}


def fix_lines(row: dict) -> list[list[str]]:
    """Each printed job-setting fix as the arguments it adds (its indented lines)."""
    return [[line.strip() for line in fix["description"].splitlines()[1:] if line.startswith("  ")]
            for fix in row["fixes"] if fix["description"].count("\n")]


# --- the fold, with the bridge's decision given as Session.resolve gives it (fast) ----------------------------------

def test_the_bridge_s_switch_is_folded_into_a_stated_backend():
    """The bridge decides whenever the command states no switch, even where it states the backend: on an H100 its
    False makes a stated cudnn raise; on Blackwell its True turns a stated none into cudnn."""
    assert fold(False, "cudnn") == (None, fold(False, "cudnn")[1]) and "Conflicting" in str(fold(False, "cudnn")[1])
    assert fold(True, "none") == ("cudnn", None) and fold(None, "cudnn") == ("cudnn", None)
    assert fold(False, "none") == ("none", None) and fold(True, "cudnn") == ("cudnn", None)

    def resolved(argv: list[str], switch: bool | None) -> Profile:
        pending = job_profile(Profile(gpu_arch="9.0", gpu_arch_source="option"), argv, None, None)
        assert pending.job is not None and pending.job.decisions.dsa_backend_pending
        return fold_bridge(pending, {}, (switch, "as given"), switch is not None)

    h100 = resolved(command(None, "cudnn"), False)
    assert h100.dsa_backend == "cudnn" and h100.job.decisions.dsa_backend_stated  # Megatron stops: checked as cudnn
    row = _row(h100)
    assert row.status.value == "fail" and "Conflicting DSA kernel controls" in row.summary, row.summary
    assert "Megatron-Bridge's DeepSeek-V4 provider writes apply_dsa_kernel_fusion=False" in row.summary
    blackwell = resolved(command(None, "none"), True)
    assert blackwell.dsa_backend == "cudnn"  # the environment checks follow what runs
    row = _row(blackwell)
    assert row.status.value == "warn" and "the job runs cudnn, not the none it states" in row.summary
    unknown = resolved(command(None, "cudnn"), None)
    row = _row(unknown)
    assert unknown.dsa_backend == "cudnn" and row.status.value == "warn" and "as given" in row.summary


def _row(profile: Profile):
    from dsv4_doctor.checks.job import job_checks
    from dsv4_doctor.testing import StubContext, run_check

    return run_check(job_checks.job_dsa_backend, StubContext(profile=profile))


def test_the_tilelang_and_conflict_fixes_are_forms_megatron_accepts_through_verl():
    """The fixes never drop the switch (the bridge writes it again) nor change tilelang to cudnn alone (the bridge's
    False on an H100 makes that the conflict): the switch, or the backend with the switch null."""
    tile = job_rows_in_process(command(None, "tilelang"), gpu_arch="9.0")["job.dsa-backend"]
    assert tile["status"] == "fail" and fix_lines(tile) == [[f"++{OTC}.dsa_kernel_backend=cudnn",
                                                             f"++{OTC}.apply_dsa_kernel_fusion=null"]]
    clash = job_rows_in_process(command("False", "cudnn"), gpu_arch="9.0")["job.dsa-backend"]
    assert fix_lines(clash) == [[f"++{OTC}.apply_dsa_kernel_fusion=null"], [f"++{OTC}.apply_dsa_kernel_fusion=True"]]
    profile = job_profile(Profile(), command(None, "cudnn"), None, None)
    assert fix_lines({"fixes": [backend_none_fix(profile).to_dict()]}) == [[
        f"++{OTC}.dsa_kernel_backend=none", f"++{OTC}.apply_dsa_kernel_fusion=null"]]


# --- against Megatron's own config class, the bridge deciding through the CLI (slow) ---------------------------------

@pytest.mark.slow  # Megatron's config classes (one subprocess, about 8 s) and six doctor runs against a real bridge
def test_every_switch_and_backend_and_every_fix_is_what_megatron_does(tmp_path):
    from megatron_config import megatron_configs

    env = (Env(tmp_path).wheel("mbridge", "megatron-bridge-0.6.2").wheel("verl", "verl-0.9.0")
           .wheel("fe", "nvidia-cudnn-frontend-1.27.0").fake("flash_mla", fake_flash_mla))
    doctor: list[tuple[str, list[str], str, dict, bool]] = []  # (label, argv, cc, row, the bridge's switch)
    for cc in ("9.0", "10.0"):
        for backend in BACKENDS.values():  # the bridge decides: the real 0.6.2 rule, its imports tried for real
            argv = command(None, backend)
            run = run_doctor("check", "-f", "json", "--no-smoke", "--only", "job.dsa-backend", "--gpu-arch", cc,
                             "--job-args", shlex.join(argv), sites=tuple(env.sites.values()))
            assert run.returncode in (0, 1), run.stderr
            row, prof = run.report["checks"][0], run.report["profile"]
            switch = prof["job"]["dsa_backend_rule"]["switch"]
            assert switch is (cc == "10.0"), prof["job"]  # on with the kernels on Blackwell, off on Hopper
            doctor.append((f"bridge {cc} {backend}", argv, cc, dict(row, backend=prof["dsa_backend"]), switch))
        for name, switch_text in SWITCHES.items():  # the command decides: no bridge asked
            if switch_text is None:
                continue
            for backend in BACKENDS.values():
                argv = command(switch_text, backend)
                rows = job_rows_in_process(argv, gpu_arch=cc)
                doctor.append((f"command {cc} {name} {backend}", argv, cc,
                               dict(rows["job.dsa-backend"], backend=rows["_profile"]["dsa_backend"]), cc == "10.0"))
    # Each fix followed: its arguments added to the command (Hydra: the last override wins), checked again.
    followed = []
    for label, argv, cc, row, switch in doctor:
        for lines in fix_lines(row):
            again = job_rows_in_process(argv + lines, gpu_arch=cc)
            followed.append((f"{label} + {lines}", argv + lines, cc,
                             dict(again["job.dsa-backend"], backend=again["_profile"]["dsa_backend"]), switch))
    none_argv = command(None, "cudnn")
    none_fix = backend_none_fix(job_profile(Profile(), none_argv, None, None)).to_dict()
    for cc, switch in (("9.0", False), ("10.0", True)):
        argv = none_argv + fix_lines({"fixes": [none_fix]})[0]
        rows = job_rows_in_process(argv, gpu_arch=cc)
        followed.append((f"backend none fix {cc}", argv, cc, dict(rows["job.dsa-backend"],
                                                                  backend=rows["_profile"]["dsa_backend"]), switch))
    cases = doctor + followed
    verdicts = megatron_configs([megatron_case(argv, cc, switch) for _, argv, cc, _, switch in cases])
    expected = {("9.0", "False", "cudnn"): "raise", ("9.0", "True", "none"): "cudnn"}
    for (label, argv, cc, row, _), megatron in zip(cases, verdicts, strict=True):
        if "error" in megatron:
            assert "Conflicting DSA kernel controls" in megatron["message"], (label, megatron)
            assert row["status"] == "fail" and megatron["message"] in row["summary"], (label, row["summary"])
            assert row["fixes"], label
        else:
            assert row["status"] != "fail" and row["backend"] == megatron["backend"], (label, row, megatron)
        key = (cc, *(str(v) for v in (settings(argv).get("apply_dsa_kernel_fusion", "-"),
                                      settings(argv).get("dsa_kernel_backend", "-"))))
        if key in expected and label.startswith("command"):
            assert ("raise" if "error" in megatron else megatron["backend"]) == expected[key], label
    # The measured outcomes: the bridge's False + cudnn raises on Hopper; its True turns none into cudnn.
    by_label = {label: (row, megatron) for (label, *_, row, _), megatron in zip(cases, verdicts, strict=True)}
    assert "error" in by_label["bridge 9.0 cudnn"][1] and by_label["bridge 10.0 none"][1] == {"backend": "cudnn"}
    assert by_label["bridge 10.0 none"][0]["status"] == "warn"
    for label, _, _, row, _ in followed:  # a followed fix passes the row, and Megatron accepts it
        assert row["status"] == "pass", (label, row["summary"])
    assert len(followed) >= 6
