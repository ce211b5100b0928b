"""The commands as use cases: each takes the parsed `Options` and gives its result. `check`, `smoke` and `preflight`
give the run's Report and the exit code; `fix` its report, plan and exit code (`list` and `explain`, which inspect
no target, are commands/catalog.py's). The CLI (cli/main.py) parses the command line into Options and prints; a report
is written by the `deliver` callable the CLI passes in, because a fleet's rank 0 must write the fleet's report while the
other ranks still wait.

Nothing heavy is imported at module level: the session, the fleet and the renderers load when a command needs them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .. import __version__
from ..model.core import ExitCode, Profile, UsageError
from .execjob import exec_job
from ..report.output import check_output_path, isatty, say, wants_live_display, write_stdout

if TYPE_CHECKING:
    from ..fix.plan import Answer, Plan
    from ..model.report import Report
    from ..engine.target import Judged

Deliver = Callable[["Report"], int]  # writes a report where the options say; its exit code (4: not written)


@dataclass(frozen=True, eq=False)  # never compared: comparison methods would only cost start-up time
class Options:
    """A command line, parsed: every option any command has, with its value when the command has no such option."""

    command: str = "check"
    cp: int | None = None
    dsa_backend: str | None = None
    gpu_arch: str | None = None
    python: str | None = None
    timeout: float | None = None
    only: list[str] | None = None  # as given: each may hold several ids, comma-separated (ids() splits them)
    skip: list[str] | None = None
    format: str = "text"
    output: str | None = None
    strict: bool = False
    accept: list[str] | None = None  # --accept ID[:REASON], repeatable (engine/accept.py: with the variable and files)
    static_only: bool = False
    versions: bool = False  # check --versions: the versions block alone (versions_only)
    no_smoke: bool = False
    deep: bool = False  # --deep: the smoke's tier 2 (the DSv4 layer, fused vs unfused) too
    device: str = "auto"
    distributed: str = "auto"  # auto | on | off
    fleet_port: int | None = None
    fleet_wait: float | None = None
    anonymize_hosts: bool = False
    ray: bool = False  # fleet mode over the job's Ray cluster (fleet --ray, check --ray)
    ray_hook: bool = False  # also give the job Ray's worker_process_setup_hook that refuses unchecked nodes
    ray_wait_nodes: float | None = None  # --ray-wait-nodes: seconds to wait for the job's GPU nodes to join
    verbose_ranks: bool = False
    no_kernel_cache: bool = False
    job_args: str | None = None
    job_cwd: str | None = None  # --job-cwd: where the --job-args command runs (default: the current folder)
    job_args_file: str | None = None  # --job-args-file: where --job-args is read from (cli.with_job_args_file)
    dry_run: bool = False
    report: str | None = None
    job_command: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # triage: the logs (files, folders, `-`)
    apply: bool = False
    yes: bool = False
    break_system_packages: bool = False  # fix: PEP 668's other way (pip's --break-system-packages), not a venv
    venv: str | None = None  # fix: the venv's folder for an externally managed interpreter (fix/pep668.py)
    download: str | None = None  # fix --download DIR: fetch what the plan installs into DIR (fix/offline.py)
    from_dir: str | None = None  # fix --from DIR: install from DIR alone, no index, git pins from their archives
    check_id: str | None = None
    verbose: int = 0
    into: str | None = None  # warm: the image-wide kernel store's folder
    recipes: str | None = None  # warm: the kernel recipes (a file or a per-user store)
    judged: Judged | None = None  # set once resolved (_resolved): the interpreter the stack rows judge, and why


def ids(values: Sequence[str] | None, option: str = "--only/--skip") -> list[str]:
    out: list[str] = []
    for v in values or []:
        found = [x.strip() for x in v.split(",") if x.strip()]
        if not found:  # `--only ''` would otherwise select everything, the opposite of what it says
            raise UsageError(f"{option} {v!r}: no check id in it")
        out += found
    return out


def profile_from_options(opts: Options, smoke: str, job_argv: Sequence[str] | None = None) -> Profile:
    """The profile from the options, or from a training command (`job_argv`): its CP and DSA backend."""
    base = Profile(gpu_arch=opts.gpu_arch, gpu_arch_source="option" if opts.gpu_arch else "unknown",
                   device=opts.device, smoke=smoke, static_only=opts.static_only, deep=opts.deep)
    if job_argv is None:
        return replace(base, cp=opts.cp or 1, cp_source="option" if opts.cp else "default",
                       dsa_backend=opts.dsa_backend or "cudnn",
                       dsa_backend_source="option" if opts.dsa_backend else "default")
    from ..job.profile import job_profile

    cwd = os.path.abspath(opts.job_cwd) if opts.job_cwd else os.getcwd()  # where the command runs: its chain's start
    return job_profile(base, job_argv, opts.cp, opts.dsa_backend, defer=True, cwd=cwd)


def _job_argv(opts: Options) -> list[str] | None:
    if opts.job_args is None:
        return None
    from ..job.command import split_job_args

    return split_job_args(opts.job_args)


def job_start(opts: Options, profile: Profile):
    """How the job's interpreter starts (its sys.path[0], path flags and variables), for the static probe: from
    preflight's command in the current folder, or --job-args in --job-cwd (default: the current folder)."""
    if profile.job is None:
        return None
    from ..job.syspath import job_path, of_chain

    if profile.job.chain is not None:  # the chain the job was read with, from the same folder
        return of_chain(profile.job.chain)
    argv = list(opts.job_command)
    argv = argv[1:] if argv[:1] == ["--"] else argv
    if not argv:
        argv = _job_argv(opts) or []
    cwd = os.path.abspath(opts.job_cwd) if opts.job_cwd else os.getcwd()
    return job_path(argv, cwd)


def _resolved(opts: Options, profile: Profile) -> Options:
    """The options with the interpreter every step of the command uses resolved once: --python, else the one the
    job's command runs (its launch chain), else the doctor's own; `judged` says which and why (target.judged_python)."""
    from ..engine.target import judged_python

    job = profile.job
    judged = judged_python(opts.python, job.chain if job is not None else None, job is not None)
    return replace(opts, python=judged.python, judged=judged)


def run_report(opts: Options, profile: Profile, only: list[str], skip: list[str], strict: bool,
               progress: bool) -> Report:  # `smoke` runs only the smoke: its report says the rest was left out
    from ..report.dispatch import live_display
    from ..engine.runreport import run_check

    from ..engine.accept import gather

    accepted = gather(opts.accept, os.environ, os.getcwd())  # a bad acceptance is a usage error, before any check
    display = live_display(progress)
    try:
        judged = opts.judged if opts.judged is not None and opts.judged.python == opts.python else None
        return run_check(opts.python, opts.timeout, profile, only, skip, strict, on_event=display,
                         job_path=job_start(opts, profile), judged=judged.to_dict() if judged else None,
                         accepted=accepted, left_out_by="smoke" if opts.command == "smoke" else None)
    finally:
        display.stop()


# ----------------------------------------------------------------------------------------- check, smoke, preflight

def check(opts: Options, deliver: Deliver, smoke: bool = False) -> tuple[Report, int]:
    """`check` (or `smoke`): this rank's report and the exit code; the report (a fleet's rank 0: the fleet's) went
    to `deliver`."""
    check_output_path(opts.output)
    if smoke:
        profile, only, skip, strict = profile_from_options(opts, "on"), ["smoke.*"], [], False
    else:
        only, skip, strict = ids(opts.only, "--only"), ids(opts.skip, "--skip"), opts.strict
        smoke_mode = "off" if opts.no_smoke else ("on" if opts.device == "cpu" else "auto")
        profile = profile_from_options(opts, smoke_mode, _job_argv(opts))
    env, profile = fleet_env(opts, profile)
    only, fleet_checks = fleet_selection(env or opts.ray, only, skip)
    started = time.monotonic()
    progress = wants_live_display(sys.stderr, opts.format) and (env is None or env.rank == 0)
    opts = _resolved(opts, profile)
    report = run_report(opts, profile, only, skip, strict, progress=progress)
    if opts.ray:
        from ..fleet import raycluster

        return report, raycluster.take_part(opts, report, _job_argv(opts), deliver, fleet_checks,
                                            _probes_profile(opts, _job_argv(opts)))[0]
    if env is None:
        return report, deliver(report)
    from ..fleet import take_part

    assert opts.python is not None
    return report, take_part(env, report, opts.python, started, strict, deliver, opts.fleet_wait, opts.verbose_ranks,
                             rerun(opts, profile, skip, strict), opts.anonymize_hosts, fleet_checks)


# What `check --versions` runs: the static probe's facts (versions, where each module lies, the cubins; deps.metadata
# waits for it), nvidia-smi (driver, GPUs), torch's import (CUDA, cuDNN, NCCL; not with --static-only); nothing else.
VERSIONS_CHECKS = "python.version,deps.metadata,torch.install"


def versions_only(opts: Options, deliver: Deliver) -> int:
    """`check --versions`: the versions block alone, to `deliver`; its exit code (the block is no verdict)."""
    clash = [name for name, given in (("--only", opts.only), ("--skip", opts.skip), ("--ray", opts.ray),
                                      ("--strict", opts.strict), ("--accept", opts.accept), ("--deep", opts.deep))
             if given]
    if clash or opts.format == "junit":
        raise UsageError(f"--versions prints what was found, not a verdict: it does not take "
                         f"{', '.join(clash) or '--format junit'}")
    opts = replace(opts, only=[VERSIONS_CHECKS], no_smoke=True, distributed="off")
    return check(opts, deliver)[1]


def preflight(opts: Options, deliver: Deliver) -> tuple[Report, int]:
    """Check the environment for the job the command describes; exec the command when nothing blocks it (then this
    does not return)."""
    from ..report.dispatch import verdict_line

    command = list(opts.job_command)
    if command[:1] == ["--"]:
        command = command[1:]
    elif command:
        from ..job.shape import shape_program

        raise UsageError(f"put the training command after `--` (got {shape_program(command[0])} first)")
    if command and not command[0]:
        raise UsageError("the training command's program is an empty word (an unset variable, such as \"$PY\"?)")
    check_output_path(opts.report, "--report")
    profile = profile_from_options(opts, "off" if opts.no_smoke else "auto", command)
    if profile.job is not None:
        profile.job.at_preflight = True  # the composition resolves oc.env as the job will: a missing one fails
    env, profile = fleet_env(opts, profile)
    started = time.monotonic()
    only, skip = ids(opts.only, "--only"), ids(opts.skip, "--skip")
    only, fleet_checks = fleet_selection(env or opts.ray, only, skip)
    opts = _resolved(opts, profile)
    if opts.ray and opts.ray_hook:  # before any check: the hook keeps the job's own py_modules, or is refused here
        from ..fleet.rayhelper import job_py_modules

        job_modules = job_py_modules(command)
    report = run_report(opts, profile, only, skip, opts.strict, progress=False)
    if opts.ray:
        from ..fleet import raycluster

        code, checked = raycluster.take_part(opts, report, command, deliver, fleet_checks,
                                             _probes_profile(opts, command))
        if opts.ray_hook and code == 0:
            command = command + raycluster.hook_overrides(checked, job_modules)
    elif env is not None:
        # Rank 0 writes the fleet's report; every rank execs only when the whole fleet passed.
        from ..fleet import take_part

        assert opts.python is not None
        code = take_part(env, report, opts.python, started, opts.strict, deliver, opts.fleet_wait, opts.verbose_ranks,
                         rerun(opts, profile, skip, opts.strict), opts.anonymize_hosts, fleet_checks)
    else:
        code = deliver(report)
    if code >= 128:
        return report, code
    if code != 0:
        if env is None or env.rank == 0:
            say("dsv4-doctor preflight: not starting the job"
                + (f" ({verdict_line(report)})" if env is None and not opts.ray else " (the fleet's verdict)"))
        return report, int(ExitCode.FAILED)
    if opts.dry_run:
        if env is None or env.rank == 0:  # a fleet's other ranks print nothing, as for the report
            from ..job.shape import shape

            say("dsv4-doctor preflight: dry run, not starting: " + shape(command))
        return report, 0
    from ..hostio.signals import GATE

    if GATE.late is not None:  # a signal came while the report was written: the job is not started
        import signal

        say(f"dsv4-doctor preflight: {signal.Signals(GATE.late).name} arrived; not starting the job")
        return report, 128 + GATE.late
    GATE.uninstall()  # the job gets the dispositions the doctor was started with
    return report, exec_job(command)


# --------------------------------------------------------------------------------------------------------- fleet

def fleet_selection(env, only: list[str], skip: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """--only / --skip of the fleet rows, which the merge writes: (the --only the ranks' own runs take, the fleet
    rows the merge writes). `--only fleet.drift` alone still runs the cheapest check, python.version, since a rank's
    run is what gives its fingerprint."""
    import fnmatch

    from ..fleet import FLEET_CHECKS

    if env is None:
        return only, FLEET_CHECKS
    named = [p for p in only if fnmatch.filter(FLEET_CHECKS, p)]
    rest = [p for p in only if not p.startswith("fleet.")]
    chosen = [c for c in FLEET_CHECKS if not named or any(fnmatch.fnmatchcase(c, p) for p in named)]
    chosen = [c for c in chosen if not any(fnmatch.fnmatchcase(c, p) for p in skip)]
    if only and not rest:
        rest = ["python.version"]
    return rest, tuple(chosen)


def rerun(opts: Options, profile: Profile, skip: list[str], strict: bool) -> Callable[[list[str], float], Report]:
    """For a rank whose packages differ from its host's local rank 0's: its host-level checks, run here, within the
    seconds the fleet's timeline leaves (each probe gets at most half of them, less the checks' margins)."""

    def again(check_ids: list[str], seconds: float) -> Report:
        from ..engine.probes import DEFAULT_TIMEOUT_S

        timeout = max(5.0, min(float(opts.timeout or DEFAULT_TIMEOUT_S), (seconds - 15.0) / 2))
        own = replace(profile, fleet=dict(profile.fleet or {}, own_host_checks=True))
        return run_report(replace(opts, timeout=timeout), own, check_ids,
                          [p for p in skip if not p.startswith("fleet.")], strict, progress=False)

    return again


def _probes_profile(opts: Options, command: list[str] | None) -> Profile:
    """The profile a Ray node that ran only the doctor's shipped probes is judged under: the driver's options and
    job command, no device."""
    try:
        return profile_from_options(opts, "off", list(command) if command else None)
    except Exception:  # noqa: BLE001 - a command the driver already read; never a crash here
        return Profile()


def fleet_env(opts: Options, profile: Profile):
    """(this rank's launcher view or None, the profile with the rank in it)."""
    from .. import fleet

    if opts.ray_wait_nodes is not None and not opts.ray:
        raise UsageError("--ray-wait-nodes waits for the GPU nodes of the job's Ray cluster: it needs --ray")
    if opts.ray:  # the driver of a Ray fleet: its nodes are checked by Ray tasks, not by a launcher's ranks
        if opts.distributed == "on":
            raise UsageError("--ray checks the nodes of the job's Ray cluster: it does not take --distributed")
        from ..fleet import raycluster

        return None, raycluster.driver_profile(profile)
    env = fleet.detect(os.environ, opts.distributed, opts.fleet_port)
    if env is None:
        from ..fleet import raycluster

        return None, raycluster.node_profile(profile, os.environ)  # a Ray fleet's node task, or a single host
    fleet.fleet_key(os.environ)  # an unreadable secret file is a usage error now, not after the checks
    return env, replace(profile, fleet=fleet.profile_fields(env, fleet.host_label(opts.anonymize_hosts, env)))


# ------------------------------------------------------------------------------------------------------------ fix

def fix(opts: Options, ask: Callable[[str], Answer]) -> tuple[Report, Plan, int]:
    """`fix`: the run's report, its fix plan (printed on stdout as a script) and the exit code; with --apply, the
    plan's pip steps run once `ask` (the CLI's y/N prompt) says yes, or at once with --yes, and the exit code is
    the re-check's."""
    from ..fix import plan as fixplan
    from ..hostio.redact import Redactor
    from ..report.dispatch import verdict_line
    from ..report.script import render_script

    if opts.apply and not opts.yes and not isatty(sys.stdin):
        raise UsageError("--apply needs --yes when stdin is not a terminal")
    if opts.break_system_packages and opts.venv is not None:
        raise UsageError("--break-system-packages and --venv are the two ways for an externally managed interpreter: "
                         "give one")
    from ..fix.fetch import offline_folder

    folder = offline_folder(opts.download, opts.from_dir, opts.apply)
    profile = profile_from_options(opts, "off", _job_argv(opts))
    only, skip = ids(opts.only, "--only"), ids(opts.skip, "--skip")
    opts = _resolved(opts, profile)
    python = opts.python
    assert python is not None
    report = run_report(opts, profile, only, skip, False, progress=False)
    code = report.exit_code
    plan = fixplan.plan_of(report, fixplan.Policy(opts.break_system_packages, opts.venv, opts.job_cwd))
    if opts.from_dir is not None:
        from ..fix.offline import from_folder

        plan = from_folder(plan, folder)
    incomplete = fixplan.incomplete(report)
    redact = Redactor()
    printed = write_stdout(render_script(plan, python, report.profile, __version__, redact, incomplete,
                                         report.job_settings))
    before = verdict_line(report)
    say("before: " + before)
    if not printed:  # nobody could read the plan: nothing is applied from it
        say("dsv4-doctor fix: could not write the plan: stdout is closed, broken or not read"
            + ("; nothing applied" if opts.apply else ""))
        return report, plan, max(int(code), int(ExitCode.OUTPUT))
    if incomplete:  # an unfinished run: its plan is partial, and --apply does not act on it
        if opts.apply:
            say(f"nothing applied: {incomplete}")
        return report, plan, code if code >= int(ExitCode.INTERNAL) else int(ExitCode.INTERNAL)
    if opts.download is not None:
        from ..fix.fetch import download_plan

        return report, plan, download_plan(plan, python, folder, say)
    if not opts.apply:
        # A crashed check (exit 3) is no clean bill, whatever the plan holds.
        return report, plan, code if code >= int(ExitCode.INTERNAL) else plan.exit_code
    from ..fix.apply import apply_and_recheck

    return report, plan, apply_and_recheck(
        plan, python, redact, code, before, opts.yes, ask, say,
        lambda: run_report(replace(opts, python=plan.venv_python or python), profile, only, skip, False,
                           progress=False))

