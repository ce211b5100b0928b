"""Fleet mode: one verdict for every rank of a multi-node job, over the torch.distributed the job already uses.

Every rank runs its own checks (static ones on every rank, since a rank's PYTHONPATH can differ from its
neighbour's; import probes once per node, by local rank 0, or by any rank whose packages differ from its local rank
0's; per-GPU checks on every rank, on its own GPU). Then the exchange helper (probes/dsv4probe_fleet.py, in the
target interpreter: this process never imports torch) moves the reports to rank 0 and the verdict back, on rank 0's
timeline; rank 0's doctor merges them (merge.py) and writes the one report.

The guarantee every rank keeps: it starts its job (exits 0) only when it read a go verdict that rank 0 published
before the verdict deadline, and read it before that deadline; otherwise it exits 1 without starting and says why.
Rank 0 lists the ranks that did not acknowledge the verdict; every rank that runs to completion exits with the
verdict's code.

It turns on by itself only when a multi-process launch is evident: torchrun's RANK/WORLD_SIZE/MASTER_ADDR with
WORLD_SIZE > 1 (also inside a one-task srun step), or an srun step with SLURM_STEP_NUM_TASKS > 1 (an sbatch batch
script, SLURM_PROCID=0 and no step, runs single-host).

With --cp N, the smoke forward runs across the real ranks: consecutive groups of N ranks form CP groups (cp_plan).

Where it lives: env.py (the launcher's environment: detection, node lists, the job's scope and secret,
cp_plan), torchstore.py (the exchange helper's file conversation), plan.py (rank 0's gather, merge and
verdict; the other ranks' side), deadlines.py (a rank's own acknowledgement, its late exit, its bounded report),
admit.py and merge.py (validating and merging the ranks' reports), raycluster.py (the Ray transport: `--ray`). This
package is fleet mode's one import for the CLI and the checks.
"""

from __future__ import annotations

from .env import (FleetEnv, cp_plan, detect, expand_nodelist, first_host, fleet_key, host_label, launcher_hosts,
                       profile_fields, tasks_per_node)
from .plan import FLEET_CHECKS, take_part

__all__ = ["FLEET_CHECKS", "FleetEnv", "cp_plan", "detect", "expand_nodelist", "first_host", "fleet_key", "host_label",
           "launcher_hosts", "profile_fields", "take_part", "tasks_per_node"]
