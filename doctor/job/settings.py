"""The job's settings as a plan section: the full `CP_ARGS` in the command's own syntax and the environment
variables to set in the job script. They are settings for the job, never commands: the fix script prints them as
comments, `--apply` never runs them, and the report keeps them under their own key (`job_settings`), apart from the
checks' argv fixes.

`CP_ARGS` is verl's DSv4 example's block (examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh @1dda039b, added
in verl #7297): cp_partition_mode=contiguous, sequence_packing_scheduler=dp_balanced and max_seqlen_per_dp_cp_rank.
The example computes the last as `$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) / ACTOR_CP))`, shell division that
rounds down: when the sum is not a multiple of CP, CP x the value is shorter than the longest sample and Megatron
asserts `total_cp_ranks * max_seqlen_per_dp_cp_rank >= seq_length`. The value here is rounded up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dataclasses import replace

from .keys import line_to_add
from .model import Job, Setting, is_interpolation

CP_SETTINGS = (("cp_partition_mode", "contiguous"), ("sequence_packing_scheduler", "dp_balanced"))
ROUNDING = ("verl's example script computes (max_prompt_length + max_response_length) / CP with shell division, "
            "which rounds down: when the sum is not a multiple of CP the longest sample does not fit; rounded up here")


def _int(setting: Setting | None) -> int | None:
    value = setting.value if setting is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def needed_length(job: Job) -> tuple[int | None, str]:
    """The longest sample the job's command states, and how it was read."""
    if job.kind == "megatron":
        flag = "dataset.seq_length" if job.syntax == "bridge" else "--seq-length"
        length = _int(job.common.get("seq_length"))
        return length, flag if length is not None else f"{flag} not stated"
    if job.kind not in ("verl", "megatron"):
        return None, "the lengths are not known (the command is not read)"
    if job.trainer == "sft":
        return None, "the SFT trainer's longest packed sample is not read from its config"
    prompt, response = _int(job.common.get("max_prompt_length")), _int(job.common.get("max_response_length"))
    if prompt is not None and response is not None:
        return prompt + response, f"{prompt} + {response} (data.max_prompt_length + data.max_response_length)"
    return None, "data.max_prompt_length and data.max_response_length not both stated as numbers"


def max_seqlen(needed: int | None, cp: int) -> int | None:
    """max_seqlen_per_dp_cp_rank: the longest sample over CP ranks, rounded up."""
    return -(-needed // cp) if needed is not None and cp > 0 else None  # exact: integers of any size


def _stated(settings: dict[str, Setting], name: str) -> Any:
    s = settings.get(name)
    return s.value if s is not None else None


def _covered(stated: Any, wanted: Any) -> bool:
    """Whether a stated value does what the CP_ARGS line asks: the same value, or for max_seqlen_per_dp_cp_rank
    (wanted: the rounded-up length, or "N" when the lengths are not stated) any whole number at least that long
    (job.cp-args judges it against the lengths)."""
    if stated == wanted:
        return True
    if isinstance(stated, bool) or not isinstance(stated, int) or stated < 1:
        return False
    return wanted == "N" or (isinstance(wanted, int) and not isinstance(wanted, bool) and stated >= wanted)


def cp_args(job: Job, cp: int) -> dict:
    """The full CP_ARGS for a job with CP > 1, per checked role (verl's ref inherits the actor's): lines, which of
    them the command lacks, which it writes as a variable the doctor cannot resolve (`not_known`, only when there
    are some: whether it lacks them is not known), and how max_seqlen_per_dp_cp_rank was computed."""
    needed, needed_from = needed_length(job)
    value = max_seqlen(needed, cp)
    syntax = job.syntax if job.syntax in ("hydra", "megatron", "bridge") else "hydra"
    shown_job = replace(job, syntax=syntax)
    roles = [r for r in job.checked_roles() if r != "ref"] or ["actor"]
    lines, missing, not_known = [], [], []
    for role in roles:
        settings = job.effective(role)
        for name, wanted in (*CP_SETTINGS, ("max_seqlen_per_dp_cp_rank", value if value is not None else "N")):
            line = line_to_add(shown_job, role, name, wanted)
            lines.append(line)
            # The Megatron-LM CLI derives max_seqlen_per_dp_cp_rank from --seq-length: not missing there.
            derived = syntax == "megatron" and name == "max_seqlen_per_dp_cp_rank"
            if is_interpolation(_stated(settings, name)):
                not_known.append(line)
            elif not derived and not _covered(_stated(settings, name), wanted):
                missing.append(line)
    how = (f"max_seqlen_per_dp_cp_rank = ceil({needed} / {cp}) = {value}, from {needed_from}" if value is not None
           else f"max_seqlen_per_dp_cp_rank = N = ceil((max_prompt_length + max_response_length) / {cp}): "
                f"{needed_from}")
    out = {"syntax": syntax, "cp": cp, "lines": lines, "missing": missing, "max_seqlen_per_dp_cp_rank": value,
           "computed": how}
    if not_known:
        out["not_known"] = not_known
    if syntax == "hydra":
        out["rounding"] = ROUNDING
    elif syntax == "megatron":
        out["computed"] = how + " (the Megatron-LM CLI derives it from --seq-length when it is not given)"
    return out


def exports(env_row: dict | None) -> list[str]:
    """The `export NAME=value` lines job.env asks for (its evidence names them)."""
    evidence = env_row.get("evidence") if isinstance(env_row, dict) else None
    wanted = evidence.get("exports") if isinstance(evidence, dict) else None
    return [str(line) for line in wanted if isinstance(line, str)] if isinstance(wanted, list) else []


def section(job: Job | None, given: Any, checks: list[dict]) -> dict | None:
    """The report's `job_settings`: for a job command (profile.job; `given`: profile.cp), the CP_ARGS it needs
    (CP > 1, or a CP not known) and the environment lines job.env asks for; None without a job command."""
    if job is None:
        return None
    cp: int = given if isinstance(given, int) and not isinstance(given, bool) and given > 0 else 1
    cp_known = job.decisions is None or job.decisions.cp_known
    rows = {c.get("id"): c for c in checks if isinstance(c, dict)}
    out: dict = {"exports": exports(rows.get("job.env")), "notes": []}
    if job.kind not in ("verl", "megatron"):
        out["command_read"] = False
    if not cp_known:
        out["notes"].append("the job's CP is not known (the command hides it, or job.config rejects its value): "
                            f"CP_ARGS are shown for CP {cp}; state it with --cp N")
    if cp > 1 or not cp_known:
        out["cp_args"] = cp_args(job, cp)
    else:
        out["notes"].append("CP = 1: no CP settings needed")
    return out


def comment_lines(settings: Mapping[str, Any] | None) -> list[str]:
    """The section as text lines (the fix script makes them comments; the text report indents them)."""
    if not settings:
        return []
    lines: list[str] = []
    block = settings.get("cp_args") if isinstance(settings.get("cp_args"), dict) else None
    if block is not None:
        where = "the training command's Hydra overrides" if block.get("syntax") == "hydra" else \
            "the training command's Megatron-LM flags"
        lines.append(f"CP_ARGS for CP {block.get('cp')}, in {where} (the full block; verl's DSv4 example):")
        lines += [f"  {line}" for line in block.get("lines") or []]
        missing = block.get("missing") or []
        if settings.get("command_read") is False:
            lines.append("whether the command states them is not known (it is not read)")
        else:
            unknown = block.get("not_known") or []
            lines.append((f"the command lacks {len(missing)} of them" if missing else
                          "the command states all of them" if not unknown else "the command states the others")
                         + (f"; it writes {len(unknown)} as a variable the doctor cannot resolve (not known: pass "
                            "the expanded command)" if unknown else ""))
        lines.append(str(block.get("computed")))
        if block.get("rounding"):
            lines.append(str(block["rounding"]))
    exported = settings.get("exports") or []
    if exported:
        lines.append("In the job script, before the training command:")
        lines += [f"  {line}" for line in exported]
    lines += [str(n) for n in settings.get("notes") or []]
    return lines
