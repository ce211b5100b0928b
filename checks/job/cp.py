"""job.cp-args' rules for one role of the job: DSv4 CP's contiguous layout, a sequence-packing scheduler, and a
max_seqlen_per_dp_cp_rank that holds the longest sample; and whether verl (#6555) sets the first two itself."""

from __future__ import annotations

from dataclasses import dataclass

from dsv4_doctor.api import ENGINE_MAX_SEQLEN, Context, Fix, Job, Setting, role_head

from .settings import (add_setting, config_files, data_parallel, first_unresolved, int_value, is_stated, is_unresolved,
                       maybe_in_file, not_known, remote_of, role_cp, role_label, value_of, written)
from .verdict import Found
from ..verl_checks import ENGINE as VERL_ENGINE
from ..verl_checks import markers as verl_markers

DYNAMIC_CP = "#6555 dynamic CP (default_dynamic_cp)"
SCHEDULERS = ("dp_balanced", "default_dynamic_cp")

# Megatron's texts (d48bd6be), quoted in the findings.
M1 = "DSv4 Hybrid with context parallelism requires cp_partition_mode='contiguous'."
M4 = ("cp_partition_mode='contiguous' with context parallelism requires THD inputs from a sequence_packing_scheduler; "
      "BSHD inputs are not supported.")
VERL_DYNAMIC = "max_seqlen_per_dp_cp_rank must be a positive integer when dynamic_context_parallel is enabled"


def verl_sets_cp(ctx: Context, job: Job) -> tuple[bool, str]:
    """Whether verl (#6555) sets the DSv4 CP settings itself, and what that was decided from."""
    if job.kind != "verl":
        return False, "a Megatron-LM command: nothing sets them for it"
    static = ctx.static
    if not static.module("verl").get("found"):
        return False, "verl is not installed in the inspected interpreter, so nothing is known to set them"
    has = verl_markers(static)[DYNAMIC_CP]
    version = static.version("verl") or "(no metadata)"
    if has:
        return True, f"verl {version} has PR #6555 (\"default_dynamic_cp\" in {VERL_ENGINE})"
    return False, f"verl {version} lacks PR #6555, which sets them for deepseek_v4"


def _per_rank(needed_from: str) -> str:
    return f"({needed_from}) / CP" if "+" in needed_from else f"{needed_from} / CP"


def _needed_length(job: Job) -> tuple[int | None, str]:
    if job.kind == "megatron":
        flag = "dataset.seq_length" if job.syntax == "bridge" else "--seq-length"
        s = job.common.get("seq_length")
        return (int_value(s), flag) if s else (None, f"{flag} not stated")
    p, r = int_value(job.common.get("max_prompt_length")), int_value(job.common.get("max_response_length"))
    if p is not None and r is not None:
        return p + r, "data.max_prompt_length + data.max_response_length"
    return None, "data.max_prompt_length and data.max_response_length not both stated as numbers"


def judge_role(job: Job, role: str, auto: bool, found: Found, rows: dict) -> None:
    """One role's CP settings (`auto`: verl sets the layout and the scheduler itself); its evidence row goes into
    `rows`."""
    fails, warns, notes, fixes, unknown = found.fails, found.warns, found.notes, found.fixes, found.unknown
    in_file = maybe_in_file(job)
    st = job.effective(role)
    cp = role_cp(job, st)
    lab = role_label(job, role)
    row: dict = {"cp": cp}
    rows[role] = row
    if cp is None:
        # What the CP rules ask (and the max_seqlen_per_dp_cp_rank line) depends on the CP: never judged on a guess.
        consequence = ", so the CP settings it needs are not judged (--cp N gives the CP)"
        unknown.append(not_known(lab, "context_parallel_size", st["cp"], consequence) if "cp" in st
                       else f"{lab}context_parallel_size not stated{in_file}{consequence}")
        return
    if cp == 1 and not value_of(st, "dynamic_context_parallel"):
        notes.append(f"{lab}CP = 1: no CP settings needed")
        return
    dynamic_known = not is_unresolved(st, "dynamic_context_parallel")
    if not dynamic_known:
        # Dynamic CP picks the scheduler and, through verl, the max_seqlen_per_dp_cp_rank that is read; at CP 1 it
        # alone decides whether the CP settings apply.
        unknown.append(not_known(lab, "dynamic_context_parallel", st["dynamic_context_parallel"],
                                 ", so whether the job needs the CP settings is not known" if cp == 1 else
                                 ", so the scheduler and the max_seqlen_per_dp_cp_rank that count are not known"))
        if cp == 1:
            return
    mode, sched = value_of(st, "cp_partition_mode"), value_of(st, "sequence_packing_scheduler")
    mode_known = not is_unresolved(st, "cp_partition_mode")
    sched_known = not is_unresolved(st, "sequence_packing_scheduler")
    if dynamic_known and value_of(st, "dynamic_context_parallel") and sched is None:
        sched = "default_dynamic_cp"  # Megatron's MPC sets it for dynamic CP
    if sched is None and value_of(st, "use_varlen_dataset"):
        sched = "dp_balanced"  # --use-varlen-dataset auto-selects it
    if auto:
        if not mode_known:  # verl's contiguous replaces it, but whether it said otherwise is not known
            unknown.append(not_known(lab, "cp_partition_mode", st["cp_partition_mode"],
                                     " (verl sets contiguous after the overrides either way)"))
        elif is_stated(st, "cp_partition_mode") and mode != "contiguous":
            warns.append(f"{lab}cp_partition_mode={mode} is overridden by verl, which sets contiguous for "
                         "deepseek_v4 after copying the overrides")
        if not sched_known:
            unknown.append(not_known(lab, "sequence_packing_scheduler", st["sequence_packing_scheduler"],
                                     " (verl sets default_dynamic_cp after the overrides either way)"))
        elif sched is not None and sched != "default_dynamic_cp":
            warns.append(f"{lab}sequence_packing_scheduler={sched} is replaced by verl's default_dynamic_cp "
                         "(set after the overrides): max_seqlen_per_dp_cp_rank then counts DP x CP ranks")
        if not is_stated(st, "cp_partition_mode") or not is_stated(st, "sequence_packing_scheduler"):
            notes.append(f"{lab}verl will use cp_partition_mode=contiguous and "
                         "sequence_packing_scheduler=default_dynamic_cp")
        sched, sched_known = "default_dynamic_cp", True
    else:
        if not mode_known:
            unknown.append(not_known(lab, "cp_partition_mode", st["cp_partition_mode"]))
        elif mode is None and in_file:
            unknown.append(f"{lab}cp_partition_mode not stated{in_file}")
        elif mode != "contiguous":
            what = "not stated (Megatron's default is zigzag)" if mode is None else f"{mode}"
            fails.append(f"{lab}cp_partition_mode is {what}: Megatron stops with \"{M1}\"")
            fixes.append(add_setting(job, role, "cp_partition_mode", "contiguous", "DSv4 CP needs the contiguous "
                                     "layout", written(st, "cp_partition_mode")))
        if not sched_known:
            unknown.append(not_known(lab, "sequence_packing_scheduler", st["sequence_packing_scheduler"]))
        elif sched is None and in_file:
            unknown.append(f"{lab}sequence_packing_scheduler not stated{in_file}")
        elif sched is None and not dynamic_known:
            pass  # dynamic CP would pick default_dynamic_cp: said with dynamic_context_parallel above
        elif sched is None:
            fails.append(f"{lab}no sequence_packing_scheduler: Megatron stops with \"{M4}\"")
            fixes.append(add_setting(job, role, "sequence_packing_scheduler", "dp_balanced",
                                     "as verl's DSv4 example sets it"))
        elif sched not in SCHEDULERS:
            fails.append(f"{lab}sequence_packing_scheduler={sched}: Megatron stops with \"Unsupported scheduler: "
                         f"{sched}. Available schedulers: {list(SCHEDULERS)}\"")
            fixes.append(add_setting(job, role, "sequence_packing_scheduler", "dp_balanced", "a supported scheduler",
                                     written(st, "sequence_packing_scheduler")))
        if mode == "contiguous" and sched in SCHEDULERS:
            notes.append(f"{lab}CP {cp}: cp_partition_mode=contiguous, sequence_packing_scheduler={sched}")
    row.update(cp_partition_mode=mode, scheduler=sched)
    if not dynamic_known:
        return  # which max_seqlen_per_dp_cp_rank verl reads, and against how many ranks, is not known
    _max_seqlen(CpRole(job, role, st, cp, sched if sched_known else None, row, sched_known), found)


def _positive(value) -> bool:
    """A positive integer as verl's McoreEngineConfig checks it (an int, not a bool, > 0)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _seqlen_fix(job, role, name, needed, needed_from, cp, now) -> Fix:
    """The line that states max_seqlen_per_dp_cp_rank (`name`: the engine's or the transformer config's), rounded
    up (verl's example rounds down)."""
    if needed:
        return add_setting(job, role, name, -(-needed // cp), _per_rank(needed_from) + ", rounded up", now)
    return add_setting(job, role, name, "N", f"N = {_per_rank('the longest sample')}, rounded up; {needed_from}", now)


@dataclass
class CpRole:
    """One role as job.cp-args judges its max_seqlen_per_dp_cp_rank; `row` is its evidence."""

    job: Job
    role: str
    settings: dict[str, Setting]  # as its config sees them (Job.effective)
    cp: int
    scheduler: str | None  # the one Megatron will use
    row: dict
    scheduler_known: bool = True  # False: the command writes it as a variable the doctor cannot resolve


def _max_seqlen(r: CpRole, found: Found) -> None:
    job, role, st, cp, sched, row = r.job, r.role, r.settings, r.cp, r.scheduler, r.row
    fails, warns, notes, fixes, unknown = found.fails, found.warns, found.notes, found.fixes, found.unknown
    lab = role_label(job, role)
    needed, needed_from = _needed_length(job)
    name = "max_seqlen_per_dp_cp_rank"  # override_transformer_config's / --max-seqlen-per-dp-cp-rank
    if job.kind == "verl":
        engine_key = f"{role_head(role)}max_seqlen_per_dp_cp_rank"
        engine = st.get(ENGINE_MAX_SEQLEN)
        if value_of(st, "dynamic_context_parallel") is True:
            # verl validates the engine's value (engine.py L229-236) and writes it over the transformer config's
            # (transformer_impl.py L303-311): the override_transformer_config value does nothing here.
            if is_stated(st, name):
                notes.append(f"{lab}override_transformer_config.max_seqlen_per_dp_cp_rank={written(st, name)} is "
                             f"replaced by verl with {engine_key} (dynamic CP)")
            name = ENGINE_MAX_SEQLEN
            if engine is None and config_files(job):
                unknown.append(f"{lab}{engine_key} not stated with dynamic_context_parallel{maybe_in_file(job)}")
                return
            if engine is None or (not is_unresolved(st, name) and not _positive(engine.value)):
                what = "not stated" if engine is None else f"={engine.raw!r}, not a positive integer,"
                fails.append(f"{lab}{engine_key} {what} with dynamic_context_parallel: verl stops with "
                             f"\"{VERL_DYNAMIC}\"")
                fixes.append(_seqlen_fix(job, role, name, needed, needed_from, cp, written(st, name)))
                row.update(max_seqlen_per_dp_cp_rank=None, max_seqlen_from=engine_key, needed=needed)
                return
        elif engine is not None:
            # Without dynamic CP verl does not read the engine's value: Megatron gets the transformer config's.
            text = (f"{lab}{engine_key}={engine.raw} is read by verl only with dynamic_context_parallel; "
                    "Megatron gets override_transformer_config.max_seqlen_per_dp_cp_rank")
            if is_stated(st, name):
                notes.append(text)
            else:
                warns.append(text + ", which the command does not state")
    value = int_value(st, name)
    row.update(max_seqlen_per_dp_cp_rank=value, needed=needed)
    if not is_stated(st, name):
        if job.syntax == "megatron":
            notes.append(f"{lab}max_seqlen_per_dp_cp_rank not stated (the Megatron-LM CLI derives it from "
                         "--seq-length)")
        elif cp > 1 and config_files(job):
            unknown.append(f"{lab}max_seqlen_per_dp_cp_rank not stated{maybe_in_file(job)}")
        elif cp > 1:
            # verl's DSv4 example states it in CP_ARGS; the line to add is the example's, rounded up.
            warns.append(f"{lab}max_seqlen_per_dp_cp_rank not stated: verl's DSv4 example sets it in CP_ARGS to "
                         "the longest sample / CP")
            fixes.append(_seqlen_fix(job, role, name, needed, needed_from, cp, None))
        else:
            notes.append(f"{lab}max_seqlen_per_dp_cp_rank: not stated")
        return
    if is_unresolved(st, name):
        unknown.append(not_known(lab, "max_seqlen_per_dp_cp_rank", st[name]))
        return
    if value is None or value < 1:
        fails.append(f"{lab}max_seqlen_per_dp_cp_rank={written(st, name)!r} is not a positive whole number")
        fixes.append(_seqlen_fix(job, role, name, needed, needed_from, cp, written(st, name)))
        return
    if needed is None:
        length = first_unresolved(job.common, "seq_length", "max_prompt_length", "max_response_length")
        if length is not None:
            unknown.append(not_known(lab, *length, f", so whether max_seqlen_per_dp_cp_rank={value} covers the "
                                     "longest sample is not known"))
            return
        notes.append(f"{lab}max_seqlen_per_dp_cp_rank={value}; whether it covers the longest sample is unknown: "
                     f"{needed_from}")
        return
    if not r.scheduler_known:
        # dp_balanced counts CP ranks and default_dynamic_cp DP x CP: CP ranks are the fewest either counts.
        if value * cp < needed:
            unknown.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x CP {cp} = {value * cp} < {needed} "
                           f"({needed_from}): whether that fits depends on the scheduler (dp_balanced counts CP "
                           "ranks, default_dynamic_cp DP x CP), which is not known here")
            return
        ranks, how = cp, f"CP = {cp} ranks (the fewest any scheduler counts)"
    elif sched == "default_dynamic_cp":
        dp, why = data_parallel(job, st, cp)
        if dp is None and value * cp < needed:
            unknown.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x CP {cp} = {value * cp} < {needed} "
                           f"({needed_from}); default_dynamic_cp counts DP x CP ranks, and DP is not known ({why})")
            return
        if dp is None:
            ranks, how = cp, f"CP = {cp} ranks (default_dynamic_cp counts DP x CP, DP not known: {why})"
        else:
            ranks, how = dp * cp, f"DP x CP = {dp * cp} ranks (default_dynamic_cp)"
    else:
        ranks, how = cp, f"CP = {cp} ranks ({sched or 'scheduler not stated'})"
    row.update(ranks=ranks)
    if value * ranks < needed:
        fails.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x {how} = {value * ranks} < {needed} ({needed_from}): "
                     "the longest sample does not fit, and Megatron asserts total_cp_ranks * "
                     "max_seqlen_per_dp_cp_rank >= seq_length")
        fixes.append(add_setting(job, role, name, -(-needed // cp), _per_rank(needed_from), written(st, name)))
    else:
        notes.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x {how} = {value * ranks} >= {needed}")


def verl_sets_cp_here(ctx: Context, job) -> tuple[bool, str]:
    """Whether verl (#6555) sets the DSv4 CP settings itself; on a remote host its verl is not known here, so the
    settings must be explicit (as without #6555)."""
    remote = remote_of(job)
    if remote and job.kind == "verl":
        return False, (f"the job runs after `{remote}`: whether the remote host's verl has PR #6555 (which sets them "
                       "for deepseek_v4) is not known here, so they must be explicit")
    return verl_sets_cp(ctx, job)
