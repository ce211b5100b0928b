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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from .fix import Command, Fix, Phase
from .model import (Check, CheckReport, Context, Finding, Profile, Result, Source, Status, errored, failed, passed,
                    result_of, skipped, warned)
from .upstreamtext import UpstreamText
from .probes import Probe, StaticRequest

__all__ = ["check", "Check", "CheckReport", "Command", "Context", "Finding", "Fix", "Phase", "Profile", "Probe",
           "Result", "Source", "StaticRequest", "Status", "UpstreamText", "errored", "failed", "passed", "result_of",
           "skipped", "warned"]

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
