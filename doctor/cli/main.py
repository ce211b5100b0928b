"""The `dsv4-doctor` command line: it parses (the grammar is cli/grammar.py's), runs the command's use case
(commands/usecases.py) and prints the result through the output layer. It never imports torch or any inspected package.

Exit codes (the same for every output format):
  0    no check failed (warnings allowed, unless --strict); `fix`: a plan was printed
  1    at least one check failed or errored (or warned, with --strict); `fix`: some failure has no fix at all
  2    usage error, said before any work (an --output that cannot be written included)
  3    the doctor itself or a plugin crashed (the report is still written)
  4    the output could not be written: stdout closed, full or not read, or --output failing at the end (the report
       then went to stdout)
  5    fleet mode: this rank took the fleet's verdict after the acknowledgement deadline, so it did not start
  129, 130, 143  interrupted by SIGHUP, SIGINT or SIGTERM (probes killed; a report of what finished is written)
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..commands.usecases import Options
from .grammar import COMMANDS, COMPLETION_VARIABLE, INSPECTING_COMMANDS, PROG, ROOT_OPTIONS, VALUE_OPTIONS, _app
from ..model.core import ExitCode, UsageError, defect_line
from ..report.emitter import emit, preflight_report
from ..report.output import finish_streams, isatty, line_text, say, write_stderr, write_stdout

if TYPE_CHECKING:
    from ..fix.plan import Answer
    from ..model.report import Report

# ------------------------------------------------------------------------------------------------------ parsing

def _with_default_command(argv: list[str]) -> list[str]:
    """`dsv4-doctor` and `dsv4-doctor --cp 2 ...` mean `dsv4-doctor check ...`; a first word that is no option is
    a command (a mistyped one gets a suggestion, not a silent `check`)."""
    if not argv or (argv[0].startswith("-") and argv[0].split("=", 1)[0] not in ROOT_OPTIONS and argv[0] != "--"):
        return ["check", *argv]
    return argv


@dataclass(frozen=True)
class EarlyTarget:
    """What a command that inspects will be given, read from the words before typer is imported."""

    python: str | None
    timeout: float | None
    no_kernel_cache: bool


_SHORT_FLAGS = re.compile(r"-(v+|y)")  # the short options that take no value (-h asks for help: no early start)


def early_target(argv: Sequence[str], environ: Mapping[str, str]) -> EarlyTarget | None:
    """--python, --timeout and --no-kernel-cache of a command that inspects a target (check, also as the default
    command, smoke, fix, preflight), read from the words as the parser will read them; None when the words ask for
    nothing to be inspected (help, version, completion, list, explain, `fix --apply` that will be refused) or hold
    anything this scan does not know for certain (a combined short option): then nothing starts early. The parser
    stays the judge: a session is adopted only when it matches what the parser gave (earlystart.session_for).
    preflight's words after `--` (or its first argument) are the job's and never read."""
    if environ.get(COMPLETION_VARIABLE):
        return None
    words = _with_default_command(list(argv))
    if not words or words[0] not in INSPECTING_COMMANDS:
        return None
    values: dict[str, str] = {}
    flags: set[str] = set()
    i = 1
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--" or (not word.startswith("-") and words[0] in ("preflight", "fleet")):
            break
        name, has_value, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in VALUE_OPTIONS:
            if not has_value:
                if i >= len(words):
                    return None  # the parser refuses it
                value, i = words[i], i + 1
            values[name] = value
        elif word[:2] in ("-f", "-o") and len(word) > 2:
            continue  # -fjson: the value in the same word
        elif (word.startswith("--") and not has_value) or _SHORT_FLAGS.fullmatch(word):
            flags.add(name)
        elif word.startswith("-"):
            return None  # -h, a combined short option, `--flag=value`: the parser's to judge
    if flags & {"--help", "--version", "--install-completion", "--show-completion"}:
        return None
    if words[0] == "fix" and "--apply" in flags and not flags & {"--yes", "-y"} and not isatty(sys.stdin):
        return None  # a usage error before any work
    timeout = None
    if "--timeout" in values:
        from .grammar import BadValue, parse_timeout

        try:
            timeout = parse_timeout(values["--timeout"])
        except BadValue:
            return None
    return EarlyTarget(values.get("--python"), timeout, "--no-kernel-cache" in flags)


def _start_early(argv: Sequence[str]) -> bool:
    """For a command that inspects: put the signal gate up, then start the target's first probes so that they run
    while typer imports and parses (earlystart.start_early). True when the gate went up (the start itself may have
    declined: a --python the session refuses). With the gate up first, a signal in the meantime ends the run with
    its report, never with an orphan."""
    target = early_target(argv, os.environ)
    if target is None:
        return False
    from ..hostio.signals import GATE

    GATE.install()
    if target.no_kernel_cache:
        _no_kernel_cache()
    from ..engine.earlystart import start_early

    start_early(target.python, target.timeout)
    return True


def _no_kernel_cache() -> None:
    from ..kernels import cache as kernelcache

    kernelcache.switch_off("--no-kernel-cache")  # the doctor's own probes only: the job's environment stays as it is


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


def parse_command_line(argv: list[str]) -> Options:
    """The command line as Options. Exits: 0 after --help, --version or completion; 2 on a usage
    error, said through the output layer. preflight's words after the first `--` are the job's, never parsed."""
    import typer
    from typer._click.exceptions import ClickException, NoSuchOption, UsageError as ClickUsageError
    from typer.exceptions import Abort, Exit

    argv = _with_default_command(list(argv))
    for i, word in enumerate(argv):  # `--show-completion` alone: for the running shell (typer takes no optional value)
        if word in ("--show-completion", "--install-completion") and (i + 1 == len(argv) or argv[i + 1][:1] == "-"):
            argv[i] = word + "="
    job_tail: list[str] | None = None
    if argv[:1] in (["preflight"], ["fleet"]) and "--" in argv:
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
        say(f"{PROG}: internal error: {defect_line(exc)}")
        finish_streams()
        sys.exit(int(ExitCode.INTERNAL))
    args = chosen.get("args")
    if args is None:  # --help, --version, completion: said and done
        finish_streams()
        sys.exit(result if isinstance(result, int) else 0)
    if job_tail is not None:
        args = replace(args, job_command=list(args.job_command) + job_tail)
    return args


class _CommandParser:
    """One command's parser, for code that parses a command's words (the docs' examples, tests)."""

    def __init__(self, command: str | None):
        self.command = command

    def parse_args(self, words: Sequence[str]) -> Options:
        return parse_command_line(([self.command] if self.command else []) + list(words))


def parser() -> tuple[_CommandParser, dict[str, _CommandParser]]:
    """The root parser and each command's: `parse_args(words)` gives the Options, or exits 2."""
    return _CommandParser(None), {name: _CommandParser(name) for name in COMMANDS}


# -------------------------------------------------------------------------------------------------- running, output

def _stdout_or_4(text: str, what: str) -> int:
    if write_stdout(text):
        return 0
    say(f"dsv4-doctor: could not write {what}: stdout is closed, broken or not read")
    return int(ExitCode.OUTPUT)


def _check_report(opts: Options, report: Report) -> int:
    """`check` and `smoke`: the report to stdout or --output, in the chosen format; its exit code."""
    return emit(report, opts.format, opts.output, opts.verbose)


def _preflight_report(opts: Options, report: Report) -> int:
    """`preflight`: the report to stderr (the job's stdout is the job's), and to --report as JSON; its exit code."""
    return preflight_report(report, opts.report, opts.verbose)


class _PromptStream:
    """stdout for typer's prompt: whatever it writes (the question, the space after it, "Error: invalid input")
    goes to stderr through the output layer, cleaned line by line; never to stdout, which holds the plan."""

    encoding, errors = "utf-8", "strict"

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError("a text stream")  # how click tells a text stream from a binary one
        write_stderr("\n".join(line_text(part) for part in text.split("\n")))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def ask(question: str) -> Answer:
    """`fix --apply`'s y/N prompt: typer.confirm (the default is No), its output through the output layer on stderr,
    the answer read from stdin. The end of input is a no; Ctrl-C (or another stop signal) ends the prompt with
    that signal, so the command exits 128 + N."""
    import contextlib

    import typer

    from ..fix.plan import Answer
    from ..hostio.signals import GATE

    stream = _PromptStream()
    # typer writes the question, and the space after it, to stdout: here that is the stream, so they go to stderr.
    with GATE.answering() as signals, contextlib.redirect_stdout(stream):
        try:
            return Answer(yes=typer.confirm(question, default=False))
        except (typer.Abort, KeyboardInterrupt):
            pass
    return Answer(yes=False, signum=signals[0] if signals else None)


MAX_JOB_ARGS_FILE_BYTES = 4 << 20  # more than any command line holds (ARG_MAX: 2 MiB)
JOB_ARGS_FIFO_S = 10.0  # `--job-args-file <(...)`: the shell's pipe, read until its writer closes it


def with_job_args_file(opts: Options) -> Options:
    """The options with --job-args-file FILE read into --job-args: as every user-named file is read (bounded, never
    blocking; a pipe within JOB_ARGS_FIFO_S seconds). A usage error when FILE cannot be read, or with --job-args."""
    if opts.job_args_file is None:
        return opts
    if opts.job_args is not None:
        raise UsageError("give the training command once: --job-args or --job-args-file")
    from ..hostio.safeio import ReadRefused, read_file

    try:
        raw = read_file(opts.job_args_file, MAX_JOB_ARGS_FILE_BYTES, fifo_s=JOB_ARGS_FIFO_S, strict_size=True)
    except ReadRefused as exc:
        raise UsageError(f"--job-args-file {opts.job_args_file!r} cannot be read: {exc}") from None
    if len(raw) >= MAX_JOB_ARGS_FILE_BYTES:  # a pipe gives no size beforehand
        raise UsageError(f"--job-args-file {opts.job_args_file!r}: more than {MAX_JOB_ARGS_FILE_BYTES} bytes")
    if b"\0" in raw:
        raise UsageError(f"--job-args-file {opts.job_args_file!r} holds a NUL byte, which no command line can")
    return replace(opts, job_args=raw.decode("utf-8", "surrogateescape"))  # as Python decodes a command line


def run_command(opts: Options) -> int:
    """The command's use case (commands/usecases.py), its result printed; the exit code."""
    from ..commands import usecases as app

    opts = with_job_args_file(opts)
    if opts.command == "check" and opts.versions:
        from ..report.emitter import emit_versions

        return app.versions_only(opts, lambda report: emit_versions(report, opts.format, opts.output))
    if opts.command in ("check", "smoke"):
        return app.check(opts, lambda report: _check_report(opts, report), smoke=opts.command == "smoke")[1]
    if opts.command in ("preflight", "fleet"):
        if opts.command == "fleet" and not opts.ray:
            from ..model.core import UsageError

            raise UsageError("fleet: say which fleet: --ray (the job's Ray cluster); a torchrun or srun job runs "
                             "`preflight` in front of every rank instead")
        return app.preflight(opts, lambda report: _preflight_report(opts, report))[1]
    if opts.command == "fix":
        return app.fix(opts, ask)[2]
    if opts.command == "triage":
        from ..report.output import check_output_path
        from ..triage.command import run

        check_output_path(opts.output)
        return run(opts.paths, opts.format, opts.output)
    if opts.command == "warm":
        from ..engine.target import resolve_python
        from ..kernels.warm import rendered, warm

        assert opts.gpu_arch is not None
        result = warm(resolve_python(opts.python), opts.gpu_arch, opts.into, opts.recipes, opts.timeout)
        return _stdout_or_4(rendered(result, opts.format == "json"), "the result") or result.exit_code
    from ..commands import catalog
    from ..report.dispatch import output_width

    if opts.command == "list":
        return _stdout_or_4(catalog.listing(opts, output_width(isatty(sys.stdout))), "the listing")
    return _stdout_or_4(catalog.explanation(opts, output_width(isatty(sys.stdout))), "the explanation")


def main(argv: Sequence[str] | None = None) -> None:
    from ..hostio.signals import GATE

    words = list(sys.argv[1:] if argv is None else argv)
    early = gate_up = _start_early(words)
    try:
        opts = parse_command_line(words)  # exits 2 on a usage error
        if opts.no_kernel_cache:
            _no_kernel_cache()
        if not gate_up:
            GATE.install()  # from here to the end no signal meets the default action (see SignalGate)
            gate_up = True
        code = _run(opts)
    finally:
        if early:
            from ..engine.earlystart import close_early

            close_early()  # after a usage error or an interrupted parse: nothing started early outlives the doctor
        if gate_up:
            GATE.uninstall()
    if GATE.late is not None and code < 128:  # asked to stop while the report was written: it was, and we stop
        code = 128 + GATE.late
    finish_streams()
    sys.exit(code)


def _run(opts: Options) -> int:
    """run_command, with every way it can end as an exit code."""
    from ..model.core import Interrupted

    try:
        return run_command(opts)
    except UsageError as exc:
        write_stderr(line_text(usage_line(opts.command)) + "\n")
        say(f"dsv4-doctor {opts.command}: error: {exc}")
        return int(ExitCode.USAGE)
    except Interrupted as exc:  # list and explain: nothing to report, only to stop cleanly
        say(f"dsv4-doctor {opts.command}: interrupted by {exc}")
        return 128 + exc.signum
    except Exception as exc:  # a defect of the doctor's own: one line that says where, never a traceback
        say(f"dsv4-doctor {opts.command}: internal error: {defect_line(exc)}")
        return int(ExitCode.INTERNAL)
