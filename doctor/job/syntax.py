"""The two syntaxes a job's settings are written in: verl's Hydra overrides and Megatron-LM's flags."""

from __future__ import annotations

import os
import re

from ..model.core import UsageError
from .keys import (CONFIG_FIELDS, CONFIG_FILE_FLAGS, HYDRA_OVERRIDE, MEGATRON_FLAGS, ROLE_HEADS, VERL_COMMON,
                   VERL_ENGINE, VERL_ROLES, flag_name)
from .model import Job, Setting
from .values import flat_dict, hidden_shown, is_hidden_word, names_only, parse_value, resolve


def parse_hydra(args: list[str], job: Job) -> None:
    overrides: dict[str, str] = {}  # every key's text, for ${key} interpolations; never reported
    for arg in args:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if m is not None and not arg.startswith("-") and m.group("value") is not None:
            overrides[m.group("key")] = m.group("value")
            for name, value in (flat_dict(m.group("value")) or {}).items():
                overrides[f"{m.group('key')}.{name}"] = value
    env = dict(os.environ)
    for name in job.unset:
        env.pop(name, None)
    env.update(job.env)

    def put(target: dict, name: str, raw: str) -> None:
        target[name] = resolve(Setting(parse_value(raw), raw), overrides, env)

    for arg in args:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if is_hidden_word(arg):
            job.hidden.append(hidden_shown(arg))
            continue
        if m is None or arg.startswith("-"):
            if arg.startswith("-"):  # a flag's name; its value, if the next word is one, is never listed
                job.unknown += names_only([arg])
                if arg.split("=", 1)[0] in CONFIG_FILE_FLAGS["hydra"] and arg.split("=", 1)[0] not in job.config_file:
                    job.config_file.append(arg.split("=", 1)[0])
            continue
        prefix, key, raw = m.group("prefix") or "", m.group("key"), m.group("value")
        if raw is None and prefix != "~":
            # A bare word is no override: most likely a flag's value (`--hf-token hf_...`), so it is not listed
            # (otherwise: a token appeared in profile.job.unknown as a "key").
            continue
        if prefix == "~":  # deleting a key: the default applies, which is "not stated" (also when stated before)
            _delete(job, key)
            continue
        assert raw is not None
        if not raw.strip().startswith(("'", '"')) and re.search(r"\$\{[^{}]*\$\{", raw):
            # Hydra's override grammar cannot parse a nested interpolation unquoted (OverrideParseException).
            job.config_errors.append(f"Error parsing override '{key[:120]}=...': a nested interpolation must be "
                                     f"quoted in Hydra's override grammar: {key[:120]}='{raw[:80]}'")
        if key in VERL_COMMON:
            put(job.common, VERL_COMMON[key], raw)
            continue
        for role, head in _heads(job).items():
            if key == head[:-1] and flat_dict(raw) is not None:
                # `<role>.megatron={context_parallel_size:2,...}`: Hydra merges it into the node, field by field.
                for name, value in (flat_dict(raw) or {}).items():
                    _put_field(job, role, head, name, value, put)
                break
            nested = raw.strip().startswith("{") and flat_dict(raw) is None
            if nested and (key == head[:-1] or (key.startswith(head) and
                                                not key.startswith(head + "override_transformer_config."))):
                # A nested dict the reader does not take apart: what it sets is not known (never the default).
                job.hidden.append(f"{key[:120]}={{...}}")
                break
            if not key.startswith(head):
                continue
            _put_field(job, role, head, key[len(head):], raw, put)
            break
        else:
            job.unknown.append(key[:200])


def _heads(job: Job) -> dict[str, str]:
    """The roles whose keys the command may state: the SFT trainer's `engine.`, or the PPO roles'."""
    return {"engine": ROLE_HEADS["engine"]} if job.trainer == "sft" else \
        {role: ROLE_HEADS[role] for role in VERL_ROLES}


def _put_field(job: Job, role: str, head: str, name: str, raw: str, put) -> None:
    fields = {}
    if name in VERL_ENGINE:
        put(job.roles.setdefault(role, {}), VERL_ENGINE[name], raw)
    elif name.startswith("override_transformer_config."):
        fields = {name.split(".", 1)[1]: raw}
    elif name == "override_transformer_config" and flat_dict(raw) is not None:
        fields = flat_dict(raw) or {}  # `...override_transformer_config={a:1,b:x}`
    else:
        job.unknown.append(f"{head}{name}"[:200])
    for config, value in fields.items():
        if config in CONFIG_FIELDS:
            setting = {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp"}.get(config, config)
            put(job.roles.setdefault(role, {}), setting, value)
        else:
            job.unknown.append(f"{head}override_transformer_config.{config}"[:200])


def _delete(job: Job, key: str) -> None:
    """`~key`: Hydra applies the overrides in order, so one stated before the deletion is gone."""
    if key in VERL_COMMON:
        job.common.pop(VERL_COMMON[key], None)
    for role, head in _heads(job).items():
        if key.startswith(head):
            name = key[len(head):]
            config = name.split(".", 1)[1] if name.startswith("override_transformer_config.") else None
            setting = VERL_ENGINE.get(name) if config is None else \
                {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp"}.get(config, config)
            if setting is not None:
                job.roles.get(role, {}).pop(setting, None)


def parse_megatron(args: list[str], job: Job) -> None:
    settings = job.roles.setdefault("model", {})
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            if is_hidden_word(arg):  # `pretrain_gpt.py $MEGATRON_ARGS`: any flag may be in it
                job.hidden.append(hidden_shown(arg))
            i += 1
            continue
        name = flag_name(arg)
        has_eq = "=" in arg
        if name not in MEGATRON_FLAGS:
            job.unknown += names_only([arg])
            if f"--{name}" in CONFIG_FILE_FLAGS["megatron"] and f"--{name}" not in job.config_file:
                job.config_file.append(f"--{name}")
            # An unknown flag's value (if any) is skipped as well: it is not a flag.
            i += 1 if has_eq or i + 1 >= len(args) or args[i + 1].startswith("--") else 2
            continue
        setting, takes_value = MEGATRON_FLAGS[name]
        if takes_value:
            if has_eq:
                raw = arg.split("=", 1)[1]
                i += 1
            else:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    raise UsageError(f"{arg} needs a value in the training command")
                raw = args[i + 1]
                i += 2
            target = job.common if setting == "seq_length" else settings
            target[setting] = Setting(parse_value(raw, hydra=False), raw, source="flag")
        else:
            if has_eq:
                raise UsageError(f"{arg.split('=', 1)[0]} takes no value in Megatron-LM")
            value = name not in ("no-dsa-kernel-fusion", "no-rope-fusion")  # store_false flags: the fusion off
            settings[setting] = Setting(value, arg, source="flag")
            i += 1

