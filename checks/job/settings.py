"""How the job checks read a training command: a role's settings as written, what the command leaves not stated,
the world it runs on, and the lines that state or change a setting in the command's own syntax."""

from __future__ import annotations

from dsv4_doctor.api import (Context, Fix, Job, Phase, Profile, Result, Setting, StaticRequest, command_not_read,
                             digits_int, entry_shown, is_interpolation, line_to_add, rejection, shorten, warned)
from ..verl_checks import STATIC as VERL_STATIC


def no_job(profile: Profile) -> str | None:
    return None if profile.job is not None else "no job arguments (preflight or --job-args)"


def not_read(job: Job, hides: str = "settings") -> str:
    """A job row's summary where the command was not read (its chain stops before the entry, or the entry's grammar
    is not known): not known, naming the word and what it hides."""
    why = command_not_read(job) or "the command's settings were not read"
    return (f"not known: {why}, so the job's {hides} are not known (give the training command itself: `check "
            "--job-args \"python3 -m verl.trainer.main_ppo ...\"`)")


def unread_row(job: Job, hides: str) -> Result:
    """The row of a job check the command does not let judge: a warning (never a skip, never a pass) that names the
    word the doctor stopped at and what it hides; the details say what the profile assumed instead."""
    assumed = job.decisions.not_known if job.decisions is not None else None
    return warned(not_read(job, hides), assumed or "", evidence={"not_read": command_not_read(job),
                                                                 "entry": entry_shown(job.entry)})


def remote_of(job: Job) -> str | None:
    """The submitter the job runs on another host through (`ray job submit`, `sbatch --wrap`), or None."""
    return job.chain.remote if job.chain is not None else None


def job_of(ctx: Context) -> Job:
    job = ctx.profile.job
    assert job is not None  # only_with="job": the runner selects these checks for a job command only
    return job


def add_setting(job: Job, role: str, setting: str, value, why: str, now: str | None = None) -> Fix:
    """The argument to add, or, when the command states the setting already (`now`), the one to change it to. The
    line is the description's own indented last line: renderers keep it whole (copy-pastable, never wrapped)."""
    line = line_to_add(job, role, setting, value)
    if now is not None:
        return Fix(f"Change in the training command ({why}), from {now!r} to:\n  {line}", key=f"job:{line}",
                   phase=Phase.SETTING)
    return Fix(f"Add to the training command ({why}):\n  {line}", key=f"job:{line}", phase=Phase.SETTING)


def written(settings: dict[str, Setting], name: str) -> str | None:
    """How the command states a setting now (its text as written), or None."""
    s = settings.get(name)
    return s.raw if s is not None else None


def value_of(settings: dict[str, Setting], name: str):
    s = settings.get(name)
    return s.value if s is not None else None


def is_stated(settings: dict[str, Setting], name: str) -> bool:
    return settings.get(name) is not None


def int_value(settings_or_setting, name: str | None = None) -> int | None:
    s = settings_or_setting.get(name) if name else settings_or_setting
    v = s.value if isinstance(s, Setting) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def config_files(job: Job) -> str:
    """The config-file flags the command gives (Hydra --config-name/--config-path, --yaml-cfg), or ""."""
    return ", ".join(job.config_file)


def maybe_in_file(job: Job) -> str:
    """What "not stated" means for the command: its default, or, with a config file, not known."""
    return f": the config the command names may set it ({config_files(job)})" if config_files(job) else ""


def role_cp(job: Job, settings: dict[str, Setting]) -> int | None:
    """A role's CP size: as stated (text that spells a number, as oc.env gives it, counts as that number); --cp's
    when the command states one the doctor cannot know (an interpolation it cannot resolve, a value job.config
    rejects), or none beside a config the command names (which may set it); else 1, verl's and Megatron's default.
    None: the role's CP is not known and --cp does not give it (the profile checks it as CP > 1)."""
    value = int_value(settings, "cp")
    if value is None and is_stated(settings, "cp"):
        value = digits_int(settings["cp"].value)
    if value is not None:
        return value
    if is_stated(settings, "cp") or config_files(job):
        given = job.decisions.cp_given if job.decisions is not None else None
        if isinstance(given, int) and not isinstance(given, bool):
            return given
        return None
    return 1


def is_unresolved(settings: dict[str, Setting], name: str) -> bool:
    """The command states the setting as an interpolation the doctor could not resolve."""
    return is_interpolation(value_of(settings, name))


def first_unresolved(settings: dict[str, Setting], *names: str) -> tuple[str, Setting] | None:
    """The first of `names` the command writes as a variable the doctor cannot resolve, with its setting."""
    return next(((name, settings[name]) for name in names if is_unresolved(settings, name)), None)


def role_label(job: Job, role: str) -> str:
    return "" if job.kind != "verl" else f"{role}: "


TORCH_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def world_size(job: Job) -> int | None:
    nodes, per_node = int_value(job.common.get("nnodes")), int_value(job.common.get("gpus_per_node"))
    if nodes is None and "nnodes" not in job.common and any(w in TORCH_LAUNCHERS for w in job.launcher):
        nodes = 1  # torchrun's --nnodes defaults to 1: `torchrun --nproc-per-node 8` is one node of 8
    return nodes * per_node if nodes is not None and per_node is not None else None


def as_written(raw: str) -> str:
    """A value as the command writes it, for a sentence: itself when it is one printable line without backticks,
    else its repr; at most 80 characters."""
    text = raw if raw.isprintable() and "`" not in raw else repr(raw)
    return shorten(text, 80)  # never through a word (a secret's part would pass redaction)


def not_known(label: str, name: str, setting: Setting, consequence: str = "") -> str:
    """What a job check says of a setting the command writes as an unexpanded shell variable or an interpolation the
    doctor cannot resolve: its value is not known here, so it is never judged, defaulted or given a fix."""
    problem = rejection(setting)
    if problem is not None:  # a value of the wrong type or out of range: job.config fails and quotes it
        return f"{label}{name} = {as_written(setting.raw)} {problem} (job.config): not known here{consequence}"
    if setting.source != "override" and setting.resolved:  # the launcher's, with why it is not known
        shown = f" is `{as_written(setting.raw)}`" if setting.source == "flag" else ""
        return f"{label}{name}{shown}: not known ({setting.resolved}){consequence}"
    return (f"{label}{name} is `{as_written(setting.raw)}` in the command: not known here{consequence}; pass the "
            "expanded command or state it")


SIZE_NAMES = {"tp": ("TP", "tensor_model_parallel_size"), "pp": ("PP", "pipeline_model_parallel_size")}


def parallel_size(job: Job, settings: dict[str, Setting], name: str) -> tuple[int | None, str]:
    """A role's TP or PP (`name`) as the job checks know it, or None and why not. A PP the command does not state is
    1, verl's and Megatron's default, unless a config file may set it; a TP it does not state is not known (a
    recipe may set another, and DSv4 needs exactly 1); nor is one written as a variable or not as a positive whole
    number."""
    short, long = SIZE_NAMES[name]
    s = settings.get(name)
    if s is None:
        if name == "pp" and not config_files(job):
            return 1, ""
        return None, f"{short} not stated{maybe_in_file(job)}"
    value = int_value(s)
    if value is not None and value >= 1:
        return value, ""
    if is_interpolation(s.value):
        return None, f"{long} is `{as_written(s.raw)}` in the command"
    return None, f"{long}={as_written(s.raw)} is not a positive whole number"


def data_parallel(job: Job, settings: dict[str, Setting], cp: int) -> tuple[int | None, str]:
    """A role's DP size, world / (TP x PP x CP), or None and why it is not known (TP and PP as parallel_size reads
    them: never a guess)."""
    world = world_size(job)
    if world is None:
        written = first_unresolved(job.common, "nnodes", "gpus_per_node")
        if written is not None:
            return None, f"{written[0]} is `{as_written(written[1].raw)}` in the command"
        return None, "the command states no node and GPU counts"
    tp, why_tp = parallel_size(job, settings, "tp")
    pp, why_pp = parallel_size(job, settings, "pp")
    if tp is None or pp is None:
        return None, why_tp or why_pp
    if world % (tp * pp * cp):
        return None, f"TP x PP x CP = {tp * pp * cp} does not divide the {world} GPUs (job.parallelism)"
    return world // (tp * pp * cp), ""


# The Megatron files the job rules quote, and what the job checks read of the environment (verl, and deep_ep for
# the MoE dispatcher).
TC = "megatron/core/transformer/transformer_config.py"
MPC = "megatron/core/model_parallel_config.py"
STATIC = StaticRequest(distributions=VERL_STATIC.distributions, modules=(*VERL_STATIC.modules, "deep_ep"),
                       sources=VERL_STATIC.sources, contains=VERL_STATIC.contains)
