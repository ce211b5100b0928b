"""Ray's worker_process_setup_hook for a job that `dsv4-doctor fleet --ray --ray-hook` checked.

Ray runs it in every worker process of the job (its actors' and tasks'), on every node, before the worker takes
any work. A worker on a node the check did not cover (one that joined the cluster after it) raises, so the worker
does not start and Ray reports the doctor's reason (the job's actors on that node die at start). It covers the
nodes, not what changed on a checked node after the check. The doctor always sets the list of checked nodes with
the hook; a list that is empty or missing covers no node, so every worker refuses.
Stdlib besides ray; shipped to the nodes with the job's runtime_env `py_modules`.
"""

import os

CHECKED_NODES_VARIABLE = "DSV4_DOCTOR_RAY_CHECKED_NODES"


def refuse_unchecked_node():
    checked = [n for n in (os.environ.get(CHECKED_NODES_VARIABLE) or "").split(",") if n]
    import ray

    node = ray.get_runtime_context().get_node_id()
    if not checked:
        raise RuntimeError("dsv4-doctor: the job's list of checked nodes (%s) is empty or missing, so no node's "
                           "environment is known to be checked: this worker on node %s refuses to start (run "
                           "`dsv4-doctor fleet --ray --ray-hook` again once the job's GPU nodes are up)"
                           % (CHECKED_NODES_VARIABLE, node))
    if node not in checked:
        raise RuntimeError("dsv4-doctor: node %s joined the Ray cluster after `dsv4-doctor fleet --ray` checked "
                           "the job's %d node(s), so its environment was never checked: this worker refuses to "
                           "start (check the fleet again with the node in it)" % (node, len(checked)))
