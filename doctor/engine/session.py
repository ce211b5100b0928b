"""One doctor run: the target interpreter and its handshake, the registry and the static probe, the profile
(resolved once, before selection), the selection, the time budget, and the run of the built-in and plugin checks
under it, whose outcome the report is made from (engine/runreport.py drives these steps; report/assemble.py makes the
report).

The session owns every child process (`Processes`): `close()` kills whatever is still running and removes every
temporary directory, which the CLI does on the way out of every command, usage errors and signals included.
"""

from __future__ import annotations

import contextlib
import fnmatch
import signal
import sys
import time
from dataclasses import replace
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..model.core import Check, CheckReport, Interrupted, Profile, Result, Status, UsageError
from .probes import (DEFAULT_TIMEOUT_S, NVIDIA_SMI, PROBE_MIN_PYTHON, STATIC_TIMEOUT_S, Probe, StaticRequest,
                     handshake_probe, parse_handshake, parse_nvidia_smi, static_probe_for)
from .plugins import MARGIN_S, HostWatch, PluginHosts, plugin_error_rows
from ..hostio.procs import Processes
from .registry import Registry, near_misses
from ..report.assemble import Outcome
from .runner import CHECK_TIMEOUT_S, ProbePool, RunContext, Runner, _report, execute, plan
from ..hostio.signals import GATE
from ..job import stackbuild
from .target import REMOTE_NOT_KNOWN, resolve_python, workers

if TYPE_CHECKING:
    from ..job.syspath import JobPath

HANDSHAKE_BUDGET_S = 15.0
MAX_CP = 1024


def remote_host(profile: Profile) -> str | None:
    """The submitter a job's command runs on another host through (`ray job submit`, `sbatch --wrap`), or None: the
    job's settings are read here, its interpreter and stack are that host's."""
    chain = getattr(profile.job, "chain", None)
    remote = getattr(chain, "remote", None)
    return remote if isinstance(remote, str) and remote else None


def select(checks: Sequence[Check], only: Sequence[str], skip: Sequence[str], job: bool = False) -> list[Check]:
    """--only / --skip by id or glob (`cudnn-fe.*`); a pattern that matches nothing, or an empty selection, is a
    usage error. Checks that read the job's command line take part only when one was given (`job`)."""
    context = {"job"} if job else set()
    for p in only:
        hit = [c for c in checks if fnmatch.fnmatchcase(c.id, p)]
        if hit and all(c.only_with and c.only_with not in context for c in hit):
            if hit[0].only_with == "job":
                raise UsageError(f"--only {p}: job checks read the training command; give it with "
                                 "`dsv4-doctor preflight -- CMD` or `check --job-args \"CMD\"`")
            raise UsageError(f"--only {p}: fleet checks are written by the fleet merge of a multi-rank run "
                             "(`check --distributed` under torchrun or srun)")
    known = [c.id for c in checks]  # every listed id: skipping one that is not active here is no error
    checks = [c for c in checks if not c.only_with or c.only_with in context]
    ids = [c.id for c in checks]
    for pattern in list(only) + list(skip):
        if not fnmatch.filter(ids if pattern in only else known, pattern):
            near = near_misses(pattern, ids if pattern in only else known)
            raise UsageError(f"no check matches {pattern!r}" + (f"; did you mean {', '.join(near)}?" if near else "")
                             + "; see `dsv4-doctor list`")
    chosen = [c for c in checks if not only or any(fnmatch.fnmatchcase(c.id, p) for p in only)]
    chosen = [c for c in chosen if not any(fnmatch.fnmatchcase(c.id, p) for p in skip)]
    if not chosen:
        raise UsageError("--only/--skip select no check: "
                         + " ".join([f"--only {p}" for p in only] + [f"--skip {p}" for p in skip]))
    return chosen


class Session:
    def __init__(self, python: str | None = None, timeout: float | None = None, pool: ProbePool | None = None):
        """`timeout`: every probe's limit (--timeout); None: DEFAULT_TIMEOUT_S, and LONG_TIMEOUT_S for long probes.
        `pool`: the early start's, whose first probes started before this module was imported (engine/earlystart.py);
        adopted when it runs this interpreter, else closed."""
        self.python = resolve_python(python)
        self.timeout_option = timeout
        self.timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
        self.started = time.monotonic()
        if pool is not None and pool.python != self.python:
            pool.procs.close()
            pool = None
        self.pool = pool or ProbePool.for_target(self.python, timeout, workers())
        self.procs: Processes = self.pool.procs
        self.handshake = handshake_probe(self.python)
        self.registry: Registry | None = None
        self.static_probe: Probe | None = None
        self.job_path: JobPath | None = None  # the job's start (preflight, --job-args): the static probe's too
        self.hosts = PluginHosts(self.procs, self.python, self.timeout, self.gpus, self.pool.slots)
        self.target: dict = {"executable": self.python, "version": None}
        self.judged: dict | None = None  # which interpreter self.python is and why (target.Judged), for the report
        self.target_problem: str | None = None
        self._gate_installs = 0  # GATE.install() calls this session made: each one is undone by restore_signals
        self._running: tuple | None = None  # (runner, plugin hosts, profile, start, budget, later) while checks run
        self._stack: Any = None  # the settings probe (stackbuild.start) once resolve started it
        self._watch: HostWatch | None = None

    # ---------------------------------------------------------------------------------------- lifetime, signals

    def close(self) -> None:
        self.restore_signals()
        self._stop_watch()
        self.procs.close()

    def serves(self, python: str | None, timeout: float | None) -> bool:
        """Whether this session is the one a run of `--python python --timeout timeout` would make."""
        try:
            return resolve_python(python) == self.python and timeout == self.timeout_option
        except UsageError:
            return False

    def install_signals(self) -> None:
        """SIGINT/SIGTERM/SIGHUP interrupt the run once (the process's SignalGate; a second one is recorded). The
        gate counts nested installs, so each one is undone, even when arm() raises for a signal that came earlier."""
        GATE.install()
        self._gate_installs += 1
        GATE.arm()

    def shield(self) -> None:
        """From now on a signal no longer interrupts: the report being written is short work."""
        GATE.shield()

    def restore_signals(self) -> None:
        GATE.shield()
        while self._gate_installs:  # the CLI's own install stays until it undoes it; a test's run_check leaves none
            self._gate_installs -= 1
            GATE.uninstall()

    # ------------------------------------------------------------------------------------------------ start-up

    def start(self, with_gpus: bool = True) -> None:
        """Start the probes every run needs; they run while the registry loads."""
        self.pool.submit(self.handshake)
        if with_gpus:
            self.pool.submit(NVIDIA_SMI)

    def load(self, describe_plugins: bool = True, static_probe: bool = True) -> Registry:
        """The registry; with `static_probe`, the one static probe every built-in check reads starts now, while the
        plugins describe themselves."""
        from . import registry

        if self.registry is None:  # loaded already when the session started early
            with contextlib.redirect_stdout(sys.stderr):
                self.registry = registry.load()
        if static_probe and self.static_probe is None:
            self.static_probe = static_probe_for(StaticRequest.merge(c.static for c in self.registry.checks),
                                                 self.timeout, self.job_path)
            self.pool.submit(self.static_probe)
        if describe_plugins and self.registry.plugins:
            self.hosts.describe(self.registry)
        return self.registry

    def all_checks(self) -> list[Check]:
        assert self.registry is not None
        out = list(self.registry.checks)
        for checks in self.hosts.plugin_checks.values():
            out += checks
        return sorted(out, key=lambda c: c.id)

    def use_job_path(self, job: JobPath | None) -> None:
        """Locate modules as the job's interpreter will (its sys.path[0], flags, variables): a static probe started
        before the job was known (the early start) is replaced by one that starts as the job does."""
        if job is None or job == self.job_path:
            return
        self.job_path = job
        self.pool.job = job
        self.static_probe = None

    def check_target(self) -> dict:
        """The handshake: is --python a Python at all, and one the probes can inspect? Raises UsageError if not."""
        result = self.pool.result(self.handshake, HANDSHAKE_BUDGET_S + 1)
        info = parse_handshake(result.data) if result.ok else None
        if info is None:
            why = result.error or "it printed no Python version"
            raise UsageError(f"--python {self.python} is not a Python interpreter the doctor can run ({why})")
        self.target = dict(info, judged=self.judged) if self.judged else info
        if tuple(info["version_info"][:2]) < PROBE_MIN_PYTHON:
            self.target_problem = (f"the target interpreter is Python {info['version']}; the doctor's probes need "
                                   f"Python {PROBE_MIN_PYTHON[0]}.{PROBE_MIN_PYTHON[1]} or newer, so it could not be "
                                   "inspected (see python.version)")
        return info

    def gpus(self) -> list[dict]:
        result = self.pool.result(NVIDIA_SMI, 16)
        try:
            return parse_nvidia_smi(result.data) if result.ok else []
        except Exception:  # whatever nvidia-smi printed, the run goes on without GPU facts
            return []

    def resolve(self, profile: Profile) -> Profile:
        """The profile, resolved once before selection: GPUs on this host and the arch they have."""
        if profile.cp > MAX_CP:
            raise UsageError(f"--cp {profile.cp} is larger than {MAX_CP}")
        gpus = self.gpus()
        profile = replace(profile, gpus=len(gpus))
        remote = remote_host(profile)
        if profile.gpu_arch is None and gpus and gpus[0].get("compute_capability") and not remote:
            profile = replace(profile, gpu_arch=gpus[0]["compute_capability"], gpu_arch_source="detected")
        if profile.job is not None and profile.job.kind == "verl" and remote:  # its config tree is the remote host's
            profile = replace(profile, job=replace(profile.job, read_by=f"read by the doctor (the job runs after "
                                                                          f"`{remote}`: not composed here)"))
        elif profile.job is not None and profile.job.kind == "verl":
            profile = self._composed(profile)
        job = profile.job
        from ..job.profile import fold_bridge
        if remote and job is not None and job.decisions is not None and job.decisions.dsa_backend_pending:
            profile = fold_bridge(profile, {"readable": False}, (None, f"the remote host's Megatron-Bridge decides "
                                                                   f"it (the job runs after `{remote}`)"), False)
        elif job is not None and job.decisions is not None and job.decisions.dsa_backend_pending:
            try:
                profile = self._bridge_backend(profile)
            except Interrupted:
                raise
            except Exception as exc:  # whatever the probes answered: not known, checked as cudnn, never a crash
                profile = fold_bridge(profile, {"readable": False}, (None, f"the Megatron-Bridge rule could not be "
                                                                       f"judged ({type(exc).__name__})"), False)
        if profile.job is not None and profile.job.kind in ("verl", "megatron"):
            self._stack = stackbuild.guarded(lambda: stackbuild.start(self, profile, remote))
        return profile

    def _composed(self, profile: Profile) -> Profile:
        """A verl job's settings composed in the target as Hydra gives them to the job (jobcompose)."""
        from ..job.compose import compose

        job = profile.job
        assert job is not None
        try:
            return compose(self, profile, preflight=job.at_preflight)
        except (Interrupted, UsageError):
            raise
        except Exception as exc:  # whatever the probe answered: the reader's settings, and why
            if job.decisions is not None and job.decisions.cp_pending:
                raise UsageError(job.decisions.cp_pending) from None
            return replace(profile, job=replace(job, read_by=f"read by the doctor (the composition broke: "
                                                             f"{type(exc).__name__})"))

    def _bridge_backend(self, profile: Profile) -> Profile:
        """A verl job that states no apply_dsa_kernel_fusion: the switch Megatron-Bridge's installed DSv4 provider
        writes, from its rule (read with ast by the static probe), the profile's CC and, where the rule asks, the same
        imports run in an import probe; then Megatron's fold with the backend the command states. Whatever is not
        known stays cudnn, the stricter."""
        from ..job import bridge_rule
        from ..job.profile import fold_bridge
        from ..model.facts import StaticFacts
        from .probes import import_probe

        if profile.cc is not None and profile.cc[0] >= 10 and not profile.static_only:
            # Started before the rule is read, so that it runs beside the static probe: 0.6.x's two imports (a
            # probe is run once per key; one the rule does not ask for is only wasted work).
            self.pool.submit(import_probe(*bridge_rule.FUSED_DSA_IMPORTS))
        static = self.pool.result(self.static_probe, STATIC_TIMEOUT_S + 1) if self.static_probe else None
        facts = StaticFacts.of(static)
        sources: Any = facts.data.get("sources")
        source = sources.get(bridge_rule.BRIDGE_MODULE) if isinstance(sources, dict) else None
        version = facts.version("megatron-bridge") or "(no metadata)"
        where = f"Megatron-Bridge {version} deepseek_v4_bridge.py"
        imports: dict[str, dict] | None = None
        evidence: dict = {"bridge": version}
        if static is None or not static.ok:
            rule: dict = {"readable": False, "why": "the static probe gave no answer"}
        elif not facts.module("megatron.bridge").get("found"):
            rule = {"readable": False, "why": "Megatron-Bridge is not installed (see mbridge.dsv4)"}
        else:
            rule = bridge_rule.read_rule(source)
        targets = bridge_rule.import_targets(rule) if rule.get("readable") else []
        cc = profile.cc
        needs_imports = bool(targets) and cc is not None and all(
            cc[0] >= t["major_min"] for t in rule["terms"] if t["kind"] == "cc")
        if needs_imports and not profile.static_only:
            probe = import_probe(*targets)
            self.pool.submit(probe)
            answer = self.pool.result(probe, (probe.timeout_s or self.timeout) + 1)
            results: Any = answer.data.get("results") if answer.ok and isinstance(answer.data, dict) else None
            imports = {str(r.get("target")): r for r in results if isinstance(r, dict)} \
                if isinstance(results, list) else {}
            evidence["imports"] = {t: bool((imports.get(t) or {}).get("ok")) for t in targets}
        elif needs_imports is False and targets:
            imports = {}  # not needed: the CC term decides first
        backend, known, how = bridge_rule.decide(rule, cc, imports, where, gpu_visible=profile.gpus > 0)
        how = how.removeprefix("not known: ").split("; the environment is checked for cudnn")[0]  # said by the fold
        return fold_bridge(profile, dict(rule, **evidence), (backend == "cudnn" if known else None, how), known)

    # ---------------------------------------------------------------------------------------------------- run

    def declared_probes(self, checks: Sequence[Check], profile: Profile) -> dict[str, Probe]:
        """Every probe a run of these built-in checks starts, by key: nvidia-smi and the static probe (started early;
        many checks read them) and each applicable check's own (runner.plan, which the runner starts from)."""
        static = self.static_probe or Probe(key="static", timeout_s=self.timeout)
        probes = {NVIDIA_SMI.key: NVIDIA_SMI, static.key: static}
        if isinstance(self._stack, Probe):  # the settings probe, started by resolve
            probes[self._stack.key] = self._stack
        for c in checks:
            try:
                probes.update((p.key, p) for p in plan(c, profile)[1])
            except Exception:
                continue
        return probes

    def budget(self, checks: Sequence[Check], profile: Profile, plugin_hosts: int = 0) -> float:
        """The run's time budget: every declared probe's timeout, and one probe timeout for each plugin host (a host
        holds a probe slot while it runs), in waves of `workers()` (long probes first, as the runner starts them; a
        wave lasts as long as its longest limit), plus the margins."""
        limits = [self.pool.timeout_for(p) for p in self.declared_probes(checks, profile).values()]
        limits = sorted(limits + [self.timeout] * plugin_hosts, reverse=True)
        n = workers()
        return sum(limits[i] for i in range(0, len(limits), n)) + CHECK_TIMEOUT_S + MARGIN_S

    def run(self, profile: Profile, selected: Sequence[Check],
            on_event: Callable[..., None] | None = None) -> Outcome:
        assert self.registry is not None and self.static_probe is not None
        start = time.monotonic()
        remote = remote_host(profile)
        # A job that runs on another host: its stack is that host's, so every row but the job's is not known here,
        # answered without its probes (or a plugin host) starting.
        elsewhere = [c for c in selected if c.only_with != "job"] if remote else []
        selected = [c for c in selected if c.only_with == "job"] if remote else selected
        builtin = [c for c in selected if self.registry.get(c.id) is c]
        plugin_ids = {c.id for c in selected} - {c.id for c in builtin}
        budget = self.budget(builtin, profile, len(self.hosts.runs_for(plugin_ids)))
        deadline = start + budget
        self.pool.deadline = deadline
        ctx = RunContext(profile=profile, python=self.python, pool=self.pool, static_probe=self.static_probe,
                         target=self.target)
        remote_rows = [_report(c, Result(Status.WARN, REMOTE_NOT_KNOWN.format(remote), evidence={"remote": remote}),
                               0.0) for c in elsewhere]
        if self.target_problem:
            reports = self._unsupported_target(builtin, ctx)
            return self._outcome(profile, reports + remote_rows, start, budget)
        hosts = self.hosts.start_runs(profile, plugin_ids, deadline)
        if on_event is not None and hosts:
            self._watch = HostWatch(hosts, on_event)  # the plugin checks' rows of the live display
        # The settings probe runs beside the checks, which are judged on the readers' settings; its row is judged
        # after them (stackbuild.settle), so the probe is never the checks' critical path.
        later = [c for c in builtin if c.id == stackbuild.ROW] if self._stack is not None else []
        runner = Runner([c for c in builtin if c not in later], ctx, deadline, on_event)
        self._running = (runner, hosts, profile, start, budget, later)
        runner.begin()
        runner.wait()
        profile, settled = stackbuild.settle(self, profile, later, ctx, deadline, on_event)
        reports = runner.reports() + settled + self.hosts.collect(hosts, deadline) + remote_rows
        self._stop_watch()
        return self._outcome(profile, reports, start, budget)

    def _stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()

    def interrupted_outcome(self, exc: Interrupted) -> Outcome | None:
        """What finished before the signal, with every unfinished check an `error` saying so; probes are killed."""
        if self._running is not None:
            self._running[0].stop()  # before the kill, so no check records its probe's death as its finding
        self._stop_watch()
        self.procs.kill_all()  # the plugin hosts' event files stay until close(), so what they finished is kept
        if self._running is None:
            return None
        runner, hosts, profile, start, budget, later = self._running
        why = f"interrupted by {signal.Signals(exc.signum).name} before it finished"
        reports = (runner.reports(unfinished=why) + [_report(c, Result(Status.ERROR, why), 0.0) for c in later]
                   + self.hosts.collect(hosts, time.monotonic(), why))
        return self._outcome(profile, reports, start, budget, interrupted=signal.Signals(exc.signum).name)

    def _outcome(self, profile, reports, start, budget, interrupted=None) -> Outcome:
        # A fleet rank's fingerprint needs its static facts: wait for them within the run's deadline (with --only
        # and a quick check, the report was otherwise built before the static probe answered).
        wait = max(0.0, start + budget - time.monotonic()) if profile.fleet and interrupted is None else 0
        static = self.pool.result(self.static_probe, wait) if self.static_probe else None
        plugins = list(self.registry.builtins) + list(self.registry.plugins) if self.registry else []
        # A built-in that breaks a registry rule is the doctor's own bug: a row, like a plugin that failed to load.
        rows = sorted(reports + plugin_error_rows(plugins), key=lambda r: r.id)
        smi = self.pool.result(NVIDIA_SMI, 0)
        try:
            gpus = parse_nvidia_smi(smi.data) if smi.ok else []
        except Exception:
            gpus = []
        # The bound the whole run keeps: what came before the checks (the handshake, nvidia-smi, the plugins'
        # descriptions, each with its own timeout) plus the checks' deadline (otherwise: a hung nvidia-smi
        # made a run take 31 s against a budget_s of 21, which counted only the checks).
        return Outcome(profile=profile, reports=rows, target=self.target,
                       static=static.data if static is not None and static.ok else None,
                       duration_s=time.monotonic() - self.started, budget_s=round(start - self.started + budget, 1),
                       interrupted=interrupted, plugins=plugins, gpus=gpus,
                       critical_path=self.pool.critical_path(self.started))

    def _unsupported_target(self, checks: Sequence[Check], ctx: RunContext) -> list[CheckReport]:
        out = []
        for check in checks:
            if check.id == "python.version":
                result, internal = execute(check, ctx)
            else:
                # Could not be inspected is not "does not apply": an error, so the run cannot end green.
                result, internal = Result(Status.ERROR, f"not inspected: {self.target_problem}"), False
            out.append(_report(check, result, 0.0, internal))
        return out
