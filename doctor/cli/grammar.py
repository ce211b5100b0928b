"""The command line's grammar: each command's options and arguments, their value types and help texts, as a typer
application built on demand (nothing of typer is imported before a command line is parsed). What a command line
says becomes an `app.Options`.
"""

from __future__ import annotations

import re
from dataclasses import fields

from .. import __version__
from ..commands.usecases import Options
from .helptext import (DESCRIPTION, EXIT_CODES_HELP, FIX_APPLY_HELP, FIX_BREAK_HELP, FIX_EPILOG, FIX_JOB_ARGS_HELP,
                       FIX_DOWNLOAD_HELP, FIX_FROM_HELP, FIX_VENV_HELP, FLEET_EPILOG, PREFLIGHT_EPILOG, SMOKE_EPILOG,
                       TRIAGE_EPILOG, TRIAGE_HELP, TRIAGE_PATHS_HELP, WARM_EPILOG, WARM_HELP)
from ..report.output import write_stdout
from ..report.shown import FORMATS

COMMANDS = ("check", "smoke", "list", "explain", "fix", "warm", "preflight", "fleet", "triage")

# ------------------------------------------------------------------------------------------------ argument types

class BadValue(ValueError):
    """A value an option does not take; the parser names the option."""


def _cp(value: str) -> int:
    try:
        n = int(value) if len(value) <= 12 else 1 << 40  # a 5,000-digit word is out of range, not a crash
    except ValueError:
        raise BadValue(f"expected a whole number, got {value!r}") from None
    if not 1 <= n <= 1024:
        raise BadValue(f"--cp must be between 1 and 1024, got {n}")
    return n


def _gpu_arch(value: str) -> str:
    if not re.fullmatch(r"\d{1,2}\.\d", value):
        raise BadValue("expected a compute capability such as 9.0 or 10.0")
    return value


def parse_timeout(value: str) -> float:
    try:
        t = float(value)
    except ValueError:
        raise BadValue(f"expected seconds, got {value!r}") from None
    if not 1.0 <= t <= 3600.0:  # also rejects inf and nan
        raise BadValue("must be between 1 and 3600 seconds")
    return t


def _port(value: str) -> int:
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise BadValue(f"expected a port number, got {value!r}")
    n = int(text) if len(text) <= 12 else 1 << 40
    if not 1 <= n <= 65534:  # P and P + 1 (the smoke's CP groups)
        raise BadValue("must be a port between 1 and 65534 (the exchange takes P and P + 1)")
    return n


# ------------------------------------------------------------------------------------------------------ parser

PROG = "dsv4-doctor"
COMPLETION_VARIABLE = "_DSV4_DOCTOR_COMPLETE"  # typer's completion protocol: set, the words are a shell's
ROOT_OPTIONS = ("-h", "--help", "--version", "--install-completion", "--show-completion")
# The commands that inspect a target, and every option of theirs that takes a value: what the early start's pre-scan
# (cli.early_target) needs of the grammar before typer is imported. A test holds these to the typer application.
INSPECTING_COMMANDS = ("check", "smoke", "fix", "preflight", "fleet")
VALUE_OPTIONS = ("--cp", "--dsa-backend", "--gpu-arch", "--python", "--timeout", "--only", "--skip", "--device", "-f",
                 "--format", "-o", "--output", "--fleet-port", "--fleet-wait", "--ray-wait-nodes", "--job-args",
                 "--job-args-file", "--job-cwd", "--report", "--venv", "--accept", "--download", "--from")
OPTION_NAMES = {f.name for f in fields(Options)} - {"command"}


def options_from(command: str, values: dict) -> Options:
    """A command's parsed values as Options: the same names whatever the command, its defaults where it has no such
    option."""
    given = {k: v for k, v in values.items() if k in OPTION_NAMES}
    distributed = given.get("distributed")  # --distributed/--no-distributed, or neither
    if not isinstance(distributed, str):
        given["distributed"] = "auto" if distributed is None else ("on" if distributed else "off")
    for key in ("job_command", "paths"):  # a list argument given nothing is None
        given[key] = given.get(key) or []
    for key in ("only", "skip"):  # a repeatable option given no time is None
        if key in given and not given[key]:
            given[key] = None
    return Options(command=command, **given)


def _checked(convert):
    """An option's parser: a value it refuses is a usage error that names the option."""
    def parse(value: str):
        from typer import BadParameter

        try:
            return convert(value)
        except BadValue as exc:
            raise BadParameter(str(exc)) from None
    parse.__name__ = convert.__name__.lstrip("_").removeprefix("parse_")
    return parse


def _app():
    """The typer application; built on demand so that nothing of typer is imported before it is needed."""
    import functools
    import inspect
    from types import SimpleNamespace

    import os

    import typer

    if os.environ.get(COMPLETION_VARIABLE):  # a shell asks for completions: typer's per-shell answers
        from typer._completion_classes import completion_init

        completion_init()
    Option = functools.partial(typer.Option, show_default=False)  # each help text states its own default
    from typer._types import TyperChoice as Choice

    app = typer.Typer(name=PROG, help=DESCRIPTION, epilog=EXIT_CODES_HELP, rich_markup_mode=None,
                      add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                      context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
    chosen: dict = {}

    def said(summary: str) -> dict:
        """A command's help, and the same text in full in the root's list (click cuts a summary at 45 characters)."""
        return {"short_help": summary, "help": summary}

    def take(command: str, values: dict) -> None:
        chosen["args"] = options_from(command, values)

    def version(value: bool) -> None:
        if value:
            write_stdout(f"{PROG} {__version__}\n")
            raise typer.Exit(0)

    def completion(install: bool):
        def callback(ctx, _param, value: str | None) -> None:
            if value is None or ctx.resilient_parsing:
                return
            from . import completion as shell_completion

            try:
                shell = shell_completion.shell_for(value or None)
            except shell_completion.NoShell as exc:
                raise typer.BadParameter(str(exc)) from None
            if install:
                path = shell_completion.install(PROG, COMPLETION_VARIABLE, shell)
                write_stdout(f"{shell} completion installed in {path}; it takes effect in a new shell\n")
            else:
                write_stdout(shell_completion.script(PROG, COMPLETION_VARIABLE, shell) + "\n")
            raise typer.Exit(0)
        return callback

    def complete_check(incomplete: str) -> list[str]:
        from .completion import complete_check as names

        return names(incomplete)

    @app.callback()
    def root(_version: bool = Option(False, "--version", callback=version, is_eager=True,
                                     help="Print the version and exit."),
             _install: str | None = Option(None, "--install-completion",
                                           metavar="[SHELL]", callback=completion(True), expose_value=False,
                                           is_eager=True, help=(
                 "Install completion for SHELL (bash, zsh, fish, powershell; default: the running shell, else "
                 "$SHELL).")),
             _show: str | None = Option(None, "--show-completion", metavar="[SHELL]",
                                        callback=completion(False), expose_value=False, is_eager=True, help=(
                 "Print the completion script for SHELL (default: the running shell, else $SHELL)."))) -> None:
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
    cache_help = ("Do not give the probes the doctor's kernel caches: the CuTe DSL cache and the AOT kernel store "
                  "(~/.cache/dsv4-doctor/cute-dsl; also DSV4_DOCTOR_KERNEL_CACHE=off) and the image-wide store.")
    deep_help = ("The deep level: the smoke's tier 2 too, the DSv4 hybrid attention layer (CP=1, CP=N against CP=1, "
                 "packed against alone) and its fused build (cuDNN indexer + FlashMLA) against the unfused one, "
                 "forward and backward (about a minute more on a GPU). For a GPU CI job and a new node's first "
                 "check; the default (tier 1 and the kernel sub-runs) is for a preflight in front of every rank.")
    fleet = "Fleet mode (one report for every rank of a torchrun or srun job)"
    dist_help = ("Run as one rank of a fleet (default: on when torchrun or an srun step with more than one task "
                 "launched this process); --no-distributed runs single-host even under torchrun or srun.")
    port_help = ("The port rank 0 serves the exchange on (default MASTER_PORT + 1, so the job's own port stays free; "
                 "in an srun step without MASTER_PORT, a port derived from the job and step ids).")
    wait_help = ("Seconds the other ranks have to report, counted once rank 0's exchange helper hosts the store "
                 "(default: the rest of the run's time budget plus 15 s of launcher skew, plus one more budget when "
                 "a rank may run its host-level checks itself).")
    anon_help = "Name hosts in the fleet report by a salted hash (one salt per run) instead of their name."
    ray_help = ("Check every alive GPU node of the job's Ray cluster (RAY_ADDRESS, else the local one) from here, "
                "where verl's driver starts: one report for the driver and every node (docs/fleet.md).")
    hook_help = ("With --ray, on a go verdict: give the command Ray's worker_process_setup_hook (through verl's "
                 "ray_kwargs.ray_init.runtime_env), so that a node joining after the check refuses its workers.")
    ranks_help = "Every rank other than 0 also prints its own report to stderr (by default they print nothing)."
    job_args_help = ("The training command, as one shell-quoted string: its DSv4 settings set the profile and the "
                     "job.* checks run (what `preflight` does, without running it).")
    job_args_file_help = ("--job-args read from FILE (at most 4 MiB; `<(...)` too), so that the training command "
                          "stays off the doctor's command line, which every user of the machine can read.")
    accept_help = ("Accept a warning of check ID (repeatable): it stays in the report, marked accepted with REASON, "
                   "and no longer fails --strict; a failure is never accepted. Also DSV4_DOCTOR_ACCEPT (`;` between "
                   "entries) and `accept = [...]` under [tool.dsv4-doctor] in dsv4-doctor.toml or pyproject.toml "
                   "(docs/accept.md).")
    cp_t, arch_t, timeout_t, port_t = _checked(_cp), _checked(_gpu_arch), _checked(parse_timeout), _checked(_port)
    dsa_choice, device_choice = Choice(["cudnn", "none"]), Choice(["auto", "cuda", "cpu"])
    report_formats = Choice(list(FORMATS))
    verbose_help = ("Text report (a terminal or a log alike): -v shows every row's summary, details and fixes in "
                    "full, -vv adds the evidence, -vvv the sources (default: the rows that need attention, one line "
                    "each, with their fix commands). JSON, markdown and JUnit are unchanged.")
    # The options several commands share, declared once (typer reads an option's declaration; it never changes it).
    job_cwd_help = ("The folder the training command runs in (default: the current one): with `python -m`/`-c` it is "
                    "the job's sys.path[0], where the job imports packages from first.")
    shared = SimpleNamespace(
        job_cwd=Option(None, "--job-cwd", metavar="DIR", help=job_cwd_help),
        job_args_file=Option(None, "--job-args-file", metavar="FILE", help=job_args_file_help),
        dsa_backend=Option(None, "--dsa-backend", click_type=dsa_choice, help=dsa_help),
        gpu_arch=Option(None, "--gpu-arch", parser=arch_t, metavar="X.Y", help=arch_help),
        python=Option(None, "--python", metavar="PATH", help=python_help),
        timeout=Option(None, "--timeout", parser=timeout_t, metavar="S", help=timeout_help),
        only=Option(None, "--only", metavar="ID[,ID...]", help=only_help, autocompletion=complete_check),
        skip=Option(None, "--skip", metavar="ID[,ID...]", help=skip_help, autocompletion=complete_check),
        format=Option("text", "-f", "--format", click_type=report_formats, help=format_help),
        output=Option(None, "-o", "--output", metavar="FILE", help=output_help),
        text_or_json=Option("text", "-f", "--format", click_type=Choice(["text", "json"]), help="text or json."),
        no_smoke=Option(False, "--no-smoke", help="Skip the smoke forward."),
        accept=Option(None, "--accept", metavar="ID[:REASON]", help=accept_help, autocompletion=complete_check),
        deep=Option(False, "--deep", help=deep_help),
        distributed=Option(None, "--distributed/--no-distributed", help=dist_help, rich_help_panel=fleet,
                           show_default=False),
        fleet_port=Option(None, "--fleet-port", parser=port_t, metavar="PORT", help=port_help),
        fleet_wait=Option(None, "--fleet-wait", parser=timeout_t, metavar="S", help=wait_help),
        anonymize_hosts=Option(False, "--anonymize-hosts", help=anon_help),
        ray=Option(False, "--ray", help=ray_help, rich_help_panel=fleet),
        ray_hook=Option(False, "--ray-hook", help=hook_help, rich_help_panel=fleet),
        ray_wait_nodes=Option(None, "--ray-wait-nodes", parser=timeout_t, metavar="S", rich_help_panel=fleet, help=(
            "With --ray: wait up to S seconds for the job's GPU nodes to join the cluster before checking them.")),
        verbose_ranks=Option(False, "--verbose-ranks", help=ranks_help),
        verbose=Option(0, "-v", "--verbose", count=True, help=verbose_help),
        no_kernel_cache=Option(False, "--no-kernel-cache", help=cache_help),
        plugin_timeout=Option(30.0, "--timeout", parser=timeout_t, metavar="S", help=plugin_timeout_help),
    )
    shared_types = {"job_cwd": str | None, "job_args_file": str | None, "dsa_backend": str | None,
                    "gpu_arch": str | None, "python": str | None, "timeout": float | None, "only": list[str] | None,
                    "skip": list[str] | None, "format": str, "output": str | None, "no_smoke": bool, "deep": bool,
                    "distributed": bool | None, "fleet_port": int | None, "fleet_wait": float | None,
                    "anonymize_hosts": bool, "ray": bool, "ray_hook": bool, "ray_wait_nodes": float | None,
                    "verbose_ranks": bool, "verbose": int, "no_kernel_cache": bool, "accept": list[str] | None}

    def parameters(*order: str):
        """A command's parameters in the order its help lists them: its own (the function's), and by name the
        options several commands share, declared once above. typer reads the signature this sets; the function
        takes the shared ones as keywords (`**given`)."""
        def decorate(function):
            own = inspect.signature(function).parameters
            keyword = inspect.Parameter.KEYWORD_ONLY
            listed = [own[name].replace(kind=keyword) if name in own else
                      inspect.Parameter(name, keyword, default=getattr(shared, name), annotation=shared_types[name])
                      for name in order]
            function.__signature__ = inspect.Signature(listed)
            return function
        return decorate

    @app.command(**said("Check this environment for the planned DSv4 job (the default)."), epilog=EXIT_CODES_HELP)
    @parameters("cp", "dsa_backend", "gpu_arch", "python", "timeout", "only", "skip", "format", "output", "strict",
                "accept", "static_only", "no_smoke", "deep", "device", "distributed", "fleet_port", "fleet_wait",
                "anonymize_hosts", "verbose_ranks", "verbose", "no_kernel_cache", "job_args", "job_args_file",
                "job_cwd", "ray", "ray_wait_nodes", "versions")
    def check(
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N", help=cp_help),
        strict: bool = Option(False, "--strict", help="Warnings fail too (exit 1), but accepted ones (--accept)."),
        static_only: bool = Option(False, "--static-only", help="Skip every check that imports packages "
                                   "(metadata, file locations and ast only)."),
        device: str = Option("auto", "--device", click_type=device_choice, help="Where the smoke forward runs: "
                             "auto (a GPU when one is visible, else skipped), cuda, cpu."),
        job_args: str | None = Option(None, "--job-args", metavar="CMD", help=job_args_help),
        versions: bool = Option(False, "--versions", help="Print only what was found (Python, torch, CUDA, the "
                                "driver, GPUs, the stack's versions), for pasting into an issue; imports torch only."),
        **given: object,
    ) -> None:
        take("check", {**locals(), **given})

    @app.command(**said("Run only the smoke forward."), epilog=SMOKE_EPILOG)
    @parameters("cp", "dsa_backend", "gpu_arch", "python", "timeout", "format", "output", "distributed", "fleet_port",
                "fleet_wait", "anonymize_hosts", "verbose_ranks", "verbose", "device", "deep", "no_kernel_cache")
    def smoke(
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N",
                                   help="Context-parallel size of the planned job (1-1024; default 1)."),
        device: str = Option("auto", "--device", click_type=device_choice,
                             help="auto: the GPU when torch sees one, else the CPU."),
        **given: object,
    ) -> None:
        take("smoke", {**locals(), **given})

    @app.command(name="list", **said("List every check with its title, where it comes from and when it applies."))
    def list_(
        format: str = Option("text", "-f", "--format", click_type=Choice(["text", "json", "markdown"]),
                             help="text, json, or markdown (the rules table of docs/rules.md)."),
        timeout: float = shared.plugin_timeout,
    ) -> None:
        take("list", locals())

    @app.command(**said("Why a check exists, when it applies, its sources and its fixes."))
    def explain(
        check_id: str = typer.Argument(..., metavar="ID", autocompletion=complete_check, help=(
            "A check id from `dsv4-doctor list`, or a group (`cudnn-fe`: each of its checks).")),
        format: str = Option("text", "-f", "--format", click_type=Choice(["text", "json"]),
                             help="text, or json (the check's entry of `list -f json`)."),
        timeout: float = shared.plugin_timeout,
    ) -> None:
        take("explain", locals())

    @app.command(**said(TRIAGE_HELP), epilog=TRIAGE_EPILOG)
    def triage(paths: list[str] | None = typer.Argument(None, metavar="[PATH ...]", help=TRIAGE_PATHS_HELP),
               format: str = shared.text_or_json, output: str | None = shared.output) -> None:
        take("triage", locals())

    @app.command(**said(WARM_HELP), epilog=WARM_EPILOG)
    def warm(
        gpu_arch: str = Option(..., "--gpu-arch", parser=arch_t, metavar="X.Y", help="The GPU arch to compile for."),
        python: str | None = shared.python,
        timeout: float | None = Option(None, "--timeout", parser=timeout_t, metavar="S", help="Seconds in all."),
        format: str = shared.text_or_json,
        into: str | None = Option(None, "--into", metavar="DIR", help="The image-wide store's folder (default "
                                  "/usr/local/share/dsv4-doctor/kernels)."),
        recipes: str | None = Option(None, "--recipes", metavar="PATH", help="The kernel recipes: a JSON file, or "
                                     "a per-user kernel store (default: the ones the doctor ships)."),
    ) -> None:
        take("warm", locals())

    @app.command(**said("Print the fix plan of the current failures as a shell script (or --apply it)."),
                 epilog=FIX_EPILOG)
    @parameters("cp", "dsa_backend", "gpu_arch", "python", "timeout", "only", "skip", "apply", "yes",
                "break_system_packages", "venv", "download", "from_dir", "job_args", "job_args_file", "job_cwd")
    def fix(
        cp: int | None = Option(None, "--cp", parser=cp_t, metavar="N", help=cp_help),
        apply: bool = Option(False, "--apply", help=FIX_APPLY_HELP),
        yes: bool = Option(False, "--yes", "-y", help="Do not ask before applying (needed without a terminal)."),
        break_system_packages: bool = Option(False, "--break-system-packages", help=FIX_BREAK_HELP),
        venv: str | None = Option(None, "--venv", metavar="DIR", help=FIX_VENV_HELP),
        download: str | None = Option(None, "--download", metavar="DIR", help=FIX_DOWNLOAD_HELP),
        from_dir: str | None = Option(None, "--from", metavar="DIR", help=FIX_FROM_HELP),
        job_args: str | None = Option(None, "--job-args", metavar="CMD", help=FIX_JOB_ARGS_HELP),
        **given: object,
    ) -> None:
        take("fix", {**locals(), **given})

    @parameters("gpu_arch", "cp", "dsa_backend", "python", "timeout", "only", "skip", "strict", "accept", "no_smoke",
                "deep", "dry_run", "report", "distributed", "fleet_port", "fleet_wait", "anonymize_hosts",
                "verbose_ranks", "verbose", "no_kernel_cache", "job_command", "ray", "ray_hook", "ray_wait_nodes")
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
        strict: bool = Option(False, "--strict", help="Warnings block the command too, but accepted ones (--accept)."),
        dry_run: bool = Option(False, "--dry-run", help="Check, report, and stop before running the command."),
        report: str | None = Option(None, "--report", metavar="FILE", help=(
            "Also write the JSON report to FILE (for the job's logs).")),
        job_command: list[str] | None = typer.Argument(None, metavar="-- COMMAND [ARG ...]", show_default=False,
                                                         help="The training command, after `--`."),
        **given: object,
    ) -> None:
        take(chosen.get("name", "preflight"), {**locals(), **given})

    exec_settings = {"allow_interspersed_args": False, "ignore_unknown_options": False}
    app.command(name="preflight", **said("Check the environment and a training command's DSv4 settings, then exec the "
                "command."), epilog=PREFLIGHT_EPILOG, context_settings=exec_settings)(preflight)

    @functools.wraps(preflight)  # the same parameters, help and all
    def fleet_(*args, **values) -> None:
        chosen["name"] = "fleet"
        preflight(*args, **values)

    app.command(name="fleet", **said("Check every node of the job's Ray cluster (--ray) and the training command, "
                "then exec the command where the whole fleet passed."), epilog=FLEET_EPILOG,
                context_settings=exec_settings)(fleet_)
    return app, chosen

