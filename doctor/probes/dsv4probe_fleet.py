"""The fleet exchange: moves each rank's report bytes to rank 0 and rank 0's verdict back, on one timeline.

Runs in the target interpreter (the doctor's CLI never imports torch) and only moves bytes: the merge, the verdict
and the report are the doctor's (doctor/fleet/merge.py). It talks to its doctor through files in `dir` (both run on
the same host, so deadlines are CLOCK_MONOTONIC values both can read) and to the other ranks through
torch.distributed's TCPStore on the fleet port, hosted by rank 0.

The timeline is rank 0's. When its store is up, rank 0 publishes the plan (`<scope>/plan`): a fresh nonce, the world
size, and the seconds left until the report deadline, the verdict deadline and the acknowledgement deadline. It
re-publishes the plan every HEARTBEAT_S with the seconds left then, so a rank that reads it derives deadlines that
are at most HEARTBEAT_S early, never late, whatever the hosts' clocks say. Every other key is under
`<scope>/<nonce>/`: `scope` is the job's identity (torchrun's run id, Slurm's job and step ids), the nonce tells
this run from an earlier one of the same job.

- Every rank: `hello/<r>` (its host and node), then its report (`report/<r>`) by the report deadline. A node's
  local rank 0 also leaves its package fingerprint (`fp/<node>`): a rank whose packages differ runs its host-level
  checks itself (its doctor sees the leader's fingerprint in plan.json) before it reports.
- Rank 0 never sends its own report: its doctor has it. It reads the others' reports as they come (a counter key
  says when one came) until all are in or the report deadline passed, hands them to its doctor (reports/, then
  gathered.json), and publishes the doctor's verdict (verdict.json) only if it is ready before the verdict
  deadline. It then waits for acknowledgements (`ack/<r>`) until the acknowledgement deadline (acks.json), and,
  once its doctor wrote the report (`released` file), releases the others (`released` key).
- Every other rank takes the verdict only when it reads it before its verdict deadline, acknowledges it, and stays
  until released (or a bound), so that a rank exiting non-zero cannot make torchrun stop rank 0 mid-report.
- Each rank's verdict (`verdict/<r>`) carries the challenge that rank drew for this run and sent in its hello: an
  earlier run's plan and verdict, signed with the same secret and replayed into the store, carry another challenge,
  so no rank starts on them.

With a shared secret (DSV4_DOCTOR_FLEET_KEY, hex, set by the doctor) every value is signed: HMAC-SHA256 over the
scope, the key and the value. A value that fails the check is ignored and counted. Without one, values carry no
MAC and anyone who can reach the port can write them (the threat model in docs/fleet.md).
Answer: {"exit_code", "timings", "plan"} or a probe_error. Stdlib besides torch.
`python dsv4probe_fleet.py OUT REQUEST_FILE`.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_fleet_exchange", HERE).answer)
