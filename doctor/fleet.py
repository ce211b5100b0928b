"""Fleet mode: one verdict for every rank of a multi-node job, over the torch.distributed the job already uses.

Every rank runs its own checks (static ones on every rank, since a rank's PYTHONPATH can differ from its
neighbour's; import probes once per node, by local rank 0; per-GPU checks on every rank, on its own GPU), then the
exchange helper (probes/dsv4probe_fleet.py, in the target interpreter: this process never imports torch) sends the
report to rank 0, which merges them (probes/fleetmerge.py) and sends the exit code back, so that `srun` and
`torchrun` fail as one.

It turns on by itself only when a multi-process launch is evident: torchrun's RANK/WORLD_SIZE/MASTER_ADDR with
WORLD_SIZE > 1, or an srun step with SLURM_STEP_NUM_TASKS > 1 (an sbatch batch script, SLURM_PROCID=0 and no step,
runs single-host).

With --cp N, the smoke forward runs across the real ranks: consecutive groups of N ranks form CP groups (cp_plan).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from dataclasses import dataclass
from collections.abc import Callable, Mapping

from .model import UsageError

DEFAULT_MASTER_PORT = 29500
SKEW_S = 15.0  # launcher skew: how much later than rank 0 another rank may start
VERDICT_GRACE_S = 30.0  # how much longer than its own wait a rank waits for rank 0's verdict
SETUP_S = 20.0  # rank 0's helper starting, importing torch and hosting the store: its join window opens after that
FLEET_SCRIPT = "dsv4probe_fleet.py"
_HOST = re.compile(r"[A-Za-z0-9._:\[\]-]{1,255}")


@dataclass(frozen=True)
class FleetEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    port: int
    launcher: str  # "torchrun" | "srun"
    local_world_size: int | None = None  # ranks per host (LOCAL_WORLD_SIZE, SLURM_STEP_TASKS_PER_NODE); None: unknown
    nodes: int | None = None  # hosts in the launch (GROUP_WORLD_SIZE, SLURM_STEP_NUM_NODES); None: unknown

    @property
    def node_leader(self) -> bool:
        return self.local_rank == 0


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"fleet mode: {name}={raw!r} is not a whole number") from None


def first_host(nodelist: str) -> str | None:
    """The first host of a Slurm node list: "gpu[03-05,07],cpu1" -> "gpu03"."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist or "")
    if not m:
        return None
    prefix, inner = m.group(1), m.group(2)
    if not inner:
        return prefix
    first = inner.split(",")[0].split("-")[0]
    return prefix + first


def tasks_per_node(spec: str) -> int | None:
    """The one task count of every node in SLURM_STEP_TASKS_PER_NODE ("8(x4)", "8,8"), or None (uneven, unreadable)."""
    counts = set()
    for part in (spec or "").split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x\d+\))?\s*", part)
        if not m:
            return None
        counts.add(int(m.group(1)))
    return counts.pop() if len(counts) == 1 else None


def detect(environ: Mapping[str, str], mode: str = "auto", port: int | None = None) -> FleetEnv | None:
    """The launcher's view of this process, or None for a single-host run. mode: auto | on (--distributed) |
    off (--no-distributed)."""
    if mode == "off":
        return None
    torchrun = all(k in environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))
    step_tasks = _int(environ, "SLURM_STEP_NUM_TASKS")
    if torchrun and (_int(environ, "WORLD_SIZE") or 1) == 1 or step_tasks == 1 and "SLURM_PROCID" in environ:
        return None  # a launch of one process is a fleet of one: the single-host run is its report
    if torchrun and (_int(environ, "WORLD_SIZE") or 1) > 1:
        rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
        local, addr, launcher = _int(environ, "LOCAL_RANK", 0), environ["MASTER_ADDR"], "torchrun"
        local_world, nodes = _int(environ, "LOCAL_WORLD_SIZE"), _int(environ, "GROUP_WORLD_SIZE")
    elif step_tasks is not None and step_tasks > 1 and "SLURM_PROCID" in environ:
        rank, world, local = _int(environ, "SLURM_PROCID"), step_tasks, _int(environ, "SLURM_LOCALID", 0)
        addr = environ.get("MASTER_ADDR") or first_host(environ.get("SLURM_STEP_NODELIST", "")) or ""
        launcher = "srun"
        local_world = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", ""))
        nodes = _int(environ, "SLURM_STEP_NUM_NODES")
    else:
        if mode == "on":
            raise UsageError("--distributed: no multi-process launch here (torchrun sets RANK, WORLD_SIZE and "
                             "MASTER_ADDR; srun sets SLURM_PROCID and SLURM_STEP_NUM_TASKS > 1)")
        return None
    assert rank is not None and world is not None and local is not None
    if not 0 <= rank < world:
        raise UsageError(f"fleet mode: rank {rank} is outside a world of {world}")
    if not _HOST.fullmatch(addr or ""):
        raise UsageError(f"fleet mode: the rendezvous address {addr!r} is not a host name (set MASTER_ADDR)")
    if port is None:
        port = (_int(environ, "MASTER_PORT", DEFAULT_MASTER_PORT) or DEFAULT_MASTER_PORT) + 1
    if not 1 <= port <= 65535:
        raise UsageError(f"fleet mode: port {port} is out of range")
    return FleetEnv(rank, world, max(0, local), addr, port, launcher,
                    local_world if local_world and local_world > 0 else None, nodes if nodes and nodes > 0 else None)


def host_label(anonymize: bool) -> str:
    """This host's name as fleet reports show it (finding the odd node is their purpose), or a stable hash."""
    name = socket.gethostname() or "unknown"
    return "host-" + hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:10] if anonymize else name


def profile_fields(env: FleetEnv, host: str) -> dict:
    # The rendezvous address stays out (the profile is part of the report, and --anonymize-hosts hides host names):
    # the smoke finds it again with cp_plan.
    return {"rank": env.rank, "world_size": env.world_size, "local_rank": env.local_rank,
            "node_leader": env.node_leader, "launcher": env.launcher, "host": host, "port": env.port,
            "local_world_size": env.local_world_size, "nodes": env.nodes}


def cp_plan(fleet: Mapping, cp: int, environ: Mapping[str, str]) -> dict:
    """Where this rank's smoke forward runs its CP ranks: {"mode": "fleet", ...} when consecutive groups of `cp`
    fleet ranks can each form a real CP group (rank r is CP rank r % cp of group r // cp, joining through a TCPStore
    that fleet rank 0's smoke serves on the fleet port + 1, one key prefix per group), else {"mode": "simulated",
    "reason": ...} (every rank simulates the cp ranks on its own device, as a single host does)."""
    world, rank = int(fleet.get("world_size") or 1), int(fleet.get("rank") or 0)
    local_world, nodes = fleet.get("local_world_size"), fleet.get("nodes")
    if cp <= 1:
        return {"mode": "simulated", "reason": "CP 1: nothing to distribute"}
    if world % cp:
        return {"mode": "simulated", "reason": f"the fleet's {world} ranks do not divide into CP groups of {cp}, "
                                               f"so each rank simulated the {cp} CP ranks on its own device"}
    multi_host = (nodes or 1) > 1 or (local_world is not None and local_world < world)
    if multi_host and (not local_world or local_world % cp):
        per_host = (f"{local_world} rank{'s' if local_world != 1 else ''} per host" if local_world else
                    "an unknown or uneven number of ranks per host")
        return {"mode": "simulated", "reason": f"the ranks are on several hosts with {per_host}, which CP groups of "
                                               f"{cp} would straddle, so each rank simulated the {cp} CP ranks on "
                                               "its own device"}
    try:
        env = detect(environ, "on", int(fleet.get("port") or 0) or None)
    except UsageError as exc:
        return {"mode": "simulated", "reason": f"the launcher's rendezvous address is not readable here ({exc}), so "
                                               f"each rank simulated the {cp} CP ranks on its own device"}
    assert env is not None
    port = env.port + 1
    if port > 65535:
        return {"mode": "simulated", "reason": f"the fleet port {env.port} leaves no port for the smoke's CP groups"}
    group = rank // cp
    return {"mode": "fleet", "rank": rank, "world": world, "cp_rank": rank % cp, "group": group,
            "first_rank": group * cp, "store_host": env.master_addr, "store_port": port}


def wait_seconds(budget_s: float, elapsed_s: float, override: float | None) -> float:
    """How long rank 0 waits for the others to join, from when its exchange helper has torch and hosts the store: the
    rest of the run's budget plus the launcher skew (every rank has the same budget), or --fleet-wait."""
    if override is not None:
        return max(1.0, override)
    return max(5.0, budget_s + SKEW_S - elapsed_s)


def exchange(env: FleetEnv, report: dict, python: str, wait_s: float, strict: bool,
             on_merged: Callable[[dict], None] | None = None, elapsed_s: float = 0.0) -> dict:
    """Run the exchange helper in the target interpreter. On rank 0, `on_merged(report)` is called with the merged
    report while the helper holds the other ranks, so that they leave only after the report is out. Returns
    {"exit_code", "timings", ...}, or {"error": ...} when this rank could not take part (torch broken, rank 0
    unreachable, no verdict in time). elapsed_s: this run's time so far, for the fleet report's budget_s."""
    import time

    from .probes import PROBE_DIR, child_env
    from .procs import Processes, kill_group
    from .redact import decode, sanitize

    procs = Processes()
    # The helper's own waits end well before this: waiting for rank 0's store, then for its verdict (each up to the
    # wait plus the grace), then for its release (65 s).
    timeout = 2 * (wait_s + VERDICT_GRACE_S + SKEW_S) + 90.0
    try:
        tmp = procs.tempdir("dsv4-doctor-fleet-")
        paths = {name: os.path.join(tmp, name) for name in ("report.json", "answer.json", "merged.json", "released",
                                                            "helper.log")}
        with open(paths["report.json"], "w", encoding="utf-8") as fh:
            json.dump(report, fh)
        request = {"rank": env.rank, "world_size": env.world_size, "master_addr": env.master_addr, "port": env.port,
                   "wait_s": wait_s, "verdict_grace_s": VERDICT_GRACE_S + SKEW_S, "strict": strict,
                   "elapsed_s": round(elapsed_s, 3),
                   "report_path": paths["report.json"], "merged_path": paths["merged.json"],
                   "released_path": paths["released"]}
        argv = [python, str(PROBE_DIR / FLEET_SCRIPT), paths["answer.json"], json.dumps(request)]
        with open(paths["helper.log"], "wb") as log, open(os.devnull, "rb") as devnull:
            proc = procs.spawn(argv, stdin=devnull, stdout=log, stderr=log, env=child_env(timeout))
        deadline = time.monotonic() + timeout
        delivered = False
        while time.monotonic() < deadline:
            if not delivered and os.path.exists(paths["merged.json"]):
                with open(paths["merged.json"], "rb") as fh:
                    merged = sanitize(json.loads(fh.read(64 * 1024 * 1024).decode("utf-8", "surrogateescape")))
                try:
                    if on_merged is not None and isinstance(merged, dict):
                        on_merged(merged)
                finally:
                    delivered = True
                    open(paths["released"], "wb").close()
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        else:
            kill_group(proc)
            return {"error": f"the fleet exchange did not finish within {timeout:.0f} s and was killed",
                    "stderr": _tail(paths["helper.log"])}
        kill_group(proc)
        try:
            with open(paths["answer.json"], "rb") as fh:
                data = sanitize(json.loads(fh.read(1 << 20).decode("utf-8", "surrogateescape")))
        except (OSError, ValueError):
            data = None
        if not isinstance(data, dict) or "probe_error" in data:
            err = (data or {}).get("probe_error") if isinstance(data, dict) else None
            why = f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else \
                f"exited with code {proc.returncode} without an answer"
            return {"error": f"the fleet exchange failed ({decode(why.encode())[:500]})",
                    "stderr": _tail(paths["helper.log"])}
        if not isinstance(data.get("exit_code"), int):
            return {"error": "the fleet exchange answered without a verdict", "stderr": _tail(paths["helper.log"])}
        if env.rank == 0 and not delivered:
            return {"error": "rank 0's fleet exchange gave no merged report", "stderr": _tail(paths["helper.log"])}
        return data
    finally:
        procs.close()


def _tail(path: str, limit: int = 3000) -> str:
    from .redact import read_tail

    return read_tail(path, limit)  # a cut first line is dropped: it may end a secret


def take_part(env: FleetEnv, report: dict, python: str, started: float, strict: bool,
              deliver: Callable[[dict], int], fleet_wait: float | None = None, verbose: bool = False) -> int:
    """Send this rank's report to rank 0 and take the fleet verdict, the exit code every rank returns. On rank 0,
    `deliver(merged)` writes the fleet report (and returns its exit code) while the other ranks wait, so that none
    of them exits (and makes torchrun stop rank 0) before the report is out. A rank that cannot take part prints
    its own report to stderr and exits 1."""
    import contextlib
    import sys
    import time

    from .model import ExitCode
    from .redact import Redactor
    from .render import output_width, render

    code = report["summary"]["exit_code"]
    if code >= 128:  # interrupted: leave now, the others name this rank
        return code
    reported = time.monotonic()
    wait = wait_seconds(float(report["summary"].get("budget_s") or 60.0), reported - started, fleet_wait)
    delivered: list[int] = []

    from .session import GATE

    def on_merged(merged: dict) -> None:
        if not isinstance(merged.get("summary"), dict) or not isinstance(merged.get("checks"), list):
            return
        merged = Redactor()(merged)  # every rank's report was redacted where it ran; the merge is checked again
        with GATE.critical():  # a signal waits until the fleet's report is written
            delivered.append(deliver(merged))

    # The exchange waits (up to the fleet budget): a signal must end it, killing the helper, not wait for it.
    GATE.arm()
    try:
        answer = exchange(env, report, python, wait, strict, on_merged if env.rank == 0 else None,
                          time.monotonic() - started)
    finally:
        GATE.shield()
    if "error" in answer:
        _say(f"dsv4-doctor (rank {env.rank} of {env.world_size}): could not take part in the fleet run: "
             f"{answer['error']}; this rank's own report follows (its node-level rows were left to local rank 0)")
        if answer.get("stderr"):
            _say("  " + str(answer["stderr"]).strip()[-2000:].replace("\n", "\n  "))
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.write(render(report, "text", width=output_width(False)))
        _say(f"dsv4-doctor (rank {env.rank}): exit 1, because this rank could not take the fleet's verdict")
        if env.rank != 0:
            # Under torchrun a rank that exits non-zero makes the launcher stop every other rank, rank 0 before it
            # writes the fleet report (found in review: a rank whose torch was broken wiped the report out). So
            # this rank stays until rank 0 has given up on it and named it in fleet.ranks; the launcher then stops
            # it, or it leaves when that time is up: rank 0's window opens after its helper's setup and lasts the
            # wait, and rank 0 may have started up to SKEW_S later. A signal ends the wait.
            linger = max(0.0, reported + wait + SKEW_S + SETUP_S - time.monotonic())
            GATE.arm()
            try:
                time.sleep(linger)
            finally:
                GATE.shield()
        return int(ExitCode.FAILED)
    if env.rank != 0 and verbose:
        _say(f"== rank {env.rank} of {env.world_size} ({host_of(report)}): its own report ==")
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.write(render(report, "text", width=output_width(False)))
    fleet_code = int(answer["exit_code"])
    # Rank 0 returns what writing the report gave (4 when --output failed); the verdict otherwise.
    return max(fleet_code, delivered[0]) if delivered else fleet_code


def host_of(report: dict) -> str:
    env = report.get("environment")
    fr = env.get("fleet_rank") if isinstance(env, dict) else None
    return str((fr.get("host") if isinstance(fr, dict) else None) or "unknown host")


def _say(message: str) -> None:
    import sys

    if sys.stderr is not None:
        try:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
