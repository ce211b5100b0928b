"""One run from start to report: the session's steps in order, and a report that is always produced (a signal or a
crash of the doctor's own becomes a report that says so; only a usage error raises)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..report.assemble import assemble, build, environment
from ..model.core import Check, CheckReport, Interrupted, Profile, Status, UsageError
from ..model.report import Report
from .accept import Acceptance, check_known
from .earlystart import session_for
from .session import select

if TYPE_CHECKING:
    from ..job.syspath import JobPath


def left_out(checks: Sequence[Check], selected: Sequence[Check], only: Sequence[str], skip: Sequence[str], job: bool,
             by: str | None = None) -> dict | None:
    """The checks that apply here but the selection left out (`--only`, `--skip`, or `smoke`'s): a run that left any
    out is no "ready to train". None when every check that applies was selected."""
    context = {"job"} if job else set()
    chosen = {c.id for c in selected}
    left = [c.id for c in checks if (not c.only_with or c.only_with in context) and c.id not in chosen]
    if not left:
        return None
    by = by or " and ".join(flag for flag, given in (("--only", only), ("--skip", skip)) if given)
    return {"count": len(left), "by": by, "checks": left[:64]}


def run_check(python: str | None, timeout: float | None, profile: Profile, only: Sequence[str], skip: Sequence[str],
              strict: bool, on_event: Callable[..., None] | None = None, job_path: JobPath | None = None,
              judged: dict | None = None, accepted: Sequence[Acceptance] = (), left_out_by: str | None = None
              ) -> Report:
    """Everything `check` does up to the report.

    Order: the early probes start, the registry loads, the selection is validated (by id alone, so a usage error
    comes before any waiting and nothing in it depends on the profile), the target is handshaken, the profile is
    resolved once, the checks run. Raises UsageError for a bad command line or target; every child process is gone
    when it returns. `judged`: which interpreter `python` is and why (target.Judged), for the report."""
    session = session_for(python, timeout)  # the one started before the command line was parsed, if it fits
    session.judged = judged
    try:
        session.install_signals()
        session.start()
        session.use_job_path(job_path)  # modules are located as the job's interpreter will find them
        session.load()
        selected = select(session.all_checks(), only, skip, job=profile.job is not None)
        check_known(accepted, [c.id for c in session.all_checks()])
        left = left_out(session.all_checks(), selected, only, skip, profile.job is not None, left_out_by)
        session.check_target()
        profile = session.resolve(profile)
        outcome = session.run(profile, selected, on_event=on_event)
        session.shield()  # the run is over: a signal now does not cut the report short
        return build(outcome, session.python, strict, accepted=accepted, left_out=left)
    except Interrupted as exc:
        session.shield()
        code = 128 + exc.signum
        partial = session.interrupted_outcome(exc)
        if partial is None:  # before any check started: a report that says so
            row: CheckReport = CheckReport(id="doctor.interrupted", title="dsv4-doctor ran", status=Status.ERROR,
                                           summary=f"interrupted by {exc} before any check ran")
            return assemble(profile, [row], [], environment(session.target, None, session.python), strict,
                            time.monotonic() - session.started, interrupted=str(exc), exit_override=code)
        # The fix plan of what finished is marked incomplete by its caller (fixplan.incomplete).
        return build(partial, session.python, strict, exit_override=code, accepted=accepted)
    except UsageError:
        raise
    except Exception as exc:  # the doctor itself broke: report it rather than die
        import traceback

        from ..hostio.redact import cut_tail

        crash: CheckReport = CheckReport(
            id="doctor.internal", title="dsv4-doctor ran", status=Status.ERROR,
            summary=f"dsv4-doctor crashed: {type(exc).__name__}: {exc}",
            details=cut_tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), 4000),
            internal_error=True)
        return assemble(profile, [crash], [], environment(session.target, None, session.python), strict,
                        time.monotonic() - session.started)
    finally:
        session.close()
