"""The `dsv4-doctor` command line: argument parsing and wiring. It never imports torch or any inspected package.

Exit codes (the same for every output format):
  0    no check failed (warnings allowed, unless --strict); `fix`: a plan was printed
  1    at least one check failed or errored (or warned, with --strict); `fix`: some failure has no fix at all
  2    usage error
  3    the doctor itself or a plugin crashed (the report is still written)
  4    the report could not be written to --output (it went to stdout instead)
  129, 130, 143  interrupted by SIGHUP, SIGINT or SIGTERM (probes killed; a report of what finished is written)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import re
import sys
from collections.abc import Sequence
from dataclasses import replace

from . import __version__
from .model import ExitCode, Profile, UsageError
from .render.output import (check_output_path, emit, finish_streams, isatty, line_text, preflight_report, say,
                            write_stderr, write_stdout)

EXIT_CODES_HELP = (
    "Exit codes: 0 no check failed (warnings allowed unless --strict); 1 a check failed or errored (or warned, with "
    "--strict); 2 usage error; 3 the doctor itself or a plugin crashed (the report is still written); 4 the report "
    "could not be written to --output (it went to stdout); 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM."
)
COMMANDS = ("check", "smoke", "list", "explain", "fix", "preflight")
FORMATS = ("text", "json", "markdown", "junit")


# ------------------------------------------------------------------------------------------------ argument types

def _cp(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= n <= 1024:
        raise argparse.ArgumentTypeError(f"--cp must be between 1 and 1024, got {n}")
    return n


def _gpu_arch(value: str) -> str:
    if not re.fullmatch(r"\d{1,2}\.\d", value):
        raise argparse.ArgumentTypeError("expected a compute capability such as 9.0 or 10.0")
    return value


def _timeout(value: str) -> float:
    try:
        t = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
    if not 1.0 <= t <= 3600.0:  # also rejects inf and nan
        raise argparse.ArgumentTypeError("must be between 1 and 3600 seconds")
    return t


def _ids(values: Sequence[str] | None, option: str = "--only/--skip") -> list[str]:
    out: list[str] = []
    for v in values or []:
        ids = [x.strip() for x in v.split(",") if x.strip()]
        if not ids:  # `--only ''` would otherwise select everything, the opposite of what it says
            raise UsageError(f"{option} {v!r}: no check id in it")
        out += ids
    return out


# ------------------------------------------------------------------------------------------------------ parser

class _Parser(argparse.ArgumentParser):
    """argparse, its messages through the output layer: an unrecognised argument may be a secret (`--hf-token
    hf_...` given to the wrong command), and a stuck stderr must not hold the exit."""

    def _print_message(self, message: str, file=None) -> None:
        if message:
            (write_stdout if file is sys.stdout else write_stderr)(line_text(message.rstrip("\n")) + "\n")

    def error(self, message: str):
        write_stderr(line_text(self.format_usage().rstrip("\n")) + "\n")
        say(f"{self.prog}: error: {message}")
        finish_streams()
        sys.exit(int(ExitCode.USAGE))


def _profile_options(p: argparse.ArgumentParser, gpu_arch: bool = True) -> None:
    p.add_argument("--cp", type=_cp, default=None, metavar="N",
                   help="Context-parallel size of the planned job (1-1024; default 1, or the job's with --job-args).")
    p.add_argument("--dsa-backend", choices=("cudnn", "none"), default=None,
                   help="Megatron dsa_kernel_backend (default: cudnn, as the MLM CLI resolves it for dsv4_hybrid).")
    if gpu_arch:
        p.add_argument("--gpu-arch", type=_gpu_arch, metavar="X.Y",
                       help="Compute capability the job runs on, e.g. 10.0; default: detected with nvidia-smi.")
    p.add_argument("--python", metavar="PATH", help="Interpreter to inspect (default: the one running the doctor).")
    p.add_argument("--timeout", type=_timeout, default=60.0, metavar="S",
                   help="Seconds each isolated probe may take before it is killed (default 60).")


def _kernel_cache_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-kernel-cache", action="store_true",
                   help="Do not give the probes the doctor's persistent CuTe DSL kernel cache "
                        "(~/.cache/dsv4-doctor/cute-dsl; also DSV4_DOCTOR_KERNEL_CACHE=off).")


def _fleet_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fleet mode (one report for every rank of a torchrun or srun job)")
    g.add_argument("--distributed", dest="distributed", action="store_const", const="on", default="auto",
                   help="Run as one rank of a fleet (default: on when torchrun or an srun step with more than one "
                        "task launched this process).")
    g.add_argument("--no-distributed", dest="distributed", action="store_const", const="off",
                   help="Run single-host even under torchrun or srun.")
    g.add_argument("--fleet-port", type=int, metavar="PORT",
                   help="The port rank 0 serves the exchange on (default MASTER_PORT + 1, so the job's own port "
                        "stays free; in an srun step without MASTER_PORT, a port derived from the job and step ids).")
    g.add_argument("--fleet-wait", type=_timeout, metavar="S",
                   help="Seconds the other ranks have to report, counted once rank 0's exchange helper hosts the "
                        "store (default: the rest of the run's time budget plus 15 s of launcher skew, plus one "
                        "more budget when a rank may run its host-level checks itself).")
    g.add_argument("--anonymize-hosts", action="store_true",
                   help="Name hosts in the fleet report by a salted hash (one salt per run) instead of their name.")
    g.add_argument("--verbose-ranks", action="store_true",
                   help="Every rank other than 0 also prints its own report to stderr (by default they print "
                        "nothing).")


def _selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", action="append", metavar="ID[,ID...]",
                   help="Run only these check ids (repeatable; globs such as 'cudnn-fe.*' allowed).")
    p.add_argument("--skip", action="append", metavar="ID[,ID...]", help="Skip these check ids (repeatable; globs).")


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--format", choices=FORMATS, default="text", help="Report format (default text).")
    p.add_argument("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The root parser and each command's (for its usage line on a usage error)."""
    root = _Parser(
        prog="dsv4-doctor", epilog=EXIT_CODES_HELP,
        description="Preflight checks for DeepSeek-V4 context-parallel training (verl + Megatron-Core + TE + cuDNN "
                    "frontend). `check` is the default command.")
    root.add_argument("--version", action="version", version=f"dsv4-doctor {__version__}")
    sub = root.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="Check this environment for the planned DSv4 job (the default).",
                           epilog=EXIT_CODES_HELP)
    _profile_options(check)
    _selection_options(check)
    _report_options(check)
    check.add_argument("--strict", action="store_true", help="Warnings fail too (exit 1).")
    check.add_argument("--static-only", action="store_true",
                       help="Skip every check that imports packages (metadata, file locations and ast only).")
    check.add_argument("--no-smoke", action="store_true", help="Skip the smoke forward.")
    check.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                       help="Where the smoke forward runs: auto (a GPU when one is visible, else skipped), cuda, cpu.")
    _fleet_options(check)
    _kernel_cache_option(check)
    check.add_argument("--job-args", metavar="CMD",
                       help="The training command, as one shell-quoted string: its DSv4 settings set the profile and "
                            "the job.* checks run (what `preflight` does, without running it).")

    preflight = sub.add_parser(
        "preflight", help="Check the environment and a training command's DSv4 settings, then exec the command.",
        usage="dsv4-doctor preflight [options] -- COMMAND [ARG ...]",
        epilog="The report goes to stderr (text), the job's stdout stays clean. Exit: the command's own exit code "
               "when it ran (it replaces the doctor: same pid); 1 when a check failed (or warned, with --strict) and "
               "the command did not start; 2 usage error; 129/130/143 interrupted.")
    preflight.add_argument("--gpu-arch", type=_gpu_arch, metavar="X.Y",
                           help="Compute capability the job runs on; default: detected with nvidia-smi.")
    preflight.add_argument("--cp", type=_cp, default=None, metavar="N",
                           help="The job's CP size, for a command whose settings the doctor cannot read (a wrapper "
                                "script); a command that states its own must agree.")
    preflight.add_argument("--dsa-backend", choices=("cudnn", "none"), default=None,
                           help="The job's dsa_kernel_backend, for a command that does not state it (a wrapper "
                                "script); a command that states its own must agree.")
    preflight.add_argument("--python", metavar="PATH", help="Interpreter to inspect (default: the one running the "
                           "doctor; in a job script, the job's python).")
    preflight.add_argument("--timeout", type=_timeout, default=60.0, metavar="S",
                           help="Seconds each isolated probe may take before it is killed (default 60).")
    _selection_options(preflight)
    preflight.add_argument("--strict", action="store_true", help="Warnings block the command too.")
    preflight.add_argument("--no-smoke", action="store_true", help="Skip the smoke forward.")
    preflight.add_argument("--dry-run", action="store_true", help="Check, report, and stop before running the command.")
    preflight.add_argument("--report", metavar="FILE", help="Also write the JSON report to FILE (for the job's logs).")
    _fleet_options(preflight)
    _kernel_cache_option(preflight)
    preflight.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                           help="The training command, after `--`.")

    smoke = sub.add_parser("smoke", help="Run only the smoke forward.", epilog=EXIT_CODES_HELP)
    _profile_options(smoke)
    _report_options(smoke)
    _fleet_options(smoke)
    smoke.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                       help="auto: the GPU when torch sees one, else the CPU.")
    _kernel_cache_option(smoke)

    lst = sub.add_parser("list", help="List every check, where it comes from and when it applies.")
    lst.add_argument("-f", "--format", choices=("text", "json", "markdown"), default="text",
                     help="text, json, or markdown (the README rules table).")
    lst.add_argument("--timeout", type=_timeout, default=30.0, metavar="S",
                     help="Seconds a third-party plugin may take to load and describe itself (default 30).")

    explain = sub.add_parser("explain", help="Why a check exists, when it applies, its sources and its fixes.")
    explain.add_argument("check_id", metavar="ID", help="A check id from `dsv4-doctor list`.")
    explain.add_argument("--timeout", type=_timeout, default=30.0, metavar="S",
                         help="Seconds a third-party plugin may take to load and describe itself (default 30).")

    fix = sub.add_parser("fix", help="Print the fix plan of the current failures as a shell script (or --apply it).",
                         epilog="Exit codes: 0 a plan was printed (or nothing to fix); 1 some failure has no fix; "
                                "2 usage error. With --apply: the re-check's exit code.")
    _profile_options(fix)
    _selection_options(fix)
    fix.add_argument("--apply", action="store_true", help="Run the plan's pip steps with the target's pip, then "
                     "re-check. Manual steps (torch) and job settings are never run.")
    fix.add_argument("--yes", "-y", action="store_true", help="Do not ask before applying (needed without a terminal).")
    fix.add_argument("--job-args", metavar="CMD",
                     help="The training command, as one shell-quoted string: the job.* checks run, and the plan ends "
                          "with the job's settings (CP_ARGS, export lines), as comments.")
    return root, {"check": check, "smoke": smoke, "list": lst, "explain": explain, "fix": fix,
                  "preflight": preflight}


# ----------------------------------------------------------------------------------------------------- running

def run_report(args, profile: Profile, only: list[str], skip: list[str], strict: bool, progress: bool,
               keep: dict | None = None) -> dict:
    from .render import Progress
    from .session import run_check

    bar = Progress(progress)
    try:
        return run_check(args.python, args.timeout, profile, only, skip, strict, on_event=bar, keep=keep)
    finally:
        bar.stop()


def cmd_check(args, smoke: bool = False) -> int:
    from .session import profile_from_options

    check_output_path(args.output)
    if smoke:
        profile, only, skip, strict = profile_from_options(args, "on"), ["smoke.*"], [], False
    else:
        only, skip, strict = _ids(args.only, "--only"), _ids(args.skip, "--skip"), args.strict
        job_argv = None
        if args.job_args is not None:
            from .job.command import split_job_args

            job_argv = split_job_args(args.job_args)
        smoke_mode = "off" if args.no_smoke else ("on" if args.device == "cpu" else "auto")
        profile = profile_from_options(args, smoke_mode, job_argv)
    env, profile = _fleet_env(args, profile)
    only, fleet_checks = _fleet_selection(env, only, skip)
    started = time.monotonic()
    progress = args.format == "text" and isatty(sys.stderr) and (env is None or env.rank == 0)
    ran: dict = {}
    report = run_report(args, profile, only, skip, strict, progress=progress, keep=ran)
    if env is None:
        return emit(report, args.format, args.output)
    from .fleet import take_part

    return take_part(env, report, ran["python"], started, strict, lambda merged: emit(merged, args.format, args.output),
                     args.fleet_wait, args.verbose_ranks, _rerun(args, profile, skip, strict), args.anonymize_hosts,
                     fleet_checks)


def _fleet_selection(env, only: list[str], skip: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """--only / --skip of the fleet rows, which the merge writes: (the --only the ranks' own runs take, the fleet
    rows the merge writes). `--only fleet.drift` alone still runs the cheapest check, python.version, since a rank's
    run is what gives its fingerprint."""
    import fnmatch

    from .fleet import FLEET_CHECKS

    if env is None:
        return only, FLEET_CHECKS
    named = [p for p in only if fnmatch.filter(FLEET_CHECKS, p)]
    rest = [p for p in only if not p.startswith("fleet.")]
    chosen = [c for c in FLEET_CHECKS if not named or any(fnmatch.fnmatchcase(c, p) for p in named)]
    chosen = [c for c in chosen if not any(fnmatch.fnmatchcase(c, p) for p in skip)]
    if only and not rest:
        rest = ["python.version"]
    return rest, tuple(chosen)


def _rerun(args, profile: Profile, skip: list[str], strict: bool):
    """For a rank whose packages differ from its host's local rank 0's: its host-level checks, run here, within the
    seconds the fleet's timeline leaves (each probe gets at most half of them, less the checks' margins)."""
    import copy

    def rerun(ids: list[str], seconds: float) -> dict:
        sub = copy.copy(args)
        sub.timeout = max(5.0, min(float(args.timeout), (seconds - 15.0) / 2))
        own = replace(profile, fleet=dict(profile.fleet or {}, own_host_checks=True))
        return run_report(sub, own, ids, [p for p in skip if not p.startswith("fleet.")], strict, progress=False)

    return rerun


def _fleet_env(args, profile: Profile):
    """(this rank's launcher view or None, the profile with the rank in it)."""
    from . import fleet

    env = fleet.detect(os.environ, getattr(args, "distributed", "off"), getattr(args, "fleet_port", None))
    if env is None:
        return None, profile
    fleet.fleet_key(os.environ)  # an unreadable secret file is a usage error now, not after the checks
    return env, replace(profile, fleet=fleet.profile_fields(env, fleet.host_label(args.anonymize_hosts, env)))


@contextlib.contextmanager
def _registry(timeout: float):
    """The checks, built-ins and plugins, for `list` and `explain`: no target is inspected, so no probe starts;
    whatever the plugin hosts started is gone when the block ends, even if loading failed."""
    from .session import Session

    session = Session(None, timeout)
    try:
        session.install_signals()
        session.load(static_probe=False)
        assert session.registry is not None
        yield session.all_checks(), session.registry.builtins + session.registry.plugins
    finally:
        session.close()


def cmd_list(args) -> int:
    from .render.rules import render_listing

    with _registry(args.timeout) as (checks, plugins):
        pass
    return _stdout_or_4(render_listing(checks, plugins, args.format), "the listing")


def cmd_explain(args) -> int:
    from .redact import Redactor
    from .render import output_width
    from .render.explain import explain_text

    with _registry(args.timeout) as (checks, _):
        pass
    c = next((x for x in checks if x.id == args.check_id), None)
    if c is None:
        near = [x.id for x in checks if args.check_id.split(".")[0] in x.id]
        raise UsageError(f"unknown check {args.check_id!r}" + (f"; did you mean {', '.join(near)}?" if near else ""))
    return _stdout_or_4(explain_text(c, output_width(isatty(sys.stdout)), Redactor()), "the explanation")


def _stdout_or_4(text: str, what: str) -> int:
    if write_stdout(text):
        return 0
    say(f"dsv4-doctor: could not write {what}: stdout is closed, broken or not read")
    return int(ExitCode.OUTPUT)


def cmd_fix(args) -> int:
    from . import fixplan
    from .redact import Redactor
    from .render import verdict_line
    from .render.script import render_script
    from .session import profile_from_options

    if args.apply and not args.yes and not isatty(sys.stdin):
        raise UsageError("--apply needs --yes when stdin is not a terminal")
    job_argv = None
    if args.job_args is not None:
        from .job.command import split_job_args

        job_argv = split_job_args(args.job_args)
    profile = profile_from_options(args, "off", job_argv)
    only, skip = _ids(args.only, "--only"), _ids(args.skip, "--skip")
    holder: dict = {}
    report = run_report(args, profile, only, skip, False, progress=False, keep=holder)
    code = report["summary"]["exit_code"]
    reports, python = holder["reports"], holder["python"]  # the session's: --python resolved once
    plan = fixplan.build_plan(reports)
    incomplete = fixplan.incomplete(report)
    redact = Redactor()
    printed = write_stdout(render_script(plan, python, report["profile"], __version__, redact, incomplete,
                                         report.get("job_settings")))
    before = verdict_line(report)
    say("before: " + before)
    if not printed:  # nobody could read the plan: nothing is applied from it
        say("dsv4-doctor fix: could not write the plan: stdout is closed, broken or not read"
            + ("; nothing applied" if args.apply else ""))
        return max(int(code), int(ExitCode.OUTPUT))
    if incomplete:  # an unfinished run: its plan is partial, and --apply does not act on it
        if args.apply:
            say(f"nothing applied: {incomplete}")
        return code if code >= int(ExitCode.INTERNAL) else int(ExitCode.INTERNAL)
    if not args.apply:
        # A crashed check (exit 3) is no clean bill, whatever the plan holds.
        return code if code >= int(ExitCode.INTERNAL) else plan.exit_code
    return fixplan.apply_and_recheck(plan, python, redact, code, before, args.yes, say,
                                     lambda: run_report(args, profile, only, skip, False, progress=False))


def cmd_preflight(args) -> int:
    """Check the environment for the job the command describes; exec the command when nothing blocks it."""
    from .render import verdict_line

    command = list(args.job_command)
    if command[:1] == ["--"]:
        command = command[1:]
    elif command:
        from .job.shape import shape_program

        raise UsageError(f"put the training command after `--` (got {shape_program(command[0])} first)")
    if command and not command[0]:
        raise UsageError("the training command's program is an empty word (an unset variable, such as \"$PY\"?)")
    check_output_path(args.report, "--report")
    from .session import profile_from_options

    profile = profile_from_options(args, "off" if args.no_smoke else "auto", command)
    env, profile = _fleet_env(args, profile)
    started = time.monotonic()
    ran: dict = {}
    only, skip = _ids(args.only, "--only"), _ids(args.skip, "--skip")
    only, fleet_checks = _fleet_selection(env, only, skip)
    report = run_report(args, profile, only, skip, args.strict, progress=False, keep=ran)
    if env is not None:
        # Rank 0 writes the fleet's report; every rank execs only when the whole fleet passed.
        from .fleet import take_part

        code = take_part(env, report, ran["python"], started, args.strict,
                         lambda merged: _preflight_report(args, merged), args.fleet_wait, args.verbose_ranks,
                         _rerun(args, profile, skip, args.strict), args.anonymize_hosts, fleet_checks)
    else:
        code = _preflight_report(args, report)
    if code >= 128:
        return code
    if code != 0:
        if env is None or env.rank == 0:
            say("dsv4-doctor preflight: not starting the job"
                    + (f" ({verdict_line(report)})" if env is None else " (the fleet's verdict)"))
        return int(ExitCode.FAILED)
    if args.dry_run:
        if env is None or env.rank == 0:  # a fleet's other ranks print nothing, as for the report
            from .job.shape import shape

            say("dsv4-doctor preflight: dry run, not starting: " + shape(command))
        return 0
    from .signals import GATE

    if GATE.late is not None:  # a signal came while the report was written: the job is not started
        import signal

        say(f"dsv4-doctor preflight: {signal.Signals(GATE.late).name} arrived; not starting the job")
        return 128 + GATE.late
    GATE.uninstall()  # the job gets the dispositions the doctor was started with
    return exec_job(command)


def _preflight_report(args, report: dict) -> int:
    return preflight_report(report, args.report)


def _where(exc: BaseException) -> str:
    """`Type: message (file:line)` of the innermost frame, for a defect report without a traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    place = f" ({os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})" if tb is not None else ""
    return f"{type(exc).__name__}: {exc}{place}"


def main(argv: Sequence[str] | None = None) -> None:
    args_in = list(sys.argv[1:] if argv is None else argv)
    # `dsv4-doctor` and `dsv4-doctor --cp 2 ...` mean `dsv4-doctor check ...`.
    if not args_in or (args_in[0] not in COMMANDS and args_in[0] not in ("-h", "--help", "--version")):
        args_in.insert(0, "check")
    p, commands = parser()
    args = p.parse_args(args_in)  # exits 2 on a usage error, 0 for --help/--version
    if getattr(args, "no_kernel_cache", False):
        from .kernelcache import ENV

        os.environ[ENV] = "off"  # read once, where the probes' environment is made
    from .model import Interrupted
    from .signals import GATE

    handlers = {"check": cmd_check, "smoke": lambda a: cmd_check(a, smoke=True), "list": cmd_list,
                "explain": cmd_explain, "fix": cmd_fix, "preflight": cmd_preflight}
    GATE.install()  # from here to the end no signal meets the default action (see SignalGate)
    try:
        code = handlers[args.command](args)
    except UsageError as exc:
        write_stderr(line_text(commands.get(args.command, p).format_usage()))
        say(f"dsv4-doctor {args.command}: error: {exc}")
        code = int(ExitCode.USAGE)
    except Interrupted as exc:  # list and explain: nothing to report, only to stop cleanly
        say(f"dsv4-doctor {args.command}: interrupted by {exc}")
        code = 128 + exc.signum
    except Exception as exc:  # a defect of the doctor's own: one line that says where, never a traceback
        say(f"dsv4-doctor {args.command}: internal error: {_where(exc)}")
        code = int(ExitCode.INTERNAL)
    finally:
        GATE.uninstall()
    if GATE.late is not None and code < 128:  # asked to stop while the report was written: it was, and we stop
        code = 128 + GATE.late
    finish_streams()
    sys.exit(code)


def exec_job(command: list[str]) -> int:
    """Replace this process with the job (same pid and environment; the job's exit code is the caller's). The
    session already reaped every probe, removed its temporary files and restored the signal dispositions, which
    exec would skip (no finally, no atexit)."""
    import signal

    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    # Python ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal stays ignored across exec: put them back
    # to the default, as subprocess's restore_signals does (otherwise: the job's `yes | head` printed "Broken
    # pipe" instead of ending quietly).
    for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
        if hasattr(signal, name):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except (OSError, ValueError) as exc:  # ValueError: an empty program name or a NUL in a word
        from .job.shape import shape_program

        say(f"dsv4-doctor preflight: could not start {shape_program(command[0])}: "
            f"{getattr(exc, 'strerror', None) or exc}")
        return 127 if isinstance(exc, (FileNotFoundError, ValueError)) else 126
    return 126  # not reached: exec does not return
