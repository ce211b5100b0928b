"""The job's Megatron config as the stack's own code builds it: the settings probe (probes/dsv4probe_settings.py),
run by the job's interpreter on the CPU, for a verl or Megatron-LM job.

Its answer goes onto the job (`job.built`, which job.stack-config reports): built (the settings Megatron-Core's
config holds), raised (the upstream exception, its file and line), or not built and why. Where it built, its
settings are the profile's: the DSA backend and the CP "as Megatron-Core built it". Where it could not run
(`--static-only`, no torch or Megatron in the target, a remote host, a command the doctor does not compose), the
doctor's readers decide, and `job.built` says which.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..model.facts import StaticFacts
from .model import Job
from .rope import rope_differs
from ..model.core import Check, CheckReport, Interrupted, Profile, UsageError
from ..engine.probes import Probe

ROW = "job.stack-config"  # the row that reports the probe's answer (checks/job/stack.py)
PROBE_SCRIPT = "dsv4probe_settings.py"
BUILT_BY = "as Megatron-Core built it"
READERS = "the doctor's readers"


def not_built(why: str) -> dict:
    return {"status": "not built", "why": why, "decided_by": READERS}


def _static(session: Any) -> StaticFacts:
    probe = session.static_probe
    result = session.pool.result(probe, session.pool.timeout_for(probe) + 1) if probe is not None else None
    return StaticFacts.of(result)


def why_not_run(session: Any, profile: Profile, job: Job, remote: str | None) -> str | None:
    """Why the probe does not run for this job (`remote`: the host it runs on after a submitter), or None."""
    if profile.static_only:
        return "--static-only: the stack's code is not run"
    if remote:
        return f"the job runs after `{remote}`: its stack is the remote host's"
    if job.kind == "verl":
        if job.composed is None:
            return f"the command's config was not composed in the target (settings {job.read_by})"
        if job.config_errors:
            return "the job's config does not compose (see job.config)"
    facts = _static(session)
    for module, said in (("torch", "no torch in the target"), ("megatron.core", "no Megatron-Core in the target")):
        if facts.data and facts.module(module).get("found") is False and module in (facts.data.get("modules") or {}):
            return said
    return None


def _gpu_facts(profile: Profile) -> dict:
    """The compute capability the profile holds (detected or --gpu-arch). The two imports' outcome is the probe's
    own: it runs them in the job's interpreter (not waited for here, so the probe starts at once)."""
    cc = profile.cc
    return {"cc": list(cc) if cc is not None else None, "fused_dsa_imports": None,
            "cc_source": profile.gpu_arch_source}


def _request(session: Any, job: Job, profile: Profile) -> dict | None:
    gpu = _gpu_facts(profile)
    if job.kind == "megatron":
        chain = job.chain
        world = getattr(getattr(chain, "world", None), "size", None)
        return {"kind": "megatron", "entry": job.entry, "argv": list(getattr(chain, "args", None) or job.overrides),
                "gpu": gpu, "world_size": world if isinstance(world, int) else None}
    from .compose import _config_dir, _hydra_options, _located, _overrides

    located, missing = _located(session)
    if missing:
        return None
    entry_file = os.path.join(located["verl_dir"], *(job.entry or "").split(".")[1:]) + ".py"
    options: dict = dict(_hydra_options(job))
    extra = _config_dir(job)
    if extra:
        options["extra_config_dir"] = os.path.abspath(extra)
    # The overrides may hold secrets: they travel in the probe's request, a file only the doctor's user reads.
    return {"kind": "verl", "entry_file": entry_file, **options, "gpu": gpu,
            "words": {"overrides": _overrides(job), "env_set": job.env, "env_unset": job.unset}}


def start(session: Any, profile: Profile, remote: str | None) -> Probe | dict:
    """The settings probe for this job, submitted and not waited for (the checks run beside it: Session.run settles
    it after them), or job.built's answer saying why it does not run."""
    job = profile.job
    assert job is not None
    why = why_not_run(session, profile, job, remote)
    if why is not None:
        return not_built(why)
    request = _request(session, job, profile)
    if request is None:
        return not_built("verl is not in the target")
    probe = Probe.python("stack-settings", PROBE_SCRIPT, request)
    session.pool.submit(probe)
    return probe


def collect(session: Any, started: Probe | dict, wait_s: float) -> dict:
    """The probe's answer as job.built holds it, waiting at most `wait_s`."""
    if isinstance(started, dict):
        return started
    result = session.pool.result(started, wait_s)
    if not result.ok or not isinstance(result.data, dict):
        why = result.error or ("timed out" if result.timed_out else "no answer")
        return not_built(f"the settings probe gave no answer ({why})")
    return answer_to_built(result.data)


def answer_to_built(data: dict) -> dict:
    """The probe's answer, checked, as job.built holds it (plain data: the report carries it)."""
    if isinstance(data.get("probe_error"), dict):
        broke = data["probe_error"]
        return not_built(f"the settings probe broke ({str(broke.get('type'))[:80]}: "
                         f"{str(broke.get('message'))[:300]})")
    status = data.get("status")
    out: dict = {"status": status if status in ("built", "raised", "not built") else "not built"}
    for key in ("stages", "versions", "gpu", "model", "mode", "why_direct", "bridge_decision", "wall_s"):
        if key in data:
            out[key] = data[key]
    if out["status"] == "built":
        given = data.get("roles")
        roles: dict = given if isinstance(given, dict) else {}
        out["roles"] = {str(r): v for r, v in roles.items() if isinstance(v, dict)}
        out["decided_by"] = BUILT_BY
        if not out["roles"]:
            return not_built("the settings probe built no role")
    elif out["status"] == "raised":
        said = data.get("error")
        error: dict = said if isinstance(said, dict) else {}
        out["error"] = {k: error.get(k) for k in ("type", "message", "file", "line", "stage", "wrapped_by")}
        out["decided_by"] = READERS
    else:
        out.update(why=str(data.get("why") or "not said")[:1500], decided_by=READERS)
    return out


def first_role(built: dict) -> dict:
    roles = built.get("roles") or {}
    for role in ("actor", "engine", "model", "ref", "critic"):
        if isinstance(roles.get(role), dict):
            return roles[role].get("settings") or {}
    return {}


def apply(profile: Profile, built: dict) -> Profile:
    """The profile with job.built, and, where the config was built, its CP and DSA backend as Megatron-Core built
    them."""
    job = profile.job
    assert job is not None
    job = replace(job, built=built)
    if built.get("status") != "built":
        return replace(profile, job=job)
    settings = first_role(built)
    changes: dict = {}
    cp = settings.get("context_parallel_size")
    if isinstance(cp, int) and not isinstance(cp, bool) and cp >= 1:
        changes.update(cp=cp, cp_source="job")
    backend = settings.get("dsa_kernel_backend")
    if settings.get("experimental_attention_variant") == "dsv4_hybrid" and backend in ("cudnn", "none"):
        changes.update(dsa_backend=backend, dsa_backend_source="job")
        if job.decisions is not None:
            job = replace(job, decisions=replace(
                job.decisions, dsa_backend_pending=None, dsa_backend_known=True,
                dsa_backend_decided=f"{BUILT_BY}: dsa_kernel_backend={backend} (apply_dsa_kernel_fusion="
                                    f"{settings.get('apply_dsa_kernel_fusion')} as the config held it)"))
    return replace(profile, job=job, **changes)


def differs(readers: Profile, built: Profile) -> tuple[list[str], list[str]]:
    """The settings the checks were run for that the stack built otherwise: (those the doctor's readers stated,
    those they did not know and checked as the stricter value)."""
    decisions = readers.job.decisions if readers.job is not None else None
    known = {"dsa_backend": decisions is None or decisions.dsa_backend_known is not False,
             "cp": readers.cp_source in ("option", "job")}
    stated: list[str] = []
    unknown: list[str] = []
    for name, attr in (("dsa_kernel_backend", "dsa_backend"), ("context_parallel_size", "cp")):
        if getattr(readers, attr) != getattr(built, attr):
            (stated if known[attr] else unknown).append(
                f"{name}: the stack built {getattr(built, attr)}, the doctor's readers "
                + (f"said {getattr(readers, attr)}" if known[attr] else
                   f"did not know it and checked {getattr(readers, attr)}"))
    return stated, unknown


def guarded(step: Callable[[], Any]) -> Any:
    """A settings-probe step, whatever it meets: its answer, else "not built" and why (never a crash)."""
    try:
        return step()
    except (Interrupted, UsageError):
        raise
    except Exception as exc:  # whatever the probe answered: the readers' settings, and why
        return not_built(f"the settings probe broke ({type(exc).__name__})")


def settle(session: Any, profile: Profile, later: Sequence[Check], ctx: Any, deadline: float,
           on_event: Callable[..., None] | None) -> tuple[Profile, list[CheckReport]]:
    """After the checks: the settings probe's answer (waited for within the run's deadline) onto the job; where the
    stack built the settings the checks were run for, the profile takes them "as Megatron-Core built it"; where it
    built others, the profile stays the readers' (what the rows were judged on) and job.stack-config fails naming
    each. Then the rows in `later` (job.stack-config), judged on it."""
    from ..engine.runner import Runner

    started = session._stack
    if started is None or profile.job is None:
        return profile, []
    built = guarded(lambda: collect(session, started, max(0.0, deadline - time.monotonic())))
    judged = apply(profile, built)
    stated, unknown = differs(profile, judged) if built.get("status") == "built" else ([], [])
    if built.get("status") == "built" and profile.job is not None and judged.job is not None:
        rope_stated, rope_unknown = rope_differs(profile.job, judged.job)
        stated, unknown = stated + rope_stated, unknown + rope_unknown
    if stated or unknown:  # the rows were judged on the readers' settings: those stay the profile's
        judged = replace(profile, job=replace(profile.job, built=dict(built, differs=stated, unchecked=unknown)))
    if not later:
        return judged, []
    runner = Runner(list(later), replace(ctx, profile=judged), deadline, on_event)
    runner.begin()
    runner.wait()
    return judged, runner.reports()
