"""The Ray fleet helper: joins the job's Ray cluster and runs the doctor once on every alive GPU node, in parallel.

Runs in the job's own Python (only the job's own ray can join its cluster: the doctor's CLI never imports ray):
`ray.init(address=RAY_ADDRESS or "auto")`, then `ray.nodes()`: the alive nodes with GPUs. One task per node, pinned
with NodeAffinitySchedulingStrategy(node_id, soft=False) (no placement group: one waits forever when a node is
missing, and reserves the GPUs the job needs). A task runs the doctor of the job's runtime environment (its env
vars, working_dir, py_executable: Ray's worker Python, py_modules) with `--no-distributed`, since verl's workers set
RANK/WORLD_SIZE themselves. The static checks ask for no GPU; with GPU checks a task asks for the node's GPUs.

The runtime_env (ray.init's, as verl's driver gives it: verl's defaults, PPO_RAY_RUNTIME_ENV of the job's verl read
with ast where found, under the command's validated overrides the doctor sends, the job's py_modules in its order)
also ships the doctor's stdlib-only static probe (py_modules, after the job's): a node whose job environment lacks the
doctor runs that probe and answers its static facts ("ran": "probes"), which the doctor turns into that node's
report. Each task says which of the runtime_env's variables it saw with their values ("runtime_env_seen").

Every task is bounded with ray.wait; a straggler is cancelled (ray.cancel) before the doctor decides. A node that
dies (NodeDiedError), cannot be scheduled (TaskUnschedulableError), lacks the doctor or hangs is an entry with its
reason, never a missing one. The reports go to `dir`/reports/<i>.json (bounded, hostile: the doctor admits them).
Answer: {"nodes": [{"index", "node_id", "host", "ip", "gpus", "why"?, "exit_code"?, "size"?}], "driver_node",
"timings"} or {"error"}. Stdlib besides ray. `python dsv4probe_ray.py OUT REQUEST_FILE` (the request in a file of
the doctor's private folder; each node's doctor gets the training command in a file too: `--job-args-file`).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_ray_nodes", HERE).answer)
