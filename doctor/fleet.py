"""Fleet mode: one verdict for every rank of a multi-node job, over the torch.distributed the job already uses.

Every rank runs its own checks (static ones on every rank, since a rank's PYTHONPATH can differ from its
neighbour's; import probes once per node, by local rank 0, or by any rank whose packages differ from its local rank
0's; per-GPU checks on every rank, on its own GPU). Then the exchange helper (probes/dsv4probe_fleet.py, in the
target interpreter: this process never imports torch) moves the reports to rank 0 and the verdict back, on rank 0's
timeline; rank 0's doctor merges them (fleetmerge.py) and writes the one report.

The guarantee every rank keeps: it starts its job (exits 0) only when it read a go verdict that rank 0 published
before the verdict deadline, and read it before that deadline; otherwise it exits 1 without starting and says why.
Rank 0 lists the ranks that did not acknowledge the verdict; every rank that runs to completion exits with the
verdict's code.

It turns on by itself only when a multi-process launch is evident: torchrun's RANK/WORLD_SIZE/MASTER_ADDR with
WORLD_SIZE > 1 (also inside a one-task srun step), or an srun step with SLURM_STEP_NUM_TASKS > 1 (an sbatch batch
script, SLURM_PROCID=0 and no step, runs single-host).

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
from .procs import Helper

DEFAULT_MASTER_PORT = 29500
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000  # an srun step without MASTER_PORT: a port from its job and step id
SKEW_S = 15.0  # launcher skew: how much later than rank 0 another rank may start
SETUP_S = 20.0  # a helper starting, importing torch and joining the store
VERDICT_S = 15.0  # after the report deadline: rank 0's merge and the verdict's publication (plus VERDICT_PER_RANK_S)
VERDICT_PER_RANK_S = 0.02
ACK_S = 10.0  # after the verdict deadline: the ranks' acknowledgements
RELEASE_S = 60.0  # the helper's bound for rank 0's report to be written (probes/dsv4probe_fleet.RELEASE_S)
FLEET_SCRIPT = "dsv4probe_fleet.py"
SECRET_VARIABLE = "DSV4_DOCTOR_FLEET_SECRET"
SECRET_FILE_VARIABLE = "DSV4_DOCTOR_FLEET_SECRET_FILE"
FLEET_CHECKS = ("fleet.drift", "fleet.ranks")
_HOST = re.compile(r"[A-Za-z0-9._:\[\]-]{1,255}")
_SCOPE = re.compile(r"[^A-Za-z0-9._-]")


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
    node: str | None = None  # the launcher's node identity (GROUP_RANK, SLURM_NODEID); None: host names key hosts
    scope: str = "dsv4doctor/job"  # the job's identity in the store's keys (torchrun's run id, Slurm's ids)

    @property
    def node_leader(self) -> bool:
        return self.local_rank == 0



def _obj(value) -> dict:
    return value if isinstance(value, dict) else {}

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


def expand_nodelist(nodelist: str, limit: int = 100_000) -> list[str]:
    """Every host of a Slurm node list, in order: "gpu[03-04,07],cpu1" -> gpu03, gpu04, gpu07, cpu1 ([] when
    unreadable)."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[\]]+)(?:\[([^\]]*)\])?(?:,|$)", nodelist or ""):
        prefix, inner = m.group(1), m.group(2)
        if inner is None:
            hosts.append(prefix)
            continue
        for part in inner.split(","):
            first, _, last = part.partition("-")
            if not first.isdigit() or last and not last.isdigit():
                return []
            lo, hi = int(first), int(last or first)
            if hi < lo or len(hosts) + hi - lo >= limit:
                return []
            hosts.extend(f"{prefix}{n:0{len(first)}d}" for n in range(lo, hi + 1))
    return hosts


def task_counts(spec: str, limit: int = 100_000) -> list[int]:
    """The task count of each node from SLURM_STEP_TASKS_PER_NODE ("2(x3),1" -> 2, 2, 2, 1; [] when unreadable)."""
    counts: list[int] = []
    for part in (spec or "").split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m or len(counts) + int(m.group(2) or 1) > limit:
            return []
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def launcher_hosts(env: FleetEnv, environ: Mapping[str, str], known: Mapping[str, str]) -> dict[int, str]:
    """Each rank's host as the launcher places it, for naming a rank that never said hello. srun: the step's node
    list and tasks per node under the block distribution (Slurm's default; another one names no host). torchrun:
    its node (GROUP_RANK) from the rank and the ranks per node, named by a rank of that node that did report
    (`known`: node id -> host), else "node N". {} when the launcher does not tell."""
    places: dict[int, str] = {}
    if env.launcher == "srun":
        distribution = environ.get("SLURM_DISTRIBUTION", "block") or "block"
        hosts = expand_nodelist(environ.get("SLURM_STEP_NODELIST", ""))
        counts = task_counts(environ.get("SLURM_STEP_TASKS_PER_NODE", ""))
        if not distribution.startswith("block") or not hosts or len(hosts) != len(counts) or \
                sum(counts) != env.world_size:
            return {}
        rank = 0
        for host, count in zip(hosts, counts, strict=True):
            for _ in range(count):
                places[rank] = host
                rank += 1
        return places
    lws, nodes = env.local_world_size, env.nodes
    if env.launcher == "torchrun" and lws and nodes and lws * nodes == env.world_size:
        for rank in range(env.world_size):
            node = str(rank // lws)
            places[rank] = known.get(node) or f"node {node}"
    return places


def detect(environ: Mapping[str, str], mode: str = "auto", port: int | None = None) -> FleetEnv | None:
    """The launcher's view of this process, or None for a single-host run. mode: auto | on (--distributed) |
    off (--no-distributed)."""
    if mode == "off":
        return None
    torchrun = all(k in environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))
    step_tasks = _int(environ, "SLURM_STEP_NUM_TASKS")
    # torchrun first: inside a one-task srun step (`srun -n1 torchrun ...`) its workers are the fleet.
    if torchrun and (_int(environ, "WORLD_SIZE") or 1) == 1 or not torchrun and step_tasks == 1 and \
            "SLURM_PROCID" in environ:
        return None  # a launch of one process is a fleet of one: the single-host run is its report
    node: str | None
    if torchrun and (_int(environ, "WORLD_SIZE") or 1) > 1:
        rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
        local, addr, launcher = _int(environ, "LOCAL_RANK", 0), environ["MASTER_ADDR"], "torchrun"
        local_world, nodes = _int(environ, "LOCAL_WORLD_SIZE"), _int(environ, "GROUP_WORLD_SIZE")
        group = _int(environ, "GROUP_RANK")
        node = str(group) if group is not None else None
    elif step_tasks is not None and step_tasks > 1 and "SLURM_PROCID" in environ:
        rank, world, local = _int(environ, "SLURM_PROCID"), step_tasks, _int(environ, "SLURM_LOCALID", 0)
        addr = environ.get("MASTER_ADDR") or first_host(environ.get("SLURM_STEP_NODELIST", "")) or ""
        launcher = "srun"
        local_world = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", ""))
        nodes = _int(environ, "SLURM_STEP_NUM_NODES")
        node_id = _int(environ, "SLURM_NODEID")
        node = str(node_id) if node_id is not None else None
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
        port = default_port(environ)
    if not 1 <= port <= 65535:
        raise UsageError(f"fleet mode: port {port} is out of range")
    return FleetEnv(rank, world, max(0, local), addr, port, launcher,
                    local_world if local_world and local_world > 0 else None, nodes if nodes and nodes > 0 else None,
                    node, job_scope(environ))


def default_port(environ: Mapping[str, str]) -> int:
    """MASTER_PORT + 1 (the job's own port is its own: two jobs on one node have two); in an srun step without
    MASTER_PORT, a port derived from the Slurm job and step ids, so that two jobs on one node do not meet."""
    master = _int(environ, "MASTER_PORT")
    if master:
        return master + 1
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    if job:
        digest = hashlib.sha256(f"{job}.{step or ''}".encode("utf-8", "replace")).digest()
        return SLURM_PORT_BASE + int.from_bytes(digest[:4], "big") % SLURM_PORT_SPAN
    return DEFAULT_MASTER_PORT + 1


def job_scope(environ: Mapping[str, str]) -> str:
    """The job's identity for the store's keys: torchrun's run id (unless "none", its default), else Slurm's job
    and step ids, else "job" (then only the port and rank 0's nonce tell two jobs apart)."""
    run_id = environ.get("TORCHELASTIC_RUN_ID") or ""
    if run_id and run_id != "none":
        raw = "run-" + run_id
    elif environ.get("SLURM_JOB_ID"):
        raw = f"slurm-{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '')}"
    else:
        raw = "job"
    return "dsv4doctor/" + _SCOPE.sub("_", raw)[:96]


def host_label(anonymize: bool = False, env: FleetEnv | None = None,
               environ: Mapping[str, str] | None = None) -> str:
    """This host's name as fleet reports show it (finding the odd node is their purpose), or with
    --anonymize-hosts a salted hash: the salt is the job's identity and, when set, the fleet secret, so every rank
    of one job computes the same label while another job's (or, without the secret, an outsider's) do not."""
    name = socket.gethostname() or "unknown"
    if not anonymize:
        return name
    from .fleetmerge import host_label as hashed

    key = fleet_key(os.environ if environ is None else environ) or b""
    return hashed(name, (env.scope if env else "") + key.hex())


def profile_fields(env: FleetEnv, host: str) -> dict:
    # The rendezvous address stays out (the profile is part of the report, and --anonymize-hosts hides host names):
    # the smoke finds it again with cp_plan.
    return {"rank": env.rank, "world_size": env.world_size, "local_rank": env.local_rank,
            "node_leader": env.node_leader, "launcher": env.launcher, "host": host, "port": env.port,
            "local_world_size": env.local_world_size, "nodes": env.nodes, "node": env.node}


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


def wait_seconds(budget_s: float, elapsed_s: float, override: float | None, reruns: bool = False) -> float:
    """How long rank 0 waits for the others' reports, from when its store is up: the rest of the run's budget plus
    the launcher skew (every rank has the same budget), plus one more budget when a rank may have to run its
    host-level checks itself (its packages differ from its local rank 0's); or --fleet-wait."""
    if override is not None:
        return max(1.0, override)
    return max(5.0, budget_s * (2 if reruns else 1) + SKEW_S - elapsed_s)


def fleet_key(environ: Mapping[str, str]) -> bytes | None:
    """The job's shared secret (DSV4_DOCTOR_FLEET_SECRET, or the file DSV4_DOCTOR_FLEET_SECRET_FILE names), as
    the HMAC key of every fleet message; None without one. UsageError when the file cannot be read or is empty."""
    secret = environ.get(SECRET_VARIABLE)
    path = environ.get(SECRET_FILE_VARIABLE)
    if path:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(1 << 16).strip()
        except OSError as exc:
            raise UsageError(f"{SECRET_FILE_VARIABLE}: cannot read the fleet secret ({exc.strerror})") from None
        if not raw:
            raise UsageError(f"{SECRET_FILE_VARIABLE}: the file is empty")
        return hashlib.sha256(b"dsv4-doctor fleet\n" + raw).digest()
    if secret:
        return hashlib.sha256(b"dsv4-doctor fleet\n" + secret.encode("utf-8", "surrogateescape")).digest()
    return None


class Exchange:
    """One run of the exchange helper; the doctor's side of the file conversation (see dsv4probe_fleet.py)."""

    def __init__(self, env: FleetEnv, python: str, request: dict, key: bytes | None, timeout_s: float):
        from .probes import PROBE_DIR, child_env
        from .procs import Processes

        self.env, self.procs = env, Processes()
        self.dir = self.procs.tempdir("dsv4-doctor-fleet-")
        self.log = os.path.join(self.dir, "helper.log")
        self.answer_path = os.path.join(self.dir, "answer.json")
        self.hard_deadline = _now() + timeout_s
        extra = {"DSV4_DOCTOR_FLEET_KEY": key.hex()} if key else {}
        self._request = dict(request, dir=self.dir)
        self._argv = [python, str(PROBE_DIR / FLEET_SCRIPT), self.answer_path, json.dumps(self._request)]
        self._env = child_env(timeout_s, extra)
        self.helper: Helper | None = None

    def start(self, hello: dict) -> None:
        from .procs import start_helper

        self.write("hello.json", hello)
        self.helper = start_helper(self.procs, self._argv, self.log, self._env)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def write(self, name: str, data) -> None:
        tmp = self.path(name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.path(name))

    def touch(self, name: str) -> None:
        open(self.path(name), "wb").close()

    def read(self, name: str, limit: int = 1 << 22) -> dict | None:
        from .procs import read_bounded
        from .redact import sanitize

        raw = read_bounded(self.path(name), limit)
        try:
            data = json.loads(raw.decode("utf-8", "surrogateescape")) if raw is not None else None
        except (ValueError, RecursionError):
            return None
        return sanitize(data) if isinstance(data, dict) else None

    def exited(self) -> bool:
        return self.helper is None or self.helper.exited()

    def wait_for(self, name: str, until: float) -> dict | None:
        """The file's content once the helper wrote it, or None when the helper exited first or time ran out."""
        import time

        while _now() < min(until, self.hard_deadline):
            data = self.read(name)
            if data is not None:
                return data
            if self.exited():
                return self.read(name)
            time.sleep(0.05)
        return None

    def finish(self, until: float) -> dict:
        """The helper's answer (waiting until `until`), or {"error": ...}."""
        import time

        while not self.exited() and _now() < min(until, self.hard_deadline):
            time.sleep(0.05)
        if self.helper is not None and not self.exited():
            self.helper.kill()
            return {"error": "the fleet exchange did not finish in time and was stopped", "stderr": self.tail()}
        data = self.read_answer()
        return data

    def read_answer(self) -> dict:
        from .procs import read_bounded

        raw = read_bounded(self.answer_path, 1 << 20)
        try:
            data = json.loads(raw.decode("utf-8", "surrogateescape")) if raw is not None else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or "probe_error" in data:
            err = data.get("probe_error") if isinstance(data, dict) else None
            why = (f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else
                   f"exited with code {self.helper.proc.returncode if self.helper else '?'} without an answer")
            return {"error": f"the fleet exchange failed ({str(why)[:500]})", "stderr": self.tail()}
        return data

    def tail(self, limit: int = 3000) -> str:
        return _tail(self.log, limit)

    def close(self) -> None:
        if self.helper is not None and not self.helper.exited():
            self.helper.kill()
        self.procs.close()


def _tail(path: str, limit: int = 3000) -> str:
    from .redact import read_tail

    return read_tail(path, limit)  # a cut first line is dropped: it may end a secret


def _now() -> float:
    import time

    return time.monotonic()


def node_level_ids(report: dict) -> list[str]:
    """The checks this rank left to its host's local rank 0 (runner.left_to_leader marks them in evidence)."""
    return [row["id"] for row in report.get("checks") or [] if isinstance(row, dict)
            and row.get("status") == "skip" and isinstance(row.get("evidence"), dict)
            and row["evidence"].get("node_level") is True]


def _hello(env: FleetEnv, report: dict) -> dict:
    environment = _obj(report.get("environment"))
    fr = _obj(environment.get("fleet_rank"))
    return {"rank": env.rank, "host": fr.get("host"), "node": env.node, "local_rank": env.local_rank,
            "fingerprint": environment.get("fingerprint")}


def _fingerprint_node(env: FleetEnv, report: dict) -> str:
    """Where local rank 0's fingerprint is found: the launcher's node id, else the host name."""
    host = str(_hello(env, report).get("host") or "unknown")
    return hashlib.sha256(f"{env.node}" .encode() if env.node is not None else host.encode("utf-8", "replace")
                          ).hexdigest()[:16]


def take_part(env: FleetEnv, report: dict, python: str, started: float, strict: bool,
              deliver: Callable[[dict], int], fleet_wait: float | None = None, verbose: bool = False,
              rerun: Callable[[list[str], float], dict | None] | None = None, anonymize: bool = False,
              fleet_checks: tuple[str, ...] = FLEET_CHECKS) -> int:
    """Take part in the fleet run with this rank's report; the exit code this rank returns. On rank 0,
    `deliver(merged)` writes the fleet report (and returns its exit code) while the other ranks wait, so that none
    of them exits (and makes torchrun stop rank 0) before the report is out; rank 0 writes it whatever happens
    (a signal, a failed exchange). A non-leader rank whose packages differ from its local rank 0's runs its
    host-level checks with `rerun(ids, seconds)` before it reports. A rank that misses the timeline exits 1."""
    code = report["summary"]["exit_code"]
    key = fleet_key(os.environ)
    if env.rank == 0 and code >= 128:  # interrupted during its own checks: its report now, no waiting for others
        return _rank0_interrupted(env, report, strict, deliver, fleet_checks, key, code)
    if env.rank == 0:
        return _rank0(env, report, python, started, strict, deliver, fleet_wait, anonymize, fleet_checks, key)
    if code >= 128:  # interrupted before the exchange: leave now, rank 0 names this rank
        return code
    return _other(env, report, python, started, fleet_wait, verbose, rerun, key)


def _rank0(env, report, python, started, strict, deliver, fleet_wait, anonymize, fleet_checks, key) -> int:
    import contextlib

    from . import fleetmerge
    from .model import ExitCode, Interrupted
    from .signals import GATE

    budget = float(report["summary"].get("budget_s") or 60.0)
    reruns = env.local_world_size != 1
    join_s = wait_seconds(budget, _now() - started, fleet_wait, reruns)
    verdict_s = VERDICT_S + VERDICT_PER_RANK_S * env.world_size
    request = {"rank": 0, "world_size": env.world_size, "master_addr": env.master_addr, "port": env.port,
               "scope": env.scope, "join_s": join_s, "verdict_s": verdict_s, "ack_s": ACK_S,
               "connect_s": SETUP_S + join_s + verdict_s + ACK_S + RELEASE_S,
               "fingerprint_node": _fingerprint_node(env, report), "leader": True}
    timeout = SETUP_S + join_s + verdict_s + ACK_S + 2 * RELEASE_S + 30.0
    own_problem = None
    try:
        own = fleetmerge.admit(0, report)
    except fleetmerge.BadReport as exc:  # the doctor's own rows: cannot happen unless a plugin slipped through
        own_problem = f"rank 0's own report could not be merged: {exc}"
        own = fleetmerge.admit(0, dict(report, checks=[]))
    exchange = Exchange(env, python, request, key, timeout)
    state: dict = {"others": {}, "problems": {}, "hints": {},
                   "info": {"scope": env.scope, "authenticated": key is not None, "mode": "store",
                            "fleet_checks": fleet_checks}}
    if own_problem:
        state["info"]["exchange_error"] = own_problem
    code = int(report["summary"]["exit_code"])
    signal_code = None

    def merged(extra: dict | None = None) -> tuple[dict, int]:
        problems = dict(state["problems"])
        info = dict(state["info"], **(extra or {}))
        for r in range(1, env.world_size):
            if r not in state["others"] and r not in problems:
                problems[r] = info.get("missing_why") or "did not report within the fleet's time"
        known = {rep.node: rep.host for rep in (own, *state["others"].values()) if rep.node}
        placed = launcher_hosts(env, os.environ, known)
        hints = {r: placed[r] for r in problems if r in placed}
        hints.update(state["hints"])  # a rank's own hello names its host as its report would
        out, verdict = fleetmerge.merge(own, state["others"], env.world_size, problems, strict, info, hints)
        return out, verdict

    verdict = None
    GATE.arm()
    try:
        exchange.start(_hello(env, report))
        plan = exchange.wait_for("plan.json", _now() + SETUP_S + 60.0) or {}
        state["info"]["bound_s"] = round(_now() - started + join_s + verdict_s + ACK_S, 1)
        gathered = _admit_while_gathering(exchange, state, env.world_size,
                                          float(plan.get("report_by") or _now()) + 30.0)
        if gathered is None:
            answer = exchange.finish(_now() + 5.0)
            why = answer.get("error") or "the fleet exchange gave no reports"
            state["info"].update(exchange_error=str(why)[:600], missing_why="not heard from: the exchange failed")
            out, verdict = merged()
        else:
            _take_reports(exchange, gathered, state, env.world_size)
            state["info"]["timings"] = gathered.get("timings") or {}
            out, verdict = merged()
            exchange.write("verdict.json", {"exit_code": int(verdict)})
            acks = exchange.wait_for("acks.json", float(plan.get("ack_by") or _now()) + 10.0) or {}
            if not acks.get("published"):
                state["info"]["exchange_error"] = ("the verdict was not ready before the verdict deadline, so no rank "
                                                   "took it")
                out, verdict = merged()
                verdict = max(int(verdict), int(ExitCode.FAILED))
            else:
                missed = [r for r in acks.get("not_acknowledged") or [] if isinstance(r, int)
                          and r in state["others"]]
                # Not a new status: the ranks that did take the verdict exit with it, and so does rank 0.
                if missed:
                    state["info"]["not_acknowledged"] = missed
                    out, _ = merged()
                    _note_unacknowledged(out, missed)
                else:
                    state["info"]["acknowledged_all"] = True
                    out, _ = merged()
    except Interrupted as exc:
        signal_code = 128 + exc.signum
        import signal as _signal

        name = _signal.Signals(exc.signum).name
        gathered = exchange.read("gathered.json")
        if gathered is not None and not state["others"]:
            _take_reports(exchange, gathered, state, env.world_size)
        exchange.close()
        state["info"].update(partial=f"interrupted by {name} during the fleet exchange: the ranks not heard from by "
                                     "then are listed as missing, and no verdict was sent", interrupted=name,
                             missing_why=f"not heard from before {name}")
        out, verdict = merged()
        out["summary"]["exit_code"] = signal_code  # as a single-host report cut short by a signal says
    except Exception as exc:  # the doctor's own side broke: the report still goes out
        exchange.close()
        state["info"].update(exchange_error=f"{type(exc).__name__}: {exc}"[:600],
                             missing_why="not heard from: the exchange failed")
        out, verdict = merged()
    finally:
        GATE.shield()
    try:
        with GATE.critical():
            written = deliver(out)
    finally:
        with contextlib.suppress(OSError):
            exchange.touch("released")
        if signal_code is None:
            exchange.finish(_now() + RELEASE_S + 10.0)
        exchange.close()
    if signal_code is not None:
        return signal_code
    final = int(verdict if verdict is not None else code)
    return max(final, written) if written else final


def _admit_while_gathering(exchange: Exchange, state: dict, world: int, until: float) -> dict | None:
    """Wait for the gather to end, validating each report as its file appears (off the verdict's critical path:
    at 1,000 ranks that is seconds of work)."""
    import time

    while _now() < min(until, exchange.hard_deadline):
        gathered = exchange.read("gathered.json")
        if gathered is not None:
            return gathered
        _take_reports(exchange, {}, state, world)
        if exchange.exited():
            return exchange.read("gathered.json")
        time.sleep(0.1)
    return None


def _rank0_interrupted(env, report, strict, deliver, fleet_checks, key, code: int) -> int:
    from . import fleetmerge
    from .signals import GATE

    name = str(report["summary"].get("interrupted") or "a signal")
    info = {"scope": env.scope, "authenticated": key is not None, "fleet_checks": fleet_checks, "interrupted": name,
            "partial": f"interrupted by {name} before the fleet exchange: only rank 0's own results are here"}
    problems = {r: f"not heard from: rank 0 was interrupted by {name} first" for r in range(1, env.world_size)}
    own = fleetmerge.admit(0, report)
    hints = launcher_hosts(env, os.environ, {own.node: own.host} if own.node else {})
    merged, _ = fleetmerge.merge(own, {}, env.world_size, problems, strict, info, hints)
    merged["summary"]["exit_code"] = code
    with GATE.critical():
        deliver(merged)
    return code


def _take_reports(exchange: Exchange, gathered: dict, state: dict, world: int) -> None:
    from . import fleetmerge

    hellos = _obj(gathered.get("hellos"))
    for raw_rank, hello in hellos.items():
        try:
            r = int(raw_rank)
        except ValueError:
            continue
        if 0 < r < world and isinstance(hello, dict) and isinstance(hello.get("host"), str):
            state["hints"][r] = fleetmerge._text(hello["host"], 255)
    rejected = _obj(gathered.get("rejected"))
    for raw_rank, why in rejected.items():
        if str(raw_rank).isdigit() and 0 < int(raw_rank) < world:
            state["problems"][int(raw_rank)] = fleetmerge._text(why, 200)
    folder = exchange.path("reports")
    try:
        arrived = [int(name[:-5]) for name in os.listdir(folder) if name.endswith(".json") and name[:-5].isdigit()]
    except OSError:
        arrived = []
    for r in sorted(arrived):
        path = os.path.join(folder, f"{r}.json")
        if r in state["others"] or not 0 < r < world or r in state.get("rejected_seen", ()):
            continue
        try:
            with open(path, "rb") as fh:
                payload = fh.read(fleetmerge.MAX_REPORT_BYTES + 1)
            state["others"][r] = fleetmerge.admit(r, payload)
            state["problems"].pop(r, None)
        except fleetmerge.BadReport as exc:
            state["problems"][r] = f"its report was rejected: {exc}"
            state.setdefault("rejected_seen", set()).add(r)
        except (OSError, ValueError, TypeError, KeyError, RecursionError, AttributeError) as exc:
            state["problems"][r] = f"its report was rejected: {type(exc).__name__}"
            state.setdefault("rejected_seen", set()).add(r)


def _note_unacknowledged(out: dict, missed: list[int]) -> None:
    from .fleetmerge import ranges

    for row in out.get("checks") or []:
        if row.get("id") == "fleet.ranks":
            row["summary"] += (f"; rank{'s' if len(missed) > 1 else ''} {ranges(missed)} did not acknowledge the "
                               "verdict (a rank that misses it exits 1 without starting)")


def _other(env, report, python, started, fleet_wait, verbose, rerun, key) -> int:

    from .model import ExitCode
    from .render import output_width, render
    from .render.output import write_stderr
    from .signals import GATE

    budget = float(report["summary"].get("budget_s") or 60.0)
    base_wait = fleet_wait if fleet_wait is not None else max(5.0, budget + SKEW_S - (_now() - started))
    connect_s = base_wait + SKEW_S + SETUP_S
    request = {"rank": env.rank, "world_size": env.world_size, "master_addr": env.master_addr, "port": env.port,
               "scope": env.scope, "connect_s": connect_s, "fingerprint_node": _fingerprint_node(env, report),
               "leader": env.node_leader}
    timeout = connect_s + SETUP_S + 4 * budget + VERDICT_S + VERDICT_PER_RANK_S * env.world_size + ACK_S + \
        2 * RELEASE_S + 60.0
    exchange = Exchange(env, python, request, key, timeout)
    ran_own = False
    GATE.arm()
    try:
        exchange.start(_hello(env, report))
        plan = exchange.wait_for("plan.json", _now() + SETUP_S + connect_s + 10.0)
        answer: dict
        if plan is None or "error" in plan:
            answer = exchange.finish(_now() + 10.0)
            if "error" not in answer and "missed" not in answer:
                answer = {"missed": (plan or {}).get("error") or "no plan from rank 0"}
        else:
            report_by = float(plan.get("report_by") or _now())
            ids = node_level_ids(report)
            leader_fp = plan.get("leader_fingerprint")
            own_fp = (report.get("environment") or {}).get("fingerprint")
            if ids and rerun is not None and (plan.get("leader") != "read" or leader_fp != own_fp):
                seconds = report_by - _now() - 3.0
                if seconds >= 5.0:
                    own = rerun(ids, seconds)
                    if isinstance(own, dict) and isinstance(own.get("checks"), list):
                        rows = {row.get("id"): row for row in own["checks"] if isinstance(row, dict)}
                        report = dict(report, checks=[rows.get(row.get("id"), row) if isinstance(row, dict) else
                                                      row for row in report["checks"]])
                        ran_own = True
            exchange.write("report.json", report)
            exchange.touch("report.json.ready")
            until = float(plan.get("ack_by") or _now()) + RELEASE_S + 15.0
            answer = exchange.finish(until)
    finally:
        GATE.shield()
        exchange_tail = exchange.tail()
        exchange.close()
    if "exit_code" in answer and isinstance(answer.get("exit_code"), int):
        if verbose:
            _say(f"== rank {env.rank} of {env.world_size} ({host_of(report)}): its own report"
                 + (" (it ran its host-level checks itself: its packages differ from its local rank 0's)"
                    if ran_own else "") + " ==")
            write_stderr(render(report, "text", width=output_width(False)))
        return int(answer["exit_code"])
    why = answer.get("missed") or answer.get("error") or "no verdict"
    _say(f"dsv4-doctor (rank {env.rank} of {env.world_size}): not starting: this rank did not take the fleet's "
         f"verdict ({why}); its own report follows")
    stderr = answer.get("stderr") or (exchange_tail if answer.get("error") else "")
    if stderr:
        _say("  " + str(stderr).strip()[-2000:].replace("\n", "\n  "))
    write_stderr(render(report, "text", width=output_width(False)))
    _say(f"dsv4-doctor (rank {env.rank}): exit 1, because this rank could not take the fleet's verdict")
    return int(ExitCode.FAILED)


def host_of(report: dict) -> str:
    env = report.get("environment")
    fr = env.get("fleet_rank") if isinstance(env, dict) else None
    return str((fr.get("host") if isinstance(fr, dict) else None) or "unknown host")


def _say(message: str) -> None:
    """A fleet-mode line on stderr, cleaned, redacted and bounded as every other output is (a rank's import error
    can carry terminal escapes, a workflow command, a token): the output layer's say, line by line."""
    from .render.output import say

    for line in message.split("\n"):
        say(line)
