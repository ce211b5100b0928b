"""`list` and `explain`: the checks, built-ins and plugins, read from the registry. No target is inspected, so no
session is made and no probe starts: the built-ins are imported from the registry, and third-party plugins (only
when there are any) describe themselves in their plugin hosts, as in a run."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..model.core import Check, UsageError

if TYPE_CHECKING:
    from .usecases import Options
    from ..engine.registry import PluginInfo, Registry


def _described_plugins(registry: Registry, timeout: float | None) -> list[Check]:
    """The third-party plugins' checks, each plugin described in its host; every host is gone on return."""
    import threading

    from ..engine.plugins import PluginHosts
    from ..engine.probes import DEFAULT_TIMEOUT_S
    from ..hostio.procs import Processes
    from ..engine.target import workers

    procs = Processes()
    try:
        hosts = PluginHosts(procs, sys.executable, DEFAULT_TIMEOUT_S if timeout is None else timeout, list,
                            threading.BoundedSemaphore(workers()))
        hosts.describe(registry)
        return [c for checks in hosts.plugin_checks.values() for c in checks]
    finally:
        procs.close()


@contextlib.contextmanager
def checks_and_plugins(timeout: float | None) -> Iterator[tuple[list[Check], list[PluginInfo]]]:
    """Every check (sorted by id) and every entry point (built-ins first). A stop signal interrupts (Interrupted),
    and whatever a plugin host started is gone when the block ends, even if loading failed."""
    from ..engine import registry
    from ..hostio.signals import GATE

    GATE.install()
    try:
        GATE.arm()
        with contextlib.redirect_stdout(sys.stderr):  # a built-in's stray print never reaches the listing
            loaded = registry.load()
        checks = list(loaded.checks) + (_described_plugins(loaded, timeout) if loaded.plugins else [])
        yield sorted(checks, key=lambda c: c.id), loaded.builtins + loaded.plugins
    finally:
        GATE.shield()
        GATE.uninstall()


def listing(opts: Options, width: int = 100) -> str:
    """`list`: every check, and every plugin that failed to load, as text, JSON or docs/rules.md's table."""
    from ..report.rules import render_listing

    with checks_and_plugins(opts.timeout) as (checks, plugins):
        pass
    return render_listing(checks, plugins, opts.format, width)


def explanation(opts: Options, width: int) -> str:
    """`explain ID`: the check's documentation as text (at `width`) or JSON."""
    from ..hostio.redact import Redactor
    from ..report.explain import explain_text

    with checks_and_plugins(opts.timeout) as (checks, _):
        pass
    import fnmatch

    from ..engine.registry import near_misses

    wanted = str(opts.check_id)
    pattern = wanted if any(ch in wanted for ch in "*?[") or "." in wanted else wanted + ".*"  # a group: its checks
    chosen = [x for x in checks if x.id == wanted] or [x for x in checks if fnmatch.fnmatchcase(x.id, pattern)]
    if not chosen:  # an upstream text's id (`explain M15`): the rule it belongs to
        from ..upstream.registry import TextIndex

        chosen = list({id(c): c for c, _ in TextIndex(checks).texts_named(wanted)}.values())
    if not chosen:
        near = near_misses(wanted, [x.id for x in checks])
        raise UsageError(f"unknown check {wanted!r}" + (f"; did you mean {', '.join(near)}?" if near else "")
                         + "; `dsv4-doctor list` shows every check (an upstream text's id, e.g. M15, names its check)")
    if opts.format == "json":
        import json

        entries = [{"id": c.id, "title": c.title, "origin": c.origin, "applies_when": c.applies_when,
                    "detects": c.detects, "explanation": c.doc(), "sources": [s.to_dict() for s in c.sources],
                    "texts": [t.to_dict() for t in c.texts],
                    "fixes": [{"description": f.description, "commands": [cmd.shell() for cmd in f.commands],
                               "manual": f.manual} for f in c.fixes]} for c in chosen]
        return json.dumps(Redactor()(entries[0] if len(entries) == 1 and chosen[0].id == wanted else entries),
                          indent=2) + "\n"
    return "\n".join(explain_text(c, width, Redactor()) for c in chosen)
