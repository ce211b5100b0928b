"""The GPU nodes a Ray fleet check's go needs (`check --ray`, `fleet --ray`): the job's trainer pool as verl composes
it (`trainer.nnodes`, `trainer.n_gpus_per_node`: the driver's composed config where there is one, so verl's own
defaults count when the command does not state them) plus the reward model's own pool (rayjob.wanted), and at least
one GPU node whatever the command says. What a missing node's fleet.ranks entry says, the warning when the count is not
known, and the nodes the worker_process_setup_hook lets the job's workers start on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from .rayjob import Wanted, wanted

if TYPE_CHECKING:
    from ..model.core import CheckReport

VERL_DEFAULT = "verl's default"
COMPOSED_COUNTS = (("nnodes", "nnodes", "trainer.nnodes"), ("gpus_per_node", "per_node", "trainer.n_gpus_per_node"))


@dataclass
class NodesWanted(Wanted):
    """Wanted, with the trainer's pool as the job gets it: where the driver composed the command with Hydra and the
    installed verl's config, its `trainer.nnodes` / `trainer.n_gpus_per_node` (verl's defaults where the command
    does not state them); `nnodes_from` says which ("stated", or VERL_DEFAULT)."""

    nnodes_from: str = "stated"

    @property
    def asks(self) -> str:
        text = super().asks
        if self.nnodes_from == VERL_DEFAULT and self.nnodes is not None:
            said = f"trainer.nnodes={self.nnodes}"
            text = text.replace(said, f"{said} (verl's default: the command does not state it)", 1)
        return text


def nodes_wanted(command: Sequence[str] | None, job: Mapping[str, Any] | None) -> NodesWanted:
    """The nodes the command asks of the cluster: the reader's (rayjob.wanted), with the trainer's pool taken from
    the driver's composed config (`job`: the driver report's profile.job) where there is one, so that verl's own
    default counts when the command does not state it. Without a composed config, a verl command that does not state
    trainer.nnodes leaves the count not known (a note), never a default the doctor assumed."""
    from .rayjob import _count

    base = wanted(command)
    want = NodesWanted(**{f.name: getattr(base, f.name) for f in fields(Wanted)})
    want.notes = list(base.notes)
    if not command or not isinstance(job, Mapping) or job.get("kind") != "verl":
        return want
    common = job.get("common") if isinstance(job.get("common"), Mapping) else {}
    if job.get("composed"):  # Hydra composed the command with the installed verl's config: its values stand
        for key, attr, name in COMPOSED_COUNTS:
            want.notes = [n for n in want.notes if not n.startswith((name + " ", name + "="))]
            setting = common.get(key) if isinstance(common, Mapping) else None
            value = None
            if isinstance(setting, Mapping) and setting.get("type") == "int":
                value = _count(name, setting.get("value"), want.notes)
            else:
                why = setting.get("resolved") if isinstance(setting, Mapping) else None
                want.notes.append(f"{name} is not known ({str(why or 'not in the composed config')[:200]})")
            setattr(want, attr, value)
            if attr == "nnodes" and isinstance(setting, Mapping):
                want.nnodes_from = VERL_DEFAULT if setting.get("source") == "default" else "stated"
    elif want.nnodes is None and not any(n.startswith("trainer.nnodes") for n in want.notes):
        read_by = str(job.get("read_by") or "not composed")[:200]
        want.notes.append(f"trainer.nnodes is not known: the command does not state it, and verl's config was not "
                          f"composed here to give its default ({read_by})")
    return want


def needed_nodes(want: Wanted) -> int:
    """The GPU nodes a go needs checked: the command's (its trainer's pool and the reward model's own), and at least
    one whatever it says: a fleet check of no GPU node is never a pass."""
    return max(want.nodes or 0, 1)


def missing_nodes(alive: int, want: Wanted, waited_s: float | None) -> str:
    """fleet.ranks' reason for each GPU node the job wants that the cluster does not have."""
    if want.nodes:
        why = f"no such node: the Ray cluster has {alive} alive GPU node(s), and the command asks {want.asks}"
    else:
        why = (f"no such node: the Ray cluster has {alive} alive GPU node(s), and a go needs at least one checked GPU "
               "node (how many the job uses is not known)")
    return why if waited_s is None else why + f" (after waiting {waited_s:.0f} s for nodes to join: --ray-wait-nodes)"


def node_count_known(rows: list[CheckReport], want: Wanted) -> list[CheckReport]:
    """fleet.ranks is not a pass when the job's node count is not known (a verl command whose trainer.nnodes the
    doctor could not read or compose): it warns and says why; every alive GPU node was still checked."""
    unknown = [n for n in want.notes if n.startswith("trainer.nnodes")] if want.nnodes is None else []
    if not unknown:
        return rows
    from ..model.core import Status
    from .admit import _text

    out = []
    for row in rows:
        if row.id == "fleet.ranks" and row.status == Status.PASS:
            row = replace(row, status=Status.WARN, summary=(
                row.summary + "; not known: how many nodes the job uses (" + _text(unknown[0], 300) + "), so "
                "whether every node it will use was checked is not known"))
        out.append(row)
    return out


def with_driver_node(checked: list[str], answer: Any) -> list[str]:
    """The nodes the hook lets the job's workers run on: the checked GPU nodes and, once there is one, the driver's
    own node (the helper's; its environment is the one the driver's own checks ran in), where verl places the
    actors that need no GPU (its TaskRunner) on a cluster whose head has none."""
    driver = answer.get("driver_node") if isinstance(answer, dict) else None
    if checked and isinstance(driver, str) and 0 < len(driver) <= 64 and driver.isalnum() and driver not in checked:
        return [*checked, driver]
    return checked
