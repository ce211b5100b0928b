"""A verl command's settings as Hydra and OmegaConf give them to the job: composed in the target interpreter
(probes/dsv4probe_hydra.py) with the installed verl's own config tree, where the target has Hydra and verl.

verl is located by the static probe (the copy the job will import); its entry module's `@hydra.main` names the
config. Hydra's and OmegaConf's own errors become job.config's failure; a probe that times out or crashes leaves
the settings not known (the CP rules run as for CP > 1). Where the target cannot compose (no Hydra, no verl, an
overrides-only command, `--static-only`), the doctor's own reader's settings stay, and the job says so.
"""

from __future__ import annotations

import ast
import os
from dataclasses import replace
from typing import Any

from ..model.facts import StaticFacts
from .bounds import digits_int, written
from .keys import CONFIG_FIELDS, ROLE_HEADS, VERL_COMMON, VERL_ENGINE, VERL_ROLES
from .command import world_from_launcher
from .model import Job, Setting, Unexpanded
from .profile import composable, profile_for
from ..model.core import Profile, UsageError
from ..engine.probes import Probe
from ..hostio.safeio import ReadRefused, read_file

PROBE_SCRIPT = "dsv4probe_hydra.py"
NAMED = {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp"}


def selected_paths(job: Job) -> dict[str, tuple[str, str]]:
    """Every config path the job checks read -> (role or "" for common, the doctor's setting name)."""
    out: dict[str, tuple[str, str]] = {}
    roles = ["engine"] if job.trainer == "sft" else list(VERL_ROLES)
    for role in roles:
        head = ROLE_HEADS[role]
        out.update({head + key: (role, name) for key, name in VERL_ENGINE.items()})
        out.update({f"{head}override_transformer_config.{field}": (role, NAMED.get(field, field))
                    for field in CONFIG_FIELDS})
    if job.trainer != "sft":
        out.update({key: ("", name) for key, name in VERL_COMMON.items()})
    elif not world_from_launcher(job):  # the Ray SFT trainer's pool: trainer.nnodes x trainer.n_gpus_per_node
        out.update({"trainer.nnodes": ("", "nnodes"), "trainer.n_gpus_per_node": ("", "gpus_per_node")})
    return out


def _hydra_options(job: Job) -> dict[str, str | None]:
    """--config-path / --config-name (and -cp / -cn) as the command gives them."""
    found: dict[str, str | None] = {"config_path": None, "config_name": None}
    words = job.overrides
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        name = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name",
                "-cn": "config_name"}.get(flag)
        if name is None:
            continue
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        found[name] = value.strip("'\"") or None
    return found


def _config_dir(job: Job) -> str | None:
    """--config-dir / -cd as the command gives it (the last one wins, as argparse takes it), or None."""
    found = None
    words = job.overrides
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag in ("--config-dir", "-cd"):
            found = (value if eq else (words[i + 1] if i + 1 < len(words) else "")).strip("'\"") or None
    return found


def _overrides(job: Job) -> list[str]:
    """The Hydra overrides among the words after the entry, exactly as given (Hydra's own flags left out)."""
    out, skip = [], False
    for word in job.overrides:
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            skip = "=" not in word and word in ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
            continue
        out.append(word)
    return out


def with_reason(job: Job, read_by: str) -> Job:
    return replace(job, read_by=read_by)


def compose(session: Any, profile: Profile, preflight: bool) -> Profile:
    """The profile with the job's settings composed in the target, or the reader's with why not."""
    job = profile.job
    if job is None or job.kind != "verl":
        return profile
    pending = job.decisions.cp_pending if job.decisions is not None else None
    why_not = None
    if not composable(job):
        why_not = ("the command holds unexpanded shell words" if job.hidden or job.hidden_launcher
                   else "no verl entry module to compose with (overrides only)")
    elif profile.static_only:
        why_not = "--static-only: not composed"
    answer: dict = {}
    if why_not is None:
        answer, why_not = _run(session, job, preflight)
    elif composable(job):  # --static-only: only files are read, so the config is judged as without Hydra
        answer = _located(session)[0]
    if why_not is not None:
        if pending:
            raise UsageError(pending)
        read_by = f"read by the doctor ({why_not})"
        errors: list[str] = []
        against = None
        if answer.get("verl_dir") and (why_not.startswith("Hydra") or profile.static_only):
            errors, against = _judged_without_hydra(job, answer)
        return replace(profile, job=replace(job, read_by=read_by, config_errors=job.config_errors + errors,
                                            checked_against=against))
    return _apply(profile, job, answer)


MAX_CONFIG_BYTES = 4 * 1024 * 1024
ENTRY_BYTES = 2_000_000  # an entry module, as the composition probe reads it


def _judged_without_hydra(job: Job, found: dict) -> tuple[list[str], str | None]:
    """verl's files are readable, Hydra is not at work (not importable, or --static-only): the overrides against
    verl's config as Hydra would compose it, for every verl trainer: its generated file where verl ships one (PPO),
    else its config composed by structure (the SFT trainer's). None: the command's config is not one the reader
    follows (a config file of the user's, a config with nested defaults)."""
    from .generated import composed_keys, generated_file, judge, judge_keys

    options = _hydra_options(job)
    if options["config_path"] not in (None, "config"):
        return [], None
    folder = os.path.join(str(found["verl_dir"]), "trainer", "config")

    def read(relpath: str) -> str | None:
        try:  # hostile input: bounded, never blocking (a FIFO is refused), decoded leniently
            return read_file(os.path.join(folder, relpath), MAX_CONFIG_BYTES).decode("utf-8", "replace")
        except ReadRefused:
            return None

    config = options["config_name"] or _entry_config_name(found, job)
    name = generated_file(config, _overrides(job)) if config in (None, "ppo_trainer", "ppo_megatron_trainer") else None
    if name is not None:
        text = read(name)
        if text is None:
            return [], None
        where = f"verl {found.get('verl')}'s {name}"
        return judge(text, _overrides(job), f"read by the doctor in {where}"), where
    composed = composed_keys(config, _overrides(job), read) if config else None
    if composed is None:
        return [], None
    where = f"verl {found.get('verl')}'s {config} (composed by structure)"
    return judge_keys(*composed, _overrides(job), f"read by the doctor in {where}"), where


def _entry_config_name(found: dict, job: Job) -> str | None:
    """The config name of the entry module's `@hydra.main(config_name=...)`, read with ast (never imported)."""
    from ..hostio.safeio import parse_python

    path = os.path.join(str(found["verl_dir"]), *(job.entry or "").split(".")[1:]) + ".py"
    try:
        tree = parse_python(read_file(path, ENTRY_BYTES), path)
    except ReadRefused:
        return None
    names = [k.value.value for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords
             if k.arg == "config_name" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)]
    return names[0] if len(names) == 1 else None


def _located(session: Any) -> tuple[dict, str | None]:
    """The target's verl as the static probe found it ({"verl_dir", "verl"}), or ({}, why not)."""
    static = session.pool.result(session.static_probe, session.timeout + 1) if session.static_probe else None
    facts = StaticFacts.of(static)
    verl = facts.module("verl")
    locations = verl.get("locations") or []
    if not verl.get("found") or not locations:
        return {}, "verl is not in the target"
    return {"verl_dir": locations[0], "verl": facts.version("verl") or "(no metadata)"}, None


def _run(session: Any, job: Job, preflight: bool) -> tuple[dict, str | None]:
    located, missing = _located(session)
    if missing:
        return located, missing
    parts = (job.entry or "").split(".")[1:]
    entry_file = os.path.join(located["verl_dir"], *parts) + ".py"
    if not os.path.isfile(entry_file):
        return located, f"the entry module {job.entry} is not in the target's verl"
    # The overrides and the command's `env K=V` values may hold secrets: they travel in the probe's request, a file
    # only the doctor's user reads (probes.run_probe), never on a command line.
    words = {"overrides": _overrides(job), "argv": list(job.overrides), "env_set": job.env, "env_unset": job.unset}
    options = _hydra_options(job)
    extra = _config_dir(job)
    if extra:  # Hydra's --config-dir: an absolute path, relative ones from the working directory
        options = dict(options, extra_config_dir=os.path.abspath(extra))
    request = {"entry_file": entry_file, **options, "words": words,
               "select": sorted(selected_paths(job)), "missing_env": "error" if preflight else "not known",
               "default_groups": ["engine=megatron" if job.trainer == "sft" else "model_engine=megatron"]}
    probe = Probe.python("hydra-compose", PROBE_SCRIPT, request)
    session.pool.submit(probe)
    result = session.pool.result(probe, session.pool.timeout_for(probe) + 1)
    if not result.ok or not isinstance(result.data, dict):
        why = result.error or ("timed out" if result.timed_out else "no answer")
        return {"failed": f"the composition in the target failed ({why})"}, None
    data = result.data
    failure = data.get("import_error")
    if isinstance(failure, dict):
        missing = failure.get("missing_module")
        if missing in ("hydra", "omegaconf"):
            return located, "Hydra not in the target"
        return located, (f"Hydra does not import in the target: {str(failure.get('type'))[:60]}: "
                    f"{str(failure.get('message'))[:200]}")
    if data.get("hydra") is None and data.get("error") is None:
        return located, "Hydra not in the target"
    error = data.get("error")
    if isinstance(error, dict) and error.get("kind") == "entry":
        return located, str(error.get("message"))[:300]
    return dict(data, **located), None


def _not_known(job: Job, why: str) -> Job:
    """Every setting the checks read is not known (the composition failed or Hydra refuses the command)."""
    marker = Setting(Unexpanded("(not known)"), "(not known)", why, source="hidden")
    roles: dict[str, dict[str, Setting]] = {}
    for role, name in selected_paths(job).values():
        target = roles.setdefault(role, {})
        if role != "critic":
            target[name] = marker
    common = roles.pop("", {})
    return replace(job, roles={r: s for r, s in roles.items() if s}, common=common, config_file=[], unknown_why=why)


def scrubbed(job: Job, message: str) -> str:
    """Hydra's message without the values of the overrides no check reads: it quotes the override it refuses
    (`+trainer.logger.key=VALUE`), and such a value may be a secret."""
    from .shape import HIDDEN, harmless_keys

    for word in _overrides(job):
        key, eq, value = word.lstrip("+~").partition("=")
        if eq and value and key not in harmless_keys():  # Hydra quotes it as `key=value`
            message = message.replace(f"{key}={value}", f"{key}={HIDDEN}")
    return message


def _raw_of(job: Job, path: str, value: Any) -> str:
    """How the job writes a setting: the override's text, else the composed value (a list or a dict in the config's
    flow style, `[2, 2]`, never `null`)."""
    for word in reversed(_overrides(job)):
        key, eq, text = word.lstrip("+~").partition("=")
        if eq and key == path:
            return text
    return "null" if value is None else written(value) if isinstance(value, (list, dict)) else str(value)


def _composed_value(got: dict) -> Any:
    """A setting's value as the probe gives it: an integer past 2^63 travels as its digits (the answer's reader
    keeps JSON integers to 64 bits) and is that integer again here; an infinity or a NaN travels as text."""
    value, kind = got.get("value"), got.get("type")
    if kind == "int" and isinstance(value, str):
        number = digits_int(value)
        return number if number is not None else Unexpanded(value[:80])
    if kind == "float" and value in ("inf", "-inf", "nan"):  # JSON has no infinity: the answer's reader wrote it so
        return float(str(value))
    return value


def _apply(profile: Profile, job: Job, answer: dict) -> Profile:
    options = job.decisions.options if job.decisions is not None else (None, None)
    base = replace(profile, job=None)
    if answer.get("failed"):
        failed = _not_known(job, str(answer["failed"]))
        failed.read_by = f"not known: {answer['failed']}"
        return profile_for(base, failed, *options)
    versions = {"hydra": str(answer.get("hydra")), "omegaconf": str(answer.get("omegaconf")),
                "verl": str(answer.get("verl")), "config_dir": str(answer.get("config_dir")),
                "config_name": str(answer.get("config_name"))}
    read_by = (f"composed with Hydra {versions['hydra']} and verl {versions['verl']}'s config "
               f"({versions['config_name']})")
    error = answer.get("error")
    if isinstance(error, dict):
        refused = _not_known(job, "Hydra refuses the command (see job.config)")
        refused.read_by, refused.composed = read_by, versions
        said = (f"Hydra's argument parser refuses the command ({error.get('message')}): the entry's @hydra.main "
                "stops there, before composing" if error.get("kind") == "arguments"
                else f"Hydra: {error.get('type')}: {error.get('message')}")
        refused.config_errors = [scrubbed(job, said)]
        return profile_for(base, refused, *options)
    roles: dict[str, dict[str, Setting]] = {}
    common: dict[str, Setting] = {}
    errors: list[str] = []
    given = answer.get("settings")
    settings: dict = given if isinstance(given, dict) else {}
    for path, (role, name) in selected_paths(job).items():
        got = settings.get(path)
        if not isinstance(got, dict):
            continue
        target = roles.setdefault(role, {}) if role else common
        if "value" in got:
            value = _composed_value(got)
            if isinstance(value, Unexpanded):  # more digits than any integer is read: out of range
                errors.append(f"{path} = {value} is out of range")
                target[name] = Setting(value, str(value), "out of range: not known", source=str(got.get("source")))
                continue
            target[name] = Setting(value, _raw_of(job, path, value), source=str(got.get("source")))
        else:
            message = scrubbed(job, str(got.get("error") or got.get("not_known"))[:500])
            if "error" in got:
                errors.append(f"{path}: {message}")
            target[name] = Setting(Unexpanded("(not known)"), _raw_of(job, path, None), message, source="hidden")
    critic = roles.get("critic", {})
    if not any(s.source == "override" for s in critic.values()):
        roles.pop("critic", None)  # verl's critic runs only when the job enables it: judged when the command sets it
    if world_from_launcher(job):  # its world size is torchrun's, read from the command (not in its config)
        common.update({k: v for k, v in job.common.items() if k in ("nnodes", "gpus_per_node")})
    composed = replace(job, roles=roles, common=common, config_file=[], read_by=read_by, composed=versions,
                       config_errors=errors)
    return profile_for(base, composed, *options)
