"""The fleet's job identity as the ranks read it: the rendezvous address as one spelling (env.identity_values: the
loopback range and "localhost" are one host, a name is resolved to its addresses within RESOLVE_S in a daemon thread,
so a resolver that hangs never holds the doctor; an address is written canonically), and the words that name what
each rank saw when two ranks of one job still disagree."""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any

RESOLVE_S = 2.0  # a name's lookup: a resolver that does not answer by then leaves the name as it was written
_RESOLVED: dict[str, tuple[str, ...] | None] = {}


def _resolve(name: str) -> tuple[str, ...] | None:
    """The addresses `name` resolves to here (sorted), or None (no answer within RESOLVE_S, or none at all). The
    lookup runs in a daemon thread: a resolver that hangs never holds the doctor."""
    if name in _RESOLVED:
        return _RESOLVED[name]
    found: dict = {}

    def look() -> None:
        try:
            infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
            found["addrs"] = tuple(sorted({str(info[4][0]).split("%")[0] for info in infos}))
        except (OSError, UnicodeError, ValueError):
            found["addrs"] = None

    thread = threading.Thread(target=look, name="dsv4-doctor-resolve", daemon=True)
    thread.start()
    thread.join(RESOLVE_S)
    addrs = found.get("addrs") or None
    _RESOLVED[name] = addrs
    return addrs


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def normalise_address(addr: str) -> tuple[str, str]:
    """(the rendezvous address in one spelling, how it was read). The loopback range (127.0.0.0/8, ::1) and
    "localhost" are one address, "loopback"; a name is resolved to its addresses (all loopback: "loopback"); an
    address is written canonically; a name that does not resolve here is kept, in lower case."""
    text = (addr or "").strip().lower().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if not text:
        return "", "no MASTER_ADDR"
    if text == "localhost" or text.endswith(".localhost"):
        return "loopback", f"MASTER_ADDR {addr} taken as the loopback range (127.0.0.0/8 and localhost are one host)"
    ip = _address(text)
    if ip is not None:
        if ip.is_loopback:
            return "loopback", (f"MASTER_ADDR {addr} taken as the loopback range (127.0.0.0/8 and localhost are one "
                                "host)")
        return str(ip), f"MASTER_ADDR {addr}, an address"
    resolved = _resolve(text)
    if not resolved:
        return text, f"MASTER_ADDR {addr}, a name that does not resolve here: taken as written"
    ips = [ip for ip in (_address(a) for a in resolved) if ip is not None]
    if ips and all(ip.is_loopback for ip in ips):
        return "loopback", f"MASTER_ADDR {addr} resolves to the loopback range here: taken as the loopback range"
    shown = ",".join(sorted({str(ip) for ip in ips}))[:255]
    return shown, f"MASTER_ADDR {addr}, resolved here to {shown}"


def identity_evidence(env: Any) -> dict:  # a fleet.env.FleetEnv (typed Any: env imports this module)
    """How the ranks agree on the job's identity, for the report: torchrun's store, Slurm's ids, or the rendezvous
    as this rank read it (normalised)."""
    values = {k: v for k, v in env.identity.items() if k != "job"}
    if env.agent_port is not None:
        values["agreed"] = ("through torchrun's own store (every agent of the job shares it): every rank takes rank "
                            "0's identity")
    return values


_SHOWN = (("master_addr", "MASTER_ADDR"), ("address", "read as"), ("port", "MASTER_PORT"),
          ("run_id", "TORCHELASTIC_RUN_ID"), ("restart", "TORCHELASTIC_RESTART_COUNT"), ("slurm_job", "SLURM_JOB_ID"),
          ("slurm_step", "SLURM_STEP_ID"))


def describe_identity(values: dict) -> str:
    """The values a rank's job identity came from, for a message (each bounded and cleaned: they came from the
    store)."""
    from .admit import _text

    parts = [f"{label} {_text(values.get(k), 80)}" for k, label in _SHOWN if values.get(k) not in (None, "")]
    return ", ".join(parts) or "no launcher values"


def split_why(rank: int, theirs: dict, ours: dict, who: str = "rank 0") -> str:
    """Why `rank` is not in this fleet: it is on the fleet port under another identity of the job; both sides'
    values named."""
    differ = [label for k, label in _SHOWN if k != "address" and str(theirs.get(k) or "") != str(ours.get(k) or "")]
    return (f"rank {rank} is on the fleet port under another job identity: it saw {describe_identity(theirs)}; "
            f"{who} saw {describe_identity(ours)}"
            + (f" (they differ in {', '.join(differ)})" if differ else "")
            + "; give every rank the same values (or, for two jobs, each its own --fleet-port)")
