"""The fleet exchange's signed channel on the store, and its bounded seconds (loaded by dsv4probe_fleet_exchange.py,
in the target interpreter; stdlib only).

With a shared secret every value is signed: HMAC-SHA256 over the scope, the key and the value; a value that fails the
check is ignored and counted.
"""

import hashlib
import hmac
import time

PROBE_FLEET_CHANNEL = True
MAX_VALUE = 8 * 1024 * 1024  # a rank's report beyond this is not read (its doctor bounds it well below)


class Channel:
    """Signed values under one scope on the store."""

    def __init__(self, store, scope, key):
        self.store, self.scope, self.key = store, scope, key
        self.rejected = 0

    def _mac(self, name, value):
        if not self.key:
            return b""
        return hmac.new(self.key, b"%s\n%s\n" % (self.scope.encode(), name.encode()) + value,
                        hashlib.sha256).hexdigest().encode()

    def set(self, name, value):
        self.store.set(self.scope + "/" + name, self._mac(name, value) + b"." + value)

    def has(self, name):
        return self.store.check([self.scope + "/" + name])

    def get(self, name):
        """The value, or None when it is absent, too large or its MAC is wrong."""
        if not self.has(name):
            return None
        raw = self.store.get(self.scope + "/" + name)
        if len(raw) > MAX_VALUE + 80:
            self.rejected += 1
            return None
        mac, sep, value = bytes(raw).partition(b".")
        if not sep or not hmac.compare_digest(mac, self._mac(name, value)):
            self.rejected += 1
            return None
        return value


def _timedelta(seconds):
    from datetime import timedelta

    return timedelta(seconds=max(1.0, seconds))


MAX_PLAN_S = 86400.0


def _seconds(value):
    """A plan's seconds left, within 0-MAX_PLAN_S: a value that is no finite number (inf, nan, text, from a writer
    without the secret) is 0, so a rank waits by it no longer than by any valid plan."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return min(seconds, MAX_PLAN_S) if seconds > 0 else 0.0


def wait_for_acks(ch, present, ack_by, verdict_by, publish, poll_s=0.05, heartbeat_s=0.5):
    """The ranks of `present` whose own acknowledgement (`ack/<r>`, signed when there is a secret) was read by
    `ack_by`. The store's counter (`acks`, unsigned: anyone who reaches the port can add to it) is only a hint of
    when to look: the ranks' own acknowledgements decide, read again until all are in or the deadline passed, so a
    forged count can neither end the wait early nor name a rank that did acknowledge."""
    acked = set()
    last = looked = time.monotonic()
    hinted = -1
    while time.monotonic() < ack_by:
        count = ch.store.add(ch.scope + "/acks", 0)
        if count >= len(present) and count != hinted or time.monotonic() - looked >= heartbeat_s:
            hinted, looked = count, time.monotonic()
            acked |= {r for r in present if r not in acked and ch.get("ack/%d" % r) is not None}
            if len(acked) >= len(present):
                return acked
        if time.monotonic() - last >= heartbeat_s:
            if time.monotonic() < verdict_by:
                publish()  # again: a value someone overwrote is back within a heartbeat
            last = time.monotonic()
        time.sleep(poll_s)
    return acked | {r for r in present if r not in acked and ch.get("ack/%d" % r) is not None}
