"""What a log line is, by ordered named rules (first match wins, specific first, then a catch-all), as PyTorch's CI
log classifier does: a consequence of another failure (never the first failure), a soft failure (a failure only
where nothing harder failed: the watchdog abort every other rank prints, a closed connection), a death another
process reports (Ray's actor and worker deaths, the launcher's "exitcode: -9": listed apart, never the first
failure, as it hides the dead one's own stream), a failure with a symptom class, a failure of no known class (an
exception), a logged error (a failure only when a registry text matches it), or a line that carries a rule's
upstream text and no word of an error (Hydra prints "Could not override '...'." alone).

Symptom classes: nccl-timeout, illegal-memory-access, oom, nan-inf, signal-killed, worker-died, no-kernel-image,
gpu-lost; each with what to collect next (`COLLECT_NEXT`)."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

CONSEQUENCE, REPORTED, SOFT, FAILURE, LOGGED = "consequence", "reported", "soft", "failure", "logged"

CLASSES = ("nccl-timeout", "illegal-memory-access", "oom", "nan-inf", "signal-killed", "worker-died",
           "no-kernel-image", "gpu-lost")

# A cheap first look at the raw bytes of every line: a line this does not find is no candidate at all.
CANDIDATE = re.compile(
    rb"Error|Exception|error|Traceback|FATAL|Fatal|fatal|CRITICAL|[Kk]illed|SIG[A-Z]{3,4}|Signal|Segmentation|"
    rb"core dump|"
    rb"[Oo]ut of memory|OutOfMemory|MemoryAllocation|allocate memory|oom|OOM|illegal|misaligned|"
    rb"(?<![A-Za-z])(?:nan|NaN|NAN|inf|Inf)(?![A-Za-z])|-finite|not finite|[Ww]atchdog|[Tt]imed? ?out|"
    rb"died|[Dd]ead|No module named|undefined symbol|kernel image|Xid|fell off|exitcode|CANCELLED|assert|Connection "
    rb"closed|Connection reset|abort|[Tt]aking the entire|ECC|NVRM|terminate called|what\(\)|cudaError|CUDA_ERROR")


@functools.cache
def _upstream_anchors() -> re.Pattern:
    """The registry texts' longest literal parts, as one bytes pattern: the cheap first look for a line that carries
    a rule's own text and none of CANDIDATE's words (built once, on first use)."""
    from ..upstream.registry import builtin_index

    parts = sorted({max(e.fragments, key=len) for e in builtin_index().entries}, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(p.encode()) for p in parts) or b"(?!)")


def upstream_anchor(raw: bytes) -> bool:
    return _upstream_anchors().search(raw) is not None


@dataclass(frozen=True)
class Rule:
    name: str  # the signature a symptom is reported under
    kind: str  # CONSEQUENCE, SOFT, FAILURE or LOGGED
    klass: str | None  # the symptom class, if any
    pattern: re.Pattern
    needles: tuple[str, ...]  # the pattern is tried only on a line holding one of these (`in` is cheap, re is not)


RULES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules.json")
KINDS = (CONSEQUENCE, REPORTED, SOFT, FAILURE, LOGGED)


def load_rules(path: str = RULES_FILE) -> tuple[Rule, ...]:
    """The line rules, in order, from their data file (rules.json: each rule's name, kind, symptom class, needles and
    patterns), read through the doctor's one read path and checked: a malformed rule raises, never half-loads."""
    from ..hostio.safeio import load_json

    rules = []
    for entry in load_json(path, 1 << 20)["rules"]:
        if entry["kind"] not in KINDS or (entry["class"] is not None and entry["class"] not in CLASSES):
            raise ValueError(f"triage rule {entry['name']!r}: unknown kind or class")
        needles = tuple(entry["needles"])
        if not needles or not all(isinstance(n, str) and n for n in needles):
            raise ValueError(f"triage rule {entry['name']!r}: needles must be non-empty strings")
        rules.append(Rule(entry["name"], entry["kind"], entry["class"], re.compile("|".join(entry["any_of"])),
                          needles))
    return tuple(rules)


RULES: tuple[Rule, ...] = load_rules()


# A line that carries a rule's upstream text (and matched no rule above): a failure of no symptom class.
UPSTREAM_TEXT = Rule("upstream-text", FAILURE, None, re.compile(""), ())


def classify_line(text: str) -> Rule | None:
    """The first rule a line (without its launcher prefixes) matches, or None: no failure."""
    for rule in RULES:
        if any(needle in text for needle in rule.needles) and rule.pattern.search(text):
            return rule
    return None


COLLECT_NEXT: dict[str, tuple[str, ...]] = {
    "nccl-timeout": (
        "Rerun with TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and TORCH_NCCL_DUMP_ON_TIMEOUT=1: each rank's NCCL flight "
        "recorder then dumps its last collectives on a timeout (TORCH_NCCL_DEBUG_INFO_TEMP_FILE says where); "
        "compare the dumps to find the rank that never entered the collective",
        "NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,COLL) on the rerun, for the communicator and transport each rank "
        "chose"),
    "illegal-memory-access": (
        "Rerun the failing rank with CUDA_LAUNCH_BLOCKING=1, so that the error is raised at the kernel that made it "
        "(asynchronous CUDA errors surface at a later, innocent call)",
        "Run it under compute-sanitizer (compute-sanitizer --tool memcheck python ...): it names the kernel, the "
        "thread and the address"),
    "oom": (
        "nvidia-smi -q -d MEMORY on the host while the job runs: who else holds GPU memory",
        "dmesg on the host: the kernel's OOM killer, for host memory"),
    "nan-inf": (
        "dsv4-doctor check --deep on that node: the smoke's tier 2 compares the fused DSv4 kernels with Megatron's "
        "PyTorch fallback, forward and backward",),
    "signal-killed": (
        "dmesg on the host: the OOM killer, or the address of a segmentation fault",
        "The scheduler's record of the job (sacct -j JOBID -o State,ExitCode,MaxRSS on Slurm): a time limit, a "
        "preemption or a memory limit"),
    "worker-died": (
        "The dead worker's own stream: its Ray session logs (/tmp/ray/session_latest/logs/worker-*.err on its "
        "node; `ray logs` on the cluster); the driver only says that it died",
        "dmesg on that node: the OOM killer"),
    "no-kernel-image": (
        "dsv4-doctor check on that node: te.import and the kernels.* rows read which GPU archs each build holds",),
    "gpu-lost": (
        "nvidia-smi -q on the host: retired pages, ECC errors, the GPU's state",
        "dmesg on the host: the NVRM Xid lines say what the driver saw (drain the node until it is reset)"),
}
