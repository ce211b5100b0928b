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


def _upstream_anchors() -> re.Pattern:
    """The registry texts' longest literal parts, as one bytes pattern: the cheap first look for a line that carries
    a rule's own text and none of CANDIDATE's words (built once, on first use)."""
    from ..upstream.registry import builtin_index

    parts = sorted({max(e.fragments, key=len) for e in builtin_index().entries}, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(p.encode()) for p in parts) or b"(?!)")


_ANCHORS: list[re.Pattern] = []


def upstream_anchor(raw: bytes) -> bool:
    if not _ANCHORS:
        _ANCHORS.append(_upstream_anchors())
    return _ANCHORS[0].search(raw) is not None


@dataclass(frozen=True)
class Rule:
    name: str  # the signature a symptom is reported under
    kind: str  # CONSEQUENCE, SOFT, FAILURE or LOGGED
    klass: str | None  # the symptom class, if any
    pattern: re.Pattern
    needles: tuple[str, ...]  # the pattern is tried only on a line holding one of these (`in` is cheap, re is not)


# Per rule: words one of which every line it matches holds.
NEEDLES: dict[str, tuple[str, ...]] = {
    "nccl-entire-process-down": ("entire process", "data inconsistency"),
    "torchrun-child-failed": ("ChildFailedError", "Root Cause"),
    "torchrun-closing-signal": ("closing signal",),
    "torchrun-exitcode-signal": ("exitcode",),
    "torchrun-exitcode": ("exitcode", "error_file"),
    "ray-task-error": ("RayTaskError",),
    "ray-actor-died": ("Actor", "actor"),
    "ray-worker-died": ("orker", "died", "Died"),
    "nccl-watchdog-timeout": ("imeout", "imed out", "heartbeat"),
    "peer-failed": ("abort", "Abort", "Remote", "remote process", "Connection", "roken pipe", "watchdog thread"),
    "gpu-lost": ("Xid", "bus", "ECC", "GPU is lost", "GPU requires", "DevicesUnavailable"),
    "no-kernel-image": ("kernel image", "NoKernelImage", "NO_BINARY", "not compatible with the current PyTorch"),
    "illegal-memory-access": ("illegal", "Illegal", "ILLEGAL", "misaligned", "aunch failure", "LaunchFailure"),
    "device-side-assert": ("device-side assert", "cudaErrorAssert"),
    "oom": ("emory", "oom", "OOM", "MEMORY"),
    "nan-inf": ("nan", "NaN", "NAN", "inf", "Inf", "finite"),
    "signal-killed": ("SIG", "Segmentation", "Bus error", "core dumped", "Fatal Python", "Killed", "killed by",
                      "CANCELLED", "DUE TO", "Signal "),
    "exception": ("Error", "Exception", "Exit", "Interrupt", "Failure"),
    "native-error": ("terminate called", "what()", "CUDA error", "NCCL error", "cudaError", "_STATUS_", "CUDA_ERROR_",
                     "fatal", "error"),
    "logged-error": ("ERROR", "CRITICAL", "FATAL", "error:", "E0", "E1", "[E"),
}


def _rule(name: str, kind: str, klass: str | None, pattern: str) -> Rule:
    return Rule(name, kind, klass, re.compile(pattern), NEEDLES[name])


RULES: tuple[Rule, ...] = (
    # Consequences: another failure came first.
    _rule("nccl-entire-process-down", CONSEQUENCE, None,
          r"taking the entire process down|To avoid data inconsistency, we are taking"),
    _rule("torchrun-child-failed", CONSEQUENCE, None, r"ChildFailedError|Root Cause \(first observed failure\)"),
    _rule("torchrun-closing-signal", CONSEQUENCE, None, r"Sending process \d+ closing signal"),
    _rule("torchrun-exitcode-signal", REPORTED, "signal-killed", r"exitcode\s*:?\s*-\d+"),
    _rule("torchrun-exitcode", CONSEQUENCE, None, r"exitcode\s*:?\s*\d+|error_file\s*:"),
    _rule("ray-actor-died", REPORTED, "worker-died",
          r"ActorDiedError|RayActorError|[Tt]he actor died|actor died unexpectedly|ActorUnavailableError"),
    _rule("ray-task-error", CONSEQUENCE, None, r"RayTaskError"),
    _rule("ray-worker-died", REPORTED, "worker-died",
          r"[Aa] worker died or was killed|WorkerCrashedError|[Ww]orker died|Worker unexpectedly exits|"
          r"worker (?:process )?(?:has )?exited unexpectedly|NodeDiedError|node (?:has )?died"),
    _rule("nccl-watchdog-timeout", SOFT, "nccl-timeout",
          r"Watchdog caught collective operation timeout|collective operation timeout|ProcessGroupNCCL.{0,200}"
          r"[Tt]imeout|NCCL.{0,80}timed out|[Tt]imed out waiting for|DistStoreError.{0,80}[Tt]imeout|"
          r"Socket Timeout|heartbeat monitor|timed out after \d+ ?m?s|wait timeout after"),
    _rule("peer-failed", SOFT, None,
          r"NCCL communicator was aborted|ncclRemoteError|remote process exited or there was a network error|"
          r"Connection closed by peer|Connection reset by peer|ProcessGroupNCCL is aborted|"
          r"Process group watchdog thread terminated|[Bb]roken pipe|has been aborted|Aborting NCCL communicator"),
    # Failures with a symptom class, most specific first.
    _rule("gpu-lost", FAILURE, "gpu-lost",
          r"NVRM: Xid|\bXid\b|fallen off the bus|fell off the bus|cudaErrorDevicesUnavailable|"
          r"uncorrectable ECC|CUDA_ERROR_ECC_UNCORRECTABLE|ECC error|GPU is lost|GPU requires reset"),
    _rule("no-kernel-image", FAILURE, "no-kernel-image",
          r"no kernel image is available|cudaErrorNoKernelImageForDevice|CUDA_ERROR_NO_BINARY_FOR_GPU|"
          r"is not compatible with the current PyTorch installation"),
    _rule("illegal-memory-access", FAILURE, "illegal-memory-access",
          r"illegal memory access|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS|misaligned address|"
          r"illegal instruction was encountered|cudaErrorLaunchFailure|unspecified launch failure"),
    _rule("device-side-assert", FAILURE, "illegal-memory-access", r"device-side assert triggered|"
          r"cudaErrorAssert"),
    _rule("oom", FAILURE, "oom",
          r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|"
          r"[Oo]ut of memory|oom-kill|oom_kill|OOM killer|Cannot allocate memory"),
    _rule("nan-inf", FAILURE, "nan-inf",
          r"(?i:\b(?:loss|grad(?:ient)?s?(?:[ _]?norm)?)\b[^\n]{0,40}?[=:|]?\s*[-+]?(?:nan|inf)\b|"
          r"\b(?:nan|inf)\b[^\n]{0,30}\b(?:loss|grad)|found (?:nan|inf)\b|nan or inf|inf or nan|non-finite|"
          r"is not finite|contains? (?:a )?(?:nan|inf)\b)"),
    _rule("signal-killed", FAILURE, "signal-killed",
          r"Segmentation fault|SIGSEGV|SIGKILL|SIGABRT|SIGBUS|SIGILL|SIGFPE|Bus error|core dumped|"
          r"Fatal Python error|Signals\.SIG[A-Z]+|killed by signal|^Killed\s*$|CANCELLED AT|DUE TO TIME LIMIT|"
          r"DUE TO PREEMPTION|Signal \d+ \(SIG[A-Z]+\) received"),
    # No symptom class: an exception, a C++ abort, a CUDA or NCCL error.
    _rule("exception", FAILURE, None,
          r"^(?:[A-Za-z_][\w.]{0,200}\.)?[A-Za-z_]\w{0,100}(?:Error|Exception|Exit|Interrupt|Failure)"
          r"(?:\([^)]{0,200}\))?:(?:\s|$)|^(?:[\w.]{0,200}\.)?(?:KeyboardInterrupt|SystemExit)\s*$|"
          # the same, logged at the error level after the logger's own prefix
          r"\b(?:ERROR|CRITICAL|FATAL)\b.{0,160}?\s(?:[A-Za-z_][\w.]{0,200}\.)?[A-Z]\w{0,100}(?:Error|Exception)"
          r"(?:\([^)]{0,200}\))?: "),
    _rule("native-error", FAILURE, None,
          r"terminate called after throwing|\bwhat\(\):|CUDA error:|NCCL error|\bcudaError\w+|CUBLAS_STATUS_\w+|"
          r"CUDNN_STATUS_\w+|CUDA_ERROR_\w+|^(?:nvcc|ninja|ld|gcc|g\+\+|c\+\+) ?(?:fatal|error) ?:"),
    # A logged error: a failure only where a registry text matches it.
    _rule("logged-error", LOGGED, None, r"\b(?:ERROR|CRITICAL|FATAL)\b|\berror:|^E\d{4} |^\[E"),
)


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
