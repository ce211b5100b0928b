"""The `dsv4-doctor` command line. It renders and decides; it never imports torch or any inspected package.

Exit codes (the same for every output format):
  0  no check failed (warnings allowed, unless --strict)
  1  at least one check failed or errored (or warned, with --strict)
  2  usage error
  3  the doctor itself or a plugin crashed (the report is still written)
"""

from __future__ import annotations

import contextlib
import enum
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from typing import List, Optional

import typer

from . import __version__
from .model import Check, CheckReport, ExitCode, Profile, Status

EXIT_CODES_HELP = (
    "Exit codes: 0 no check failed (warnings allowed unless --strict); 1 a check failed or errored "
    "(or warned, with --strict); 2 usage error; 3 the doctor itself or a plugin crashed (the report is still written)."
)

app = typer.Typer(
    name="dsv4-doctor",
    help="Preflight checks for DeepSeek-V4 context-parallel training (verl + Megatron-Core + TE + cuDNN frontend).\n\n"
    + EXIT_CODES_HELP,
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Format(str, enum.Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    junit = "junit"


class Backend(str, enum.Enum):
    cudnn = "cudnn"
    none = "none"


class Device(str, enum.Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _gpu_arch(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    if not re.fullmatch(r"\d{1,2}\.\d", value):
        raise typer.BadParameter("expected a compute capability such as 9.0 or 10.0")
    return value


def _python(value: Optional[str]) -> str:
    if value is None:
        return sys.executable
    found = value if os.sep in value else shutil.which(value)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise typer.BadParameter(f"no executable interpreter at {value!r}")
    return os.path.abspath(found)


def _output(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    parent = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise typer.BadParameter(f"cannot write {value!r}: {parent} is not a writable directory")
    return value


def _ids(values: Optional[List[str]]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def select(checks: list[Check], only: list[str], skip: list[str]) -> list[Check]:
    """--only / --skip by id or glob (`cudnn-fe.*`); a pattern that matches nothing is a usage error."""
    ids = [c.id for c in checks]
    for pattern in only + skip:
        if not fnmatch.filter(ids, pattern):
            raise typer.BadParameter(f"no check matches {pattern!r}; see `dsv4-doctor list`")
    chosen = [c for c in checks if not only or any(fnmatch.fnmatchcase(c.id, p) for p in only)]
    return [c for c in chosen if not any(fnmatch.fnmatchcase(c.id, p) for p in skip)]


_REGISTRY = None


def _registry():
    global _REGISTRY
    if _REGISTRY is None:
        from .registry import load

        with contextlib.redirect_stdout(sys.stderr):  # a plugin printing at import must not reach stdout
            _REGISTRY = load()
    return _REGISTRY


def _static_request(registry):
    """All checks' static needs, whatever is selected: one cheap probe, and the same one main() prefetches."""
    from .probes import StaticRequest

    return StaticRequest.merge(c.static for c in registry.checks)


def _prefetch(args: list[str]) -> None:
    """Start the static probe while typer parses the command line (typer's start-up costs about 0.15 s)."""
    if args[0] not in ("check", "fix") or any(a in ("--help", "-h") for a in args):
        return
    python = sys.executable
    for i, a in enumerate(args):
        if a == "--python" and i + 1 < len(args):
            python = args[i + 1]
        elif a.startswith("--python="):
            python = a.split("=", 1)[1]
    timeout = 60.0
    for i, a in enumerate(args):
        value = args[i + 1] if a == "--timeout" and i + 1 < len(args) else (
            a.split("=", 1)[1] if a.startswith("--timeout=") else None)
        if value is not None:
            try:
                timeout = float(value)
            except ValueError:
                return
            if not 1.0 <= timeout <= 3600.0:
                return
    try:
        python = _python(python)
        from .runner import prefetch_static, static_probe_for

        prefetch_static(python, static_probe_for(_static_request(_registry()), timeout))
    except Exception:
        return  # the command itself reports whatever is wrong


def _plugin_reports(plugins) -> list[CheckReport]:
    return [
        CheckReport(
            id="plugin." + (re.sub(r"[^a-z0-9_-]+", "-", p.name.lower()).strip("-_") or "unnamed"),
            title=f"Plugin {p.name} loads", status=Status.ERROR,
            summary=f"plugin {p.name!r} from distribution {p.distribution} failed to load: {p.error}",
            details=p.traceback, evidence={"entry_point": p.value, "distribution": p.distribution,
                                           "version": p.version},
            origin=p.distribution, internal_error=True,
        )
        for p in plugins if p.error
    ]


class _Progress:
    """A live status line on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.running: list[str] = []
        self.status = None
        if enabled:
            from rich.console import Console

            self.status = Console(stderr=True, markup=False, highlight=False).status("starting checks")
            self.status.start()

    def __call__(self, event: str, check_id: str) -> None:
        if self.status is None:
            return
        if event == "start":
            self.running.append(check_id)
        elif check_id in self.running:
            self.running.remove(check_id)
        shown = ", ".join(self.running[:4]) + (" …" if len(self.running) > 4 else "")
        self.status.update(f"running: {shown}" if shown else "finishing")

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


def execute(profile: Profile, python: str, only: list[str], skip: list[str], timeout: float, strict: bool,
            progress: bool = False, static_only: bool = False) -> dict:
    """Load checks, run them, and build the (redacted) report. A crash of the doctor still yields a report."""
    from .report import build
    from .runner import run_checks

    plugins = []
    run = None
    # Plugins and inspected code must not print into a JSON report: anything they print goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            registry = _registry()
            plugins = registry.plugins
            checks = select(registry.checks, only, skip)
            if static_only:
                checks = [c for c in checks if not c.probes_for(profile)]
            bar = _Progress(progress)
            try:
                run = run_checks(checks, profile, python, probe_timeout_s=timeout, on_event=bar,
                                 static_request=_static_request(registry))
            finally:
                bar.stop()
            return build(run, run.checks + _plugin_reports(plugins), plugins, python, strict=strict,
                         profile=run.profile.to_dict())
        except typer.BadParameter:
            raise
        except Exception as exc:  # the doctor itself broke: report it rather than die
            crash = CheckReport(
                id="doctor.internal", title="dsv4-doctor ran", status=Status.ERROR,
                summary=f"dsv4-doctor crashed: {type(exc).__name__}: {exc}",
                details="".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:],
                internal_error=True,
            )
            return build(None, [crash], plugins, python, strict=strict, profile=profile.to_dict())


def _write(text: str, output: Optional[str]) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _color(output: Optional[str]) -> bool:
    if output or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR"))


# Options shared by `check` and `fix`.
CP = typer.Option(1, "--cp", min=1, help="Context-parallel size of the planned job.")
BACKEND = typer.Option(Backend.cudnn, "--dsa-backend", help="Megatron dsa_kernel_backend (the MLM CLI resolves "
                       "an omitted one to cudnn for dsv4_hybrid).")
GPU_ARCH = typer.Option(None, "--gpu-arch", callback=_gpu_arch, help="Compute capability the job runs on, e.g. "
                        "10.0; default: detected with nvidia-smi. Lets a CPU-only image be checked for its GPU.")
PYTHON = typer.Option(None, "--python", help="Interpreter to inspect (default: the one running the doctor).")
ONLY = typer.Option(None, "--only", help="Run only these check ids (repeatable, comma-separated, globs allowed).")
SKIP = typer.Option(None, "--skip", help="Skip these check ids (repeatable, comma-separated, globs allowed).")
TIMEOUT = typer.Option(60.0, "--timeout", min=1.0, max=3600.0, help="Seconds each isolated probe may take before it is killed.")
DEVICE = typer.Option(Device.auto, "--device", help="Where the smoke forward runs: auto (a GPU when one is "
                      "visible, else skipped), cuda, or cpu.")


@app.command(epilog=EXIT_CODES_HELP)
def check(
    cp: int = CP,
    dsa_backend: Backend = BACKEND,
    gpu_arch: Optional[str] = GPU_ARCH,
    python: Optional[str] = PYTHON,
    only: Optional[List[str]] = ONLY,
    skip: Optional[List[str]] = SKIP,
    timeout: float = TIMEOUT,
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Report format."),
    output: Optional[str] = typer.Option(None, "--output", "-o", callback=_output,
                                         help="Write the report to this file."),
    strict: bool = typer.Option(False, "--strict", help="Warnings fail too (exit 1)."),
    static_only: bool = typer.Option(False, "--static-only", help="Only checks that import nothing (metadata, "
                                     "file locations, ast): well under a second."),
    no_smoke: bool = typer.Option(False, "--no-smoke", help="Skip the smoke forward (smoke.thd-cp)."),
    device: Device = DEVICE,
) -> None:
    """Check this environment for the planned DSv4 job (the default command)."""
    target = _python(python)
    profile = Profile(cp=cp, dsa_backend=dsa_backend.value, gpu_arch=gpu_arch,
                      gpu_arch_source="option" if gpu_arch else "unknown", device=device.value,
                      smoke="off" if no_smoke else ("on" if device is Device.cpu else "auto"))
    report = execute(profile, target, _ids(only), _ids(skip), timeout, strict,
                     progress=fmt is Format.text and sys.stderr.isatty(), static_only=static_only)
    _emit(report, fmt, output)


def _emit(report: dict, fmt: Format, output: Optional[str]) -> None:
    from .render import render, verdict_line
    from .render.github import emit

    color = _color(output) if fmt is Format.text else False
    width = shutil.get_terminal_size((160, 24)).columns if color and sys.stdout.isatty() else None
    _write(render(report, fmt.value, color=color, width=width), output)
    if output:
        _stderr(verdict_line(report) + f" (report written to {output})")
    emit(report, sys.stderr)
    raise typer.Exit(report["summary"]["exit_code"])


@app.command(epilog=EXIT_CODES_HELP)
def smoke(
    cp: int = CP,
    dsa_backend: Backend = BACKEND,
    python: Optional[str] = PYTHON,
    timeout: float = TIMEOUT,
    device: Device = typer.Option(Device.auto, "--device", help="auto: the GPU when torch sees one, else the CPU."),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Report format."),
    output: Optional[str] = typer.Option(None, "--output", "-o", callback=_output,
                                         help="Write the report to this file."),
) -> None:
    """Run only the smoke forward (smoke.thd-cp): a contiguous-CP THD attention against a float32 reference."""
    target = _python(python)
    profile = Profile(cp=cp, dsa_backend=dsa_backend.value, device=device.value, smoke="on")
    report = execute(profile, target, ["smoke.thd-cp"], [], timeout, strict=False,
                     progress=fmt is Format.text and sys.stderr.isatty())
    _emit(report, fmt, output)


@app.command("list")
def list_checks(fmt: Format = typer.Option(Format.text, "--format", "-f",
                                           help="text, json, or markdown (the README rules table).")) -> None:
    """List every check, where it comes from and when it applies."""
    import json

    from .redact import Redactor

    registry = _registry()
    redact = Redactor()
    rows = [{"id": c.id, "title": c.title, "origin": c.origin, "applies_when": c.applies_when} for c in registry.checks]
    if fmt is Format.json:
        sys.stdout.write(json.dumps(redact({"checks": rows, "plugins": [p.to_dict() for p in registry.plugins]}),
                                    indent=2) + "\n")
        return
    if fmt is Format.markdown:
        from .render.rules import rules_table

        sys.stdout.write(rules_table(registry.checks))
        return
    width = max([len(r["id"]) for r in rows] + [5])
    for r in rows:
        sys.stdout.write(f"{r['id']:<{width}}  {r['origin']:<14}  {r['applies_when']}\n")
    for p in registry.plugins:
        if p.error:
            sys.stdout.write(redact(f"plugin {p.name} ({p.distribution}) failed to load: {p.error}") + "\n")


def explain_text(c: Check) -> str:
    lines = [f"{c.id}: {c.title}", f"origin: {c.origin}", f"applies when: {c.applies_when}",
             f"detects: {c.detects}", "", c.doc(), ""]
    if c.fixes:
        lines.append("Fixes:")
        for fix in c.fixes:
            lines.append(f"  {fix.description}")
            lines += [f"    {cmd}" for cmd in fix.commands]
        lines.append("")
    lines.append("Sources:")
    lines += [f"  {s.title}" + (f": {s.url}" if s.url else "") for s in c.sources] or ["  (none)"]
    return "\n".join(lines) + "\n"


@app.command()
def explain(check_id: str = typer.Argument(..., metavar="ID", help="A check id from `dsv4-doctor list`.")) -> None:
    """Why a check exists, when it applies, its upstream sources and its fixes."""
    registry = _registry()
    c = registry.get(check_id)
    if c is None:
        near = [x.id for x in registry.checks if check_id.split(".")[0] in x.id]
        raise typer.BadParameter(f"unknown check {check_id!r}" + (f"; did you mean {', '.join(near)}?" if near else ""),
                                 param_hint="ID")
    sys.stdout.write(explain_text(c))


def fix_script(report: dict, python: str) -> tuple[str, list[str]]:
    """One ordered, de-duplicated script of the fix commands of every failing or warning check."""
    commands: list[str] = []
    lines = [
        "#!/bin/sh",
        "# dsv4-doctor fix script. Profile: " + " ".join(f"{k}={v}" for k, v in report["profile"].items()),
        "set -e",
        f"PY={shlex.quote(python)}",
    ]
    for c in report["checks"]:
        if c["status"] not in ("fail", "warn", "error"):
            continue
        for fix in c["fixes"]:
            new = [cmd for cmd in fix["commands"] if cmd not in commands]
            if not new:
                continue
            lines.append(f"# {c['id']}: {fix['description']}")
            for cmd in new:
                commands.append(cmd)
                lines.append(_with_target_pip(cmd))
    if not commands:
        lines.append("# nothing to fix")
    return "\n".join(lines) + "\n", commands


def _with_target_pip(cmd: str) -> str:
    """`pip ...` runs with the inspected interpreter's pip, not whichever pip is first on PATH."""
    return re.sub(r"^(?:pip3?|python3? -m pip) ", '"$PY" -m pip ', cmd)


@app.command()
def fix(
    cp: int = CP,
    dsa_backend: Backend = BACKEND,
    gpu_arch: Optional[str] = GPU_ARCH,
    python: Optional[str] = PYTHON,
    only: Optional[List[str]] = ONLY,
    skip: Optional[List[str]] = SKIP,
    timeout: float = TIMEOUT,
    apply: bool = typer.Option(False, "--apply", help="Run the commands with the target interpreter's pip."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before applying."),
) -> None:
    """Print the fix commands of the current failures as one shell script (or run them with --apply)."""
    from .render import verdict_line

    target = _python(python)
    profile = Profile(cp=cp, dsa_backend=dsa_backend.value, gpu_arch=gpu_arch,
                      gpu_arch_source="option" if gpu_arch else "unknown")
    report = execute(profile, target, _ids(only), _ids(skip), timeout, strict=False)
    script, commands = fix_script(report, target)
    sys.stdout.write(script)
    if not apply or not commands:
        raise typer.Exit(report["summary"]["exit_code"])
    if not yes and not typer.confirm(f"Run these {len(commands)} command(s) now?", default=False, err=True):
        _stderr("nothing applied")
        raise typer.Exit(ExitCode.FAILED)
    env = dict(os.environ, PY=target)
    for cmd in commands:
        line = _with_target_pip(cmd)
        _stderr(f"+ {line}")
        done = subprocess.run(["sh", "-c", line], env=env)
        if done.returncode != 0:
            _stderr(f"command failed with exit code {done.returncode}; stopping")
            raise typer.Exit(ExitCode.FAILED)
    known = {c.id for c in _registry().checks}
    failing = [c["id"] for c in report["checks"] if c["status"] in ("fail", "warn", "error") and c["id"] in known]
    if not failing:
        _stderr("nothing to re-check")
        raise typer.Exit(ExitCode.OK)
    again = execute(report_profile(report), target, failing, [], timeout, strict=False)
    for c in again["checks"]:
        _stderr(f"{c['id']}: {c['status']} - {c['summary']}")
    _stderr("after the fixes: " + verdict_line(again))
    raise typer.Exit(again["summary"]["exit_code"])


def report_profile(report: dict) -> Profile:
    p = report["profile"]
    return Profile(cp=p["cp"], dsa_backend=p["dsa_backend"], gpu_arch=p["gpu_arch"],
                   gpu_arch_source=p["gpu_arch_source"], device=p.get("device", "auto"), smoke=p.get("smoke", "auto"))


def version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"dsv4-doctor {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """Preflight checks for DeepSeek-V4 context-parallel training."""


COMMANDS = {"check", "list", "explain", "fix", "smoke"}


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # `dsv4-doctor` and `dsv4-doctor --cp 2 ...` mean `dsv4-doctor check ...`.
    if not args or (args[0] not in COMMANDS and args[0] not in ("--help", "-h", "--version")):
        args.insert(0, "check")
    _prefetch(args)
    app(args=args, prog_name="dsv4-doctor")
