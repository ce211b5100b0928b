"""Fleet mode's view of the launch: what torchrun's or srun's environment says about this process and its job.

The launcher detection (`detect`: a rank, its world, its node, the rendezvous address and the exchange's port), the
Slurm node-list and tasks-per-node parsing that places a rank on its host, the job's scope and shared secret
(`fleet_key`) in the store's keys, the host label reports show, and where the smoke's CP groups run (`cp_plan`).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass, field
from collections.abc import Mapping

from ..model.core import UsageError
from .identity import normalise_address

DEFAULT_MASTER_PORT = 29500
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000  # an srun step without MASTER_PORT: a port from its job and step id
SECRET_VARIABLE = "DSV4_DOCTOR_FLEET_SECRET"
SECRET_FILE_VARIABLE = "DSV4_DOCTOR_FLEET_SECRET_FILE"
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
    job: str = ""  # the digest of the job's identity (job_identity): a report or plan of another job is refused
    agent_port: int | None = None  # torchrun's own store (its agent's, on MASTER_PORT): agrees the fleet port
    port_given: bool = False  # --fleet-port: the user chose the port
    # What went into `job` as this rank saw it (identity_values): named when ranks of one job still disagree.
    identity: dict = field(default_factory=dict, compare=False)

    @property
    def node_leader(self) -> bool:
        return self.local_rank == 0


MAX_WORLD_SIZE = 1 << 17  # 131072 ranks: more than any job runs; a larger world is refused before any per-rank work
MAX_PORT = 65535
# The range of each launcher variable the doctor reads; a value outside it is a usage error that states the range.
RANGES: dict[str, tuple[int, int]] = {
    "WORLD_SIZE": (0, MAX_WORLD_SIZE), "RANK": (0, MAX_WORLD_SIZE - 1), "LOCAL_RANK": (0, MAX_WORLD_SIZE - 1),
    "LOCAL_WORLD_SIZE": (1, MAX_WORLD_SIZE), "GROUP_WORLD_SIZE": (1, MAX_WORLD_SIZE),
    "GROUP_RANK": (0, MAX_WORLD_SIZE - 1), "SLURM_STEP_NUM_TASKS": (0, MAX_WORLD_SIZE),
    "SLURM_PROCID": (0, MAX_WORLD_SIZE - 1), "SLURM_LOCALID": (0, MAX_WORLD_SIZE - 1),
    "SLURM_STEP_NUM_NODES": (1, MAX_WORLD_SIZE), "SLURM_NODEID": (0, MAX_WORLD_SIZE - 1),
    "MASTER_PORT": (1, MAX_PORT - 1),
}


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    lo, hi = RANGES.get(name, (0, MAX_WORLD_SIZE))
    text = raw.strip()
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not (digits.isascii() and digits.isdigit()):
        raise UsageError(f"fleet mode: {name}={raw[:40]!r} is not a whole number")
    if len(digits) > 12:  # never parsed: int() of a 5,000-digit value raises, and it is out of range anyway
        raise UsageError(f"fleet mode: {name} is out of range (a whole number in {lo}-{hi}; got a "
                         f"{len(digits)}-digit number)")
    value = int(text)
    if not lo <= value <= hi:
        raise UsageError(f"fleet mode: {name}={value} is out of range (a whole number in {lo}-{hi})")
    return value


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
    for part in (spec or "")[:4096].split(","):
        m = re.fullmatch(r"\s*(\d{1,7})(?:\(x\d{1,7}\))?\s*", part)
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
            if not first.isdigit() or last and not last.isdigit() or len(first) > 9 or len(last) > 9:
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
        m = re.fullmatch(r"\s*(\d{1,7})(?:\(x(\d{1,7})\))?\s*", part)
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
    given = port is not None
    if port is None:
        port = default_port(environ)
    if not 1 <= port <= 65535:
        raise UsageError(f"fleet mode: port {port} is out of range")
    return FleetEnv(rank, world, max(0, local), addr, port, launcher,
                    local_world if local_world and local_world > 0 else None, nodes if nodes and nodes > 0 else None,
                    node, job_scope(environ, addr, launcher), job_identity(environ, addr, launcher),
                    agent_store_port(environ, launcher), given,
                    dict(identity_values(environ, addr, launcher), job=job_identity(environ, addr, launcher)))


def default_port(environ: Mapping[str, str]) -> int:
    """MASTER_PORT + 1 (the job's own port is its own: two jobs on one node have two); in an srun step without
    MASTER_PORT, a port derived from the Slurm job and step ids, so that two jobs on one node do not meet."""
    master = _int(environ, "MASTER_PORT")
    if master:
        return master + 1  # MASTER_PORT is at most 65534 (RANGES)
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    if job:
        digest = hashlib.sha256(f"{job}.{step or ''}".encode("utf-8", "replace")).digest()
        return SLURM_PORT_BASE + int.from_bytes(digest[:4], "big") % SLURM_PORT_SPAN
    return DEFAULT_MASTER_PORT + 1


def job_scope(environ: Mapping[str, str], master_addr: str | None = None, launcher: str = "torchrun") -> str:
    """The job's identity for the store's keys: a readable label (torchrun's run id unless "none", its default;
    else Slurm's job and step ids; else "job") and the digest of everything that tells two concurrent jobs apart
    (job_identity), so that two jobs on one port never read each other's keys."""
    run_id = environ.get("TORCHELASTIC_RUN_ID") or ""
    if run_id and run_id != "none":
        raw = "run-" + run_id
    elif environ.get("SLURM_JOB_ID"):
        raw = f"slurm-{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '')}"
    else:
        raw = "job"
    return "dsv4doctor/" + _SCOPE.sub("_", raw)[:80] + "-" + job_identity(environ, master_addr, launcher)


def job_identity(environ: Mapping[str, str], master_addr: str | None = None, launcher: str = "torchrun") -> str:
    """A digest two concurrent jobs cannot share, the same on every rank of one job (identity_values says what goes
    in). Under torchrun the ranks then take rank 0's through torchrun's own store where they reach it."""
    values = identity_values(environ, master_addr, launcher)
    parts = [str(values.get(k, "")) for k in ("address", "port", "run_id", "restart", "slurm_job", "slurm_step")]
    return hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:16]


def identity_values(environ: Mapping[str, str], master_addr: str | None = None, launcher: str = "torchrun") -> dict:
    """What tells this job from another, as this rank sees it. An srun step: Slurm's job and step ids alone (every
    task of a step has the same ones, whatever address it was given). Otherwise the rendezvous, MASTER_ADDR
    normalised (normalise_address: one host spelled two ways is one) and MASTER_PORT (two jobs on one host have two
    master ports), and the launcher's ids (torchrun's run id and restart count, Slurm's ids around torchrun)."""
    addr = master_addr if master_addr is not None else environ.get("MASTER_ADDR", "")
    job, step = environ.get("SLURM_JOB_ID", "")[:64], environ.get("SLURM_STEP_ID", "")[:64]
    if launcher == "srun" and job:
        return {"slurm_job": job, "slurm_step": step, "how": "Slurm's job and step ids (SLURM_JOB_ID, SLURM_STEP_ID)"}
    address, note = normalise_address(addr)
    values = {"master_addr": addr[:255], "address": address, "port": environ.get("MASTER_PORT", "")[:8],
              "run_id": environ.get("TORCHELASTIC_RUN_ID", "")[:128],
              "restart": environ.get("TORCHELASTIC_RESTART_COUNT", "")[:8], "slurm_job": job, "slurm_step": step,
              "how": note}
    return {k: v for k, v in values.items() if v != ""}


def agent_store_port(environ: Mapping[str, str], launcher: str) -> int | None:
    """torchrun's own store, where the workers reach it (its agent hosts it on MASTER_PORT and says so with
    TORCHELASTIC_USE_AGENT_STORE=True): the ranks agree the fleet port through it. None elsewhere (srun)."""
    if launcher != "torchrun" or environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    raw = environ.get("MASTER_PORT", "")
    return int(raw) if raw.isdigit() and 1 <= int(raw) <= 65535 else None


def host_label(anonymize: bool = False, env: FleetEnv | None = None,
               environ: Mapping[str, str] | None = None) -> str:
    """This host's name as fleet reports show it (finding the odd node is their purpose), or with
    --anonymize-hosts a salted hash: the salt is the job's identity and, when set, the fleet secret, so every rank
    of one job computes the same label while another job's (or, without the secret, an outsider's) do not."""
    name = socket.gethostname() or "unknown"
    if not anonymize:
        return name
    from .merge import host_label as hashed

    key = fleet_key(os.environ if environ is None else environ) or b""
    return hashed(name, (env.scope if env else "") + key.hex())


def profile_fields(env: FleetEnv, host: str) -> dict:
    # The rendezvous address stays out (the profile is part of the report, and --anonymize-hosts hides host names):
    # the smoke finds it again with cp_plan.
    return {"rank": env.rank, "world_size": env.world_size, "local_rank": env.local_rank,
            "node_leader": env.node_leader, "launcher": env.launcher, "host": host, "port": env.port,
            "local_world_size": env.local_world_size, "nodes": env.nodes, "node": env.node, "job": env.job}


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


SECRET_MAX_BYTES = 1 << 16
SECRET_FIFO_S = 10.0  # a secret given as a pipe (`<(...)`, a FIFO): its writer has this long to write it
_SECRETS: dict[str, bytes] = {}  # the secret file's contents, read once: a pipe gives its text only once


def fleet_key(environ: Mapping[str, str]) -> bytes | None:
    """The job's shared secret (DSV4_DOCTOR_FLEET_SECRET, or the file DSV4_DOCTOR_FLEET_SECRET_FILE names), as
    the HMAC key of every fleet message; None without one. UsageError when the file cannot be read or is empty.
    The file is read once per process (a regular file or a FIFO, bounded, never blocking past SECRET_FIFO_S; a
    stop signal meanwhile raises Interrupted) and kept."""
    from ..hostio.safeio import ReadRefused, read_file

    secret = environ.get(SECRET_VARIABLE)
    path = environ.get(SECRET_FILE_VARIABLE)
    if path:
        raw = _SECRETS.get(path)
        if raw is None:
            try:
                raw = read_file(path, SECRET_MAX_BYTES + 1, fifo_s=SECRET_FIFO_S).strip()
            except ReadRefused as exc:
                raise UsageError(f"{SECRET_FILE_VARIABLE}: cannot read the fleet secret ({exc})") from None
            if len(raw) > SECRET_MAX_BYTES:
                raise UsageError(f"{SECRET_FILE_VARIABLE}: the fleet secret is longer than {SECRET_MAX_BYTES} bytes")
            if not raw:
                raise UsageError(f"{SECRET_FILE_VARIABLE}: the file is empty")
            _SECRETS[path] = raw
        return hashlib.sha256(b"dsv4-doctor fleet\n" + raw).digest()
    if secret:
        return hashlib.sha256(b"dsv4-doctor fleet\n" + secret.encode("utf-8", "surrogateescape")).digest()
    return None
