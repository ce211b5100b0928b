"""What a verl command asks of its Ray cluster, read as the job-commands reader reads it: the nodes and GPUs per node
(`trainer.*`, and the reward model's own pool), and the runtime_env the job's ray.init gets (env_vars, working_dir,
py_executable, py_modules, excludes; validated and bounded, never through a shell), with the fields the check's
tasks cannot take (pip, conda, a remote URI, ...): the nodes' environment rows are then not known."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..job.model import Job

MAX_NODES = 100_000  # doctor/job/bounds.py's range of trainer.nnodes
RUNTIME_ENV_KEY = "ray_kwargs.ray_init.runtime_env"


@dataclass
class Wanted:
    """The nodes the command asks for, read by the job-command reader: the trainer's pool and the reward model's
    own pool (verl 0.9.1: `reward.reward_model.enable_resource_pool=True` adds `[n_gpus_per_node] * nnodes`, the
    `reward_pool`, beside `trainer.n_gpus_per_node * trainer.nnodes`: verl/trainer/ppo/v1/trainer_base.py). None
    where the command does not state it (or it cannot be read); `notes`: what could not be read, and why."""

    nnodes: int | None = None
    per_node: int | None = None
    reward_nnodes: int | None = None
    reward_per_node: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> int | None:
        return None if self.nnodes is None else self.nnodes + (self.reward_nnodes or 0)

    @property
    def asks(self) -> str:
        text = f"trainer.nnodes={self.nnodes}"
        if self.reward_nnodes:
            text += f" + {REWARD_KEY}.nnodes={self.reward_nnodes} (the reward model's own pool) = {self.nodes}"
        return text

    @property
    def least_gpus(self) -> int | None:
        """The fewest GPUs a node needs for one of the pools (a node of the reward pool may have fewer)."""
        sizes = [n for n in (self.per_node, self.reward_per_node if self.reward_nnodes else None) if n]
        return min(sizes) if sizes else None


REWARD_KEY = "reward.reward_model"  # verl 0.9.1's keys (the legacy top-level `reward_model.*` are migrated only by
# the fully-async entry's migrate_legacy_reward_impl, so main_ppo never reads them)
REWARD_DEFAULTS = {"enable_resource_pool": False, "nnodes": 0, "n_gpus_per_node": 8}  # _generated_ppo_*trainer.yaml


def _count(name: str, value: Any, notes: list[str]) -> int | None:
    """A node count or GPUs per node within bounds.py's range; out of range (or not a whole number): None, said."""
    from ..job.bounds import RANGES

    low, high, what = RANGES["nnodes" if name.endswith("nnodes") else "gpus_per_node"]
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    if value == 0 and name.startswith(REWARD_KEY):
        return None  # said by the caller: verl's own refusal
    shown = str(value) if len(str(value)) <= 30 else "a value of more than 30 characters"
    notes.append(f"{name}={shown} is not compared: it must be {what}")
    return None


def read_command(command: Sequence[str] | None) -> Job | None:
    """The command as the job-command reader (doctor/job) reads it; None without one, or one it refuses."""
    if not command:
        return None
    from ..job.command import parse
    from ..model.core import UsageError

    try:
        return parse(list(command))
    except UsageError:
        return None


def wanted(command: Sequence[str] | None) -> Wanted:
    """What the command asks of the cluster (Wanted), read by the job-command reader (doctor/job)."""
    out = Wanted()
    job = read_command(command)
    if job is None:
        return out
    from ..job.model import Unexpanded

    def stated(name: str) -> Any:
        setting = job.common.get(name)
        value = getattr(setting, "value", None)
        if isinstance(value, Unexpanded):
            out.notes.append(f"trainer.{'nnodes' if name == 'nnodes' else 'n_gpus_per_node'} is not known "
                             f"({getattr(setting, 'why', '') or 'not read'})")
            return None
        return value

    out.nnodes = _count("trainer.nnodes", stated("nnodes"), out.notes)
    out.per_node = _count("trainer.n_gpus_per_node", stated("gpus_per_node"), out.notes)
    reward = _reward_settings(job)
    if reward is None:
        out.notes.append(f"the reward model's own pool ({REWARD_KEY}.*) is not known: the command holds words the "
                         "shell did not expand, or a config file")
        return out
    if reward.get("enable_resource_pool") is True:
        out.reward_nnodes = _count(f"{REWARD_KEY}.nnodes", reward.get("nnodes"), out.notes)
        out.reward_per_node = _count(f"{REWARD_KEY}.n_gpus_per_node", reward.get("n_gpus_per_node"), out.notes)
        if reward.get("nnodes") == 0:  # verl's default: verl refuses it ("must be greater than 0")
            out.notes.append(f"{REWARD_KEY}.enable_resource_pool=True leaves {REWARD_KEY}.nnodes at 0, which verl "
                             "refuses (it must be greater than 0)")
    elif reward.get("enable_resource_pool") not in (False, None):
        out.notes.append(f"{REWARD_KEY}.enable_resource_pool is not true or false: the reward pool is not counted")
    return out


def _reward_settings(job: Any) -> dict | None:
    """verl's `reward.reward_model.{enable_resource_pool,nnodes,n_gpus_per_node}` as the command leaves them
    (verl's defaults where it does not state them; Hydra: the last word wins, `~key` restores the default); None
    when they cannot be known (unexpanded shell words, a config file)."""
    from ..job.keys import HYDRA_OVERRIDE
    from ..job.values import flat_dict, parse_value

    if job.kind != "verl":
        return dict(REWARD_DEFAULTS)
    if job.hidden or job.config_file:
        return None
    out: dict[str, Any] = dict(REWARD_DEFAULTS)
    for arg in job.overrides:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if m is None or arg.startswith("-"):
            continue
        key, raw = m.group("key"), m.group("value")
        items: dict[str, str | None] = {}
        if key == REWARD_KEY and raw is not None:
            items = dict(flat_dict(raw) or {})
        elif key.startswith(REWARD_KEY + ".") and key[len(REWARD_KEY) + 1:] in REWARD_DEFAULTS:
            items = {key[len(REWARD_KEY) + 1:]: raw}
        for name, value in items.items():
            if name not in REWARD_DEFAULTS:
                continue
            out[name] = REWARD_DEFAULTS[name] if value is None or m.group("prefix") == "~" else parse_value(value)
    return out


# ------------------------------------------------------------------------------------------ the job's runtime_env

MAX_ENV_VARS = 256
MAX_VALUE_CHARS = 4096
MAX_LIST = 64  # py_modules and excludes entries
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
APPLIED_FIELDS = ("env_vars", "working_dir", "py_executable", "py_modules", "excludes")
# Ray's RuntimeEnvConfig (setup timeouts, eager install): how Ray sets the environment up, not what is in it.
HARMLESS_FIELDS = ("config",)


@dataclass
class JobRuntimeEnv:
    """The command's runtime_env as the check's tasks take it (`env`), what of it is not applied and why (`notes`:
    names only, values may hold secrets), and the fields not applied (`unapplied`: pip, conda, a remote working_dir,
    a field the doctor does not know, ...): the job's workers import what the check's tasks did not, so every node's
    rows that depend on its Python environment are not known."""

    env: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unapplied: list[str] = field(default_factory=list)

    def refuse(self, field_name: str, note: str) -> None:
        self.notes.append(note)
        name = field_name if FIELD_NAME.fullmatch(field_name) else "a field that is not a name"
        if name not in self.unapplied and len(self.unapplied) < 16:
            self.unapplied.append(name)


def job_runtime_env(command: Sequence[str] | None) -> tuple[dict, list[str]]:
    """(runtime_env, notes) of `read_runtime_env`."""
    got = read_runtime_env(command)
    return got.env, got.notes


def read_runtime_env(command: Sequence[str] | None) -> JobRuntimeEnv:
    """The runtime_env the command's `ray_kwargs.ray_init.runtime_env.*` overrides give verl's ray.init (Hydra:
    the last word wins), as far as the tasks can take it: `env_vars` (names as a shell would take them, text
    values, at most 256, each at most 4096 characters), `working_dir` (an existing local folder), `py_executable`
    (an existing executable file, never a command line: nothing goes through a shell), `py_modules` (local folders
    and .py files, in the command's order; Ray puts them before the job's own path on every worker) and `excludes`.
    Everything else (pip, conda, uv, container, image_uri, a remote URI, a wheel Ray would pip-install, a field the
    doctor does not know) and anything that fails these rules is not applied: named in the notes (names only:
    values may hold secrets) and in `unapplied`. A config file or words the shell did not expand may set any of it:
    then the runtime_env is not known (`unapplied`: runtime_env)."""
    out = JobRuntimeEnv()
    env = out.env
    job = read_command(command)
    if job is None:
        return out
    from ..job.keys import HYDRA_OVERRIDE
    from ..job.model import Setting
    from ..job.values import flat_dict, parse_value, resolve

    if job.kind != "verl":
        return out
    if job.config_file or job.hidden:
        where = (f"the config file the command names ({', '.join(job.config_file[:3])})" if job.config_file else
                 "words of the command the shell did not expand")
        out.refuse("runtime_env", f"{RUNTIME_ENV_KEY} is not known: {where} may set it")
    texts: dict[str, str] = {}
    for arg in job.overrides:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if m is not None and not arg.startswith("-") and m.group("value") is not None:
            texts[m.group("key")] = m.group("value")
    # The environment the command's launch chain gives the job (`env -i`, `env -u NAME`, `NAME=VALUE`, `export`).
    chain = job.chain
    environ = {} if chain is not None and chain.env_cleared else dict(os.environ)
    for name in job.unset:
        environ.pop(name, None)
    environ.update(job.env)
    head = RUNTIME_ENV_KEY + "."
    refused: dict[str, str] = {}  # field -> its note, for the last word of each field (Hydra: the last word wins)
    for arg in job.overrides:
        m = HYDRA_OVERRIDE.fullmatch(arg)
        if m is None or arg.startswith("-") or not (m.group("key") + ".").startswith(head):
            continue
        key, raw, prefix = m.group("key"), m.group("value"), m.group("prefix") or ""
        path = key[len(head):].split(".") if key != RUNTIME_ENV_KEY else []
        top = path[0] if path else "runtime_env"
        if prefix == "~":
            _drop(env, path)
            refused.pop(top if top != "env_vars" or len(path) == 1 else f"env_vars.{path[1]}", None)
            continue
        if raw is None:
            continue
        if not path:
            refused["runtime_env"] = (f"{RUNTIME_ENV_KEY}=... (a whole runtime_env in one word) is not applied: "
                                      "state its fields")
            continue
        if top in ("py_modules", "excludes") and len(path) == 1:
            entries, problem = _path_list(top, raw)
            if problem:  # an earlier word's entries stay applied; the field is not applied all the same
                refused[top] = problem
            else:
                refused.pop(top, None)
                env[top] = entries
            continue
        if top == "env_vars" and len(path) == 1 and flat_dict(raw) is not None:
            pairs = list((flat_dict(raw) or {}).items())
        elif top == "env_vars" and len(path) == 2:
            pairs = [(path[1], raw)]
        elif len(path) == 1 and top in ("working_dir", "py_executable"):
            pairs = [(top, raw)]
        elif top in HARMLESS_FIELDS:
            continue
        else:
            refused[top] = (f"{key[:200]} is not applied to the check's tasks (only {', '.join(APPLIED_FIELDS)} "
                            "are, from local paths)")
            continue
        for name, text in pairs:
            value = resolve(Setting(parse_value(text), text), texts, environ).value
            why = _invalid(top, name, value)
            slot = f"env_vars.{name}" if top == "env_vars" else top
            if why:
                refused[slot] = why
            elif top == "env_vars":
                if len(env.get("env_vars", {})) >= MAX_ENV_VARS and name not in env.get("env_vars", {}):
                    refused[slot] = (f"env_vars: more than {MAX_ENV_VARS} variables; {name} and later ones are "
                                     "not applied")
                    continue
                refused.pop(slot, None)
                env.setdefault("env_vars", {})[name] = _env_text(value)
            else:
                refused.pop(slot, None)
                env[name] = value
    for slot, note in refused.items():
        out.refuse(slot.split(".")[0], note)
    return out


def _path_list(field_name: str, raw: str) -> tuple[list[str], str]:
    """`py_modules=[a,'b']` / `excludes=[...]` (a Hydra list of text) as the tasks take it: py_modules' entries are
    local folders or .py files (absolute: Ray resolves them against the driver's folder, where the doctor runs), and
    excludes are Ray's gitignore-style patterns. ([], why not) for anything else: a remote URI, a wheel (Ray
    pip-installs it on the node), a path that is not there, a value that is not a list of text."""
    where = f"{RUNTIME_ENV_KEY}.{field_name}"
    items = _hydra_list(raw)
    if items is None or len(items) > MAX_LIST:
        return [], f"{where} is not applied: its value is not a list of at most {MAX_LIST} paths"
    out = []
    for item in items:
        if not item or len(item) > MAX_VALUE_CHARS or "\x00" in item or "${" in item:
            return [], f"{where} is not applied: an entry is empty, an interpolation, or longer than {MAX_VALUE_CHARS}"
        if field_name == "excludes":
            out.append(item)
            continue
        if "://" in item:
            return [], f"{where} is not applied: an entry is a remote URI (the check fetches nothing)"
        if item.endswith(".whl"):
            return [], f"{where} is not applied: an entry is a wheel, which Ray pip-installs on each node"
        path = os.path.abspath(item)
        if not (os.path.isdir(path) or (path.endswith(".py") and os.path.isfile(path))):
            return [], f"{where} is not applied: an entry is not a folder or .py file on this machine"
        out.append(path)
    return out, ""


def _hydra_list(raw: str) -> list[str] | None:
    """`[a, 'b c', "d"]` (a Hydra list of text, one level) -> ["a", "b c", "d"]; None for anything else."""
    text = raw.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    items, current, quote, quoted = [], "", "", False
    for ch in text[1:-1]:
        if quote:
            if ch == quote:
                quote = ""
            else:
                current += ch
        elif ch in "'\"":
            quote, quoted = ch, True
            current = current if current.strip() else ""  # spaces before the quote are not part of the entry
        elif ch in "{}[]":
            return None
        elif ch == ",":
            items.append(current if quoted else current.strip())
            current, quoted = "", False
        elif not (quoted and ch.isspace()):  # spaces after a quoted entry are not part of it
            current += ch
    if quote:
        return None
    if current.strip() or quoted:
        items.append(current if quoted else current.strip())
    return items


def _env_text(value: Any) -> str:
    """A Hydra value as Ray's env_vars take it (text): OmegaConf gives verl `true`/`1` as bool/int."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _drop(env: dict, path: list[str]) -> None:
    """`~ray_kwargs.ray_init.runtime_env.<path>`: Hydra deletes the key (the whole runtime_env without a path)."""
    if not path:
        env.clear()
    elif path[0] == "env_vars" and len(path) == 2:
        env.get("env_vars", {}).pop(path[1], None)
    elif len(path) == 1:
        env.pop(path[0], None)


def _invalid(field_name: str, name: str, value: Any) -> str | None:
    """Why a runtime_env value is not applied (hostile input: the command is the user's, the check runs it on every
    node), or None."""
    from ..job.model import Unexpanded

    where = f"{RUNTIME_ENV_KEY}.{field_name}" + (f".{name[:64]}" if field_name == "env_vars" else "")
    if isinstance(value, Unexpanded) or (isinstance(value, str) and "${" in value):
        return f"{where} is not applied: its value is an interpolation the doctor cannot resolve"
    if field_name == "env_vars":
        if not ENV_NAME.fullmatch(name):
            return f"{RUNTIME_ENV_KEY}.env_vars: a variable name that is not a shell name is not applied"
        if value is None or isinstance(value, (dict, list)):
            return f"{where} is not applied: its value is not text"
        text = _env_text(value)
    else:
        if not isinstance(value, str) or not value:
            return f"{where} is not applied: its value is not a path"
        text = value
    if len(text) > MAX_VALUE_CHARS or "\x00" in text:
        return f"{where} is not applied: its value is longer than {MAX_VALUE_CHARS} characters or holds a NUL"
    if field_name == "working_dir" and not os.path.isdir(text):
        return f"{where} is not applied: it is not a folder on this machine (a remote URI is not taken)"
    if field_name == "py_executable" and not (os.path.isabs(text) and os.path.isfile(text) and
                                              os.access(text, os.X_OK)):
        return (f"{where} is not applied: it is not an executable file given by its absolute path (a command line "
                "is never taken)")
    return None
