"""The profile a training command describes: its CP and DSA backend, and what it states (`profile.job`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from ..model import Profile, UsageError
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
    backend, how = job.dsa_backend()
    if how.startswith("not known") and given_backend is not None:
        backend, how = given_backend, f"from --dsa-backend (the command's is {how})"
    hidden_cp = cp is None and any(isinstance(getattr(job.effective(r).get("cp"), "value", None), Unexpanded)
                                   for r in job.checked_roles())
    if hidden_cp:
        return _hidden_cp_profile(base, job, given_cp, backend, how, given_backend)
    pending = cp_given = stated = None
    if backend == BRIDGE_DECIDES:
        if given_backend is not None:
            backend, how = given_backend, ("from --dsa-backend (the command does not state it; Megatron-Bridge's "
                                           "DeepSeek-V4 provider would decide)")
        else:
            # Session.resolve decides it from the installed bridge's rule, the GPU and a probe; until then, and
            # wherever that cannot be known, the environment is checked for cudnn, the stricter.
            pending = BRIDGE_DECIDES
            backend, how = "cudnn", how + "; not known yet: the environment is checked for cudnn, the stricter"
    if cp is None:
        if given_cp is None:
            # Not known, never the doctor's usage error: the job's config says it, the doctor cannot read it.
            interpolated = any(is_interpolation(getattr(job.effective(r).get("cp"), "value", None))
                               for r in job.checked_roles())
            why = ("the job's context_parallel_size is an interpolation the doctor cannot resolve (not in the "
                   "environment, nor another override of the command; a shell variable left unexpanded?)"
                   if interpolated else "the job's context_parallel_size is not stated on the command line, and "
                   f"the config it names ({', '.join(job.config_file)}) may set it")
            return _hidden_cp_profile(base, job, None, backend, how, given_backend, why)
        cp = cp_given = given_cp
    elif given_cp not in (None, cp):
        raise UsageError(f"--cp {given_cp} contradicts the job's context_parallel_size {cp}: leave --cp out with "
                         "job arguments")
    if backend not in ("cudnn", "none"):
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
                       given_backend: str | None, why: str | None = None) -> Profile:
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
    stated = None
    if backend not in ("cudnn", "none", BRIDGE_DECIDES):
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
