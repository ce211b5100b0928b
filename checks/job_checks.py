"""The job's own settings, read from its command line (`preflight -- CMD`, `check --job-args`): what Megatron's
config validation and verl's engine would reject after the cluster was allocated and the model loaded.

These checks run only when job arguments are given (Check.only_with = "job"). Each failure quotes the upstream error it
prevents and gives the exact argument to add, in the syntax the command already uses; a value the command does not
state is "not stated", never guessed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from dsv4_doctor.job.keys import ENGINE_MAX_SEQLEN, VERL_ROLES, line_to_add
from dsv4_doctor.job.model import Job, Setting, is_interpolation
from dsv4_doctor.api import check
from dsv4_doctor.model import Context, Finding, Fix, Phase, Profile, Result, Source, Status, passed, skipped, warned
from dsv4_doctor.probes import StaticRequest
from dsv4_doctor.job.settings import ROUNDING
from dsv4_doctor.job.shape import entry_shown

from ._upstream import EAV, gh, mlm, pypi
from .verl_checks import ENGINE as VERL_ENGINE
from .verl_checks import STATIC as VERL_STATIC
from .verl_checks import markers as verl_markers

TC = "megatron/core/transformer/transformer_config.py"
MPC = "megatron/core/model_parallel_config.py"
DYNAMIC_CP = "#6555 dynamic CP (default_dynamic_cp)"
SCHEDULERS = ("dp_balanced", "default_dynamic_cp")
STATIC = StaticRequest(distributions=VERL_STATIC.distributions, modules=(*VERL_STATIC.modules, "deep_ep"),
                       sources=VERL_STATIC.sources, contains=VERL_STATIC.contains)

# Megatron's texts (d48bd6be), quoted in the findings.
M1 = "DSv4 Hybrid with context parallelism requires cp_partition_mode='contiguous'."
M4 = ("cp_partition_mode='contiguous' with context parallelism requires THD inputs from a sequence_packing_scheduler; "
      "BSHD inputs are not supported.")
M6 = "DSv4 Hybrid Attention only supports TP size 1."
M10 = ("DSv4 with fused DSA and dense indexer loss is not supported on SM90 because the cuDNN Frontend SM90 dense DSA "
       "kernels are not reliable for this path. Use sparse indexer loss or set dsa_kernel_backend='none'.")
DISPATCH = "sequence_packing only supports moe_token_dispatcher_type in ('alltoall', 'flex'), got '{}'"
VERL_DYNAMIC = "max_seqlen_per_dp_cp_rank must be a positive integer when dynamic_context_parallel is enabled"


@dataclass
class Found:
    """What a job check found across the job's roles; `verdict` makes its closing finding."""

    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # what the command leaves not known
    notes: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)


def verdict(found: Found, evidence: dict, tail: Sequence[str] = (), passed_text: str = "") -> list[Finding]:
    """The job checks' one closing rule: the failures, else the warnings, lead the summary, with whatever ranks
    below them as details; anything not known skips the row (saying what); else the notes pass it. `tail`: details
    a failure, warning or pass ends with."""
    fails, warns, unknown, notes = found.fails, found.warns, found.unknown, found.notes
    if fails:
        return [Finding(Status.FAIL, "; ".join(fails), "\n".join([*warns, *unknown, *notes, *tail]), found.fixes,
                        evidence)]
    if warns:
        return [Finding(Status.WARN, "; ".join(warns), "\n".join([*unknown, *notes, *tail]), found.fixes, evidence)]
    if unknown:
        return [Finding(Status.SKIP, "; ".join(unknown + notes), evidence=evidence)]
    return [Finding(Status.PASS, "; ".join(notes) or passed_text, "\n".join(tail), evidence=evidence)]


def _no_job(profile: Profile) -> str | None:
    return None if profile.job is not None else "no job arguments (preflight or --job-args)"


def _not_read(job: Job) -> str:
    """Why a job row cannot judge the command: it is neither verl nor Megatron-LM (a wrapper script, a launcher)."""
    not_known = job.decisions.not_known if job.decisions is not None else None
    return not_known or ("the command is neither a verl nor a Megatron-LM training command: its settings are not "
                         "known; give the training command itself (`check --job-args \"python3 -m "
                         "verl.trainer.main_ppo ...\"`), or state the CP with --cp N")


def _job(ctx: Context) -> Job:
    job = ctx.profile.job
    assert job is not None  # only_with="job": the runner selects these checks for a job command only
    return job


def _add(job: Job, role: str, setting: str, value, why: str, now: str | None = None) -> Fix:
    """The argument to add, or, when the command states the setting already (`now`), the one to change it to. The
    line is the description's own indented last line: renderers keep it whole (copy-pastable, never wrapped)."""
    line = line_to_add(job, role, setting, value)
    if now is not None:
        return Fix(f"Change in the training command ({why}), from {now!r} to:\n  {line}", key=f"job:{line}",
                   phase=Phase.SETTING)
    return Fix(f"Add to the training command ({why}):\n  {line}", key=f"job:{line}", phase=Phase.SETTING)


def _now(settings: dict[str, Setting], name: str) -> str | None:
    """How the command states a setting now (its text as written), or None."""
    s = settings.get(name)
    return s.raw if s is not None else None


def _value(settings: dict[str, Setting], name: str):
    s = settings.get(name)
    return s.value if s is not None else None


def _stated(settings: dict[str, Setting], name: str) -> bool:
    return settings.get(name) is not None


def _int(settings_or_setting, name: str | None = None) -> int | None:
    s = settings_or_setting.get(name) if name else settings_or_setting
    v = s.value if isinstance(s, Setting) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _from_file(job: Job) -> str:
    """The config-file flags the command gives (Hydra --config-name/--config-path, --yaml-cfg), or ""."""
    return ", ".join(job.config_file)


def _maybe_in_file(job: Job) -> str:
    """What "not stated" means for the command: its default, or, with a config file, not known."""
    return f": the config file may set it ({_from_file(job)})" if _from_file(job) else ""


def _cp(job: Job, settings: dict[str, Setting]) -> int:
    """A role's CP size: as stated; --cp's when the command states one the doctor cannot resolve, or none beside a
    config file (the CLI insists on --cp then); else 1, verl's and Megatron's default."""
    value = _int(settings, "cp")
    if value is not None:
        return value
    if _stated(settings, "cp") or _from_file(job):
        given = job.decisions.cp_given if job.decisions is not None else None
        return given if isinstance(given, int) and not isinstance(given, bool) else 1
    return 1


def _unresolved(settings: dict[str, Setting], name: str) -> bool:
    """The command states the setting as an interpolation the doctor could not resolve."""
    return is_interpolation(_value(settings, name))


def _label(job: Job, role: str) -> str:
    return "" if job.kind != "verl" else f"{role}: "


def _verl_sets_cp(ctx: Context, job: Job) -> tuple[bool, str]:
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


def _world(job: Job) -> int | None:
    nodes, per_node = _int(job.common.get("nnodes")), _int(job.common.get("gpus_per_node"))
    return nodes * per_node if nodes is not None and per_node is not None else None


def _per_rank(needed_from: str) -> str:
    return f"({needed_from}) / CP" if "+" in needed_from else f"{needed_from} / CP"


def _needed_length(job: Job) -> tuple[int | None, str]:
    if job.kind == "megatron":
        s = job.common.get("seq_length")
        return (_int(s), "--seq-length") if s else (None, "--seq-length not stated")
    p, r = _int(job.common.get("max_prompt_length")), _int(job.common.get("max_response_length"))
    if p is not None and r is not None:
        return p + r, "data.max_prompt_length + data.max_response_length"
    return None, "data.max_prompt_length and data.max_response_length not both stated as numbers"


# ---------------------------------------------------------------------------------------------------- job.cp-args

@check("job.cp-args", "The job states the DSv4 CP settings", skip_if=_no_job, only_with="job",
    applies_when="job arguments given; CP > 1",
    detects="the training command's overrides or flags; verl's #6555 marker (ast)",
    sources=(
        mlm(TC, "1563-1616", "Megatron-LM dev transformer_config.py L1563-1616 (contiguous CP rules)"),
        mlm(MPC, "74-98", "Megatron-LM dev model_parallel_config.py (max_seqlen_per_dp_cp_rank, schedulers)"),
        Source("verl run_deepseek_v4_flash_megatron.sh CP_ARGS (PR #7297)",
               "https://github.com/verl-project/verl/pull/7297"),
        gh("verl-project/verl", "blob/1dda039b/examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh",
           "verl @1dda039b run_deepseek_v4_flash_megatron.sh: max_seqlen_per_dp_cp_rank=$(((MAX_PROMPT_LENGTH + "
           "MAX_RESPONSE_LENGTH) / ACTOR_CP)) rounds down; the doctor's line rounds up"),
        Source("verl PR #6555 (MegatronEngine sets the DSv4 CP settings)", "https://github.com/verl-project/verl/pull/6555"),
        Source("verl 0.9.0 workers/config/engine.py L229-236 (McoreEngineConfig: max_seqlen_per_dp_cp_rank with "
               "dynamic CP); workers/engine/megatron/transformer_impl.py L303-311 (written over the transformer "
               "config's)", "https://github.com/verl-project/verl/blob/v0.9.0/verl/workers/config/engine.py#L229-L236"),
    ),
    static=STATIC)
def job_cp_args(ctx: Context) -> Result | list[Finding]:
    """With CP > 1, DSv4 needs `cp_partition_mode=contiguous` (Megatron: "DSv4 Hybrid with context parallelism
    requires cp_partition_mode='contiguous'.") and a `sequence_packing_scheduler` (dp_balanced or
    default_dynamic_cp; without one Megatron stops with "cp_partition_mode='contiguous' with context parallelism
    requires THD inputs from a sequence_packing_scheduler"). verl with PR #6555 (0.9.0 has it; detected as
    verl.cp-layout does) sets both itself for deepseek_v4, after the user's overrides: missing overrides then
    pass with a note, and an override that contradicts verl's choice is reported as overridden. Without #6555,
    and on a Megatron-LM command line, they must be explicit. When `max_seqlen_per_dp_cp_rank` is stated, it
    times the scheduler's rank count (CP for dp_balanced, DP x CP for default_dynamic_cp) must cover the longest
    sample (`data.max_prompt_length + data.max_response_length`, or `--seq-length`). With verl's
    `<role>.megatron.dynamic_context_parallel=True`, verl requires its engine key
    `<role>.megatron.max_seqlen_per_dp_cp_rank` (a positive integer, else "max_seqlen_per_dp_cp_rank must be a
    positive integer when dynamic_context_parallel is enabled") and writes it over the transformer config's;
    without dynamic CP verl does not read the engine key, and Megatron gets the
    `override_transformer_config` value. With CP > 1 and no max_seqlen_per_dp_cp_rank it warns and gives the
    line verl's example adds, ceil((max_prompt_length + max_response_length) / CP): the example's shell
    division rounds down, which leaves the longest sample short when the sum is not a multiple of CP. The full
    CP_ARGS block is in the report's job settings and at the end of `fix --job-args`.
    """
    job = _job(ctx)
    roles = job.checked_roles()
    if not roles:
        return skipped(_not_read(job), evidence={"entry": entry_shown(job.entry)})
    auto, why_auto = _verl_sets_cp(ctx, job)
    found = Found()
    fails, warns, notes, fixes, unknown = found.fails, found.warns, found.notes, found.fixes, found.unknown
    in_file = _maybe_in_file(job)
    evidence: dict = {"verl_sets_cp_settings": auto, "decided_from": why_auto, "roles": {}}
    for role in roles:
        st = job.effective(role)
        cp = _cp(job, st)
        lab = _label(job, role)
        row: dict = {"cp": cp}
        evidence["roles"][role] = row
        if cp == 1 and not _value(st, "dynamic_context_parallel"):
            notes.append(f"{lab}CP = 1: no CP settings needed")
            continue
        mode, sched = _value(st, "cp_partition_mode"), _value(st, "sequence_packing_scheduler")
        if _value(st, "dynamic_context_parallel") and sched is None:
            sched = "default_dynamic_cp"  # Megatron's MPC sets it for dynamic CP
        if sched is None and _value(st, "use_varlen_dataset"):
            sched = "dp_balanced"  # --use-varlen-dataset auto-selects it
        if auto:
            if _stated(st, "cp_partition_mode") and mode != "contiguous":
                warns.append(f"{lab}cp_partition_mode={mode} is overridden by verl, which sets contiguous for "
                             "deepseek_v4 after copying the overrides")
            if sched is not None and sched != "default_dynamic_cp":
                warns.append(f"{lab}sequence_packing_scheduler={sched} is replaced by verl's default_dynamic_cp "
                             "(set after the overrides): max_seqlen_per_dp_cp_rank then counts DP x CP ranks")
            if not _stated(st, "cp_partition_mode") or not _stated(st, "sequence_packing_scheduler"):
                notes.append(f"{lab}verl will use cp_partition_mode=contiguous and "
                             "sequence_packing_scheduler=default_dynamic_cp")
            sched = "default_dynamic_cp"
        else:
            if mode is None and in_file:
                unknown.append(f"{lab}cp_partition_mode not stated{in_file}")
            elif mode != "contiguous":
                what = "not stated (Megatron's default is zigzag)" if mode is None else f"{mode}"
                fails.append(f"{lab}cp_partition_mode is {what}: Megatron stops with \"{M1}\"")
                fixes.append(_add(job, role, "cp_partition_mode", "contiguous", "DSv4 CP needs the contiguous layout",
                                  _now(st, "cp_partition_mode")))
            if sched is None and in_file:
                unknown.append(f"{lab}sequence_packing_scheduler not stated{in_file}")
            elif sched is None:
                fails.append(f"{lab}no sequence_packing_scheduler: Megatron stops with \"{M4}\"")
                fixes.append(_add(job, role, "sequence_packing_scheduler", "dp_balanced",
                                  "as verl's DSv4 example sets it"))
            elif sched not in SCHEDULERS:
                fails.append(f"{lab}sequence_packing_scheduler={sched}: Megatron stops with \"Unsupported scheduler: "
                             f"{sched}. Available schedulers: {list(SCHEDULERS)}\"")
                fixes.append(_add(job, role, "sequence_packing_scheduler", "dp_balanced", "a supported scheduler",
                                  _now(st, "sequence_packing_scheduler")))
            if mode == "contiguous" and sched in SCHEDULERS:
                notes.append(f"{lab}CP {cp}: cp_partition_mode=contiguous, sequence_packing_scheduler={sched}")
        row.update(cp_partition_mode=mode, scheduler=sched)
        _max_seqlen(CpRole(job, role, st, cp, sched, row), found)
    evidence.update(failures=fails, warnings=warns, notes=notes, unknown=unknown)
    # Said only where a max_seqlen_per_dp_cp_rank line is given: it is rounded up, unlike verl's example.
    rounding = [ROUNDING] if any("max_seqlen_per_dp_cp_rank" in f.key for f in fixes) else []
    if not (fails or warns or unknown) and all(r["cp"] == 1 for r in evidence["roles"].values()) and not any(
            _value(job.effective(r), "dynamic_context_parallel") for r in roles):
        return skipped("CP = 1: the job needs no CP settings", evidence=evidence)
    return verdict(found, evidence, [why_auto, *rounding], "the job states the DSv4 CP settings")


def _positive(value) -> bool:
    """A positive integer as verl's McoreEngineConfig checks it (an int, not a bool, > 0)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _seqlen_fix(job, role, name, needed, needed_from, cp, now) -> Fix:
    """The line that states max_seqlen_per_dp_cp_rank (`name`: the engine's or the transformer config's), rounded
    up (verl's example rounds down)."""
    if needed:
        return _add(job, role, name, math.ceil(needed / cp), _per_rank(needed_from) + ", rounded up", now)
    return _add(job, role, name, "N", f"N = {_per_rank('the longest sample')}, rounded up; {needed_from}", now)


@dataclass
class CpRole:
    """One role as job.cp-args judges its max_seqlen_per_dp_cp_rank; `row` is its evidence."""

    job: Job
    role: str
    settings: dict[str, Setting]  # as its config sees them (Job.effective)
    cp: int
    scheduler: str | None  # the one Megatron will use
    row: dict


def _max_seqlen(r: CpRole, found: Found) -> None:
    job, role, st, cp, sched, row = r.job, r.role, r.settings, r.cp, r.scheduler, r.row
    fails, warns, notes, fixes, unknown = found.fails, found.warns, found.notes, found.fixes, found.unknown
    lab = _label(job, role)
    needed, needed_from = _needed_length(job)
    name = "max_seqlen_per_dp_cp_rank"  # override_transformer_config's / --max-seqlen-per-dp-cp-rank
    if job.kind == "verl":
        engine_key = f"{VERL_ROLES.get(role, VERL_ROLES['actor'])}.megatron.max_seqlen_per_dp_cp_rank"
        engine = st.get(ENGINE_MAX_SEQLEN)
        if _value(st, "dynamic_context_parallel") is True:
            # verl validates the engine's value (engine.py L229-236) and writes it over the transformer config's
            # (transformer_impl.py L303-311): the override_transformer_config value does nothing here.
            if _stated(st, name):
                notes.append(f"{lab}override_transformer_config.max_seqlen_per_dp_cp_rank={_now(st, name)} is "
                             f"replaced by verl with {engine_key} (dynamic CP)")
            name = ENGINE_MAX_SEQLEN
            if engine is None and _from_file(job):
                unknown.append(f"{lab}{engine_key} not stated with dynamic_context_parallel{_maybe_in_file(job)}")
                return
            if engine is None or (not _unresolved(st, name) and not _positive(engine.value)):
                what = "not stated" if engine is None else f"={engine.raw!r}, not a positive integer,"
                fails.append(f"{lab}{engine_key} {what} with dynamic_context_parallel: verl stops with "
                             f"\"{VERL_DYNAMIC}\"")
                fixes.append(_seqlen_fix(job, role, name, needed, needed_from, cp, _now(st, name)))
                row.update(max_seqlen_per_dp_cp_rank=None, max_seqlen_from=engine_key, needed=needed)
                return
        elif engine is not None:
            # Without dynamic CP verl does not read the engine's value: Megatron gets the transformer config's.
            text = (f"{lab}{engine_key}={engine.raw} is read by verl only with dynamic_context_parallel; "
                    "Megatron gets override_transformer_config.max_seqlen_per_dp_cp_rank")
            if _stated(st, name):
                notes.append(text)
            else:
                warns.append(text + ", which the command does not state")
    value = _int(st, name)
    row.update(max_seqlen_per_dp_cp_rank=value, needed=needed)
    if not _stated(st, name):
        if job.kind == "megatron":
            notes.append(f"{lab}max_seqlen_per_dp_cp_rank not stated (the Megatron-LM CLI derives it from "
                         "--seq-length)")
        elif cp > 1 and _from_file(job):
            unknown.append(f"{lab}max_seqlen_per_dp_cp_rank not stated{_maybe_in_file(job)}")
        elif cp > 1:
            # verl's DSv4 example states it in CP_ARGS; the line to add is the example's, rounded up.
            warns.append(f"{lab}max_seqlen_per_dp_cp_rank not stated: verl's DSv4 example sets it in CP_ARGS to "
                         "the longest sample / CP")
            fixes.append(_seqlen_fix(job, role, name, needed, needed_from, cp, None))
        else:
            notes.append(f"{lab}max_seqlen_per_dp_cp_rank: not stated")
        return
    if _unresolved(st, name):
        notes.append(f"{lab}max_seqlen_per_dp_cp_rank={_now(st, name)!r}: not known (an interpolation the doctor "
                     "cannot resolve here)")
        return
    if value is None or value < 1:
        fails.append(f"{lab}max_seqlen_per_dp_cp_rank={_now(st, name)!r} is not a positive whole number")
        fixes.append(_seqlen_fix(job, role, name, needed, needed_from, cp, _now(st, name)))
        return
    if needed is None:
        notes.append(f"{lab}max_seqlen_per_dp_cp_rank={value}; whether it covers the longest sample is unknown: "
                     f"{needed_from}")
        return
    if sched == "default_dynamic_cp":
        world = _world(job)
        tp, pp = _int(st, "tp") or 1, _int(st, "pp") or 1
        dp = world // (tp * pp * cp) if world and world % (tp * pp * cp) == 0 else None
        ranks = dp * cp if dp else None
        if ranks is None and value * cp < needed:
            notes.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x CP {cp} = {value * cp} < {needed} ({needed_from}); "
                         "default_dynamic_cp counts DP x CP ranks, and DP is unknown (world size not stated)")
            return
        ranks = ranks or cp
        how = f"DP x CP = {ranks} ranks (default_dynamic_cp)"
    else:
        ranks, how = cp, f"CP = {cp} ranks ({sched or 'scheduler not stated'})"
    row.update(ranks=ranks)
    if value * ranks < needed:
        fails.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x {how} = {value * ranks} < {needed} ({needed_from}): "
                     "the longest sample does not fit, and Megatron asserts total_cp_ranks * "
                     "max_seqlen_per_dp_cp_rank >= seq_length")
        fixes.append(_add(job, role, name, math.ceil(needed / cp), _per_rank(needed_from), _now(st, name)))
    else:
        notes.append(f"{lab}max_seqlen_per_dp_cp_rank={value} x {how} = {value * ranks} >= {needed}")


# ------------------------------------------------------------------------------------------------ job.parallelism

@check("job.parallelism", "The job's TP, PP and CP fit DSv4 and the GPUs", skip_if=_no_job, only_with="job",
    applies_when="job arguments given",
    detects="the training command's parallel sizes and node/GPU counts",
    sources=(mlm(TC, "1743-1765", "Megatron-LM dev transformer_config.py L1743-1765 (DSv4: TP 1)"),))
def job_parallelism(ctx: Context) -> Result | list[Finding]:
    """DSv4's hybrid attention supports tensor parallelism 1 only (Megatron asserts "DSv4 Hybrid Attention only
    supports TP size 1.", at any CP), and TP x PP x CP must divide the job's GPUs (nodes x GPUs per node, from
    `trainer.nnodes`/`trainer.n_gpus_per_node` or torchrun's `--nnodes`/`--nproc-per-node`) so that Megatron can
    form the model replicas. A TP the command does not state is not known (the row is a skip that says so: a
    config file or a recipe may set another), nor is anything a config file it names (Hydra --config-name/
    --config-path, Megatron-LM --yaml-cfg) may set; a world size it does not state leaves the divisibility
    unknown, and the check says so.
    """
    job = _job(ctx)
    roles = job.checked_roles()
    if not roles:
        return skipped(_not_read(job))
    world = _world(job)
    found = Found()
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    evidence: dict = {"world_size": world, "roles": {}}
    for role in roles:
        st, lab = job.effective(role), _label(job, role)
        tp = _int(st, "tp")
        cp, pp = _cp(job, st), _int(st, "pp") or (None if (_from_file(job) and not _stated(st, "pp")) or
                                                   _unresolved(st, "pp") else 1)
        evidence["roles"][role] = {"tp": tp, "cp": cp, "pp": pp, "tp_stated": _stated(st, "tp")}
        if not _stated(st, "tp"):
            # Not stated is not known: verl's and Megatron's default is 1, but a config file or a recipe may differ.
            unknown.append(f"{lab}TP not stated" + (_maybe_in_file(job) or
                                                    " (verl's and Megatron's default is 1; the command does not "
                                                    "say)"))
            continue
        if tp is None and _unresolved(st, "tp"):
            unknown.append(f"{lab}tensor_model_parallel_size={st['tp'].raw!r}: not known (an interpolation "
                           "the doctor cannot resolve here)")
            continue
        if tp is None:
            fails.append(f"{lab}tensor_model_parallel_size={st['tp'].raw!r} is not a number")
            fixes.append(_add(job, role, "tp", 1, "DSv4's attention supports TP 1 only", _now(st, "tp")))
        elif tp != 1:
            fails.append(f"{lab}TP = {tp}: Megatron asserts \"{M6}\"")
            fixes.append(_add(job, role, "tp", 1, "DSv4's attention supports TP 1 only", _now(st, "tp")))
        else:
            notes.append(f"{lab}TP = 1")
        if _unresolved(st, "pp"):
            unknown.append(f"{lab}pipeline_model_parallel_size={st['pp'].raw!r}: not known, so whether TP x PP x CP "
                           "divides the world size is unknown")
        elif pp is None:
            unknown.append(f"{lab}PP not stated{_maybe_in_file(job)}: whether TP x PP x CP divides the world size "
                           "is unknown")
        elif world is None:
            notes.append(f"{lab}whether TP x PP x CP = {(tp or 1) * pp * cp} divides the world size is unknown "
                         "(the command states no node and GPU counts)")
        elif world % ((tp or 1) * pp * cp):
            fails.append(f"{lab}TP x PP x CP = {(tp or 1) * pp * cp} does not divide the {world} GPUs: Megatron "
                         "cannot form a model replica")
        else:
            notes.append(f"{lab}TP x PP x CP = {(tp or 1) * pp * cp} divides the {world} GPUs "
                         f"(DP = {world // ((tp or 1) * pp * cp)})")
    evidence.update(failures=fails, notes=notes, unknown=unknown)
    return verdict(found, evidence)


# ----------------------------------------------------------------------------------------------- job.moe-dispatch

@check("job.moe-dispatch", "The MoE dispatcher works with sequence packing", skip_if=_no_job, only_with="job",
    applies_when="job arguments given; a packing scheduler in use",
    detects="the training command's dispatcher and scheduler; deep_ep location",
    sources=(
        mlm(TC, "3672-3704", "Megatron-LM dev transformer_config.py L3672-3704 (packing: alltoall or flex)"),
        Source("Megatron-Bridge #5543 (DSv4 defaults to flex/HybridEP)",
               "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/5543"),
    ),
    static=STATIC)
def job_moe_dispatch(ctx: Context) -> Result | list[Finding]:
    """With a sequence-packing scheduler, Megatron accepts only the `alltoall` and `flex` MoE token dispatchers
    ("sequence_packing only supports moe_token_dispatcher_type in ('alltoall', 'flex')"); its default is
    `allgather`. verl's DSv4 provider sets alltoall (before the user's overrides, so an override wins);
    Megatron-Bridge main defaults DSv4 to flex with HybridEP, which needs DeepEP (verl's image builds it for
    9.0 and 10.0 only). A flex dispatcher without an importable deep_ep fails.
    """
    job = _job(ctx)
    roles = job.checked_roles()
    if not roles:
        return skipped(_not_read(job))
    auto, _ = _verl_sets_cp(ctx, job)
    found = Found()
    fails, warns, notes, fixes, unknown = found.fails, found.warns, found.notes, found.fixes, found.unknown
    deep_ep = ctx.static.module("deep_ep").get("found")
    evidence: dict = {"deep_ep_found": deep_ep, "roles": {}}
    checked = 0
    for role in roles:
        st, lab = job.effective(role), _label(job, role)
        cp = _cp(job, st)
        scheduler = _value(st, "sequence_packing_scheduler") or (
            "default_dynamic_cp" if _value(st, "dynamic_context_parallel") else None)
        if auto and cp > 1:
            scheduler = "default_dynamic_cp"  # verl (#6555) sets it after the overrides, as job.cp-args says
        elif scheduler is not None and scheduler not in SCHEDULERS:
            scheduler = f"{scheduler} (which job.cp-args rejects)"
        if scheduler is None and _value(st, "use_varlen_dataset"):
            scheduler = "dp_balanced"
        if scheduler is None and cp > 1:
            scheduler = "dp_balanced (the one job.cp-args asks for)"  # CP > 1 needs one: judge the job as it will be
        stated = _value(st, "moe_token_dispatcher_type")
        if stated is not None:
            dispatcher, source = str(stated), "stated"
        elif _from_file(job) and scheduler is not None:
            unknown.append(f"{lab}moe_token_dispatcher_type not stated{_maybe_in_file(job)}")
            evidence["roles"][role] = {"scheduler": scheduler, "dispatcher": None, "source": "not stated"}
            continue
        elif job.kind == "verl":
            dispatcher, source = "alltoall", "not stated: verl's DSv4 provider sets alltoall"
        else:
            dispatcher, source = "allgather", "not stated: Megatron's default"
        evidence["roles"][role] = {"scheduler": scheduler, "dispatcher": dispatcher, "source": source}
        if scheduler is None:
            notes.append(f"{lab}no packing scheduler: any dispatcher works")
            continue
        checked += 1
        if dispatcher not in ("alltoall", "flex"):
            fails.append(f"{lab}moe_token_dispatcher_type={dispatcher} ({source}) with a packing scheduler: Megatron "
                         f"asserts \"{DISPATCH.format(dispatcher)}\"")
            fixes.append(_add(job, role, "moe_token_dispatcher_type", "alltoall", "supported with sequence packing",
                              _now(st, "moe_token_dispatcher_type")))
        elif dispatcher == "flex":
            backend = _value(st, "moe_flex_dispatcher_backend") or "deepep"
            if not deep_ep:
                fails.append(f"{lab}moe_token_dispatcher_type=flex (backend {backend}) but DeepEP (deep_ep) is not "
                             "installed: Megatron raises at the first MoE layer (HybridEP needs DeepEP's hybrid-ep "
                             "build; see mbridge.dsv4)")
                fixes.append(_add(job, role, "moe_token_dispatcher_type", "alltoall", "no DeepEP needed",
                                  _now(st, "moe_token_dispatcher_type")))
            else:
                warns.append(f"{lab}moe_token_dispatcher_type=flex (backend {backend}): DeepEP is installed; whether "
                             "its HybridEP kernels were built for this GPU is not checked (verl's image builds them "
                             "for 9.0 and 10.0 only)")
        else:
            notes.append(f"{lab}dispatcher {dispatcher} ({source}) with the {scheduler} scheduler")
    evidence.update(failures=fails, warnings=warns, notes=notes, unknown=unknown)
    if not (fails or warns or unknown or checked):
        return skipped("no packing scheduler: the dispatcher rule does not apply", evidence=evidence)
    return verdict(found, evidence)


# ---------------------------------------------------------------------------------------------- job.indexer-loss

@check("job.indexer-loss", "No fused dense indexer loss on SM90", skip_if=_no_job, only_with="job",
    applies_when="job arguments given; CC 9.0 and dsa_kernel_backend=cudnn",
    detects="the training command's indexer-loss settings; the GPU arch",
    sources=(mlm(TC, "1773-1818", "Megatron-LM dev transformer_config.py L1773-1818 (SM90 dense indexer loss)"),))
def job_indexer_loss(ctx: Context) -> Result | list[Finding]:
    """On SM90 with dsa_kernel_backend=cudnn, a ratio-4 indexer and dsa_indexer_loss_coeff > 0, Megatron rejects
    the dense indexer loss ("DSv4 with fused DSA and dense indexer loss is not supported on SM90 ..."): the
    job must set dsa_indexer_use_sparse_loss=True (verl's DSv4 example sets it, with coeff 0.0). A coefficient
    the command does not state is reported as such.
    """
    job = _job(ctx)
    roles = job.checked_roles()
    profile = ctx.profile
    if not roles:
        return skipped(_not_read(job))
    if profile.dsa_backend != "cudnn":
        return skipped("dsa_kernel_backend=none: the fused DSA kernels (and the SM90 rule) are not used")
    if profile.cc is None:
        return skipped("the GPU's compute capability is unknown (no GPU visible; give --gpu-arch): the SM90 rule "
                       "cannot be judged")
    if profile.cc != (9, 0):
        return skipped(f"CC {profile.gpu_arch}: the dense indexer loss rule is for SM90 only")
    found = Found()
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    evidence: dict = {"roles": {}}
    for role in roles:
        st, lab = job.effective(role), _label(job, role)
        coeff, sparse = _value(st, "dsa_indexer_loss_coeff"), _value(st, "dsa_indexer_use_sparse_loss")
        evidence["roles"][role] = {"dsa_indexer_loss_coeff": coeff, "dsa_indexer_use_sparse_loss": sparse}
        if _value(st, "csa_dense_mode") is True:
            notes.append(f"{lab}csa_dense_mode: no ratio-4 indexer")
            continue
        if not _stated(st, "dsa_indexer_loss_coeff") and job.kind == "megatron" and not _from_file(job):
            notes.append(f"{lab}dsa_indexer_loss_coeff not stated: Megatron's default None, no indexer loss")
            continue
        if not _stated(st, "dsa_indexer_loss_coeff") or _unresolved(st, "dsa_indexer_loss_coeff"):
            # Megatron-Bridge's DSv4 provider decides what verl does not state: not known from the command.
            unknown.append((f"{lab}dsa_indexer_loss_coeff: not stated{_maybe_in_file(job)}" if _from_file(job) else
                            f"{lab}dsa_indexer_loss_coeff: not stated (Megatron-Bridge's DSv4 provider decides)")
                           if not _stated(st, "dsa_indexer_loss_coeff") else
                           f"{lab}dsa_indexer_loss_coeff={_now(st, 'dsa_indexer_loss_coeff')!r}: not known")
            continue
        if not isinstance(coeff, (int, float)) or isinstance(coeff, bool):
            notes.append(f"{lab}dsa_indexer_loss_coeff={coeff!r} is not a number")
            continue
        if coeff <= 0:
            notes.append(f"{lab}indexer loss off (coeff {coeff})")
            continue
        if sparse is True:
            notes.append(f"{lab}sparse indexer loss (coeff {coeff})")
            continue
        fails.append(f"{lab}dense indexer loss (coeff {coeff}, dsa_indexer_use_sparse_loss "
                     f"{'not stated' if sparse is None else sparse}) with fused DSA on SM90: Megatron stops with "
                     f"\"{M10}\"")
        fixes.append(_add(job, role, "dsa_indexer_use_sparse_loss", True, "as verl's DSv4 example sets it",
                          _now(st, "dsa_indexer_use_sparse_loss")))
    evidence.update(failures=fails, notes=notes, unknown=unknown)
    return verdict(found, evidence)


# --------------------------------------------------------------------------------------------------------- job.env

@check("job.env", "The job's environment variables", skip_if=_no_job, only_with="job",
    applies_when="job arguments given",
    detects="the job's environment and GPU names",
    sources=(
        Source("verl run_deepseek_v4_flash_megatron.sh (environment)",
               "https://github.com/verl-project/verl/blob/main/examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh"),
        Source("Megatron-LM #6319 (NVLS on by default in DDP)", "https://github.com/NVIDIA/Megatron-LM/issues/6319"),
        Source("NCCL #2186 (MNNVL on GB200 NVL72)", "https://github.com/NVIDIA/nccl/issues/2186"),
        mlm(EAV + "deepseek_v4_hybrid_attention.py", "", "Megatron-LM dev DSv4 attention"),
    ))
def job_env(ctx: Context) -> Result | list[Finding]:
    """Judges the environment the job runs in (the doctor runs inside it at preflight; `env K=V` in front of the
    command counts too). NCCL_NVLS_ENABLE=0, as verl's DSv4 script and the Megatron recipes set it (Megatron's
    DDP enables NVLS unless it is set). CUDA_DEVICE_MAX_CONNECTIONS: verl's script sets 1, while Megatron's EP
    all-to-all overlap wants more than 1, a trade-off the warning states. NCCL_MNNVL_ENABLE on GB200/GB300
    NVL72 hosts. Warnings only; each names the `export` line to put in the job script, which the fix plan
    and the text report list as job settings (never run).
    """
    job = _job(ctx)
    env = dict(os.environ)
    for name in job.unset:  # `env -u NAME` in front of the command
        env.pop(name, None)
    env.update(job.env)
    names = [str(g.get("name", "")) for g in ctx.gpus()]
    warns, notes, exports = [], [], []
    nvls = env.get("NCCL_NVLS_ENABLE")
    if nvls != "0":
        exports.append(("NCCL_NVLS_ENABLE", "0", "as verl's DSv4 script and the Megatron recipes set it"))
        warns.append(f"NCCL_NVLS_ENABLE is {'unset' if nvls is None else repr(nvls)}: verl's DSv4 script and the "
                     "Megatron recipes set NCCL_NVLS_ENABLE=0 (Megatron's DDP enables NVLS unless it is set, MLM "
                     "#6319)")
    else:
        notes.append("NCCL_NVLS_ENABLE=0")
    connections = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    overlap = any(_value(job.effective(r), "overlap_moe_expert_parallel_comm") is True
                  for r in job.checked_roles())
    if connections is None:
        exports.append(("CUDA_DEVICE_MAX_CONNECTIONS", "1", "verl's DSv4 script's choice; more than 1 for Megatron's "
                        "EP all-to-all overlap"))
        warns.append("CUDA_DEVICE_MAX_CONNECTIONS is unset: verl's DSv4 script sets 1 (communication kernels keep "
                     "their launch order), while Megatron's EP all-to-all overlap wants more than 1; choose one")
    elif connections == "1" and overlap:
        warns.append("CUDA_DEVICE_MAX_CONNECTIONS=1 with overlap_moe_expert_parallel_comm: the EP all-to-all "
                     "overlap needs more than one connection to overlap anything")
    else:
        notes.append(f"CUDA_DEVICE_MAX_CONNECTIONS={connections}")
    if any("GB200" in n or "GB300" in n for n in names):
        mnnvl = env.get("NCCL_MNNVL_ENABLE")
        if mnnvl is None:
            exports.append(("NCCL_MNNVL_ENABLE", "1", "multi-node NVLink on GB200/GB300 NVL72"))
            warns.append("NCCL_MNNVL_ENABLE is unset on a GB200/GB300 host: multi-node NVLink on NVL72 depends on it "
                         "(NCCL #2186)")
        else:
            notes.append(f"NCCL_MNNVL_ENABLE={mnnvl}")
    evidence = {"NCCL_NVLS_ENABLE": nvls, "CUDA_DEVICE_MAX_CONNECTIONS": connections,
                "NCCL_MNNVL_ENABLE": env.get("NCCL_MNNVL_ENABLE"), "gpus": names[:8],
                "from_command": sorted(job.env),
                "exports": [f"export {name}={value}" for name, value, _ in exports]}
    fixes = [Fix(f"Set in the job script, before the training command ({why}):\n  export {name}={value}",
                 key=f"env:{name}={value}", phase=Phase.SETTING) for name, value, why in exports]
    if job.kind not in ("verl", "megatron"):
        # A wrapper (bash x.sh, srun ...) runs a script that may export or override them after the doctor looked.
        script = "the command runs a script the doctor does not read, which may set them itself"
        if warns:
            return warned("; ".join(warns) + f" ({script})", "\n".join(notes), fixes=fixes, evidence=evidence)
        return skipped(f"not known: {'; '.join(notes)} before the command starts, but {script}", evidence=evidence)
    if warns:
        return warned("; ".join(warns), "\n".join(notes), fixes=fixes, evidence=evidence)
    return passed("; ".join(notes), evidence=evidence)


# ---------------------------------------------------------------------------------------------- job.dsa-backend

M13 = ("dsv4_hybrid does not support dsa_kernel_backend='tilelang'; use 'cudnn' for fused CSA kernels or 'none' for "
       "the PyTorch fallback.")
BACKENDS = ("none", "cudnn")


def _drop_fusion_switch(job: Job, role: str, backend: str) -> Fix:
    """The conflict's fix: drop the deprecated switch (dsa_kernel_backend says what the job wants)."""
    why = f"dsa_kernel_backend={backend} states the backend; apply_dsa_kernel_fusion is the deprecated switch"
    if job.syntax == "megatron":
        return Fix(f"Remove --no-dsa-kernel-fusion from the training command ({why})",
                   key="job:remove --no-dsa-kernel-fusion", phase=Phase.SETTING)
    key = f"{VERL_ROLES.get(role, VERL_ROLES['actor'])}.megatron.override_transformer_config.apply_dsa_kernel_fusion"
    return Fix(f"Drop the deprecated switch ({why}): remove the argument that sets it from the training command, or "
               f"add after it:\n  ~{key}", key=f"job:~{key}", phase=Phase.SETTING)


@check("job.dsa-backend", "The job's DSA kernel backend is one DSv4 accepts", skip_if=_no_job, only_with="job",
    applies_when="job arguments given",
    detects="the training command's dsa_kernel_backend and apply_dsa_kernel_fusion",
    sources=(
        mlm(TC, "1618-1646", "Megatron-LM dev transformer_config.py L1618-1646 (apply_dsa_kernel_fusion folded in)"),
        mlm(TC, "1766-1770", "Megatron-LM dev transformer_config.py L1766-1770 (tilelang rejected for dsv4_hybrid)"),
        mlm("megatron/training/argument_utils.py", "370-387",
            "Megatron-LM dev argument_utils.py L370-387 (an omitted --dsa-kernel-backend is cudnn for dsv4_hybrid)"),
        pypi("megatron-bridge", "0.5.1", "megatron-bridge 0.5.1 wheel, megatron/bridge/models/deepseek/"
             "deepseek_v4_bridge.py L105-111, L460 (apply_dsa_kernel_fusion on for CC major >= 10)"),
        pypi("megatron-bridge", "0.6.2", "megatron-bridge 0.6.2 wheel, deepseek_v4_bridge.py L114-122, L394, L472 "
             "(and only when cudnn DSA and FlashMLA import)"),
        gh("NVIDIA-NeMo/Megatron-Bridge", "blob/c7774d44/src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py",
           "Megatron-Bridge c7774d44 deepseek_v4_bridge.py (the commit verl's DSv4 example names; the 0.6.x rule)"),
    ))
def job_dsa_backend(ctx: Context) -> Result | list[Finding]:
    """Megatron's DSv4 layer takes `dsa_kernel_backend` `none` (the PyTorch fallback) or `cudnn` (the cuDNN
    frontend's DSA kernels and FlashMLA); it rejects `tilelang` for dsv4_hybrid, and the Megatron-LM CLI's
    choices reject anything else. The deprecated `apply_dsa_kernel_fusion` maps True to cudnn and False to none,
    and stating it beside a different backend raises "Conflicting DSA kernel controls". A backend the command
    does not state is the path's default: cudnn for the Megatron-LM CLI with dsv4_hybrid; through verl (which
    never sets it), whatever the installed Megatron-Bridge's DSv4 provider sets `apply_dsa_kernel_fusion` to,
    read from its deepseek_v4_bridge.py with ast: 0.5.x turns it on for any CC major >= 10, c7774d44 and 0.6.x
    only when `from cudnn import DSA` and `from flash_mla import flash_mla_sparse_fwd` also import (the doctor
    runs the same two imports in a probe). A wrapper command (bash, srun, a launcher), a config file, a bridge
    whose rule cannot be read, an unknown CC, or (on a machine without a GPU) an import that cannot load the
    driver's libcuda leave it not known: the environment is then checked for cudnn, the stricter. The job line
    says which rule decided it, and the environment checks follow it.
    """
    job = _job(ctx)
    roles = job.checked_roles()
    if not roles:
        return skipped(_not_read(job))
    decided = job.decisions.dsa_backend_decided if job.decisions is not None else ""
    found = Found()
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    evidence: dict = {"decided": decided, "roles": {}}
    for role in roles:
        st, lab = job.effective(role), _label(job, role)
        backend, fusion = _value(st, "dsa_kernel_backend"), _value(st, "apply_dsa_kernel_fusion")
        evidence["roles"][role] = {"dsa_kernel_backend": backend, "apply_dsa_kernel_fusion": fusion}
        if not _stated(st, "dsa_kernel_backend"):
            (notes if _stated(st, "apply_dsa_kernel_fusion") else unknown).append(
                f"{lab}dsa_kernel_backend not stated" + (f" (apply_dsa_kernel_fusion={fusion})"
                                                         if _stated(st, "apply_dsa_kernel_fusion") else ""))
            continue
        if _unresolved(st, "dsa_kernel_backend"):
            unknown.append(f"{lab}dsa_kernel_backend={_now(st, 'dsa_kernel_backend')!r}: not known")
            continue
        if backend == "tilelang":
            fails.append(f"{lab}dsa_kernel_backend=tilelang: Megatron stops with \"{M13}\"")
        elif backend not in BACKENDS:
            fails.append(f"{lab}dsa_kernel_backend={backend!r}: Megatron accepts only 'none' and 'cudnn' for DSv4 "
                         "(its CLI's choices are none, tilelang and cudnn, and tilelang is rejected for dsv4_hybrid)")
        elif fusion in (True, False) and backend not in ("none", "cudnn" if fusion else "none"):
            legacy = "cudnn" if fusion else "none"
            fails.append(f"{lab}apply_dsa_kernel_fusion={fusion} maps to dsa_kernel_backend={legacy!r}, but "
                         f"dsa_kernel_backend={backend!r} is stated too: Megatron raises \"Conflicting DSA kernel "
                         "controls\"")
            fixes.append(_drop_fusion_switch(job, role, backend))
            continue
        else:
            notes.append(f"{lab}dsa_kernel_backend={backend}")
            continue
        fixes.append(_add(job, role, "dsa_kernel_backend", "cudnn", "the fused kernels; or none for the PyTorch "
                          "fallback", _now(st, "dsa_kernel_backend")))
    evidence.update(failures=fails, notes=notes, unknown=unknown)
    if fails:
        return verdict(found, evidence, [decided])
    if unknown and not notes:
        why = decided[len("not stated: "):] if decided.startswith("not stated: ") else decided
        return skipped("; ".join(unknown) + f": {why}", evidence=evidence)
    return passed("; ".join(notes + unknown), decided, evidence=evidence)


CHECKS = [job_cp_args, job_parallelism, job_moe_dispatch, job_indexer_loss, job_dsa_backend, job_env]
