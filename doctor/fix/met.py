"""Which fix commands the copy the job imports already satisfies: the one rule the fix plan (fix/plan.py) and the
text and markdown reports (render.fixes_shown) share, so a report never shows a command the plan would drop.

Pure: it reads a command's argv and the installed versions (name -> version) only. Nothing here renders, runs a
command or starts a session; it imports only the fix types (fix/steps.py) and `packaging`, lazily.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar

from .steps import Command


class ShownFixLike(Protocol):
    """What fixes_to_run reads of a fix as a report shows it (report.ShownFix, a dataclass)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def commands(self) -> tuple[str, ...]: ...

    @property
    def argv(self) -> tuple[tuple[str, ...], ...]: ...

    @property
    def env(self) -> tuple[Mapping[str, str], ...] | None: ...


F = TypeVar("F", bound=ShownFixLike)


def already_met(cmd: Command, installed: Mapping[str, str]) -> bool:
    """A `pip install` whose every requirement is a plain `NAME==VERSION` (no extras, no URL) that the copy the job
    imports already is: running it again would change nothing the re-check judges, so a plan that converges drops it."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    if not cmd.is_pip or "install" not in cmd.argv[1:3]:
        return False
    rest = cmd.argv[cmd.argv.index("install") + 1:]
    # the requirements: not the options, nor the folder a `--target` step names (checks/_reach.py aims one there)
    words = [w for i, w in enumerate(rest)
             if not w.startswith("-") and (i == 0 or rest[i - 1] not in ("--target", "-t"))]
    if not words or any(w.startswith("-") for w in cmd.argv if w in ("-r", "--requirement", "-e", "--editable")):
        return False
    for word in words:
        try:
            req = Requirement(word)
        except InvalidRequirement:
            return False
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if req.extras or req.url or req.marker or len(pins) != 1 or len(req.specifier) != 1 or \
                installed.get(str(canonicalize_name(req.name))) != pins[0]:
            return False
    return True


def fixes_to_run(fixes: Sequence[F], installed: Mapping[str, str]) -> list[F]:
    """A report row's fixes as the text and markdown reports show them, the plan's way: a command whose requirement
    the copy the job imports already meets (already_met) is left out, and so is a fix whose every command is (the plan
    drops that step). A fix without commands (prose, a job setting) stays. The JSON keeps every fix as the check
    made it: a consumer of it applies already_met with the versions it sees."""
    if not installed:
        return list(fixes)

    def met(argv: Sequence[str]) -> bool:
        try:
            return already_met(Command(tuple(argv)), installed)
        except (ValueError, TypeError):  # a masked or odd argv is never judged met: it stays shown
            return False

    out = []
    for fix in fixes:
        if len(fix.argv) != len(fix.commands) or (fix.env is not None and len(fix.env) != len(fix.commands)):
            out.append(fix)
            continue
        keep = [i for i, argv in enumerate(fix.argv) if not met(argv)]
        if len(keep) == len(fix.argv):
            out.append(fix)
        elif keep:
            env = fix.env
            out.append(replace(fix, commands=tuple(fix.commands[i] for i in keep),
                               argv=tuple(fix.argv[i] for i in keep),
                               env=tuple(env[i] for i in keep) if env is not None else None))
    return out
