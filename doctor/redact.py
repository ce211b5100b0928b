"""Secret redaction and output hygiene, applied to the whole report before any renderer sees it.

Redaction nets: values under a secret-looking key; `NAME=value`, `NAME: "quoted value"`, `--token value` and
`Authorization: Bearer ...` text; credentials in URLs; well-known token shapes (HF, GitHub, GitLab, OpenAI, AWS,
Slack, JWT, PEM private keys); and the literal values of this process's secret-looking environment variables
wherever they appear (a stderr tail, a path, a message).

Hygiene: text from the inspected environment can hold control characters, terminal escapes, undecodable bytes,
lines that GitHub Actions would run as workflow commands, and non-finite floats; none of that may reach a report.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Mapping

MASK = "***REDACTED***"

SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH(?!OR(?!IZ))|COOKIE|PRIVATE|SIGNATURE"
    r"|(?:^|_|-)(?:API|ACCESS|ACCOUNT)?_?KEY(?:_|-|$)|APIKEY|ACCESSKEY|ACCOUNTKEY|(?:^|_)PASS(?:_|$)|(?:^|_)PAT(?:_|$)"
    r"|(?:^|_)DSN(?:_|$)",
    re.IGNORECASE,
)
# Names that match the pattern above but hold no secret (their values are common words that would be masked
# everywhere).
NOT_SECRET = re.compile(r"^(?:TOKENIZERS?_|XDG_SESSION_|HF_HUB_DISABLE_|.*_TOKEN_?(?:LEN|LENGTH|LIMIT|COUNT)$)", re.I)
COMMON_VALUES = {"true", "false", "none", "null", "user", "root", "yes", "no", "auto", "default", "disabled"}

# NAME=value, NAME: value, "NAME": "value", NAME = "a quoted value" where NAME looks secret.
_ASSIGNMENT = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>["']?\s*[=:]\s*)"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|(?:Bearer|Basic|Token)\s+[^\s"',;&]+|[^\s"',;&]+)""",
    re.IGNORECASE,
)
_FLAG = re.compile(r"(?P<flag>--?[A-Za-z][A-Za-z0-9_-]*)(?P<sep>[ =])(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)")
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/\s:@]+):(?P<pw>[^/\s@]+)@", re.I)
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_WORKFLOW_COMMAND = re.compile(r"^(\s*)::", re.M)


def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not NOT_SECRET.search(name)


def _secret_value(value: str) -> bool:
    """Values worth replacing wherever they appear: not a short common word that would mask unrelated text."""
    if len(value) < 6 or value.lower() in COMMON_VALUES:
        return False
    return not (value.isalpha() and len(value) < 12)


def clean_text(value: str) -> str:
    """Decodable, printable, and inert under GitHub Actions."""
    value = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    value = _ANSI.sub("", value)
    value = _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group(0)), value)
    return _WORKFLOW_COMMAND.sub(r"\1\\::", value)


class Redactor:
    def __init__(self, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        # Longest first, so a value that contains another is masked whole.
        self.secret_values = sorted(
            {v for k, v in environ.items() if looks_secret(k) and _secret_value(v)}, key=len, reverse=True
        )
        self.count = 0

    def text(self, value: str) -> str:
        original = value
        for secret in self.secret_values:
            if secret in value:
                value = value.replace(secret, MASK)
        value = _PEM.sub(MASK, value)

        def assignment(m: re.Match) -> str:
            if looks_secret(m.group("name")) and m.group("value").strip("\"'") != MASK:
                return m.group("name") + m.group("sep") + MASK
            return m.group(0)

        def flag(m: re.Match) -> str:
            if looks_secret(m.group("flag").lstrip("-")):
                return m.group("flag") + m.group("sep") + MASK
            return m.group(0)

        value = _ASSIGNMENT.sub(assignment, value)
        value = _FLAG.sub(flag, value)
        value = _BEARER.sub(lambda m: f"{m.group('scheme')} {MASK}", value)
        value = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", value)
        value = _TOKEN_SHAPES.sub(MASK, value)
        if value != original:
            self.count += 1
        return value

    def __call__(self, obj: Any, key: str | None = None) -> Any:
        """Redact and clean a JSON-like tree; non-finite floats become strings (JSON has no NaN)."""
        if isinstance(obj, dict):
            return {clean_text(str(k)): self(v, str(k)) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self(v, key) for v in obj]
        if isinstance(obj, float) and not math.isfinite(obj):
            return str(obj)
        if isinstance(obj, (bool, int, float)) or obj is None:
            return obj
        if not isinstance(obj, str):
            obj = str(obj)  # a plugin's Path, Version, ...: shown as text rather than breaking the report
        if key is not None and looks_secret(key) and obj and obj != MASK:
            self.count += 1
            return MASK
        return clean_text(self.text(obj))
