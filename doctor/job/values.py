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
        return int(text)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return text



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


INTERPOLATION = re.compile(r"\$\{(?:oc\.env:(?P<env>[A-Za-z_][A-Za-z0-9_]*)(?:,(?P<default>[^{}$]*))?|"
                            r"(?P<key>[A-Za-z_][A-Za-z0-9_.]*))\}")


def resolve(setting: Setting, overrides: dict[str, str], env: dict[str, str], depth: int = 0) -> Setting:
    """A value that is exactly one OmegaConf interpolation, resolved as verl's config would resolve it; else as it
    was (and one that cannot be resolved stays the text, which the checks report as not known)."""
    m = INTERPOLATION.fullmatch(str(setting.value).strip()) if isinstance(setting.value, str) else None
    if m is None or depth > 8:
        return setting
    if m.group("env"):
        name = m.group("env")
        if name in env:
            return Setting(parse_value(env[name]), setting.raw, f"{name} from the job's environment")
        if m.group("default") is not None:
            return Setting(parse_value(m.group("default")), setting.raw, f"{name} unset: the default")
        return setting
    key = m.group("key")
    if key in overrides:
        inner = resolve(Setting(parse_value(overrides[key]), overrides[key]), overrides, env, depth + 1)
        if not is_interpolation(inner.value):
            return Setting(inner.value, setting.raw, f"from {key}" + (f" ({inner.resolved})" if inner.resolved else ""))
    return setting

