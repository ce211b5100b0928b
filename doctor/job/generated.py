"""Where the target has verl's config files but no Hydra: the overrides judged against verl's composed config.

verl ships its PPO trainer's composed config flattened into `verl/trainer/config/_generated_ppo_<engine>_trainer.yaml`
(`scripts/print_cfg.py --cfg job model_engine=<engine>`). Its keys are read by structure (indentation, mapping keys;
no YAML library: the CLI has none), bounded. Hydra composes in struct mode, so `+key=...` on a key the config has
stops the job ("Could not append to config. An item is already at ..."), and so does `key=...` on one it lacks
("Could not override ..."). Which generated file applies follows the command's config name and its `model_engine`
choice. A config verl ships no generated file for (the SFT trainer's `sft_trainer_engine`) is composed here by
structure as Hydra composes it: its defaults list (`group@package: option`, the command's `group=option` choices
first) puts each group file's keys under its package, and `_self_` the file's own; a group file with a defaults list of
its own, or a choice whose file is not there, leaves the config not judged. A config file of the user's
(`--config-path`) is not judged here.
"""

from __future__ import annotations

import re

from .keys import HYDRA_OVERRIDE

MAX_LINES = 20_000
_KEY_LINE = re.compile(r"(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*|'[^']*'|\"[^\"]*\"):(?:\s(?P<value>.*))?$")
ENGINES = {"megatron", "torchtitan", "veomni"}


def generated_file(config_name: str | None, overrides: list[str]) -> str | None:
    """The generated file that is this command's composed config, or None when there is none."""
    name = config_name or "ppo_trainer"
    name = name[:-5] if name.endswith(".yaml") else name
    engine = None
    for word in overrides:
        key, eq, value = word.partition("=")
        if eq and key == "model_engine":
            engine = value.strip("'\"")
    if name == "ppo_trainer":
        if engine in (None, "dp"):
            return "_generated_ppo_trainer.yaml"
        return f"_generated_ppo_{engine}_trainer.yaml" if engine in ENGINES else None
    if name == "ppo_megatron_trainer" and engine in (None, "megatron"):
        return "_generated_ppo_megatron_trainer.yaml"
    return None


def config_keys(text: str) -> tuple[set[str], set[str]]:
    """(every key path, the paths that are mappings) of a generated config, read by indentation. List items and
    what is under them are skipped (no override the doctor judges reaches into a list)."""
    keys: set[str] = set()
    mappings: set[str] = {""}
    stack: list[tuple[int, str]] = []  # (indent, path)
    item: int | None = None  # the indent of the list item whose lines come now
    for line in text.splitlines()[:MAX_LINES]:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if stripped == "-" or stripped.startswith("- "):
            item = indent
            continue
        if item is not None and indent > item:
            continue
        item = None
        m = _KEY_LINE.fullmatch(line.rstrip())
        if m is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = m.group("key").strip("'\"")
        path = f"{stack[-1][1]}.{key}" if stack else key
        keys.add(path)
        value = (m.group("value") or "").strip()
        if not value or value.startswith("#"):
            mappings.add(path)  # a nested mapping (or a list) follows
            stack.append((indent, path))
        elif value == "{}":
            mappings.add(path)
    return keys, mappings


def judge(text: str, overrides: list[str], where: str) -> list[str]:
    """Hydra's composition errors that the overrides would give against this generated config."""
    return judge_keys(*config_keys(text), overrides, where)

MAX_GROUP_FILES = 32
_DEFAULT_ENTRY = re.compile(
    r"\s*-\s*(?P<group>[A-Za-z0-9_/.]+)(?:@(?P<package>[A-Za-z0-9_.]+))?\s*:\s*(?P<option>\S+)\s*$")


def _defaults(text: str) -> list[tuple[str, str, str]] | None:
    """A config file's defaults list as (group, package, option) entries, `_self_` as ("_self_", "", ""); None
    where an entry is not one this reader follows (an `override`, an optional or a list option, a nested path)."""
    out: list[tuple[str, str, str]] = []
    lines = text.splitlines()[:MAX_LINES]
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "defaults:"), None)
    if start is None:
        return out
    for line in lines[start + 1:]:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line.startswith((" ", "-")):
            break  # the next top-level key
        if stripped == "- _self_":
            out.append(("_self_", "", ""))
            continue
        m = _DEFAULT_ENTRY.fullmatch(line)
        if m is None or m.group("group").startswith(("override", "optional")) or m.group("option").startswith("["):
            return None
        group = m.group("group")
        out.append((group, m.group("package") or group.replace("/", "."), m.group("option")))
    return out


def composed_keys(name: str, overrides: list[str], read) -> tuple[set[str], set[str]] | None:
    """(every key path, the mapping paths) of the config `name` as Hydra composes it from its defaults list and the
    command's group choices, or None where this reader cannot follow it. `read(relpath)`: a config file's text, or
    None when it is not there or not read."""
    text = read(f"{name}.yaml")
    entries = _defaults(text) if text is not None else None
    if entries is None:
        return None
    choices = {}
    for word in overrides:
        key, eq, value = word.partition("=")
        if eq and not key.startswith(("+", "~")) and "." not in key:
            choices[key] = value.strip("'\"")
    if "_self_" not in [group for group, _, _ in entries]:
        entries.append(("_self_", "", ""))  # Hydra 1.1+: the file's own keys come last when _self_ is not listed
    keys, mappings = set(), {""}
    for group, package, option in entries[:MAX_GROUP_FILES]:
        if group == "_self_":
            found = config_keys(_without_defaults(text))
            prefix = ""
        else:
            body = read(f"{group}/{choices.get(group, option)}.yaml")
            if body is None or _defaults(body):
                return None  # a choice that is not there (Hydra would refuse it), or nested defaults: not judged
            found, prefix = config_keys(body), package + "."
            keys.add(package)
            mappings.add(package)
        keys |= {prefix + k for k in found[0]}
        mappings |= {prefix + k for k in found[1] if k}
    return keys, mappings


def _without_defaults(text: str) -> str:
    lines, out, inside = text.splitlines()[:MAX_LINES], [], False
    for line in lines:
        if line.rstrip() == "defaults:":
            inside = True
            continue
        if inside and (not line.strip() or line.startswith((" ", "-", "#"))):
            continue
        inside = False
        out.append(line)
    return "\n".join(out)


def judge_keys(keys: set[str], mappings: set[str], overrides: list[str], where: str) -> list[str]:
    """Hydra's composition errors that the overrides would give against a config of these keys."""
    problems = []
    for word in overrides:
        m = HYDRA_OVERRIDE.fullmatch(word)
        if m is None or word.startswith("-") or m.group("value") is None:
            continue
        prefix, key = m.group("prefix") or "", m.group("key")
        if "@" in key or "/" in key or key.split(".", 1)[0] == "hydra":
            continue  # a config group or Hydra's own settings: not in the job's config
        if prefix == "+" and key in keys:
            problems.append(f"Could not append to config. An item is already at '{key}'. Either remove + prefix: "
                            f"'{key}=...' or add a second + to add or override '{key}': '++{key}=...' ({where})")
        elif prefix == "" and "." in key and key not in keys:
            parent = key.rsplit(".", 1)[0]
            while parent and parent not in keys:
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            if parent in mappings:  # under a leaf (a null value) Hydra's message differs: not judged
                problems.append(f"Could not override '{key}'. To append to your config use +{key}=... ({where})")
    return problems
