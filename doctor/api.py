"""The one import of a check or a plugin: `from dsv4_doctor.api import check, Finding, ...`.

A rule is one decorated function; its docstring is the rule's explanation (what `explain` prints and docs/checks.md
shows), and the function returns a `Result` or yields `Finding`s, from which the runner derives the result:

    @check("torch.example", "An example", applies_when="always", detects="torch's version",
           sources=(Source("PyTorch release notes", "https://github.com/pytorch/pytorch/releases"),),
           texts=(UpstreamText("X1", "torch {version} is not supported", Source("torch/__init__.py"), "RuntimeError"),))
    def example(ctx):
        '''Why the rule matters, for whoever reads `dsv4-doctor explain torch.example`.'''
        yield Finding(Status.PASS, "torch imports")

The module-level name is bound to the resulting `Check`, so plugin API 1 (a module's Check attributes) collects it.

Everything of the engine a check uses is exported here (`__all__`, by kind), and the built-in checks import nothing
else of it, so a built-in check reads exactly like a plugin's. Names whose modules importing this one does not load
anyway (the facts, the job's settings, the fleet, the kernel cache, ...) load on first use, so that a plugin that only
declares checks stays cheap to import.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .fix.steps import BREAK_SYSTEM_PACKAGES, Command, Fix, Phase, plain_value
from .model.core import (Check, CheckReport, Context, Finding, Profile, Result, Source, Status, errored, failed,
                         needs_failed, passed, result_of, skipped, warned)
from .engine.probes import NVIDIA_SMI, TORCH, Probe, StaticRequest, import_probe, parse_nvidia_smi
from .hostio.redact import Redactor, cut, shorten
from .hostio.safeio import read_bounded
from .upstream.texts import UpstreamText

__all__ = [
    # Declaring a check: the decorator and what it makes, its sources and upstream texts, the probes it declares,
    # and what it is given (the run's Context, the resolved Profile).
    "check", "Check", "Source", "UpstreamText", "Probe", "StaticRequest", "import_probe", "NVIDIA_SMI", "TORCH",
    "Context", "Profile",
    # Findings and results: what a check returns or yields, and the classifier of an upstream message back to the
    # texts checks declared.
    "Finding", "Status", "Result", "CheckReport", "passed", "warned", "failed", "errored", "skipped", "result_of",
    "needs_failed", "classify", "anchored",
    # Facts: the static probe's answer (distributions, files, modules), version and requirement reading, the GPU
    # listing.
    "StaticFacts", "STACK_MODULE_OF", "canonical", "outcome", "error_text", "version", "at_least", "safe_version",
    "safe_specifier", "MAX_REQUIREMENTS", "parse_requirement", "requirement_text", "requirements", "parse_nvidia_smi",
    # Fixes: the steps a check proposes, their parts, and the installer's PEP 668 settings.
    "Fix", "Command", "Phase", "plain_value", "BREAK_SYSTEM_PACKAGES", "BREAK_KEY", "VENV_KEY", "DEFAULT_VENV",
    # Job settings: the training command as read (its settings, launch wrappers, roles and the bridge's rule).
    "Job", "Setting", "is_interpolation", "command_not_read", "entry_shown", "digits_int", "rejection", "ROUNDING",
    "ENGINE_MAX_SEQLEN", "line_to_add", "role_head", "RoleBackend", "role_backend", "bridge_switch", "SWITCH_BACKEND",
    "conflict_text", "RopeFusion", "rope_fusion", "WRAPPERS", "PYTHON_MANUAL", "RAY_MANUAL", "SBATCH", "SHELL_MANUAL",
    "SRUN", "TORCHRUN_MANUAL", "UV_MANUAL",
    # Fleet: the merged report's own rows and the context-parallel groups of a fleet's ranks.
    "FLEET_SOURCES", "FLEET_RANKS_TITLE", "FLEET_DRIFT_TITLE", "cp_plan",
    # Helpers: hostile text made safe to show, bounded reads, the target interpreter, this run's kernel cache.
    "Redactor", "cut", "shorten", "read_bounded", "REMOTE_NOT_KNOWN", "same_interpreter", "run_kernel_cache",
]

# The names that load on first use: the module under dsv4_doctor each comes from (those of _RENAMED under their name
# there). Kept equal to the imports under TYPE_CHECKING below, which give them their types.
_LAZY: dict[str, tuple[str, ...]] = {
    "upstream.registry": ("classify", "anchored"),
    "model.facts": ("StaticFacts", "canonical", "outcome", "error_text"),
    "model.located": ("STACK_MODULE_OF",),
    "model.versions": ("version", "at_least", "safe_version", "safe_specifier", "MAX_REQUIREMENTS", "parse_requirement",
                 "requirement_text", "requirements"),
    "fix.pep668": ("BREAK_KEY", "VENV_KEY", "DEFAULT_VENV"),
    "job.model": ("Job", "Setting", "is_interpolation"),
    "job.unread": ("command_not_read",),
    "job.shape": ("entry_shown",),
    "job.bounds": ("digits_int", "rejection"),
    "job.settings": ("ROUNDING",),
    "job.keys": ("ENGINE_MAX_SEQLEN", "line_to_add", "role_head"),
    "job.profile": ("RoleBackend", "role_backend", "bridge_switch"),
    "job.bridge_rule": ("SWITCH_BACKEND", "conflict_text"),
    "job.rope": ("RopeFusion", "rope_fusion"),
    "job.wrappers": ("WRAPPERS", "PYTHON_MANUAL", "RAY_MANUAL", "SBATCH", "SHELL_MANUAL", "SRUN", "TORCHRUN_MANUAL",
                     "UV_MANUAL"),
    "fleet.merge": ("FLEET_SOURCES", "FLEET_RANKS_TITLE", "FLEET_DRIFT_TITLE"),
    "fleet.env": ("cp_plan",),
    "engine.target": ("REMOTE_NOT_KNOWN", "same_interpreter"),
    "kernels.cache": ("run_kernel_cache",),
}
# Exported under a name that says what it is outside its module: this name -> the name in its module.
_RENAMED = {"command_not_read": "not_read", "FLEET_RANKS_TITLE": "RANKS_TITLE", "FLEET_DRIFT_TITLE": "DRIFT_TITLE",
            "run_kernel_cache": "for_run"}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

if TYPE_CHECKING:
    from .model.facts import StaticFacts, canonical, error_text, outcome
    from .fix.pep668 import BREAK_KEY, DEFAULT_VENV, VENV_KEY
    from .fleet.env import cp_plan
    from .fleet.merge import DRIFT_TITLE as FLEET_DRIFT_TITLE, FLEET_SOURCES, RANKS_TITLE as FLEET_RANKS_TITLE
    from .job.bounds import digits_int, rejection
    from .job.bridge_rule import SWITCH_BACKEND, conflict_text
    from .job.keys import ENGINE_MAX_SEQLEN, line_to_add, role_head
    from .job.model import Job, Setting, is_interpolation
    from .job.profile import RoleBackend, bridge_switch, role_backend
    from .job.rope import RopeFusion, rope_fusion
    from .job.settings import ROUNDING
    from .job.shape import entry_shown
    from .job.unread import not_read as command_not_read
    from .job.wrappers import (PYTHON_MANUAL, RAY_MANUAL, SBATCH, SHELL_MANUAL, SRUN, TORCHRUN_MANUAL, UV_MANUAL,
                               WRAPPERS)
    from .kernels.cache import for_run as run_kernel_cache
    from .model.located import STACK_MODULE_OF
    from .engine.target import REMOTE_NOT_KNOWN, same_interpreter
    from .upstream.registry import anchored, classify
    from .model.versions import (MAX_REQUIREMENTS, at_least, parse_requirement, requirement_text, requirements,
                                 safe_specifier, safe_version, version)


def __getattr__(name: str) -> Any:
    """A name of `_LAZY`, loaded from its module on first use and kept here (PEP 562)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__package__}.{module}"), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


RunFunction = Callable[[Context], "Result | Iterable[Finding]"]


def check(id: str, title: str, *, applies_when: str, detects: str, needs: Iterable[str] = (),
          after: Iterable[str] = (), fixes: Iterable[Fix] = (), sources: Iterable[Source] = (),
          texts: Iterable[UpstreamText] = (),
          skip_if: Callable[[Profile], str | None] | None = None, probes: Any = (), static: Any = None,
          only_with: str | None = None, per_gpu: bool = False) -> Callable[[RunFunction], Check]:
    """Make the decorated function a rule: a `Check` whose run is the function and whose explanation is its
    docstring. `needs`: checks this one builds on (when one failed or errored, this one is skipped saying so);
    `after`: checks whose outcome it reads (`ctx.outcome`), which only run first. `texts`: the upstream error and
    warning texts of the rule (`UpstreamText`), by which a message is classified back to it."""

    def decorate(function: RunFunction) -> Check:
        doc = inspect.cleandoc(function.__doc__ or "")
        kwargs: dict[str, Any] = {}
        if skip_if is not None:
            kwargs["skip_if"] = skip_if
        return Check(id=id, title=title, explanation=doc, applies_when=applies_when, detects=detects, run=function,
                     sources=tuple(sources), texts=tuple(texts), fixes=tuple(fixes),
                     probes=probes if callable(probes) else tuple(probes),
                     static=static, needs=tuple(needs), after=tuple(after), only_with=only_with, per_gpu=per_gpu,
                     **kwargs)

    return decorate
