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
                            wants_live_display, write_stderr, write_stdout)

EXIT_CODES_HELP = (
    "Exit codes: 0 no check failed (warnings allowed unless --strict); 1 a check failed or errored (or warned, with "
    "--strict); 2 usage error; 3 the doctor itself or a plugin crashed (the report is still written); 4 the report "
    "could not be written to --output (it went to stdout); 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM."
)
COMMANDS = ("check", "smoke", "list", "explain", "fix", "preflight")
FORMATS = ("text", "json", "markdown", "junit")


# ------------------------------------------------------------------------------------------------ argument types

class _BadValue(ValueError):
    """A value an option does not take; the parser names the option."""


def _cp(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise _BadValue(f"expected a whole number, got {value!r}") from None
    if not 1 <= n <= 1024:
        raise _BadValue(f"--cp must be between 1 and 1024, got {n}")
    return n


def _gpu_arch(value: str) -> str:
    if not re.fullmatch(r"\d{1,2}\.\d", value):
        raise _BadValue("expected a compute capability such as 9.0 or 10.0")
    return value


def _timeout(value: str) -> float:
    try:
        t = float(value)
    except ValueError:
        raise _BadValue(f"expected seconds, got {value!r}") from None
    if not 1.0 <= t <= 3600.0:  # also rejects inf and nan
        raise _BadValue("must be between 1 and 3600 seconds")
    return t


def _port(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise _BadValue(f"expected a port number, got {value!r}") from None


def _ids(values: Sequence[str] | None, option: str = "--only/--skip") -> list[str]:
    out: list[str] = []
    for v in values or []:
        ids = [x.strip() for x in v.split(",") if x.strip()]
        if not ids:  # `--only ''` would otherwise select everything, the opposite of what it says
            raise UsageError(f"{option} {v!r}: no check id in it")
        out += ids
    return out


# ------------------------------------------------------------------------------------------------------ parser

PROG = "dsv4-doctor"
ROOT_OPTIONS = ("-h", "--help", "--version", "--install-completion", "--show-completion")
DESCRIPTION = ("Preflight checks for DeepSeek-V4 context-parallel training (verl + Megatron-Core + TE + cuDNN "
               "frontend). `check` is the default command.")
PREFLIGHT_EPILOG = ("The report goes to stderr (text), the job's stdout stays clean. Exit: the command's own exit code "
                    "when it ran (it replaces the doctor: same pid); 1 when a check failed (or warned, with --strict) "
                    "and the command did not start; 2 usage error; 129/130/143 interrupted.")
SMOKE_EPILOG = ("Exit codes: 0 the smoke forward passed or was skipped; 1 it failed or errored; 2 usage error; 3 the "
                "doctor itself crashed (the report is still written); 4 the report could not be written to --output "
                "(it went to stdout); 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM.")
FIX_EPILOG = ("Exit codes: 0 a plan was printed (or nothing to fix); 1 some failure has no fix; 2 usage error. With "
              "--apply: the re-check's exit code.")
# Every attribute a handler reads, with its value when the command has no such option.
NAMESPACE_DEFAULTS: dict = {
    "cp": None, "dsa_backend": None, "gpu_arch": None, "python": None, "timeout": None, "only": None, "skip": None,
    "format": "text", "output": None, "strict": False, "static_only": False, "no_smoke": False, "device": "auto",
    "distributed": "auto", "fleet_port": None, "fleet_wait": None, "anonymize_hosts": False, "verbose_ranks": False,
    "no_kernel_cache": False, "job_args": None, "dry_run": False, "report": None, "job_command": [],
    "apply": False, "yes": False, "check_id": None, "verbose": 0,
}


def _namespace(command: str, values: dict) -> argparse.Namespace:
    """The handlers' view of a command line: the same attribute names whatever parsed it."""
    given = {k: v for k, v in values.items() if k in NAMESPACE_DEFAULTS}
    distributed = given.get("distributed")  # --distributed/--no-distributed, or neither
    if not isinstance(distributed, str):
        given["distributed"] = "auto" if distributed is None else ("on" if distributed else "off")
    if given.get("job_command") is None:
        given["job_command"] = []
    for key in ("only", "skip"):  # a repeatable option given no time is None, as argparse had it
        if key in given and not given[key]:
            given[key] = None
    return argparse.Namespace(command=command, **{**NAMESPACE_DEFAULTS, **given})


def _checked(convert):
    """An option's parser: a value it refuses is a usage error that names the option."""
    def parse(value: str):
        from typer import BadParameter

        try:
            return convert(value)
        except _BadValue as exc:
            raise BadParameter(str(exc)) from None
    parse.__name__ = convert.__name__.lstrip("_")
    return parse


def _app():
    """The typer application; built on demand so that nothing of typer is imported before it is needed."""
    import functools

    import typer

    Option = functools.partial(typer.Option, show_default=False)  # each help text states its own default
    from typer._types import TyperChoice as Choice

    app = typer.Typer(name=PROG, help=DESCRIPTION, epilog=EXIT_CODES_HELP, rich_markup_mode=None,
                      add_completion=True, no_args_is_help=False, pretty_exceptions_enable=False,
                      context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
    chosen: dict = {}

    def take(command: str, values: dict) -> None:
        chosen["args"] = _namespace(command, values)

    def version(value: bool) -> None:
        if value:
            write_stdout(f"{PROG} {__version__}\n")
            raise typer.Exit(0)

    @app.callback()
    def root(_version: bool = Option(False, "--version", callback=version, is_eager=True,
                                     help="Print the version and exit.")) -> None:
        pass

    cp_help = "Context-parallel size of the planned job (1-1024; default 1, or the job's with --job-args)."
    dsa_help = "Megatron dsa_kernel_backend (default: cudnn, as the MLM CLI resolves it for dsv4_hybrid)."
    arch_help = "Compute capability the job runs on, e.g. 10.0; default: detected with nvidia-smi."
    python_help = "Interpreter to inspect (default: the one running the doctor)."
    timeout_help = ("Seconds each isolated probe may take before it is killed (default 60, and 150 for the GPU "
                    "smoke's probes).")
    plugin_timeout_help = "Seconds a third-party plugin may take to load and describe itself (default 30)."
    only_help = "Run only these check ids (repeatable; globs such as 'cudnn-fe.*' allowed)."
    skip_help = "Skip these check ids (repeatable; globs)."
    format_help = "Report format (default text)."
    output_help = "Write the report to FILE instead of stdout."
    cache_help = ("Do not give the probes the doctor's persistent CuTe DSL kernel cache "
                  "(~/.cache/dsv4-doctor/cute-dsl; also DSV4_DOCTOR_KERNEL_CACHE=off).")
    fleet = "Fleet mode (one report for every rank of a torchrun or srun job)"
    dist_help = ("Run as one rank of a fleet (default: on when torchrun or an srun step with more than one task "
                 "launched this process); --no-distributed runs single-host even under torchrun or srun.")
    port_help = ("The port rank 0 serves the exchange on (default MASTER_PORT + 1, so the job's own port stays free; "
                 "in an srun step without MASTER_PORT, a port derived from the job and step ids).")
    wait_help = ("Seconds the other ranks have to report, counted once rank 0's exchange helper hosts the store "
                 "(default: the rest of the run's time budget plus 15 s of launcher skew, plus one more budget when "
                 "a rank may run its host-level checks itself).")
    anon_help = "Name hosts in the fleet report by a salted hash (one salt per run) instead of their name."
    ranks_help = "Every rank other than 0 also prints its own report to stderr (by default they print nothing)."
    job_args_help = ("The training command, as one shell-quoted string: its DSv4 settings set the profile and the "
                     "job.* checks run (what `preflight` does, without running it).")
    cp_t, arch_t, timeout_t, port_t = _checked(_cp), _checked(_gpu_arch), _checked(_timeout), _checked(_port)
    dsa_choice, device_choice = Choice(["cudnn", "none"]), Choice(["auto", "cuda", "cpu"])
    report_formats = Choice(list(FORMATS))
    verbose_help = ("On a terminal: -v shows every row with its details and evidence, -vv adds the sources "
                    "(default: only the rows that need attention). Piped text, JSON, markdown and JUnit are unchanged.")

    @app.command(help="Check this environment for the planned DSv4 job (the default).", epilog=EXIT_CODES_HELP)
    def check(
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N", help=cp_help),
        dsa_backend: str | None = Option(None, "--dsa-backend", click_type=dsa_choice, help=dsa_help),
        gpu_arch: str | None = Option(None, "--gpu-arch", parser=arch_t, metavar="X.Y", help=arch_help),
        python: str | None = Option(None, "--python", metavar="PATH", help=python_help),
        timeout: float | None = Option(None, "--timeout", parser=timeout_t, metavar="S", help=timeout_help),
        only: list[str] | None = Option(None, "--only", metavar="ID[,ID...]", help=only_help),
        skip: list[str] | None = Option(None, "--skip", metavar="ID[,ID...]", help=skip_help),
        format: str = Option("text", "-f", "--format", click_type=report_formats, help=format_help),
        output: str | None = Option(None, "-o", "--output", metavar="FILE", help=output_help),
        strict: bool = Option(False, "--strict", help="Warnings fail too (exit 1)."),
        static_only: bool = Option(False, "--static-only", help="Skip every check that imports packages "
                                   "(metadata, file locations and ast only)."),
        no_smoke: bool = Option(False, "--no-smoke", help="Skip the smoke forward."),
        device: str = Option("auto", "--device", click_type=device_choice, help="Where the smoke forward runs: "
                             "auto (a GPU when one is visible, else skipped), cuda, cpu."),
        distributed: bool | None = Option(None, "--distributed/--no-distributed", help=dist_help,
                                             rich_help_panel=fleet, show_default=False),
        fleet_port: int | None = Option(None, "--fleet-port", parser=port_t, metavar="PORT", help=port_help),
        fleet_wait: float | None = Option(None, "--fleet-wait", parser=timeout_t, metavar="S", help=wait_help),
        anonymize_hosts: bool = Option(False, "--anonymize-hosts", help=anon_help),
        verbose_ranks: bool = Option(False, "--verbose-ranks", help=ranks_help),
        verbose: int = Option(0, "-v", "--verbose", count=True, help=verbose_help),
        no_kernel_cache: bool = Option(False, "--no-kernel-cache", help=cache_help),
        job_args: str | None = Option(None, "--job-args", metavar="CMD", help=job_args_help),
    ) -> None:
        take("check", locals())

    @app.command(help="Run only the smoke forward.", epilog=SMOKE_EPILOG)
    def smoke(
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N",
                                   help="Context-parallel size of the planned job (1-1024; default 1)."),
        dsa_backend: str | None = Option(None, "--dsa-backend", click_type=dsa_choice, help=dsa_help),
        gpu_arch: str | None = Option(None, "--gpu-arch", parser=arch_t, metavar="X.Y", help=arch_help),
        python: str | None = Option(None, "--python", metavar="PATH", help=python_help),
        timeout: float | None = Option(None, "--timeout", parser=timeout_t, metavar="S", help=timeout_help),
        format: str = Option("text", "-f", "--format", click_type=report_formats, help=format_help),
        output: str | None = Option(None, "-o", "--output", metavar="FILE", help=output_help),
        distributed: bool | None = Option(None, "--distributed/--no-distributed", help=dist_help,
                                             show_default=False),
        fleet_port: int | None = Option(None, "--fleet-port", parser=port_t, metavar="PORT", help=port_help),
        fleet_wait: float | None = Option(None, "--fleet-wait", parser=timeout_t, metavar="S", help=wait_help),
        anonymize_hosts: bool = Option(False, "--anonymize-hosts", help=anon_help),
        verbose_ranks: bool = Option(False, "--verbose-ranks", help=ranks_help),
        verbose: int = Option(0, "-v", "--verbose", count=True, help=verbose_help),
        device: str = Option("auto", "--device", click_type=device_choice,
                             help="auto: the GPU when torch sees one, else the CPU."),
        no_kernel_cache: bool = Option(False, "--no-kernel-cache", help=cache_help),
    ) -> None:
        take("smoke", locals())

    @app.command(name="list", help="List every check with its title, where it comes from and when it applies.")
    def list_(
        format: str = Option("text", "-f", "--format", click_type=Choice(["text", "json", "markdown"]),
                             help="text, json, or markdown (the README rules table)."),
        timeout: float = Option(30.0, "--timeout", parser=timeout_t, metavar="S", help=plugin_timeout_help),
    ) -> None:
        take("list", locals())

    @app.command(help="Why a check exists, when it applies, its sources and its fixes.")
    def explain(
        check_id: str = typer.Argument(..., metavar="ID", help="A check id from `dsv4-doctor list`."),
        format: str = Option("text", "-f", "--format", click_type=Choice(["text", "json"]),
                             help="text, or json (the check's entry of `list -f json`)."),
        timeout: float = Option(30.0, "--timeout", parser=timeout_t, metavar="S", help=plugin_timeout_help),
    ) -> None:
        take("explain", locals())

    @app.command(help="Print the fix plan of the current failures as a shell script (or --apply it).",
                 epilog=FIX_EPILOG)
    def fix(
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N", help=cp_help),
        dsa_backend: str | None = Option(None, "--dsa-backend", click_type=dsa_choice, help=dsa_help),
        gpu_arch: str | None = Option(None, "--gpu-arch", parser=arch_t, metavar="X.Y", help=arch_help),
        python: str | None = Option(None, "--python", metavar="PATH", help=python_help),
        timeout: float | None = Option(None, "--timeout", parser=timeout_t, metavar="S", help=timeout_help),
        only: list[str] | None = Option(None, "--only", metavar="ID[,ID...]", help=only_help),
        skip: list[str] | None = Option(None, "--skip", metavar="ID[,ID...]", help=skip_help),
        apply: bool = Option(False, "--apply", help="Run the plan's pip steps with the target's pip, then re-check. "
                             "Manual steps (torch) and job settings are never run."),
        yes: bool = Option(False, "--yes", "-y", help="Do not ask before applying (needed without a terminal)."),
        job_args: str | None = Option(None, "--job-args", metavar="CMD", help=(
            "The training command, as one shell-quoted string: the job.* checks run, and the plan ends with the "
            "job's settings (CP_ARGS, export lines), as comments.")),
    ) -> None:
        take("fix", locals())

    @app.command(help="Check the environment and a training command's DSv4 settings, then exec the command.",
                 epilog=PREFLIGHT_EPILOG,
                 context_settings={"allow_interspersed_args": False, "ignore_unknown_options": False})
    def preflight(
        gpu_arch: str | None = Option(None, "--gpu-arch", parser=arch_t, metavar="X.Y", help=(
            "Compute capability the job runs on; default: detected with nvidia-smi.")),
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N", help=(
            "The job's CP size, for a command whose settings the doctor cannot read (a wrapper script); a "
            "command that states its own must agree.")),
        dsa_backend: str | None = Option(None, "--dsa-backend", click_type=dsa_choice, help=(
            "The job's dsa_kernel_backend, for a command that does not state it (a wrapper script); a command "
            "that states its own must agree.")),
        python: str | None = Option(None, "--python", metavar="PATH", help=(
            "Interpreter to inspect (default: the one running the doctor; in a job script, the job's python).")),
        timeout: float | None = Option(None, "--timeout", parser=timeout_t, metavar="S", help=timeout_help),
        only: list[str] | None = Option(None, "--only", metavar="ID[,ID...]", help=only_help),
        skip: list[str] | None = Option(None, "--skip", metavar="ID[,ID...]", help=skip_help),
        strict: bool = Option(False, "--strict", help="Warnings block the command too."),
        no_smoke: bool = Option(False, "--no-smoke", help="Skip the smoke forward."),
        dry_run: bool = Option(False, "--dry-run", help="Check, report, and stop before running the command."),
        report: str | None = Option(None, "--report", metavar="FILE", help=(
            "Also write the JSON report to FILE (for the job's logs).")),
        distributed: bool | None = Option(None, "--distributed/--no-distributed", help=dist_help,
                                             show_default=False),
        fleet_port: int | None = Option(None, "--fleet-port", parser=port_t, metavar="PORT", help=port_help),
        fleet_wait: float | None = Option(None, "--fleet-wait", parser=timeout_t, metavar="S", help=wait_help),
        anonymize_hosts: bool = Option(False, "--anonymize-hosts", help=anon_help),
        verbose_ranks: bool = Option(False, "--verbose-ranks", help=ranks_help),
        verbose: int = Option(0, "-v", "--verbose", count=True, help=verbose_help),
        no_kernel_cache: bool = Option(False, "--no-kernel-cache", help=cache_help),
        job_command: list[str] | None = typer.Argument(None, metavar="-- COMMAND [ARG ...]", show_default=False,
                                                         help="The training command, after `--`."),
    ) -> None:
        take("preflight", locals())

    return app, chosen


def _with_default_command(argv: list[str]) -> list[str]:
    """`dsv4-doctor` and `dsv4-doctor --cp 2 ...` mean `dsv4-doctor check ...`; a first word that is no option is
    a command (a mistyped one gets a suggestion, not a silent `check`)."""
    if not argv or (argv[0].startswith("-") and argv[0].split("=", 1)[0] not in ROOT_OPTIONS and argv[0] != "--"):
        return ["check", *argv]
    return argv


def _error_text(exc) -> str:
    """A usage error in the doctor's words; what the user typed is data (the output layer cleans and redacts it)."""
    from typer._click.exceptions import NoSuchOption

    if isinstance(exc, NoSuchOption):
        near = sorted(set(exc.possibilities or ()))
        return f"unrecognized arguments: {exc.option_name}" + (f"; did you mean {', '.join(near)}?" if near else "")
    return exc.format_message()


def usage_line(command: str | None) -> str:
    """`Usage: dsv4-doctor COMMAND [OPTIONS] ...` of one command (or of the root)."""
    import typer

    app, _ = _app()
    group = typer.main.get_command(app)
    ctx = group.make_context(PROG, [], resilient_parsing=True)
    sub = group.get_command(ctx, command) if command else None  # type: ignore[attr-defined]
    if sub is None:
        return group.get_usage(ctx).strip()
    with sub.make_context(command, [], parent=ctx, resilient_parsing=True) as sub_ctx:
        return sub.get_usage(sub_ctx).strip()


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """The handlers' namespace from the command line. Exits: 0 after --help, --version or completion; 2 on a usage
    error, said through the output layer. preflight's words after the first `--` are the job's, never parsed."""
    import typer
    from typer._click.exceptions import ClickException, NoSuchOption, UsageError as ClickUsageError
    from typer.exceptions import Abort, Exit

    argv = _with_default_command(list(argv))
    job_tail: list[str] | None = None
    if argv[:1] == ["preflight"] and "--" in argv:
        cut = argv.index("--")
        argv, job_tail = argv[:cut], argv[cut:]
    try:
        app, chosen = _app()
        result = typer.main.get_command(app).main(args=argv, prog_name=PROG, standalone_mode=False)
    except ClickException as exc:
        if isinstance(exc, ClickUsageError) and exc.ctx is not None:
            write_stderr(line_text(exc.ctx.get_usage().strip()) + "\n")
        where = f"{PROG} {exc.ctx.info_name}" if isinstance(exc, ClickUsageError) and exc.ctx is not None \
            and exc.ctx.parent is not None else PROG
        say(f"{where}: error: {_error_text(exc)}")
        if isinstance(exc, NoSuchOption):
            say(f"Try '{PROG} {argv[0] if argv else ''} --help'.".replace("  ", " "))
        finish_streams()
        sys.exit(int(ExitCode.USAGE))
    except Exit as exc:
        finish_streams()
        sys.exit(exc.exit_code)
    except Abort:  # end of input at a prompt
        finish_streams()
        sys.exit(int(ExitCode.USAGE))
    except Exception as exc:  # a defect of the doctor's own: one line that says where, never a traceback
        say(f"{PROG}: internal error: {_where(exc)}")
        finish_streams()
        sys.exit(int(ExitCode.INTERNAL))
    args = chosen.get("args")
    if args is None:  # --help, --version, completion: said and done
        finish_streams()
        sys.exit(result if isinstance(result, int) else 0)
    if job_tail is not None:
        args.job_command = list(args.job_command) + job_tail
    return args


class _CommandParser:
    """One command's parser, for code that parses a command's words (the docs' examples, tests)."""

    def __init__(self, command: str | None):
        self.command = command

    def parse_args(self, words: Sequence[str]) -> argparse.Namespace:
        return parse_command_line(([self.command] if self.command else []) + list(words))


def parser() -> tuple[_CommandParser, dict[str, _CommandParser]]:
    """The root parser and each command's: `parse_args(words)` gives the handlers' namespace, or exits 2."""
    return _CommandParser(None), {name: _CommandParser(name) for name in COMMANDS}


# ----------------------------------------------------------------------------------------------------- running

def run_report(args, profile: Profile, only: list[str], skip: list[str], strict: bool, progress: bool,
               keep: dict | None = None) -> dict:
    from .render import live_display
    from .session import run_check

    display = live_display(progress)
    try:
        return run_check(args.python, args.timeout, profile, only, skip, strict, on_event=display, keep=keep)
    finally:
        display.stop()


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
    progress = wants_live_display(sys.stderr, args.format) and (env is None or env.rank == 0)
    ran: dict = {}
    report = run_report(args, profile, only, skip, strict, progress=progress, keep=ran)
    if env is None:
        return emit(report, args.format, args.output, args.verbose)
    from .fleet import take_part

    def report_merged(merged: dict) -> int:
        return emit(merged, args.format, args.output, args.verbose)

    return take_part(env, report, ran["python"], started, strict, report_merged, args.fleet_wait, args.verbose_ranks,
                     _rerun(args, profile, skip, strict), args.anonymize_hosts, fleet_checks)


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
        from .probes import DEFAULT_TIMEOUT_S

        sub = copy.copy(args)
        sub.timeout = max(5.0, min(float(args.timeout or DEFAULT_TIMEOUT_S), (seconds - 15.0) / 2))
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
    if args.format == "json":
        import json

        entry = {"id": c.id, "title": c.title, "origin": c.origin, "applies_when": c.applies_when,
                 "detects": c.detects, "explanation": c.doc(), "sources": [s.to_dict() for s in c.sources],
                 "fixes": [{"description": f.description, "commands": [cmd.shell() for cmd in f.commands],
                            "manual": f.manual} for f in c.fixes]}
        return _stdout_or_4(json.dumps(Redactor()(entry), indent=2) + "\n", "the explanation")
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
    return preflight_report(report, args.report, args.verbose)


def _where(exc: BaseException) -> str:
    """`Type: message (file:line)` of the innermost frame, for a defect report without a traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    place = f" ({os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})" if tb is not None else ""
    return f"{type(exc).__name__}: {exc}{place}"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_command_line(list(sys.argv[1:] if argv is None else argv))  # exits 2 on a usage error
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
        write_stderr(line_text(usage_line(args.command)) + "\n")
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
