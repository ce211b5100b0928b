"""Text from the inspected environment: made safe where it enters, and redacted before any renderer sees a report.

Entry (`sanitize`): every string a probe answers, a plugin returns or the environment holds is capped (with a visible
marker) and made valid text: undecodable bytes become `\\xNN`, lone surrogates `\\uXXXX`. Every later step is linear
in the length of its input, so hostile text cannot stall the doctor.

Redaction (`Redactor`, applied to the whole report): values under secret-looking keys; `NAME=value`,
`NAME: "quoted value"`, `--token value` and `Authorization: Bearer ...` text; URL userinfo; well-known token shapes
(HF, GitHub, GitLab, OpenAI, AWS, Slack, JWT, PEM private keys); and the literal values of this process's
secret-named environment variables wherever they appear.

Hygiene (`clean_text`): terminal escapes and control characters are removed or escaped, and no line of output can
start a GitHub Actions workflow command (`::` or `##[`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from typing import Any
from collections.abc import Mapping

from ..fix.steps import Command
from .validtext import ANSI, clean_text, neutralize_workflow_commands, valid_text  # noqa: F401 (re-exported)

MASK = "***REDACTED***"
MAX_TEXT = 16 * 1024  # any one string taken from the environment
TRUNCATED = "…[{n} more characters truncated by dsv4-doctor]"
TAIL_CUT = "…[earlier output cut by dsv4-doctor]\n"
# What is printed in place of a command that redaction had to change (it holds a secret): a comment, inert when pasted.
WITHHELD = "# (a command here held a secret and is not printed)"

# Secret-looking variable names. SESSION counts only as a suffix (FOO_SESSION, AWS_SESSION_TOKEN), so that
# XDG_SESSION_ID and XDG_SESSION_TYPE stay readable.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDS|AUTH(?!OR(?!IZ))|COOKIE|PRIVATE|SIGNATURE"
    r"|(?:^|_|-)(?:API|ACCESS|ACCOUNT)?_?KEY(?:_|-|S?$)|APIKEY|ACCESSKEY|ACCOUNTKEY|(?:^|_)PASS(?:_|$)"
    r"|(?:^|_)PWD$|(?:^|_)PW$|PASS$|PRIV_?KEY|(?:^|_)PAT(?:_|$)|(?:^|_)DSN(?:_|$)"
    r"|(?:^|_)SESSION(?:_TOKEN|_KEY|_SECRET|_COOKIE)?$|JWT",
    re.IGNORECASE,
)
# Names that match the pattern above but hold no secret.
# Training settings about tokens are not credentials: moe_token_dispatcher_type, max_tokens, num_tokens, ...
NOT_SECRET = re.compile(r"^(?:TOKENIZERS?_|HF_HUB_DISABLE_|.*_TOKEN_?(?:LEN|LENGTH|LIMIT|COUNT)$|OLDPWD$|PWD$)"
                        r"|TOKEN[_-]DISPATCH|(?:MAX|NUM|MIN)[_-]TOKENS?(?:$|[_-])|TOKENS?[_-]PER[_-]", re.I)
# Values of secret-named variables that are too common to replace wherever they appear (they are still masked in
# the environment listing): replacing "true" everywhere would shred a report and hide nothing.
COMMON_VALUES = {"true", "false", "none", "null", "auto", "default", "disabled", "enabled", "unset"}
MIN_SECRET_VALUE = 4
# The words a text puts where a value goes (upstream messages: "Expected override in KEY=VALUE form"): no secret.
PLACEHOLDERS = {"VALUE", "VAL", "<VALUE>", "VALUE>", "NAME", "N"}

# Every pattern below starts only at a boundary (a lookbehind for the previous character), so a long run of
# ordinary characters is scanned once, not once per position: redaction is linear in the length of the text.
_NAME_START = r"(?<![A-Za-z0-9_.-])"
# `NAME=` / `NAME: ` and, matched only after a secret-looking name, its value. The value of any other name is
# scanned on (`x=API_KEY=abc`, `RuntimeError: HF_TOKEN=abc` hold an assignment inside one), and each scan starts past
# the last, so the pass stays linear.
_NAME_SEP = re.compile(
    _NAME_START + r"""(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,200})(?P<sep>["']?[ \t]{0,20}[=:][ \t]{0,20})""")
_VALUE = re.compile(
    r"""(?P<value>"[^"\n]{0,4096}"|'[^'\n]{0,4096}'|(?:Bearer|Basic|Token)[ \t]+[^\s"',;&]{1,4096}"""
    r"""|[^\s"',;&]{1,4096}|["'][^\s"',;&]{1,4096})""",
    re.IGNORECASE,
)
_FLAG = re.compile(r"(?<![^\s\"'=])(?P<flag>--?[A-Za-z][A-Za-z0-9_-]{0,100})(?P<sep>[ =])"
                   r"(?P<value>\"[^\"\n]{0,4096}\"|'[^'\n]{0,4096}'|[^\s\"']{1,4096})")
# A credential after its scheme word holds a digit or is long; a prose word is neither ("MoE token dispatchers" is
# documentation, not a secret). The lookahead is bounded by the same run, so this stays linear.
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s{1,20}"
                     r"(?P<value>(?=[A-Za-z._~+/=-]{0,4096}[0-9])[A-Za-z0-9._~+/=-]{8,}|[A-Za-z0-9._~+/=-]{16,})",
                     re.IGNORECASE)
# scheme://userinfo@ : the userinfo is masked whether or not it holds a colon (https://TOKEN@host is a credential),
# up to the last `@` before the host (a password may hold a raw `@`: https://user:p@ss@host).
_URL_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,30}://)(?P<userinfo>[^/\s?#]{1,4096})@")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})"
    # A JWT starts only where no segment character precedes it: with \b it could start after every `-` of one long
    # run and rescan the rest of it each time (otherwise: "eyJaaaaaaaa-" * 20000 took 9.4 s).
    r"|(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z ]{0,40}PRIVATE KEY-----")

def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not NOT_SECRET.search(name)


_TRAILING_WORD = re.compile(r"\S*")
WORD_MAX = 8192


def cut(value: str, limit: int) -> str:
    """At most `limit` characters of `value`, never part of a word or of a secret: when the cut goes through a word
    (a run of non-space characters: `TOKEN=abc...`, `hf_...`, a URL with userinfo) the whole word goes, and so does
    any of this process's secret values (which may hold spaces) that the cut goes through. Redaction recognises a
    secret by its start (`TOKEN=`, `hf_`, `Bearer`) and its length, so a prefix left by a cut would pass it."""
    limit = max(0, limit)
    if len(value) <= limit:
        return value
    head = value[:limit]
    if limit and not value[limit].isspace():
        # Anchored on the reversed text: linear. A word longer than WORD_MAX loses its last WORD_MAX characters:
        # every pattern of redaction sees at most 4096 characters of a value, so what is before them was judged whole.
        m = _TRAILING_WORD.match(head[::-1][:WORD_MAX + 1])
        head = head[:limit - min(m.end() if m else 0, WORD_MAX)]
    for secret in _spaced_secrets():
        start = value.rfind(secret, max(0, limit - len(secret) + 1), limit + len(secret) - 1)
        if 0 <= start < len(head) < start + len(secret):
            head = head[:start]
    return head


_SPACED: list = [-1.0, []]  # (when read, the values): read again after a second at most, not at every cut


def _spaced_secrets() -> list[str]:
    """This process's secret values that hold a space (the word rule of `cut` covers the others), longest first."""
    import time

    now = time.monotonic()
    if now - _SPACED[0] > 1.0:
        _SPACED[:] = [now, [v for v in Redactor().secret_values if any(c.isspace() for c in v)][:64]]
    return _SPACED[1]


def cap(value: str, limit: int = MAX_TEXT) -> str:
    """At most `limit` characters (cut as `cut` does, never through a word), with a visible marker saying how much
    was cut."""
    if len(value) <= limit:
        return value
    head = cut(value, limit)
    return head + TRUNCATED.format(n=len(value) - len(head))


def shorten(value: str, limit: int, marker: str = "…") -> str:
    """`value` in at most `limit` characters and `marker` when it had to be cut (as `cut` does)."""
    if len(value) <= limit:
        return value
    return cut(value, max(0, limit - len(marker))).rstrip() + marker


def cut_tail(value: str, limit: int) -> str:
    """The last `limit` characters of `value` at most (a traceback's end), never starting inside a word: a cut
    through a secret's start leaves its rest, which redaction (recognising a secret by its start) would not see."""
    if len(value) <= limit:
        return value
    tail = value[len(value) - max(0, limit):]
    if tail and not value[len(value) - len(tail) - 1].isspace():
        m = re.match(r"\S*", tail)
        tail = tail[m.end() if m else 0:]
    for secret in _spaced_secrets():  # a secret value with spaces that the cut goes through goes too
        start = value.find(secret, max(0, len(value) - len(tail) - len(secret) + 1))
        if 0 <= start < len(value) - len(tail) < start + len(secret):
            tail = tail[start + len(secret) - (len(value) - len(tail)):]
    return tail.lstrip()


def decode(raw: bytes, limit: int = MAX_TEXT) -> str:
    """Bytes from a child process or a file: undecodable bytes become \\xNN (never U+FFFD)."""
    return cap(raw.decode("utf-8", "backslashreplace"), limit)


def read_tail(path: str, limit: int) -> str:
    """The last `limit` bytes of a log, as text. When that cuts into a line, the rest of the line is dropped too: it
    could be the end of a secret whose start, the part redaction recognises (`TOKEN=`, `Bearer`), was cut off."""
    from .safeio import read_tail as tail

    raw, size = tail(path, limit)  # a regular file only, never blocking (a FIFO put there reads as nothing)
    if size <= limit:
        return decode(raw)
    return TAIL_CUT + decode(raw[raw.find(b"\n") + 1:] if b"\n" in raw else b"")


def sanitize(obj: Any, limit: int = MAX_TEXT, max_nodes: int = 200_000) -> Any:
    """A JSON-like tree from outside the doctor, made safe: valid capped text, finite numbers, no cycles, bounded
    depth and size. Objects of other types become their text (or a placeholder when even that fails)."""
    budget = [max_nodes]

    def walk(o: Any, ancestors: tuple) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            return "…[more data truncated by dsv4-doctor]"
        if isinstance(o, str):
            return valid_text(cap(o, limit))
        if isinstance(o, bool) or o is None or isinstance(o, int):
            return o if not isinstance(o, int) or isinstance(o, bool) or abs(o) < 2 ** 63 else str(o)
        if isinstance(o, float):
            return o if math.isfinite(o) else str(o)
        if isinstance(o, (dict, list, tuple)):
            if id(o) in ancestors:
                return "…[cycle]"
            if len(ancestors) > 40:
                return "…[nested too deep]"
            inner = ancestors + (id(o),)
            if isinstance(o, dict):
                return {valid_text(cap(_text(k), 256)): walk(v, inner) for k, v in list(o.items())}
            return [walk(v, inner) for v in list(o)]
        return valid_text(cap(_text(o), limit))

    return walk(obj, ())


def _text(o: Any) -> str:
    try:
        return str(o)
    except Exception:  # an object whose __str__ raises (not BaseException: a stop signal must pass)
        return f"<unprintable {type(o).__name__}>"


def _mask_pem(value: str) -> str:
    out, pos = [], 0
    while True:
        begin = _PEM_BEGIN.search(value, pos)
        if begin is None:
            out.append(value[pos:])
            return "".join(out)
        out.append(value[pos:begin.start()])
        out.append(MASK)
        end = _PEM_END.search(value, begin.end())
        if end is None:
            return "".join(out)  # no end marker: everything after BEGIN is key material
        pos = end.end()


def _env_prefix(env: Any) -> str | None:
    """A command's environment as the shell prefix it prints with; None when it is not one the doctor builds."""
    if not env:
        return ""
    if not isinstance(env, dict):
        return None
    try:
        return Command(("true",), tuple(env.items())).env_prefix()
    except ValueError:
        return None


def _env_words(env: Any) -> list[str]:
    """A command's environment as `NAME=value` words, for the secret test of the line it is printed on."""
    return [f"{k}={v}" for k, v in env.items()] if isinstance(env, dict) else []


def _prose(sep: str, value: re.Match) -> bool:
    """`NAME: word more words`: a message about a variable ("…SECRET_FILE: the file is empty"), not its value: a
    colon (no `=`), then an unquoted short lower-case word followed by more words on the line."""
    word, after = value.group("value"), value.string[value.end():value.end() + 2]
    return "=" not in sep and len(word) <= 16 and word.isalpha() and word.islower() and \
        len(after) == 2 and after[0] == " " and after[1].isalpha()


def _mask_assignments(text: str) -> str:
    """Every `NAME=value` / `NAME: value` whose name looks secret, with its value masked."""
    out, pos, done = [], 0, 0
    while (m := _NAME_SEP.search(text, pos)) is not None:
        pos = m.end()
        if not looks_secret(m.group("name")):
            continue
        value = _VALUE.match(text, pos)
        word = value.group("value").strip("\"'") if value is not None else ""
        if value is None or word == MASK or _prose(m.group("sep"), value) or word.upper() in PLACEHOLDERS or \
                not any(c.isalnum() for c in word):  # `key=...`, `KEY=VALUE`: a placeholder holds no secret
            continue
        out += [text[done:pos], MASK]
        pos = done = value.end()
    return "".join(out) + text[done:] if out else text


class Redactor:
    def __init__(self, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        values = set()
        for k, v in environ.items():
            if looks_secret(k) and len(v) >= MIN_SECRET_VALUE and v.lower() not in COMMON_VALUES:
                values.add(valid_text(v))
                # As an error message may quote it: repr() and JSON escape quotes and backslashes (otherwise:
                # `pa'ss\word55` appeared as `pa\'ss\\word55` and was not masked).
                for quoted in (repr(v)[1:-1], json.dumps(v)[1:-1]):
                    if quoted != v:
                        values.add(valid_text(quoted))
        # Longest first, so a value that contains another is masked whole.
        self.secret_values = sorted(values, key=len, reverse=True)
        self.count = 0

    def literal(self, value: str) -> str:
        """This process's secret values replaced wherever they appear (str.replace: linear, any length)."""
        for secret in self.secret_values:
            if secret in value:
                self.count += value.count(secret)
                value = value.replace(secret, MASK)
        return value

    def text(self, value: str) -> str:
        value = self.literal(value)
        original = value
        if "PRIVATE KEY" in value:
            value = _mask_pem(value)

        def flag(m: re.Match) -> str:
            if looks_secret(m.group("flag").lstrip("-")):
                return m.group("flag") + m.group("sep") + MASK
            return m.group(0)

        value = _mask_assignments(value)
        value = _FLAG.sub(flag, value)
        value = _BEARER.sub(lambda m: f"{m.group('scheme')} {MASK}", value)
        value = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", value)
        value = _TOKEN_SHAPES.sub(MASK, value)
        if value != original:
            self.count += 1
        return value

    def command(self, argv: Any) -> str | None:
        """A command as it may be printed: its words, quoted (`shlex.join`); None when redaction would change a word
        or the line, or a word already holds a mask (it holds a secret). Redacting the quoted line instead
        would rewrite text across the quotes and unbalance them, which made a hostile argv run on a pasted shell."""
        if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(w, str) for w in argv):
            return None
        words = [valid_text(cap(w)) for w in argv]
        if any(MASK in w for w in words):  # withheld by an earlier pass, which counted it: withheld, not recounted
            return None
        line = shlex.join(words)
        before = self.count
        # The whole line is tried too, for what spans words (`--token VALUE`); it is never what gets printed.
        if words != list(argv) or any(self.text(w) != w for w in words) or self.text(line) != line:
            self.count = before + 1
            return None
        return clean_text(line)

    def command_line(self, argv: Any) -> str:
        """`command`, or the WITHHELD comment."""
        line = self.command(argv)
        return WITHHELD if line is None else line

    def __call__(self, obj: Any, key: str | None = None, limit: int = MAX_TEXT) -> Any:
        """Redact and clean a JSON-like tree; non-finite floats become strings (JSON has no NaN).

        A fix (a dict with `argv` and `commands`) has its printed `commands` built again from its argv (`command`),
        never redacted as whole strings; a command that is withheld has its argv withheld too."""
        if isinstance(obj, dict):
            if isinstance(obj.get("argv"), list) and isinstance(obj.get("commands"), list):
                raw_env = obj.get("env")
                envs: list = raw_env if isinstance(raw_env, list) else []
                # A command's environment is printed with it, so a secret there withholds the command too.
                lines = [self.command([*_env_words(envs[i] if i < len(envs) else None), *a])
                         and self.command(a) if isinstance(a, list) else None for i, a in enumerate(obj["argv"])]
                prefixes = [_env_prefix(envs[i] if i < len(envs) else None) for i in range(len(lines))]
                lines = [None if line is None or prefix is None else prefix + line
                         for line, prefix in zip(lines, prefixes, strict=True)]
                shown = {"commands": [WITHHELD if line is None else line for line in lines],
                         # a withheld command's argv is withheld too (`--token VALUE` is two harmless-looking words)
                         "argv": [[MASK] if line is None else self(a, "argv", limit)
                                  for a, line in zip(obj["argv"], lines, strict=True)]}
                ident = obj.get("id")
                if isinstance(ident, str):  # a fix's default id is its commands, joined: withheld ones leave it
                    for a, line in zip(obj["argv"], lines, strict=True):
                        if line is None and isinstance(a, list) and a and all(isinstance(w, str) for w in a):
                            ident = ident.replace(shlex.join(a), "(withheld)")
                    shown["id"] = self(ident, "id", limit)
            else:
                shown = {}
            return {clean_text(self.text(cap(self.literal(valid_text(str(k))), 256))):
                    shown[k] if k in shown else self(v, str(k), limit) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self(v, key, limit) for v in obj]
        if isinstance(obj, float) and not math.isfinite(obj):
            return str(obj)
        if isinstance(obj, (bool, int, float)) or obj is None:
            return obj
        if not isinstance(obj, str):
            obj = str(obj)  # a plugin's Path, Version, ...: shown as text rather than breaking the report
        if key is not None and looks_secret(key) and obj and obj != MASK:
            self.count += 1
            return MASK
        return clean_text(self.redact_then_cap(obj, limit))

    def redact_then_cap(self, value: str, limit: int = MAX_TEXT) -> str:
        """`value` redacted, then capped at `limit` (a cut never goes through a word, `cut`), so that no cut can
        leave part of a secret that redaction, seeing only that part, would not recognise. Text over 4x the limit is
        cut (the same way) before it is redacted, so that redaction stays bounded."""
        # Terminal escapes go first: one inside a secret (`hf_\x1b[0mABC…`) would hide it from the patterns and be
        # removed by the cleaning after them.
        value = self.literal(ANSI.sub("", valid_text(value)))
        total = len(value)
        if total > 4 * limit:
            value = cut(value, 4 * limit)
        value = self.text(value)
        if len(value) <= limit and total <= 4 * limit:
            return value
        head = cut(value, limit)
        return head + TRUNCATED.format(n=max(1, total - len(head)))
