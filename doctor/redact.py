"""Secret redaction, applied to the whole report before any renderer sees it (so every format is covered).

Three nets: values under a secret-looking key; `NAME=value` text where NAME looks secret; and the literal values of
this process's secret-looking environment variables wherever they appear (a stderr tail, a path, a message).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

MASK = "***REDACTED***"

SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH(?!OR)|COOKIE|PRIVATE|SIGNATURE|SESSION"
    r"|(?:^|_|-)(?:API|ACCESS)?_?KEY(?:_|-|$)|APIKEY|ACCESSKEY|(?:^|_)PASS(?:_|$)|(?:^|_)PAT(?:_|$)|DSN",
    re.IGNORECASE,
)
# NAME=value, NAME: value, "NAME": "value" where NAME looks secret.
_ASSIGNMENT = re.compile(r"""(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>["']?\s*[=:]\s*["']?)(?P<value>[^\s"',;&]+)""")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/\s:@]+):(?P<pw>[^/\s@]+)@", re.I)
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})\b"
)


def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


class Redactor:
    def __init__(self, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        # Longest first, so a value that contains another is masked whole.
        self.secret_values = sorted(
            {v for k, v in environ.items() if looks_secret(k) and len(v) >= 4}, key=len, reverse=True
        )
        self.count = 0

    def text(self, value: str) -> str:
        original = value
        for secret in self.secret_values:
            if secret in value:
                value = value.replace(secret, MASK)

        def assignment(m: re.Match) -> str:
            if looks_secret(m.group("name")) and m.group("value") != MASK:
                return m.group("name") + m.group("sep") + MASK
            return m.group(0)

        value = _ASSIGNMENT.sub(assignment, value)
        value = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", value)
        value = _TOKEN_SHAPES.sub(MASK, value)
        if value != original:
            self.count += 1
        return value

    def __call__(self, obj: Any, key: str | None = None) -> Any:
        if isinstance(obj, dict):
            return {k: self(v, str(k)) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self(v, key) for v in obj]
        if isinstance(obj, str):
            if key is not None and looks_secret(key) and obj and obj != MASK:
                self.count += 1
                return MASK
            return self.text(obj)
        return obj
