"""Where the target has verl's config files but no Hydra: the overrides judged against verl's generated config.

verl ships its PPO trainer's composed config flattened into `verl/trainer/config/_generated_ppo_<engine>_trainer.yaml`
(`scripts/print_cfg.py --cfg job model_engine=<engine>`). Its keys are read by structure (indentation, mapping keys;
no YAML library: the CLI has none), bounded. Hydra composes in struct mode, so `+key=...` on a key the config has
stops the job ("Could not append to config. An item is already at ..."), and so does `key=...` on one it lacks
("Could not override ..."). Which generated file applies follows the command's config name and its `model_engine`
choice; any other config (the SFT trainer's, a config file of the user's) is not judged here.
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
    keys, mappings = config_keys(text)
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
