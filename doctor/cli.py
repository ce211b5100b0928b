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
import os
import re
import sys
from collections.abc import Sequence

from . import __version__
from .model import ExitCode, Profile

EXIT_CODES_HELP = (
    "Exit codes: 0 no check failed (warnings allowed unless --strict); 1 a check failed or errored (or warned, with "
    "--strict); 2 usage error; 3 the doctor itself or a plugin crashed (the report is still written); 4 the report "
    "could not be written to --output (it went to stdout); 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM."
)
COMMANDS = ("check", "smoke", "list", "explain", "fix")
FORMATS = ("text", "json", "markdown", "junit")


class UsageFailure(Exception):
    """Raised by argument callbacks; printed as `dsv4-doctor: error: ...` with exit 2."""


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
        raise argparse.ArgumentTypeError("--timeout must be between 1 and 3600 seconds")
    return t


def _ids(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def check_output_path(path: str | None) -> None:
    """A report file that cannot be written is a usage error, said before any work."""
    if path is None:
        return
    if os.path.isdir(path):
        raise UsageFailure(f"--output {path!r} is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageFailure(f"--output {path!r}: {parent} is not a directory")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageFailure(f"--output {path!r} is not writable")
    elif not os.access(parent, os.W_OK):
        raise UsageFailure(f"--output {path!r}: {parent} is not writable")


# ------------------------------------------------------------------------------------------------------ parser

def _profile_options(p: argparse.ArgumentParser, gpu_arch: bool = True) -> None:
    p.add_argument("--cp", type=_cp, default=1, metavar="N", help="Context-parallel size of the planned job (1-1024).")
    p.add_argument("--dsa-backend", choices=("cudnn", "none"), default=None,
                   help="Megatron dsa_kernel_backend (default: cudnn, as the MLM CLI resolves it for dsv4_hybrid).")
    if gpu_arch:
        p.add_argument("--gpu-arch", type=_gpu_arch, metavar="X.Y",
                       help="Compute capability the job runs on, e.g. 10.0; default: detected with nvidia-smi.")
    p.add_argument("--python", metavar="PATH", help="Interpreter to inspect (default: the one running the doctor).")
    p.add_argument("--timeout", type=_timeout, default=60.0, metavar="S",
                   help="Seconds each isolated probe may take before it is killed (default 60).")


def _selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", action="append", metavar="ID[,ID...]",
                   help="Run only these check ids (repeatable; globs such as 'cudnn-fe.*' allowed).")
    p.add_argument("--skip", action="append", metavar="ID[,ID...]", help="Skip these check ids (repeatable; globs).")


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--format", choices=FORMATS, default="text", help="Report format (default text).")
    p.add_argument("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The root parser and each command's (for its usage line on a usage error)."""
    root = argparse.ArgumentParser(
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

    smoke = sub.add_parser("smoke", help="Run only the smoke forward.", epilog=EXIT_CODES_HELP)
    _profile_options(smoke)
    _report_options(smoke)
    smoke.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                       help="auto: the GPU when torch sees one, else the CPU.")

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
    return root, {"check": check, "smoke": smoke, "list": lst, "explain": explain, "fix": fix}


# ----------------------------------------------------------------------------------------------------- running

def _stderr(message: str) -> None:
    from .redact import clean_text

    sys.stderr.write(clean_text(message) + "\n")
    sys.stderr.flush()


class _Progress:
    """A live status line on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.running: list[str] = []

    def __call__(self, event: str, check_id: str) -> None:
        if not self.enabled:
            return
        if event == "start":
            self.running.append(check_id)
        elif check_id in self.running:
            self.running.remove(check_id)
        shown = ", ".join(self.running[:4]) + (" …" if len(self.running) > 4 else "")
        sys.stderr.write("\r\x1b[K" + (f"running: {shown}" if shown else "finishing"))
        sys.stderr.flush()

    def stop(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _profile(args, smoke: str) -> Profile:
    return Profile(cp=args.cp, dsa_backend=args.dsa_backend or "cudnn",
                   dsa_backend_source="option" if args.dsa_backend else "default",
                   gpu_arch=getattr(args, "gpu_arch", None),
                   gpu_arch_source="option" if getattr(args, "gpu_arch", None) else "unknown",
                   device=getattr(args, "device", "auto"), smoke=smoke,
                   static_only=bool(getattr(args, "static_only", False)))


def run_report(args, profile: Profile, only: list[str], skip: list[str], strict: bool, progress: bool,
               keep: dict | None = None) -> dict:
    from .session import run_check

    bar = _Progress(progress)
    try:
        return run_check(args.python, args.timeout, profile, only, skip, strict, on_event=bar, keep=keep)
    finally:
        bar.stop()


def emit(report: dict, fmt: str, output: str | None) -> int:
    """Write the report; its exit code, or 4 when --output could not be written (the report then goes to stdout)."""
    from .render import output_width, render, verdict_line
    from .render.github import emit as annotate

    code = report["summary"]["exit_code"]
    to_tty = output is None and sys.stdout.isatty()
    color = fmt == "text" and to_tty and not os.environ.get("NO_COLOR")
    text = render(report, fmt, color=color, width=output_width(to_tty))
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
            _stderr(verdict_line(report) + f" (report written to {output})")
        except OSError as exc:
            _stderr(f"dsv4-doctor: could not write the report to {output}: {exc}; it follows on stdout")
            sys.stdout.write(render(report, fmt, width=output_width(False)))
            sys.stdout.flush()
            code = max(code, int(ExitCode.OUTPUT))
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    annotate(report, sys.stderr)
    return code


def cmd_check(args, smoke: bool = False) -> int:
    check_output_path(args.output)
    if smoke:
        profile, only, skip, strict = _profile(args, "on"), ["smoke.*"], [], False
    else:
        only, skip, strict = _ids(args.only), _ids(args.skip), args.strict
        profile = _profile(args, "off" if args.no_smoke else ("on" if args.device == "cpu" else "auto"))
    report = run_report(args, profile, only, skip, strict, progress=args.format == "text" and sys.stderr.isatty())
    return emit(report, args.format, args.output)


def _registry_session(timeout: float):
    from .session import Session

    session = Session(None, timeout)
    session.load()
    return session


def cmd_list(args) -> int:
    import json

    from .redact import Redactor

    session = _registry_session(args.timeout)
    try:
        checks = session.all_checks()
        plugins = session.registry.builtins + session.registry.plugins
    finally:
        session.close()
    redact = Redactor()
    if args.format == "json":
        rows = [{"id": c.id, "title": c.title, "origin": c.origin, "applies_when": c.applies_when} for c in checks]
        sys.stdout.write(json.dumps(redact({"checks": rows, "plugins": [p.to_dict() for p in plugins]}),
                                    indent=2) + "\n")
        return 0
    if args.format == "markdown":
        from .render.rules import rules_table

        sys.stdout.write(rules_table(checks))
        return 0
    width = max([len(c.id) for c in checks] + [5])
    for c in checks:
        sys.stdout.write(redact(f"{c.id:<{width}}  {c.origin:<14}  {c.applies_when}") + "\n")
    for p in plugins:
        if p.error:
            sys.stdout.write(redact(f"plugin {p.name} ({p.distribution}) failed to load: {p.error}") + "\n")
    return 0


def cmd_explain(args) -> int:
    from .redact import Redactor
    from .render.explain import explain_text

    session = _registry_session(args.timeout)
    try:
        checks = session.all_checks()
    finally:
        session.close()
    c = next((x for x in checks if x.id == args.check_id), None)
    if c is None:
        near = [x.id for x in checks if args.check_id.split(".")[0] in x.id]
        raise UsageFailure(f"unknown check {args.check_id!r}" + (f"; did you mean {', '.join(near)}?" if near else ""))
    sys.stdout.write(Redactor()(explain_text(c)))
    return 0


def cmd_fix(args) -> int:
    from . import fixplan
    from .procs import Processes
    from .render import verdict_line

    if args.apply and not args.yes and not sys.stdin.isatty():
        raise UsageFailure("--apply needs --yes when stdin is not a terminal")
    profile = _profile(args, "off")
    only, skip = _ids(args.only), _ids(args.skip)
    holder: dict = {}
    report = run_report(args, profile, only, skip, False, progress=False, keep=holder)
    reports, python = holder.get("reports", []), holder.get("python", args.python or sys.executable)
    plan = fixplan.build_plan(reports)
    sys.stdout.write(fixplan.render_script(plan, python, report["profile"], __version__))
    sys.stdout.flush()
    before = verdict_line(report)
    _stderr("before: " + before)
    if not args.apply:
        return report["summary"]["exit_code"] if report["summary"]["exit_code"] >= 128 else plan.exit_code
    if not any(s.automatic for s in plan.steps):
        _stderr("nothing to apply: the plan has no automatic (pip) step")
        return plan.exit_code
    if not args.yes:
        sys.stderr.write(f"Run the {sum(len(s.commands) for s in plan.steps if s.automatic)} pip command(s) of this "
                         "plan now? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            _stderr("nothing applied")
            return int(ExitCode.FAILED)
    procs = Processes()
    try:
        ran, code = fixplan.apply(plan, python, procs)
    finally:
        procs.close()
    if code:
        _stderr(f"a pip command failed with exit code {code}; stopped after {ran} command(s)")
        return int(ExitCode.FAILED)
    again = run_report(args, profile, only, skip, False, progress=False)
    for c in again["checks"]:
        _stderr(f"{c['id']}: {c['status']} - {c['summary']}")
    _stderr("before: " + before)
    _stderr("after:  " + verdict_line(again))
    return again["summary"]["exit_code"]


def main(argv: Sequence[str] | None = None) -> None:
    args_in = list(sys.argv[1:] if argv is None else argv)
    # `dsv4-doctor` and `dsv4-doctor --cp 2 ...` mean `dsv4-doctor check ...`.
    if not args_in or (args_in[0] not in COMMANDS and args_in[0] not in ("-h", "--help", "--version")):
        args_in.insert(0, "check")
    p, commands = parser()
    args = p.parse_args(args_in)  # exits 2 on a usage error, 0 for --help/--version
    from .session import UsageError

    handlers = {"check": cmd_check, "smoke": lambda a: cmd_check(a, smoke=True), "list": cmd_list,
                "explain": cmd_explain, "fix": cmd_fix}
    try:
        code = handlers[args.command](args)
    except (UsageFailure, UsageError) as exc:
        commands.get(args.command, p).print_usage(sys.stderr)
        _stderr(f"dsv4-doctor {args.command}: error: {exc}")
        code = int(ExitCode.USAGE)
    sys.stdout.flush()
    sys.exit(code)
