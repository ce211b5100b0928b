"""A run's report, put together: the environment section, a fleet rank's fingerprint, the verdict, then redaction
and cleaning of the whole wire form, from which the typed Report (model/report.py) is made. Nothing reaches a renderer
any other way.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping, Sequence

from .. import __version__
from ..fix.steps import Fix
from ..model.core import CheckReport, Profile, counts, exit_code_for, overall_status
from ..hostio.redact import Redactor, sanitize
from ..model.report import SCHEMA, Report
from ..hostio.safeio import read_bounded

if TYPE_CHECKING:
    from ..engine.accept import Acceptance
    from ..engine.registry import PluginInfo

@dataclass
class Outcome:
    """What a run produced, for the report builder."""

    profile: Profile
    reports: list[CheckReport[Fix]]
    target: dict
    static: dict | None
    duration_s: float
    budget_s: float
    interrupted: str | None = None
    plugins: list[PluginInfo] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)  # nvidia-smi's rows
    critical_path: dict | None = None  # the probe that ended last (ProbePool.critical_path)

# Variables that change what the DSv4 stack does; secret-named ones among them are masked whatever their length.
RELEVANT_ENV_PREFIXES = ("CUDA_", "NVTE_", "NCCL_", "TORCH_", "PYTORCH_", "NVIDIA_", "CUDNN_", "TRITON_",
                         "MEGATRON_", "VERL_", "TE_")
RELEVANT_ENV_NAMES = ("LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_HOME")


def detect_container() -> dict:
    """Cheap, read-only hints; none is proof on its own, so all are listed."""
    evidence = []
    runtime = None
    if os.path.exists("/.dockerenv"):
        evidence.append("/.dockerenv")
        runtime = "docker"
    if os.path.exists("/run/.containerenv"):
        evidence.append("/run/.containerenv")
        runtime = runtime or "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        evidence.append("KUBERNETES_SERVICE_HOST")
        runtime = runtime or "kubernetes"
    for var, name in (("SINGULARITY_CONTAINER", "apptainer"), ("APPTAINER_CONTAINER", "apptainer"),
                      ("ENROOT_ROOTFS", "enroot"), ("NVIDIA_PYTORCH_VERSION", "ngc-pytorch")):
        if os.environ.get(var):
            evidence.append(var)
            runtime = runtime or name
    cgroup = (read_bounded("/proc/1/cgroup", 4096) or b"").decode("utf-8", "replace")
    for word in ("docker", "kubepods", "containerd", "libpod"):
        if word in cgroup:
            evidence.append(f"/proc/1/cgroup mentions {word}")
            runtime = runtime or word
            break
    return {"detected": bool(evidence), "runtime": runtime, "evidence": evidence}


def relevant_variables(environ=None) -> dict:
    environ = os.environ if environ is None else environ
    return sanitize({k: environ[k] for k in sorted(environ)
                     if k.startswith(RELEVANT_ENV_PREFIXES) or k in RELEVANT_ENV_NAMES})


def environment(target: dict, static: dict | None, python: str) -> dict:
    py = static.get("python") if isinstance(static, dict) else None
    source = py if isinstance(py, dict) else target
    info = {k: source.get(k) if isinstance(source.get(k), (str, type(None))) else str(source.get(k))
            for k in ("executable", "version", "implementation", "prefix")}
    info["executable"] = info["executable"] or python
    if isinstance(target.get("judged"), dict):  # which interpreter this is and why (target.Judged)
        info.update(target["judged"])
    if isinstance(py, dict) and isinstance(py.get("installer"), dict):  # what the fix plan installs with
        inst = py["installer"]
        info["installer"] = {"pip": inst.get("pip") if isinstance(inst.get("pip"), str) else None,
                             "uv_venv": inst.get("uv_venv") is True,
                             "uv": inst.get("uv") if isinstance(inst.get("uv"), str) else None,
                             "ensurepip": inst.get("ensurepip") is True}
    return {
        "doctor_python": sys.executable,
        "target_python": info,
        "host": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                 "cpu_count": os.cpu_count()},
        "container": detect_container(),
        "variables": relevant_variables(),
    }


def _profile_shown(profile: dict) -> dict:
    """The profile as a report carries it: the job command's values by shape (job.shape.job_shown)."""
    from ..job.shape import job_shown

    if isinstance(profile.get("job"), dict):
        profile = dict(profile, job=job_shown(profile["job"]))
    return profile


def assemble(profile: Profile | dict, checks: Sequence[CheckReport[Fix]], plugins: Sequence, env: dict, strict: bool,
             duration_s: float, budget_s: float | None = None, interrupted: str | None = None,
             exit_override: int | None = None, critical_path: dict | None = None,
             accepted: Sequence[Acceptance] = (), left_out: dict | None = None) -> Report:
    """The report: its wire form built, redacted and cleaned, then typed; the checks' own fixes ride along for the
    fix planner (Report.actions). `accepted`: the run's accepted warnings (engine/accept.py), marked on their rows."""
    said: list[dict] = []
    if accepted:
        from ..engine.accept import apply

        checks, said = apply(checks, accepted)
    status = overall_status(c.status for c in checks)
    code = exit_code_for(checks, strict)
    summary: dict[str, Any] = {
        "status": status.value,
        "exit_code": int(code) if exit_override is None else int(exit_override),
        "strict": strict,
        "counts": dict(counts(checks)),
        "duration_s": round(duration_s, 3),
        "internal_errors": [c.id for c in checks if c.internal_error],
    }
    if budget_s is not None:
        summary["budget_s"] = round(budget_s, 1)
    if interrupted:
        summary["interrupted"] = interrupted
    if critical_path:
        summary["critical_path"] = critical_path
    if said:
        summary["accepted"] = said
    if left_out:
        summary["left_out"] = left_out
    from ..job.unread import not_read

    unread = not_read(profile.job) if isinstance(profile, Profile) else None
    if unread:
        summary["job_not_read"] = unread  # the verdict line says it: the job's settings were not judged
    report = {
        "schema": SCHEMA,
        "doctor": {"name": "dsv4-doctor", "version": __version__},
        "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "profile": _profile_shown(profile.to_dict() if isinstance(profile, Profile) else dict(profile)),
        "environment": env,
        "plugins": [p.to_dict() for p in plugins],
        "summary": summary,
        "checks": [c.to_dict() for c in checks],
    }
    from ..job.settings import section

    settings = section(profile.job, profile.cp, [c.to_dict() for c in checks]) if isinstance(profile, Profile) else None
    if settings is not None:
        report["job_settings"] = settings
    return sealed(report, actions={c.id: tuple(c.fixes) for c in checks if c.fixes})


def sealed(wire: dict, actions: Mapping[str, tuple[Fix, ...]] | None = None, counted: int = 0) -> Report:
    """The last step of every report, a single host's (`assemble`) or a fleet's merged one (fleet/merge.py, the Ray
    fleet's node texts included): its whole wire form redacted and cleaned, then typed. Nothing is added to a report
    after this. `redactions.count` is what this pass masked plus `counted`, what earlier passes masked in text this
    one sees again (rank 0's own report in a fleet's); redacted text is masked again as it is, and not counted again."""
    redactor = Redactor()
    out = redactor({k: v for k, v in wire.items() if k != "redactions"})
    out["redactions"] = {"count": max(0, int(counted)) + redactor.count}
    return Report.from_wire(out, actions=actions)


def fingerprint(static: dict | None, gpus: list[dict]) -> dict:
    """What fleet.drift compares between ranks: each inspected distribution's version and RECORD hash, each source
    file the rules read (its sha256), the driver, Python and doctor versions."""
    from ..model.facts import StaticFacts

    if not static:  # said, not left empty: an empty fingerprint would match any other
        return {"packages": {}, "sources": {}, "platform": {"doctor": __version__},
                "missing": "the static probe gave no answer within the run, so this rank's packages are not known"}
    facts = StaticFacts(static)
    packages = {}
    for name in sorted(facts.data.get("distributions") or {}):
        copy = facts.dist(name)
        if copy is None:
            packages[name] = "not installed"
            continue
        record = copy.get("record_sha256")
        packages[name] = f"{copy.get('version') or '?'} (RECORD {record[:12] if record else 'absent'})"
    sources = {}
    for module in sorted(facts.data.get("sources") or {}):
        src = facts.source(module)
        if src.get("found") and src.get("sha256"):
            sources[module] = src["sha256"][:16]
    platform_facts = {"python": facts.python.get("version"), "doctor": __version__,
                      "driver": (gpus[0].get("driver_version") if gpus else None) or "no nvidia-smi"}
    return {"packages": packages, "sources": sources, "platform": platform_facts}


def build(outcome: Outcome, python: str, strict: bool = False, exit_override: int | None = None,
          accepted: Sequence[Acceptance] = (), left_out: dict | None = None) -> Report:
    from .versions import gather

    env = environment(outcome.target, outcome.static, python)
    # What was found, first in every report: from what the run read (static facts, nvidia-smi, the torch row).
    env = {"versions": gather({r.id: r for r in outcome.reports}, env["target_python"], outcome.static,
                              outcome.gpus), **env}
    fleet = outcome.profile.fleet
    if fleet:
        env["fleet_rank"] = {k: fleet.get(k) for k in ("rank", "local_rank", "host", "node", "job")}
        env["fingerprint"] = fingerprint(outcome.static, outcome.gpus)
    report = assemble(outcome.profile, outcome.reports, outcome.plugins, env, strict, outcome.duration_s,
                      outcome.budget_s, outcome.interrupted, exit_override, outcome.critical_path, accepted, left_out)
    return replace(report, installed=installed_versions(outcome.static))


def installed_versions(static: dict | None) -> dict[str, str]:
    """Each distribution the static probe read, at the version of the copy the job imports (StaticFacts.version)."""
    from packaging.utils import canonicalize_name

    from ..model.facts import StaticFacts

    facts = StaticFacts(static or {})
    found = {str(canonicalize_name(name)): facts.version(name) for name in facts.distribution_names()}
    return {name: v for name, v in found.items() if isinstance(v, str) and v}
