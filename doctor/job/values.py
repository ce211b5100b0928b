"""Values as Hydra and argparse read them, and the OmegaConf interpolations verl resolves."""

from __future__ import annotations

import re
from typing import Any

from .model import Setting, is_interpolation


def parse_value(raw: str, hydra: bool = True) -> Any:
    """A Hydra value (null, booleans, numbers, else the text, one level of matching quotes removed), or an argparse
    one (`hydra=False`: numbers, else the text; argparse has no null or booleans, so `none` is the text "none", as it
    is in Hydra's grammar too)."""
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    low = text.lower()
    if hydra and low == "null":
        return None
    if hydra and low == "true":
        return True
    if hydra and low == "false":
        return False
    if re.fullmatch(r"[+-]?\d+", text):
        # Longer text stays text (int() refuses it under int_max_str_digits): bounds.py calls it out of range.
        return int(text) if len(text) <= 4000 else text
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return text



# A whole word the shell did not expand: `$X`, `${X}`, `${X[@]}` (verl's script style, `"${ACTOR[@]}"` once the
# quotes are gone), `${X:-default}`, `$@`, `$(...)`, a backquoted command. Its value may be any number of words.
HIDDEN_WORD = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[@*]|\{[A-Za-z_][A-Za-z0-9_]*(?:\[[@*]\]|[:#%/^,-][^{}]*)?\}|"
                         r"\{[@*]\}|\(.*\))|`.*`", re.S)


def is_hidden_word(word: str) -> bool:
    return HIDDEN_WORD.fullmatch(word) is not None


def hidden_shown(word: str) -> str:
    """A hidden word as the report names it: the variable's own text when it is short and plain, else its start."""
    return word if len(word) <= 64 and re.fullmatch(r"[$@*{}\[\]A-Za-z0-9_:#%/^,.-]+", word) else "$(...)"


NAME_WORD = re.compile(r"[+~-]*[A-Za-z_][A-Za-z0-9_.@/\-]*")


def names_only(args: list[str]) -> list[str]:
    """The flag and key names among a command's words the doctor does not read. A word that is no name (a `sh -c`
    script, a quoted sentence) is left out whole: what precedes its first `=` may hold a password."""
    names = (a.split("=", 1)[0] for a in args if a.startswith("-") or "=" in a)
    return [n[:200] for n in names if NAME_WORD.fullmatch(n)][:200]



def flat_dict(raw: str) -> dict[str, str] | None:
    """`{a:1,b:'x y'}` (a Hydra dict value, one level) -> {"a": "1", "b": "'x y'"}; None for anything else."""
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    body, items, current, quote = text[1:-1], [], "", ""
    for ch in body:
        if quote:
            current += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote, current = ch, current + ch
        elif ch in "{}[]":
            return None  # nested: not read
        elif ch == ",":
            items.append(current)
            current = ""
        else:
            current += ch
    if quote:
        return None
    if current.strip():
        items.append(current)
    out = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon or not re.fullmatch(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*", key):
            return None
        out[key.strip()] = value.strip()
    return out


INTERPOLATION = re.compile(r"\$\{(?:(?P<decode>oc\.decode:\$\{)?oc\.env:(?P<env>[A-Za-z_][A-Za-z0-9_]*)"
                           r"(?:,(?P<default>[^{}$]*))?(?(decode)\})|(?P<key>[A-Za-z_][A-Za-z0-9_.]*))\}")
OC_DECODE_ADVICE = "write it as '${oc.decode:${oc.env:NAME}}' (quoted: Hydra's override grammar needs the quotes)"


def resolve(setting: Setting, overrides: dict[str, str], env: dict[str, str], depth: int = 0) -> Setting:
    """A value that is exactly one OmegaConf interpolation, resolved as verl's config would resolve it; else as it
    was (and one that cannot be resolved stays the text, which the checks report as not known). OmegaConf's
    `oc.env` gives text (`'2'`, not 2), with or without a default; `oc.decode` of it parses the text as a value."""
    m = INTERPOLATION.fullmatch(str(setting.value).strip()) if isinstance(setting.value, str) else None
    if m is None or depth > 8:
        return setting
    if m.group("env"):
        name, decode = m.group("env"), m.group("decode") is not None
        if name in env:
            text: str | None = env[name]
            how = f"{name} from the job's environment"
        elif m.group("default") is not None:
            default = parse_value(m.group("default"))
            text = None if default is None else str(default)
            how = f"{name} unset: the default"
        else:
            return setting
        if decode:
            return Setting(None if text is None else parse_value(text), setting.raw, how + ", decoded",
                           setting.source)
        return Setting(text, setting.raw, how + " (text: oc.env gives a string)", setting.source)
    key = m.group("key")
    if key in overrides:
        inner = resolve(Setting(parse_value(overrides[key]), overrides[key]), overrides, env, depth + 1)
        if not is_interpolation(inner.value):
            return Setting(inner.value, setting.raw, f"from {key}" + (f" ({inner.resolved})" if inner.resolved else ""),
                           setting.source)
    return setting
