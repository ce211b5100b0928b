"""Rank and host, from where a log lies and from what its lines start with.

From the path (`of_path`):
- torchrun `--log-dir`: `.../attempt_K/N/stdout.log` or `stderr.log` (N: the local rank; torchrun >= 2.2 also
  `.../attempt_K/N/{stdout,stderr}.log` under a run id folder) -> rank N.
- Slurm per-task files (`%t` in `--output`/`--error`): a name that ends in `<jobid>-<task>`, `<jobid>_<task>` or
  `<jobid>.<task>` before `.out`, `.err`, `.log` or `.txt` (`job-123-4.out`, `slurm-123_4.err`) -> rank <task>;
  and any name with `rank<N>`, `rank-<N>`, `rank_<N>`, `task<N>`, `task-<N>` (`train-rank3.log`) -> rank N.
- Ray session logs: `worker-<worker id>-<job id>-<pid>.out` / `.err` -> the worker (no rank: Ray does not say).
From a line's prefixes (`of_line`), in the order launchers stack them:
- `srun --label`: `N: ` -> rank N;
- a plain host prefix `host: ` (pdsh, clush): lower-case letters, digits, `.`, `-`, holding a digit;
- Ray / verl driver: `(ActorName pid=P, ip=A)` -> host A;
- torchrun: `[rankN]:` / `[defaultN]:` (`--tee` / `--redirects`) -> rank N.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TORCHRUN_DIR = re.compile(r"(?:^|/)attempt_\d+/(\d{1,6})/(?:stdout|stderr|error)\.(?:log|json)$")
_SLURM_TASK = re.compile(r"\d+[-_.](\d{1,6})\.(?:out|err|log|txt)$")
_NAMED_RANK = re.compile(r"(?:rank|task)[-_]?(\d{1,6})(?!\d)", re.IGNORECASE)
_RAY_WORKER = re.compile(r"(?:^|/)(worker-[0-9a-f]{8,64}-[0-9a-f]{1,16}-(\d{1,9}))\.(?:out|err)$")

# Prefixes, each anchored at the start of what is left of the line.
_SRUN = re.compile(r"\s{0,6}(\d{1,6}): ")
_HOST = re.compile(r"(?=[a-z0-9.-]{0,62}\d)([a-z0-9][a-z0-9.-]{0,62}): ")
_RAY = re.compile(r"\((?:(?P<actor>[A-Za-z_][\w.:-]{0,80})(?:, | ))?(?:pid=(?P<pid>\d{1,9}))?(?:, ?)?"
                  r"(?:ip=(?P<ip>[0-9a-fA-F.:]{3,45}))?\)(?: |$)")
_TORCHRUN = re.compile(r"\[(?:rank|default)(\d{1,6})\]:")


@dataclass(frozen=True)
class Where:
    rank: int | None = None
    host: str | None = None
    worker: str | None = None  # a Ray worker or actor (pid), when no rank is known


def of_path(path: str) -> Where:
    """Rank (or Ray worker) from a log's path."""
    path = path.replace("\\", "/")
    name = path.rsplit("/", 1)[-1]
    m = _TORCHRUN_DIR.search(path)
    if m:
        return Where(rank=int(m.group(1)))
    m = _RAY_WORKER.search(path)
    if m:
        return Where(worker=f"pid={m.group(2)}")
    m = _SLURM_TASK.search(name) or _NAMED_RANK.search(name)
    if m:
        return Where(rank=int(m.group(1)))
    return Where()


def of_line(text: str) -> tuple[Where, str]:
    """The rank, host and worker a line's prefixes give, and the line without them."""
    rank: int | None = None
    host: str | None = None
    worker: str | None = None
    at = 0
    for _ in range(4):  # prefixes stack (srun label, then torchrun's), at most once each
        m = _SRUN.match(text, at)
        if m and rank is None:
            rank, at = int(m.group(1)), m.end()
            continue
        m = _TORCHRUN.match(text, at)
        if m:
            rank, at = int(m.group(1)), m.end()
            continue
        m = _RAY.match(text, at) if text.startswith("(", at) else None
        if m and (m.group("pid") or m.group("ip")):
            host = m.group("ip") or host
            worker = " ".join(filter(None, (m.group("actor"), m.group("pid") and f"pid={m.group('pid')}")))
            at = m.end()
            continue
        m = _HOST.match(text, at) if host is None and rank is None else None
        if m and (not m.group(1).replace(".", "").isdigit() or m.group(1).count(".") == 3):  # a name or an IPv4
            host, at = m.group(1), m.end()
            continue
        break
    return Where(rank, host, worker), text[at:]
