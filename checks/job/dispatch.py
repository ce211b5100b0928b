"""job.moe-dispatch's rule for one role of the job: the sequence-packing scheduler Megatron will use, and the MoE
token dispatchers it allows with one."""

from __future__ import annotations

from dsv4_doctor.api import Context, Finding, Job, Result, Source, check, skipped

from .cp import SCHEDULERS, verl_sets_cp_here
from .settings import (STATIC, TC, add_setting, as_written, config_files, is_unresolved, job_of, maybe_in_file, no_job,
                       not_known, remote_of, role_cp, role_label, unread_row, value_of, written)
from .verdict import Found, verdict
from .._upstream import mlm

DISPATCH = "sequence_packing only supports moe_token_dispatcher_type in ('alltoall', 'flex'), got '{}'"


def judge_dispatch(job: Job, role: str, auto: bool, deep_ep: bool, found: Found, rows: dict) -> bool:
    """One role's dispatcher (`auto`: verl sets the scheduler itself; `deep_ep`: deep_ep is importable); its
    evidence row goes into `rows`. Whether the role packs sequences, so that the rule applied."""
    fails, warns, notes, fixes, unknown = found.fails, found.warns, found.notes, found.fixes, found.unknown
    st, lab = job.effective(role), role_label(job, role)
    known_cp = role_cp(job, st)
    cp = known_cp if known_cp is not None else 2  # a CP not known is checked as CP > 1, as the profile does
    dynamic_known = not is_unresolved(st, "dynamic_context_parallel")
    scheduler = value_of(st, "sequence_packing_scheduler") or (
        "default_dynamic_cp" if dynamic_known and value_of(st, "dynamic_context_parallel") else None)
    # The setting written as a variable that leaves it not known whether the batch is packed (at CP 1 only: CP > 1
    # packs with some scheduler, and every one allows alltoall and flex).
    packing_not_known: str | None = None
    if auto and cp > 1:
        scheduler = "default_dynamic_cp"  # verl (#6555) sets it after the overrides, as job.cp-args says
    elif is_unresolved(st, "sequence_packing_scheduler"):
        packing_not_known = "sequence_packing_scheduler" if cp == 1 else None
        scheduler = f"`{as_written(st['sequence_packing_scheduler'].raw)}` (not known here)"
    elif scheduler is not None and scheduler not in SCHEDULERS:
        scheduler = f"{scheduler} (which job.cp-args rejects)"
    if scheduler is None and value_of(st, "use_varlen_dataset"):
        scheduler = "dp_balanced"
    if scheduler is None and not dynamic_known and cp == 1:
        packing_not_known = "dynamic_context_parallel"
        scheduler = f"default_dynamic_cp if dynamic_context_parallel `{as_written(st[packing_not_known].raw)}` is on"
    if scheduler is None and cp > 1:
        scheduler = "dp_balanced (the one job.cp-args asks for)"  # CP > 1 needs one: judge the job as it will be
        if known_cp is None and packing_not_known is None:
            packing_not_known = "cp"  # the CP alone decides whether the batch is packed, and it is not known
    stated = value_of(st, "moe_token_dispatcher_type")
    if is_unresolved(st, "moe_token_dispatcher_type"):
        rows[role] = {"scheduler": scheduler, "dispatcher": None, "source": "not known"}
        if scheduler is None:
            notes.append(f"{lab}no packing scheduler: any dispatcher works")
            return False
        unknown.append(not_known(lab, "moe_token_dispatcher_type", st["moe_token_dispatcher_type"],
                                 ", so whether Megatron accepts it with sequence packing is not known"))
        return True
    if stated is not None:
        dispatcher, source = str(stated), "stated"
    elif config_files(job) and scheduler is not None:
        unknown.append(f"{lab}moe_token_dispatcher_type not stated{maybe_in_file(job)}")
        rows[role] = {"scheduler": scheduler, "dispatcher": None, "source": "not stated"}
        return False
    elif job.kind == "verl":
        dispatcher, source = "alltoall", "not stated: verl's DSv4 provider sets alltoall"
    else:
        dispatcher, source = "allgather", "not stated: Megatron's default"
    rows[role] = {"scheduler": scheduler, "dispatcher": dispatcher, "source": source}
    if scheduler is None:
        notes.append(f"{lab}no packing scheduler: any dispatcher works")
        return False
    if packing_not_known is not None and dispatcher != "alltoall":
        name = "context_parallel_size" if packing_not_known == "cp" else packing_not_known
        unknown.append(not_known(lab, name, st[packing_not_known], ", so whether the batch is packed "
                                 f"(and the dispatcher rule applies to {dispatcher}) is not known"))
        return False
    if dispatcher not in ("alltoall", "flex"):
        fails.append(f"{lab}moe_token_dispatcher_type={dispatcher} ({source}) with a packing scheduler: Megatron "
                     f"asserts \"{DISPATCH.format(dispatcher)}\"")
        fixes.append(add_setting(job, role, "moe_token_dispatcher_type", "alltoall", "supported with sequence "
                                 "packing", written(st, "moe_token_dispatcher_type")))
    elif dispatcher == "flex":
        backend = value_of(st, "moe_flex_dispatcher_backend") or "deepep"
        if not deep_ep:
            fails.append(f"{lab}moe_token_dispatcher_type=flex (backend {backend}) but DeepEP (deep_ep) is not "
                         "installed: Megatron raises at the first MoE layer (HybridEP needs DeepEP's hybrid-ep "
                         "build; see mbridge.dsv4)")
            fixes.append(add_setting(job, role, "moe_token_dispatcher_type", "alltoall", "no DeepEP needed",
                                     written(st, "moe_token_dispatcher_type")))
        else:
            warns.append(f"{lab}moe_token_dispatcher_type=flex (backend {backend}): DeepEP is installed; whether "
                         "its HybridEP kernels were built for this GPU is not checked (verl's image builds them "
                         "for 9.0 and 10.0 only)")
    else:
        notes.append(f"{lab}dispatcher {dispatcher} ({source}) with the {scheduler} scheduler")
    return True


# ----------------------------------------------------------------------------------------------- job.moe-dispatch

@check("job.moe-dispatch", "The MoE dispatcher works with sequence packing", skip_if=no_job, only_with="job",
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
    9.0 and 10.0 only). A flex dispatcher without an importable deep_ep fails. A dispatcher written as a
    variable the doctor cannot resolve is not known under packing (no line); a scheduler written so still packs
    at CP > 1, and every scheduler allows alltoall and flex.
    """
    job = job_of(ctx)
    roles = job.checked_roles()
    if not roles:
        return unread_row(job, "MoE token dispatcher and packing scheduler")
    auto, _ = verl_sets_cp_here(ctx, job)
    found = Found()
    fails, warns, notes, unknown = found.fails, found.warns, found.notes, found.unknown
    remote = remote_of(job)
    deep_ep = None if remote else ctx.static.module("deep_ep").get("found")  # another host's is not known here
    evidence: dict = {"deep_ep_found": deep_ep, "roles": {}}
    checked = 0
    for role in roles:
        checked += judge_dispatch(job, role, auto, bool(deep_ep) or remote is not None, found, evidence["roles"])
    if remote:  # a flex dispatcher's DeepEP is the remote host's: not known, never judged on this one
        warns[:] = [w for w in warns if "DeepEP is installed" not in w]
        unknown += [f"{role_label(job, r)}moe_token_dispatcher_type=flex: whether DeepEP (deep_ep) is installed on "
                    f"the remote host is not known (the job runs after `{remote}`)"
                    for r, row in evidence["roles"].items() if row.get("dispatcher") == "flex"]
    evidence.update(failures=fails, warnings=warns, notes=notes, unknown=unknown)
    if not (fails or warns or unknown or checked):
        return skipped("no packing scheduler: the dispatcher rule does not apply", evidence=evidence)
    return verdict(found, evidence)
