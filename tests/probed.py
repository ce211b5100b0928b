"""Built-in checks judged in this process over real probe answers: the static probe and each check's own probes run
for real, by the target interpreter, against an environment of real wheels and fakes (tests/fakes.py Env); only the
CLI process around them is left out. A rule's logic is tested here at the cost of its probes; the probe and CLI
contract of each area keeps an end-to-end test that starts the real console script.

    row = judge(env, bare_python, "cudnn-fe.csa", cp=2, gpu_arch="9.0")        # as `check --only cudnn-fe.csa`
    rows = judge_all(env, bare_python, ["mcore.dsv4", "mcore.config"], cp=2)   # as `--only mcore.dsv4,mcore.config`
    row = judge_in_run(env, bare_python, "cudnn-fe.csa", gpu_arch="10.0")      # as in a run of every check

    script = fix_script(env, bare_python, ["kernels.flash-mla"], gpu_arch="9.0")  # as `fix --only ...`

`judge_all` runs the named checks in their run order with their outcomes recorded, as a run with `--only` of those
ids does (a `needs` outside the selection is not applied). `judge_in_run` adds what the check builds on (its `needs`
and `after`, and theirs), so its row is the one a run of every check gives. The rows are those of the report the CLI
would write (assembled, redacted, typed: assemble.assemble), so a test reads one as it reads `Run.check(id)`.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dsv4_doctor import __version__
from dsv4_doctor.fix import plan as fixplan
from dsv4_doctor.report.assemble import assemble
from dsv4_doctor.checks import CHECKS
from dsv4_doctor.model.facts import StaticFacts
from dsv4_doctor.job.profile import job_profile
from dsv4_doctor.model.core import CheckReport, Profile
from dsv4_doctor.engine.probes import (NVIDIA_SMI, DEFAULT_TIMEOUT_S, LONG_TIMEOUT_S, STATIC_TIMEOUT_S, Probe,
                                       ProbeResult, StaticRequest, handshake_probe, parse_handshake, parse_nvidia_smi,
                                       run_probe, static_probe_for)
from dsv4_doctor.hostio.procs import Processes
from dsv4_doctor.hostio.redact import Redactor
from dsv4_doctor.report.script import render_script
from dsv4_doctor.model.report import Report
from dsv4_doctor.engine.runner import ProbeFailed, execute
from dsv4_doctor.testing import CheckCrashed
from wheels import CACHE

BY_ID = {c.id: c for c in CHECKS}
RUN_IDS = [c.id for c in CHECKS if not c.only_with]  # what `check` runs with no --only and no training command
# The one static probe a real run starts: every built-in's request merged, so a check sees the facts it would see.
STATIC = static_probe_for(StaticRequest.merge(c.static for c in CHECKS), DEFAULT_TIMEOUT_S)


@dataclass
class ProbedContext:
    """model.Context over real probes run by `python` with `sites` on PYTHONPATH (as run_doctor's `sites`), each
    probe once per key, as a run shares them. `env` adds variables to the probes' environment (PATH with a stub
    nvidia-smi, LD_LIBRARY_PATH)."""

    profile: Profile
    python: str
    sites: Sequence[Path] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    outcomes: dict[str, CheckReport] = field(default_factory=dict)
    target: dict = field(default_factory=dict)
    answers: dict[str, ProbeResult] = field(default_factory=dict)
    procs: Processes = field(default_factory=Processes)
    # Answers shared by the judgements of one unchanged environment (fakes.Env keeps them), by interpreter, path,
    # the state of the files there and probe (its script and request: a profile that asks differently asks another
    # probe). A probe reads what is installed, so its answer holds until a file changes; only answers are kept,
    # never a failure.
    shared: dict[tuple, ProbeResult] | None = None
    timeout: float | None = None  # --timeout: every probe's limit, as the session sets it
    _state: tuple | None = None

    def timeout_for(self, probe: Probe) -> float:
        """As Session's ProbePool: a probe's own limit, else the run's for its kind; the static probe's is at most
        --timeout."""
        if probe.key == STATIC.key and self.timeout is not None:
            return min(STATIC_TIMEOUT_S, self.timeout)
        if probe.timeout_s is not None:
            return probe.timeout_s
        if self.timeout is not None:
            return self.timeout
        return LONG_TIMEOUT_S if probe.long else DEFAULT_TIMEOUT_S

    @contextmanager
    def _environment(self):
        """The probes' environment: probes.child_env copies this process's, as the CLI's copies the shell's."""
        wanted = {"PYTHONPATH": os.pathsep.join(str(s) for s in self.sites), **self.env}
        saved = {k: os.environ.get(k) for k in (*wanted, "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
        os.environ.update(wanted)
        os.environ.pop("GITHUB_ACTIONS", None)
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _installed_state(self) -> tuple:
        """The path and what is on it: every file of the sites a test builds (name, size, mtime), and the cached
        wheels' directories by name (they never change once fetched)."""
        if self._state is None:
            state = []
            for site in map(Path, self.sites):
                if CACHE in site.parents:
                    state.append((str(site),))
                    continue
                files = sorted((str(f.relative_to(site)), f.lstat().st_size, f.lstat().st_mtime_ns)
                               for f in site.rglob("*"))
                state.append((str(site), *files))
            self._state = tuple(state)
        return self._state

    def probe(self, probe: Probe) -> ProbeResult:
        shared = self.shared if not self.env else None  # variables of the test's own: asked afresh
        identity = (self.python, self._installed_state(), probe.key, probe.script, probe.request, probe.argv)
        if shared is not None and identity in shared:
            self.answers[probe.key] = shared[identity]
        if probe.key not in self.answers:
            with self._environment():
                self.answers[probe.key] = run_probe(probe, self.python, self.timeout_for(probe), self.procs)
            if shared is not None and self.answers[probe.key].ok:
                shared[identity] = self.answers[probe.key]
        return self.answers[probe.key]

    def require(self, probe: Probe) -> Any:
        result = self.probe(probe)
        if not result.ok:
            raise ProbeFailed(result)
        return result.data

    @property
    def static(self) -> StaticFacts:
        return StaticFacts(self.require(STATIC))

    def gpus(self) -> list[dict]:
        result = self.probe(NVIDIA_SMI)
        return parse_nvidia_smi(result.data) if result.ok else []

    def outcome(self, check_id: str) -> CheckReport | None:
        return self.outcomes.get(check_id)


def profile(cp: int | None = None, gpu_arch: str | None = None, dsa_backend: str | None = None,
            static_only: bool = False, smoke: str = "auto", device: str = "auto",
            job_args: Sequence[str] | None = None, deep: bool = False) -> Profile:
    """The profile `check --cp --gpu-arch --dsa-backend --device [--deep] [--job-args]` makes
    (app.profile_from_options): `smoke="off"` is --no-smoke, `smoke="on"` the `smoke` command; --device cpu turns the
    smoke on, as in `check`; `deep` is --deep (the smoke's tier 2).
    A job whose DSA backend Megatron-Bridge decides is resolved by the session from the installed bridge: test that
    through the CLI."""
    if smoke == "auto" and device == "cpu":
        smoke = "on"
    base = Profile(gpu_arch=gpu_arch, gpu_arch_source="option" if gpu_arch else "unknown", static_only=static_only,
                   smoke=smoke, device=device, deep=deep)
    if job_args is None:
        return replace(base, cp=cp or 1, cp_source="option" if cp else "default", dsa_backend=dsa_backend or "cudnn",
                       dsa_backend_source="option" if dsa_backend else "default")
    made = job_profile(base, list(job_args), cp, dsa_backend)
    decisions = getattr(made.job, "decisions", None)
    assert decisions is None or not decisions.dsa_backend_pending, "the bridge decides the backend: use the CLI"
    return made


def _run_order(ids: Iterable[str], job: bool = False) -> list[str]:
    """The selected ids (or globs, as --only takes them; the job checks match only with a training command) with
    each one's `needs` and `after` among them first, as the runner waits for them."""
    active = RUN_IDS + ([c.id for c in CHECKS if c.only_with == "job"] if job else [])
    chosen = [c for pattern in ids for c in (fnmatch.filter(active, pattern) if "*" in pattern else [pattern])]
    chosen = list(dict.fromkeys(chosen))
    assert chosen, f"no check matches {ids}"
    done: list[str] = []

    def visit(check_id: str) -> None:
        if check_id in done:
            return
        for first in (*BY_ID[check_id].needs, *BY_ID[check_id].after):
            if first in chosen:
                visit(first)
        done.append(check_id)
    for check_id in chosen:
        visit(check_id)
    return done


def run_in_process(env: Any, python: str, ids: Iterable[str], *, prof: Profile | None = None,
                   probe_env: Mapping[str, str] | None = None, timeout: float | None = None,
                   crash_ok: bool = False, **options: Any) -> Report:
    """The typed report of `check --only ID,...` (its rows built, redacted and typed as the CLI's are: assemble),
    the checks judged in this process over real probes. `env` is a fakes.Env, a list of site directories, or None
    (nothing on PYTHONPATH); `options` make the profile (see `profile`) unless `prof` is given; `timeout` is
    --timeout. A check whose own code breaks raises testing.CheckCrashed with its traceback, unless `crash_ok`: then
    it is the run's internal-error row."""
    sites = list(env.sites.values()) if hasattr(env, "sites") else list(env or ())
    ctx = ProbedContext(prof or profile(**options), python, sites, dict(probe_env or {}),
                        shared=getattr(env, "probe_answers", None), timeout=timeout)
    # As Session.check_target: the interpreter's handshake, which python.version reads.
    handshake = ctx.probe(handshake_probe(python))
    ctx.target = (parse_handshake(handshake.data) if handshake.ok else None) or {}
    # As Session.resolve: the GPUs nvidia-smi lists, and their arch unless --gpu-arch gave one.
    gpus = ctx.gpus()
    ctx.profile = replace(ctx.profile, gpus=len(gpus))
    if ctx.profile.gpu_arch is None and gpus and gpus[0].get("compute_capability"):
        ctx.profile = replace(ctx.profile, gpu_arch=gpus[0]["compute_capability"], gpu_arch_source="detected")
    order = _run_order(ids, job=ctx.profile.job is not None)
    for check_id in order:
        check = BY_ID[check_id]
        result, crashed = execute(check, ctx)
        if crashed and not crash_ok:
            raise CheckCrashed(f"{check.id}: {result.summary}\n{result.details}")
        ctx.outcomes[check_id] = CheckReport(id=check.id, title=check.title, status=result.status,
                                             summary=result.summary, details=result.details,
                                             evidence=result.evidence, fixes=list(result.fixes),
                                             sources=list(check.sources), origin=check.origin,
                                             internal_error=crashed)
    report = assemble(ctx.profile, [ctx.outcomes[i] for i in order], [], {}, False, 0.0)
    from dsv4_doctor.report.assemble import installed_versions

    return replace(report, installed=installed_versions(ctx.static.data))  # as assemble.build gives the planner


def judge_all(env: Any, python: str, ids: Iterable[str], **kwargs: Any) -> dict[str, dict]:
    """Each of `ids` judged as `check --only ID,...` judges it: its row of the JSON report, by id."""
    return {row["id"]: row for row in run_in_process(env, python, ids, **kwargs).to_dict()["checks"]}


def fix_script(env: Any, python: str, ids: Iterable[str], **kwargs: Any) -> str:
    """What `fix --only ID,...` prints: the plan of the in-process report, rendered as app.fix renders it."""
    kwargs.setdefault("smoke", "off")  # `fix` runs no smoke
    report = run_in_process(env, python, ids, **kwargs)
    return render_script(fixplan.plan_of(report), python, report.profile, __version__, Redactor(),
                         fixplan.incomplete(report), report.job_settings)


def judge(env: Any, python: str, check_id: str, **kwargs: Any) -> dict:
    """One check judged as `check --only ID` judges it: its row."""
    return judge_all(env, python, [check_id], **kwargs)[check_id]


def builds_on(check_id: str) -> list[str]:
    """The check and every check it builds on (`needs`, `after`), transitively."""
    out: list[str] = []

    def visit(c: str) -> None:
        if c in out or c not in BY_ID:
            return
        out.append(c)
        for first in (*BY_ID[c].needs, *BY_ID[c].after):
            visit(first)
    visit(check_id)
    return out


def judge_in_run(env: Any, python: str, check_id: str, **kwargs: Any) -> dict:
    """One check's row as a run of every check gives it: the checks it builds on run first, and its `needs` apply."""
    return judge_all(env, python, builds_on(check_id), **kwargs)[check_id]


def without_timings(row: dict) -> dict:
    """A row without what differs from run to run: its duration and the seconds a probe measured (`import_s`)."""
    evidence = {k: v for k, v in row.get("evidence", {}).items()
                if not (k.endswith("_s") and isinstance(v, (int, float)))}
    return {**{k: v for k, v in row.items() if k != "duration_s"}, "evidence": evidence}


def assert_same_rows(report: dict, rows: Mapping[str, dict]) -> None:
    """The in-process rows are the CLI's: every check of `report` (a JSON report) has the same row in `rows`."""
    assert sorted(rows) == sorted(c["id"] for c in report["checks"])
    for row in report["checks"]:
        assert without_timings(rows[row["id"]]) == without_timings(row), row["id"]
