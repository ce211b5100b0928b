"""The fleet exchange's signed channel on the store, and its bounded seconds (loaded by dsv4probe_fleet.py, in the
target interpreter; stdlib only).

With a shared secret every value is signed: HMAC-SHA256 over the scope, the key and the value; a value that fails the
check is ignored and counted.
"""

import hashlib
import hmac

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
