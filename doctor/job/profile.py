"""The profile a training command describes: its CP and DSA backend, and what it states (`profile.job`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..model.core import Profile, UsageError
from .bridge_rule import conflict_text, fold
from .command import parse
from .keys import BRIDGE_DECIDES, line_to_add
from .bounds import rejected, rejection, text_numbers
from .model import Decisions, Job, Unexpanded, is_interpolation


def job_profile(base: Profile, argv: Sequence[str], given_cp: int | None, given_backend: str | None,
                defer: bool = False, cwd: str | None = None) -> Profile:
    """The profile for the job a command describes: its CP and DSA backend (the options may only agree, or fill in
    a CP the command states in a way the doctor cannot resolve), and what it states, as profile.job. `defer`: a
    verl command the target may compose (Session.resolve) holds the reader's usage error about its CP until then.
    `cwd`: the folder the command runs in (its launch chain starts there)."""
    job = parse(argv, cwd)
    if not defer or not composable(job):
        return profile_for(base, job, given_cp, given_backend)
    try:
        return profile_for(base, job, given_cp, given_backend)
    except UsageError as exc:
        if "context_parallel_size" not in str(exc) or given_cp is not None:
            raise
        profile = profile_for(base, job, STRICT_CP, given_backend)
        assert profile.job is not None and profile.job.decisions is not None
        decisions = replace(profile.job.decisions, cp_pending=str(exc), options=(given_cp, given_backend),
                            cp_given=None)
        return replace(profile, cp_source="default", job=replace(profile.job, decisions=decisions))


def composable(job: Job) -> bool:
    """Whether the target may compose the command's config (jobcompose): a verl entry module, every word expanded."""
    return job.kind == "verl" and (job.entry or "").startswith("verl.") and not job.hidden and \
        not job.hidden_launcher


def profile_for(base: Profile, job: Job, given_cp: int | None, given_backend: str | None) -> Profile:
    """job_profile's work over a parsed (or composed) Job."""
    if job.kind == "unknown":
        return _unknown_job_profile(base, job, given_cp, given_backend)
    # A value of the wrong type or out of range is the job's config's mistake: job.config's finding, never a usage
    # error (profile_for may see the same Job twice: each finding once).
    found = [e for e in rejected(job) + text_numbers(job) if e not in job.config_errors]
    job.config_errors += list(dict.fromkeys(found))
    cp = job.cp()
    stated = None
    if job.kind == "verl":
        # Through verl, Megatron-Bridge's provider writes apply_dsa_kernel_fusion and Megatron folds it into the
        # backend: the bridge decides whenever the command states no switch (Session.resolve asks it).
        backend, how, known, stated = verl_backend(job, bridge_switch(job))
        if known is None:
            backend = BRIDGE_DECIDES
    else:
        backend, how = job.dsa_backend()
    if how.startswith("not known") and given_backend is not None:
        backend, how = given_backend, f"from --dsa-backend (the command's is {how})"
    hidden_cp = cp is None and any(isinstance(getattr(job.effective(r).get("cp"), "value", None), Unexpanded)
                                   for r in job.checked_roles())
    if hidden_cp:
        return _hidden_cp_profile(base, job, given_cp, backend, how, given_backend, stated=stated)
    pending = cp_given = None
    if backend == BRIDGE_DECIDES:
        if given_backend is not None:
            backend, how = given_backend, ("from --dsa-backend (the command states no apply_dsa_kernel_fusion; "
                                           "Megatron-Bridge's DeepSeek-V4 provider would write it)")
        else:
            # Session.resolve decides it from the installed bridge's rule, the GPU and a probe; until then, and
            # wherever that cannot be known, the environment is checked for cudnn, the stricter.
            pending = BRIDGE_DECIDES
            backend = "cudnn"
    if cp is None:
        if given_cp is None:
            # Not known, never the doctor's usage error: the job's config says it, the doctor cannot read it.
            interpolated = any(is_interpolation(getattr(job.effective(r).get("cp"), "value", None))
                               for r in job.checked_roles())
            why = ("the job's context_parallel_size is an interpolation the doctor cannot resolve (not in the "
                   "environment, nor another override of the command; a shell variable left unexpanded?)"
                   if interpolated else "the job's context_parallel_size is not stated on the command line, and "
                   f"the config it names ({', '.join(job.config_file)}) may set it")
            return _hidden_cp_profile(base, job, None, backend, how, given_backend, why, stated)
        cp = cp_given = given_cp
    elif given_cp not in (None, cp):
        raise UsageError(f"--cp {given_cp} contradicts the job's context_parallel_size {cp}: leave --cp out with "
                         "job arguments")
    if stated is None and backend not in ("cudnn", "none"):
        # Megatron rejects it at config validation (job.dsa-backend says so); the environment is judged for the
        # fused kernels, the stricter of the two it accepts.
        stated = backend
        how = f"{how}, which Megatron rejects (see job.dsa-backend); the environment is checked for cudnn"
        backend = "cudnn"
    if given_backend not in (None, backend):
        raise UsageError(f"--dsa-backend {given_backend} contradicts the job's ({backend}, {how})")
    job.decisions = Decisions(dsa_backend_decided=how, dense_indexer_loss=job.dense_indexer_loss(), cp_given=cp_given,
                              dsa_backend_stated=stated, dsa_backend_pending=pending,
                              options=(given_cp, given_backend))
    return replace(base, cp=cp, cp_source="job" if cp_given is None else "option", dsa_backend=backend,
                   dsa_backend_source="job", job=job)


STRICT_CP = 2  # a CP the doctor cannot know is checked as CP > 1: the CP rules run


def _hidden_cp_profile(base: Profile, job: Job, given_cp: int | None, backend: str, how: str,
                       given_backend: str | None, why: str | None = None, stated: str | None = None) -> Profile:
    """The CP is not known: an unexpanded shell word may hold it, job.config rejects its value (the wrong type, out
    of range), or `why` (an interpolation, a config the command names). The CP rules run as for CP > 1 unless --cp
    states it; the DSA backend as the command gives it (or cudnn, not known)."""
    words = job.hidden or job.hidden_launcher
    role = "engine" if job.trainer == "sft" else "actor" if job.kind == "verl" else "model"
    if why is not None:
        how_to = f"{line_to_add(job, role, 'cp', 'N')} in the command, or --cp N"
    else:
        why = _cp_not_known(job, words)
        how_to = f"{line_to_add(job, role, 'cp', 'N')} after it, --cp N, or the command as the shell expands it" \
            if words else "a command job.config accepts, or --cp N"
    if given_cp is None:
        cp, cp_given = STRICT_CP, None
        not_known = f"{why}: the CP is checked as CP > 1 (state it with {how_to})"
    else:
        cp = cp_given = given_cp
        not_known = f"{why}: the CP is --cp {given_cp}'s"
    if stated is None and backend not in ("cudnn", "none", BRIDGE_DECIDES):
        stated, backend = backend, "cudnn"
    pending = BRIDGE_DECIDES if backend == BRIDGE_DECIDES else None
    if pending:
        backend = "cudnn"
    job.decisions = Decisions(dsa_backend_decided=how, dense_indexer_loss=job.dense_indexer_loss(), cp_given=cp_given,
                              cp_known=given_cp is not None, not_known=not_known, dsa_backend_stated=stated,
                              dsa_backend_pending=pending, options=(given_cp, given_backend))
    return replace(base, cp=cp, cp_source="option" if given_cp is not None else "default", dsa_backend=backend,
                   dsa_backend_source="job", job=job)


def _unknown_job_profile(base: Profile, job: Job, given_cp: int | None, given_backend: str | None) -> Profile:
    """A command that is neither verl nor Megatron-LM (a wrapper script, a launcher): its settings are not known.
    The CP rules and the cudnn rules run, as for the stricter job, unless --cp / --dsa-backend state them."""
    program = os.path.basename(job.entry or "") or "the command"
    missing: list[str] = []
    if given_cp is None:
        cp, cp_given = STRICT_CP, None
        missing.append("cp (checked as CP > 1; state it with --cp N)")
    else:
        cp = cp_given = given_cp
    if given_backend is None:
        backend, how = "cudnn", ("not known: the command is neither verl nor Megatron-LM, so its DSA setting cannot "
                                 "be read; the environment is checked for cudnn, the stricter (state it with "
                                 "--dsa-backend)")
        missing.append("dsa-backend (checked as cudnn; state it with --dsa-backend)")
    else:
        backend, how = given_backend, "from --dsa-backend (the command's own is not known)"
    chain = job.chain
    what = (f"{chain.stopped}" if chain is not None and chain.stopped else
            f"`{chain.remote}` runs the job on another host" if chain is not None and chain.remote else
            job.unknown_why or f"{program} runs something the doctor does not read")
    not_known = (f"{what}, so the job's settings are not known"
                         + (f": {'; '.join(missing)}" if missing else "") + "; the job.* rows need the training "
                         "command itself (`check --job-args \"python3 -m verl.trainer.main_ppo ...\"`)")
    job.decisions = Decisions(dsa_backend_decided=how, dense_indexer_loss=None, cp_given=cp_given,
                              cp_known=given_cp is not None, not_known=not_known)
    # Without --cp the CP is the doctor's own choice (checked as CP > 1): a default, which the report says.
    return replace(base, cp=cp, cp_source="option" if given_cp is not None else "default", dsa_backend=backend,
                   dsa_backend_source="job", job=job)


def _cp_not_known(job: Job, words: list[str]) -> str:
    """Why the job's CP is not known: the command's settings are not, job.config rejects it, or an unexpanded word
    or a nested dict may hold it."""
    if job.unknown_why:
        return f"the job's settings are not known ({job.unknown_why})"
    if not words:
        cp_settings = [job.effective(r)["cp"] for r in job.checked_roles() if "cp" in job.effective(r)]
        cp_setting = next((s for s in cp_settings if isinstance(s.value, Unexpanded)), None)
        problem = rejection(cp_setting)
        raw = cp_setting.raw if cp_setting is not None else ""
        shown = raw if raw.isprintable() else repr(raw)
        if problem is not None:
            return f"the job's context_parallel_size = {shown} {problem} (see job.config), so it is not known"
        if cp_setting is not None and cp_setting.resolved:
            return f"the job's context_parallel_size is not known ({cp_setting.resolved[:300]})"
        return "the job's context_parallel_size is not known"
    if words[-1].endswith("={...}"):
        return (f"the command's dict override {words[-1]!r} is nested, which the doctor's reader does not take "
                "apart, so the settings it may hold are not known")
    return (f"the command's word {words[-1]!r} is not expanded (a shell variable, array or command "
            "substitution), so the settings it may hold are not known")


# --- the DSA backend of a verl job: the switch, the bridge, Megatron's fold -----------------------------------------

ACCEPTED_BACKENDS = ("none", "cudnn")


@dataclass(frozen=True)
class RoleBackend:
    """One verl role's DSA backend as Megatron will fold it (bridge_rule.fold)."""

    runs: str | None  # "cudnn" or "none": what Megatron runs; None where it is not known or Megatron stops
    how: str  # how it was decided, or why it is not known (the link)
    backend: str | None = None  # dsa_kernel_backend as the command states it ("null" for null); None: not stated
    switch: bool | None = None  # the apply_dsa_kernel_fusion Megatron gets (None: null, or not known)
    switch_by: str = ""  # who writes the switch: "command" or "bridge"; "" where it is null or not known
    switch_raw: str | None = None  # the command's switch as written
    error: str | None = None  # Megatron's ValueError text where it stops (the conflict)
    rejected: str | None = None  # a stated backend Megatron rejects for dsv4_hybrid (tilelang, anything else)
    unknown: str | None = None  # set where not known: the link that is not
    pending: bool = False  # not known only because the bridge was not asked yet (Session.resolve asks it)


def role_backend(job: Job, role: str, bridge: tuple[bool | None, str] | None) -> RoleBackend:
    """One verl role's DSA backend: the command's switch when it states one (True, False or null), else the installed
    bridge's decision (`bridge`), then Megatron's fold (raise, override or keep). `bridge`: the switch Megatron-Bridge's
    DeepSeek-V4 provider writes and how that was decided, (None, why) where it is not known, None while Session.resolve
    has not asked it."""
    eff = job.effective(role)
    b, s = eff.get("dsa_kernel_backend"), eff.get("apply_dsa_kernel_fusion")
    if b is not None and isinstance(b.value, Unexpanded):
        why = f"{b.resolved or 'an unexpanded word may hold it'} (the word {b.raw[:80]!r})"
        return RoleBackend(None, why, unknown=why)
    if b is not None and is_interpolation(b.value):
        why = f"the command writes dsa_kernel_backend as {b.raw[:80]!r}, which the doctor cannot resolve"
        return RoleBackend(None, why, unknown=why)
    backend = None if b is None else "null" if b.value is None else str(b.value)
    stated_backend = f"dsa_kernel_backend={backend}" if backend is not None else "dsa_kernel_backend not stated"
    rejected = backend if backend is not None and backend not in ACCEPTED_BACKENDS else None
    raw = s.raw if s is not None else None

    def switch_not_known(why: str, pending: bool = False) -> RoleBackend:
        # A backend Megatron rejects stops the job whatever the switch: that is known.
        if rejected:
            return RoleBackend(None, f"stated: dsa_kernel_backend={backend}", backend=backend, switch_raw=raw,
                               rejected=rejected)
        return RoleBackend(None, why, backend=backend, switch_raw=raw, unknown=why, pending=pending)

    if s is not None and is_interpolation(s.value):
        return switch_not_known(f"the command writes apply_dsa_kernel_fusion as {s.raw[:80]!r}, which the doctor "
                                "cannot resolve")
    if s is not None and s.value is not None and not isinstance(s.value, bool):
        return switch_not_known(f"apply_dsa_kernel_fusion={s.raw[:80]!r} is not a bool (see job.config)")
    if s is not None:
        switch, by = s.value, ("command" if s.value is not None else "")
        how = f"stated: apply_dsa_kernel_fusion={s.raw}" + (f" and {stated_backend}" if backend else "")
    elif job.config_file:
        return switch_not_known(f"not stated: the config the command names ({', '.join(job.config_file)}) may set "
                                + ("apply_dsa_kernel_fusion" if backend else "it"))
    elif bridge is None:
        return switch_not_known(f"{stated_backend}, apply_dsa_kernel_fusion not stated: Megatron-Bridge's DeepSeek-V4 "
                                "provider writes it, and its decision is not known yet", pending=True)
    elif bridge[0] is None:
        return switch_not_known(f"{bridge[1]}, so the apply_dsa_kernel_fusion Megatron-Bridge's DeepSeek-V4 provider "
                                f"writes is not known ({stated_backend})")
    else:
        switch, by = bridge[0], "bridge"
        how = f"{stated_backend}; Megatron-Bridge writes apply_dsa_kernel_fusion={switch} ({bridge[1]})"
    if rejected:
        error = conflict_text(switch, rejected) if switch is not None else None
        return RoleBackend(None, how, backend=backend, switch=switch, switch_by=by, switch_raw=raw, error=error,
                           rejected=rejected)
    runs, error = fold(switch, backend)
    if error is None and switch is not None:
        how += f"; Megatron folds the switch in: {runs}" + (" over the stated none" if backend == "none" and
                                                             runs != "none" else "")
    return RoleBackend(runs, how, backend=backend, switch=switch, switch_by=by, switch_raw=raw, error=error)


def verl_backend(job: Job, bridge: tuple[bool | None, str] | None) -> tuple[str, str, bool | None, str | None]:
    """(backend, how, known, rejected) for the profile from every checked role: known None while only the bridge's
    decision is missing (pending); a job Megatron stops (a conflict, a backend it rejects) is judged for cudnn, the
    stricter, with `rejected` saying what stops it; what is not known is checked for cudnn too."""
    roles = [(r, role_backend(job, r, bridge)) for r in job.checked_roles()]
    label = (lambda r: f"{r}: ") if len(roles) > 1 else (lambda r: "")
    strict = "; the environment is checked for cudnn, the stricter"
    for role, rb in roles:
        if rb.unknown and not rb.pending:
            return "cudnn", f"not known: {label(role)}{rb.unknown}{strict}", False, None
    for role, rb in roles:
        if rb.error or rb.rejected:
            what = rb.rejected or f"apply_dsa_kernel_fusion={rb.switch} with dsa_kernel_backend={rb.backend}"
            return "cudnn", (f"{label(role)}{rb.how}, which Megatron rejects (see job.dsa-backend); the environment "
                             "is checked for cudnn"), True, what
    if any(rb.pending for _, rb in roles):
        first = next(rb for _, rb in roles if rb.pending)
        return "cudnn", f"not known yet: {first.how}{strict}", None, None
    runs = {rb.runs for _, rb in roles}
    if len(runs) == 1:
        return str(runs.pop()), "; ".join(dict.fromkeys(f"{label(r)}{rb.how}" for r, rb in roles)), True, None
    return "cudnn", ("the roles run different backends (" + "; ".join(f"{r}: {rb.runs} ({rb.how})" for r, rb in roles)
                     + "); the environment is checked for cudnn, the one with kernels to check"), True, None


def bridge_switch(job: Job) -> tuple[bool | None, str] | None:
    """The bridge's decision Session.resolve recorded in the job's decisions, or None while it was not asked."""
    rule = job.decisions.dsa_backend_rule if job.decisions is not None else None
    if not isinstance(rule, dict) or "switch" not in rule:
        return None
    switch = rule.get("switch")
    return (switch if isinstance(switch, bool) else None), str(rule.get("switch_how") or "")


def fold_bridge(profile: Profile, rule: dict, bridge: tuple[bool | None, str], known: bool) -> Profile:
    """Session.resolve's answer for a pending verl job: the bridge's decision (the switch it writes, or None: not
    known) folded into each role's backend as Megatron folds it (verl_backend); the decision is kept in the job's
    decisions for job.dsa-backend."""
    job = profile.job
    assert job is not None and job.decisions is not None  # resolve calls it for a pending job only
    backend, how, folded_known, stated = verl_backend(job, bridge)
    if not folded_known and not how.startswith("not known"):
        how = f"not known: {how}"
    given = job.decisions.options[1]
    if folded_known is False and given is not None:  # --dsa-backend says what is not known
        backend, how = given, f"from --dsa-backend (the job's is {how})"
    rule = dict(rule, switch=bridge[0], switch_how=bridge[1], switch_known=known)
    decisions = replace(job.decisions, dsa_backend_pending=None, dsa_backend_decided=how,
                        dsa_backend_known=bool(folded_known) and known, dsa_backend_stated=stated,
                        dsa_backend_rule=rule)
    return replace(profile, dsa_backend=backend, job=replace(job, decisions=decisions))
