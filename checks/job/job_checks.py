"""The job's own settings, read from its command line (`preflight -- CMD`, `check --job-args`): what Megatron's
config validation and verl's engine would reject after the cluster was allocated and the model loaded.

These checks run only when job arguments are given (Check.only_with = "job"). Each failure quotes the upstream error it
prevents and gives the exact argument to add, in the syntax the command already uses; a value the command does not
state is "not stated", never guessed, and one it writes as a variable the doctor cannot resolve (`$NAME`, `${NAME}`)
is "not known": a skip that names it, with no line to add.

Each check here loops over the job's roles and closes with one verdict (_job_verdict); its rule for one role lives in
a module named for what it judges: _job_cp (job.cp-args), _job_dispatch (job.moe-dispatch), _job_dsa
(job.dsa-backend, job.indexer-loss). _job_settings reads a role's settings and writes the lines that change them.
"""

from __future__ import annotations

from dsv4_doctor.api import (PYTHON_MANUAL, RAY_MANUAL, ROUNDING, SBATCH, SHELL_MANUAL, SRUN, TORCHRUN_MANUAL,
                             UV_MANUAL, WRAPPERS, Context, Finding, Result, Source, UpstreamText, check, cut, failed,
                             passed, skipped, warned)

from .cp import M1, M4, judge_role, verl_sets_cp_here
from .dispatch import job_moe_dispatch
from .dsa import job_dsa_backend, job_indexer_loss
from .settings import (MPC, STATIC, TC, add_setting, first_unresolved, int_value, is_stated, is_unresolved, job_of,
                       maybe_in_file, no_job, not_known, parallel_size, role_cp, role_label, unread_row,
                       value_of, world_size, written)
from .stack import job_stack_config
from .verdict import Found, verdict
from .env import job_env
from .._upstream import EAV, gh, mlm, mlm_at


# Megatron's texts (d48bd6be), quoted in the findings.
M6 = "DSv4 Hybrid Attention only supports TP size 1."

# The upstream texts of each rule (classified back to it by dsv4_doctor.upstream.registry; `{name}`: a variable part).
_OLD_TC = "bfa33263ca06e6974410d0ea871b25e21c5aee85"  # the CP merge on Megatron-LM dev: the texts' first wording
CP_TEXTS = (
    UpstreamText("M1", M1, mlm(TC, "1611-1616"), "ValueError"),
    UpstreamText("M1-old", "DSv4 Hybrid with CP requires cp_partition_mode='contiguous'.",
                 mlm_at(_OLD_TC, TC, "Megatron-LM dev bfa33263 transformer_config.py L1499"), "ValueError"),
    UpstreamText("M2", "Unsupported cp_partition_mode: {mode}", mlm(TC, "1563-1564"), "ValueError"),
    UpstreamText("M3", "DSv4 Hybrid with CP requires a sequence_packing_scheduler for THD inputs.",
                 mlm_at(_OLD_TC, TC, "Megatron-LM dev bfa33263 transformer_config.py L1490-1492"), "AssertionError"),
    UpstreamText("M4", M4, mlm(TC, "1566-1573"), "ValueError"),
    UpstreamText("M5", "cp_partition_mode='contiguous' with context parallelism currently requires "
                 "experimental_attention_variant to be either 'dsv4_hybrid' or 'gated_delta_net'.",
                 mlm(TC, "1597-1601"), "ValueError"),
    UpstreamText("M5-old", "cp_partition_mode='contiguous' currently is only supported with dsv4_hybrid.",
                 mlm_at(_OLD_TC, TC, "Megatron-LM dev bfa33263 transformer_config.py L1504-1506"), "ValueError"),
    UpstreamText("M5-mla", "cp_partition_mode='contiguous' is not supported with multi_latent_attention outside "
                 "dsv4_hybrid.", mlm(TC, "1592-1595"), "ValueError"),
    UpstreamText("M5-gdn", "cp_partition_mode='contiguous' is incompatible with gated_delta_net "
                 "linear_cp_mode='headwise'.", mlm(TC, "1603-1609"), "ValueError"),
    UpstreamText("R2", "DSv4 Hybrid with CP requires qkv_format='thd'.",
                 mlm(EAV + "deepseek_v4_hybrid_attention.py", "266-268"), "ValueError"),
    UpstreamText("R3", "CompressedSparseAttention with CP requires qkv_format='thd'.", mlm(EAV + "csa.py", "2102-2104"),
                 "ValueError"),
    UpstreamText("R3-mode", "CompressedSparseAttention requires cp_partition_mode='contiguous'. CP partition "
                 "conversion must be handled before entering CSA.", mlm(EAV + "csa.py", "2105-2109"), "ValueError"),
    UpstreamText("R4", "Contiguous CP slicing requires total_tokens={total_tokens} to be divisible by "
                 "cp_size={cp_size}.", mlm("megatron/core/datasets/data_schedule_utils.py", "79-94"), "RuntimeError"),
    UpstreamText("R12", "DSv4 THD CP path requires boundary_hidden and boundary_kv from the hidden-only boundary "
                 "exchange and boundary KV projection path.", mlm(EAV + "csa.py", "2570-2574"), "RuntimeError"),
)
PARALLELISM_TEXTS = (
    UpstreamText("M6", M6, mlm(TC, "1760-1762"), "AssertionError"),
    UpstreamText("M5-mtp", "MTP with tensor_model_parallel_size > 1, sequence_parallel=True, and "
                 "cp_partition_mode='contiguous' has a known token-side padding-mask layout bug. This combination is "
                 "temporarily unsupported and will be fixed in a follow-up change.", mlm(TC, "1575-1584"),
                 "ValueError"),
)
HYDRA = "https://github.com/facebookresearch/hydra/blob/v1.3.2/"
CONFIG_TEXTS = (
    UpstreamText("H1", "Could not append to config. An item is already at '{key}'.",
                 Source("Hydra 1.3.2 hydra/_internal/config_loader_impl.py L379",
                        HYDRA + "hydra/_internal/config_loader_impl.py#L379"), "ConfigCompositionException"),
    UpstreamText("H2", "Could not override '{key}'.\nTo append to your config use +{override}",
                 Source("Hydra 1.3.2 hydra/_internal/config_loader_impl.py L393",
                        HYDRA + "hydra/_internal/config_loader_impl.py#L393"), "ConfigCompositionException",
                 match=("Could not override '", "'.")),  # its first line: a log holds the two lines apart
    UpstreamText("H3", "unrecognized arguments: {arguments}",
                 Source("CPython 3.11 Lib/argparse.py (parse_args), run by Hydra 1.3.2's get_args_parser",
                        "https://github.com/python/cpython/blob/3.11/Lib/argparse.py"), "SystemExit"),
    UpstreamText("H4", "unsupported operand type(s) for %: 'int' and 'str'",
                 Source("OmegaConf 2.3.0 oc.env returns a string (resolvers/oc/__init__.py)",
                        "https://github.com/omry/omegaconf/blob/v2.3.0/omegaconf/resolvers/oc/__init__.py"),
                 "TypeError"),
    UpstreamText("B1", "Unknown option: {option}", gh("NVIDIA-NeMo/Megatron-Bridge",
                 "blob/067f987d/scripts/training/run_recipe.py#L268", "Megatron-Bridge 067f987d run_recipe.py L268"),
                 "ValueError"),
    UpstreamText("B2", "Expected override in KEY=VALUE form, got {word}", gh("NVIDIA-NeMo/Megatron-Bridge",
                 "blob/067f987d/scripts/training/run_recipe.py#L270", "Megatron-Bridge 067f987d run_recipe.py L270"),
                 "ValueError"),
)


# How the doctor reads a command before its settings (doctor/job/chain.py): each wrapper's manual, at the commit its
# grammar was read from (doctor/job/wrappers.py), grouped by project; the titles are the tables' own.
_MANUAL_GROUPS = (
    ("GNU coreutils", "aa0c0de35", "https://github.com/coreutils/coreutils/tree/aa0c0de35/src"),
    ("GNU time 1.9", "", "https://www.gnu.org/software/time/"),
    ("util-linux", "39465c780", "https://github.com/util-linux/util-linux/tree/39465c780"),
    ("numactl", "93c1fe5", "https://github.com/numactl/numactl/blob/93c1fe5/numactl.c"),
    ("bash(1) builtin", "(bash 5.2)", "https://www.gnu.org/software/bash/manual/bash.html#Bourne-Shell-Builtins"),
)
_MANUAL_URLS = (
    (SRUN.manual, "https://github.com/SchedMD/slurm/blob/284c3b95/src/common/slurm_opt.c"),
    (SBATCH.manual, "https://github.com/SchedMD/slurm/blob/284c3b95/src/common/slurm_opt.c"),
    (SHELL_MANUAL, "https://pubs.opengroup.org/onlinepubs/9699919799/utilities/sh.html"),
    (RAY_MANUAL, "https://github.com/ray-project/ray/blob/master/python/ray/dashboard/modules/job/cli.py"),
    (UV_MANUAL, "https://github.com/astral-sh/uv/blob/26a9dd4b/crates/uv-workspace/src/workspace.rs"),
    (TORCHRUN_MANUAL + " (torch 2.13)", "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/run.py"),
    (PYTHON_MANUAL, "https://docs.python.org/3/using/cmdline.html"),
)


def _launch_sources() -> tuple[Source, ...]:
    grouped = []
    for prefix, at, url in _MANUAL_GROUPS:
        heads = [w.manual.split(" (")[0] for w in WRAPPERS if w.manual.startswith(prefix)]
        names = [h[len(prefix) + 1:] if h.startswith(prefix + " ") else h for h in heads]
        grouped.append(Source(f"{prefix}{' ' + at if at else ''}: {', '.join(names)}", url))
    return (Source("CPython's sys.path: sys.path[0] is the script's folder (links resolved), the working directory for "
                   "-m and -c, none with -I, -P or PYTHONSAFEPATH", "https://docs.python.org/3/library/sys.html#sys.path"),
            *grouped, *(Source(title, url) for title, url in _MANUAL_URLS),
            Source("execve(2): interpreter scripts (a #! line: the interpreter and one optional argument)",
                   "https://man7.org/linux/man-pages/man2/execve.2.html"),
            gh("facebookresearch/hydra", "blob/v1.3.2/hydra/_internal/utils.py",
               "Hydra 1.3.2 hydra/_internal/utils.py get_args_parser: the argument parser @hydra.main runs before "
               "composing (overrides, --config-path, --config-name, --config-dir)"))


# ---------------------------------------------------------------------------------------------------- job.cp-args

@check("job.cp-args", "The job states the DSv4 CP settings", skip_if=no_job, only_with="job",
    texts=CP_TEXTS,
    applies_when="job arguments given; CP > 1",
    detects="the training command's overrides or flags; verl's #6555 marker (ast)",
    sources=(
        mlm(TC, "1563-1616", "Megatron-LM dev transformer_config.py L1563-1616 (contiguous CP rules)"),
        mlm(MPC, "74-98", "Megatron-LM dev model_parallel_config.py (max_seqlen_per_dp_cp_rank, schedulers)"),
        Source("verl run_deepseek_v4_flash_megatron.sh CP_ARGS (PR #7297)",
               "https://github.com/verl-project/verl/pull/7297"),
        gh("verl-project/verl", "blob/1dda039b/examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh",
           "verl @1dda039b run_deepseek_v4_flash_megatron.sh: max_seqlen_per_dp_cp_rank=$(((MAX_PROMPT_LENGTH + "
           "MAX_RESPONSE_LENGTH) / ACTOR_CP)) rounds down; the doctor's line rounds up"),
        Source("verl PR #6555 (MegatronEngine sets the DSv4 CP settings)", "https://github.com/verl-project/verl/pull/6555"),
        Source("verl 0.9.0 workers/config/engine.py L229-236 (McoreEngineConfig: max_seqlen_per_dp_cp_rank with "
               "dynamic CP); workers/engine/megatron/transformer_impl.py L303-311 (written over the transformer "
               "config's)", "https://github.com/verl-project/verl/blob/v0.9.0/verl/workers/config/engine.py#L229-L236"),
        *_launch_sources(),
    ),
    static=STATIC)
def job_cp_args(ctx: Context) -> Result | list[Finding]:
    """With CP > 1, DSv4 needs `cp_partition_mode=contiguous` (Megatron: "DSv4 Hybrid with context parallelism
    requires cp_partition_mode='contiguous'.") and a `sequence_packing_scheduler` (dp_balanced or
    default_dynamic_cp; without one Megatron stops with "cp_partition_mode='contiguous' with context parallelism
    requires THD inputs from a sequence_packing_scheduler"). verl with PR #6555 (0.9.0 has it; detected as
    verl.cp-layout does) sets both itself for deepseek_v4, after the user's overrides: missing overrides then
    pass with a note, and an override that contradicts verl's choice is reported as overridden. Without #6555,
    and on a Megatron-LM command line, they must be explicit. When `max_seqlen_per_dp_cp_rank` is stated, it
    times the scheduler's rank count (CP for dp_balanced, DP x CP for default_dynamic_cp) must cover the longest
    sample (`data.max_prompt_length + data.max_response_length`, or `--seq-length`). With verl's
    `<role>.megatron.dynamic_context_parallel=True`, verl requires its engine key
    `<role>.megatron.max_seqlen_per_dp_cp_rank` (a positive integer, else "max_seqlen_per_dp_cp_rank must be a
    positive integer when dynamic_context_parallel is enabled") and writes it over the transformer config's;
    without dynamic CP verl does not read the engine key, and Megatron gets the
    `override_transformer_config` value. With CP > 1 and no max_seqlen_per_dp_cp_rank it warns and gives the
    line verl's example adds, ceil((max_prompt_length + max_response_length) / CP): the example's shell
    division rounds down, which leaves the longest sample short when the sum is not a multiple of CP. The full
    CP_ARGS block is in the report's job settings and at the end of `fix --job-args`. A setting the command
    writes as a variable the doctor cannot resolve (`$MODE`, `${SCHED}`) is not known: the row says so, gives it
    no line and does not pass; default_dynamic_cp's DP is counted only from what the command states (its world
    size, and TP and PP as job.parallelism reads them). The settings are read as the command's launch chain runs
    them (each wrapper, `sh -c` string, launcher and `#!` line in front of the entry by its own manual's grammar,
    sys.path by CPython's rules, verl's entries by Hydra's own argument parser); a chain that stops before the
    entry, or an entry whose grammar is not known, leaves every job row not known (a warning naming the word),
    never a skip or a pass.
    """
    job = job_of(ctx)
    roles = job.checked_roles()
    if not roles:
        return unread_row(job, "CP settings (cp_partition_mode, sequence_packing_scheduler, "
                          "max_seqlen_per_dp_cp_rank)")
    auto, why_auto = verl_sets_cp_here(ctx, job)
    found = Found()
    fails, warns, fixes, unknown = found.fails, found.warns, found.fixes, found.unknown
    evidence: dict = {"verl_sets_cp_settings": auto, "decided_from": why_auto, "roles": {}}
    for role in roles:
        judge_role(job, role, auto, found, evidence["roles"])
    evidence.update(failures=fails, warnings=warns, notes=found.notes, unknown=unknown)
    # Said only where a max_seqlen_per_dp_cp_rank line is given: it is rounded up, unlike verl's example.
    rounding = [ROUNDING] if any("max_seqlen_per_dp_cp_rank" in f.key for f in fixes) else []
    if not (fails or warns or unknown) and all(r["cp"] == 1 for r in evidence["roles"].values()) and not any(
            value_of(job.effective(r), "dynamic_context_parallel") for r in roles):
        return skipped("CP = 1: the job needs no CP settings", evidence=evidence)
    return verdict(found, evidence, [why_auto, *rounding], "the job states the DSv4 CP settings")


# ------------------------------------------------------------------------------------------------ job.parallelism


@check("job.parallelism", "The job's TP, PP and CP fit DSv4 and the GPUs", skip_if=no_job, only_with="job",
    texts=PARALLELISM_TEXTS,
    applies_when="job arguments given",
    detects="the training command's parallel sizes and node/GPU counts",
    sources=(mlm(TC, "1743-1765", "Megatron-LM dev transformer_config.py L1743-1765 (DSv4: TP 1)"),))
def job_parallelism(ctx: Context) -> Result | list[Finding]:
    """DSv4's hybrid attention supports tensor parallelism 1 only (Megatron asserts "DSv4 Hybrid Attention only
    supports TP size 1.", at any CP), and TP x PP x CP must divide the job's GPUs (nodes x GPUs per node, from
    `trainer.nnodes`/`trainer.n_gpus_per_node` or torchrun's `--nnodes`/`--nproc-per-node`) so that Megatron can
    form the model replicas. A TP the command does not state is not known (the row is a skip that says so: a
    config file or a recipe may set another), nor is anything a config file it names (Hydra --config-name/
    --config-path, Megatron-LM --yaml-cfg) may set; a world size it does not state leaves the divisibility
    unknown, and the check says so. A TP, PP or node or GPU count written as a variable the doctor cannot
    resolve is not known either (a skip).
    """
    job = job_of(ctx)
    roles = job.checked_roles()
    if not roles:
        return unread_row(job, "TP, PP and CP sizes and world size")
    world = world_size(job)
    world_written = first_unresolved(job.common, "nnodes", "gpus_per_node")
    found = Found()
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    evidence: dict = {"world_size": world, "roles": {}}
    for role in roles:
        st, lab = job.effective(role), role_label(job, role)
        tp, cp = int_value(st, "tp"), role_cp(job, st)
        pp, pp_not_known = parallel_size(job, st, "pp")  # as job.cp-args reads it for default_dynamic_cp's DP
        evidence["roles"][role] = {"tp": tp, "cp": cp, "pp": pp, "tp_stated": is_stated(st, "tp")}
        if not is_stated(st, "tp"):
            # Not stated is not known: verl's and Megatron's default is 1, but a config file or a recipe may differ.
            unknown.append(f"{lab}TP not stated" + (maybe_in_file(job) or
                                                    " (verl's and Megatron's default is 1; the command does not "
                                                    "say)"))
            continue
        if tp is None and is_unresolved(st, "tp"):
            unknown.append(not_known(lab, "tensor_model_parallel_size", st["tp"]))
            continue
        if tp is None:
            fails.append(f"{lab}tensor_model_parallel_size={st['tp'].raw!r} is not a number")
            fixes.append(add_setting(job, role, "tp", 1, "DSv4's attention supports TP 1 only", written(st, "tp")))
        elif tp != 1:
            fails.append(f"{lab}TP = {tp}: Megatron asserts \"{M6}\"")
            fixes.append(add_setting(job, role, "tp", 1, "DSv4's attention supports TP 1 only", written(st, "tp")))
        else:
            notes.append(f"{lab}TP = 1")
        size = max(tp or 1, 1) * (pp or 1) * (cp or 1)  # TP x PP x CP (a TP below 1 already fails above)
        if cp is None:
            unknown.append(not_known(lab, "context_parallel_size", st["cp"], ", so whether TP x PP x CP divides "
                                     "the world size is not known"))
        elif is_unresolved(st, "pp"):
            unknown.append(not_known(lab, "pipeline_model_parallel_size", st["pp"], ", so whether TP x PP x CP "
                                     "divides the world size is not known"))
        elif pp is None:
            unknown.append(f"{lab}{pp_not_known}: whether TP x PP x CP divides the world size is unknown")
        elif world is None and world_written is not None:
            unknown.append(not_known(lab, *world_written, f", so whether TP x PP x CP = {size} "
                                     "divides the world size is not known"))
        elif world is None:
            notes.append(f"{lab}whether TP x PP x CP = {size} divides the world size is unknown "
                         "(the command states no node and GPU counts)")
        elif world % size:
            fails.append(f"{lab}TP x PP x CP = {size} does not divide the {world} GPUs: Megatron "
                         "cannot form a model replica")
        else:
            notes.append(f"{lab}TP x PP x CP = {size} divides the {world} GPUs "
                         f"(DP = {world // size})")
    evidence.update(failures=fails, notes=notes, unknown=unknown)
    return verdict(found, evidence)


# ----------------------------------------------------------------------------------------------------- job.config


@check("job.config", "The job's config composes and its settings have the types and ranges they need", skip_if=no_job,
    texts=CONFIG_TEXTS,
    only_with="job", applies_when="job arguments given",
    detects="Hydra's compose in the target with verl's installed config tree; else the doctor's reader",
    sources=(
        gh("facebookresearch/hydra", "blob/v1.3.2/hydra/_internal/config_loader_impl.py",
           "Hydra 1.3.2 config_loader_impl.py (\"Could not append to config. An item is already at ...\", "
           "\"Could not override ...\")"),
        gh("omry/omegaconf", "blob/v2.3.0/omegaconf/resolvers/oc/__init__.py",
           "OmegaConf 2.3.0 resolvers/oc: oc.env returns a string; oc.decode parses one"),
        gh("verl-project/verl", "blob/v0.9.1/verl/trainer/main_ppo.py",
           "verl 0.9.1 main_ppo.py / sft_trainer.py: @hydra.main(config_path=\"config\", config_name=...)"),
        gh("facebookresearch/hydra", "blob/v1.3.2/hydra/_internal/utils.py",
           "Hydra 1.3.2 _internal/utils.py get_args_parser: the argument parser @hydra.main runs before composing "
           "(\"unrecognized arguments: ...\")"),
        gh("NVIDIA-NeMo/Megatron-Bridge", "blob/067f987d/scripts/training/run_recipe.py",
           "Megatron-Bridge 067f987d run_recipe.py: _build_parser, _collect_overrides (\"Unknown option: ...\", "
           "\"Expected override in KEY=VALUE form, got ...\"), COMMON_OVERRIDE_FIELDS"),
    ))
def job_config(ctx: Context) -> Result | list[Finding]:
    """A verl job's config is what Hydra composes from the entry module's `@hydra.main` config (read from the
    installed module with ast), verl's config tree, the command's `--config-path`/`--config-name`/`--config-dir`
    and its overrides. Where the target has Hydra and verl, the doctor composes it there, as the job will (nothing is
    instantiated; only the settings the job checks read are resolved), and Hydra's or OmegaConf's errors fail
    this row with their message: `+key=...` on a key verl's config has ("Could not append to config. An item is
    already at ..."), a plain override of one it lacks ("Could not override ..."), bad override grammar; before
    composing, Hydra's own argument parser runs as `@hydra.main` runs it, so overrides on both sides of
    `--config-name` fail with its "unrecognized arguments". Megatron-Bridge's recipe launcher (`run_recipe.py`) is
    read with its own parser's rules, and what that parser refuses ("Unknown option", "Expected override in KEY=VALUE
    form", an invalid int, no `--model`/`--recipe`, no mode it can infer) fails this row in its words. A whole-number
    setting given as text fails too: OmegaConf's `${oc.env:NAME}` returns a string, with or without a default,
    so `context_parallel_size=${oc.env:CP}` gives verl `'2'` and it stops with "TypeError: unsupported operand
    type(s) for %: 'int' and 'str'"; write `'${oc.decode:${oc.env:NAME}}'`. A setting of the wrong type (a CP of
    "two", 2.5, a list or a dict; a switch that is not true or false; a backend that is not a name) or outside its
    range (a CP of 0 or above 1024, a length above 2^31 - 1) fails, quoting the value as the job gets it (a list or
    a dict as itself) and stating what it must be, wherever it was set (an override, a config file, a flag): the
    job's config, never the doctor's usage error. Where the target cannot compose (no Hydra), the doctor's own
    reader judges what it can and says so.
    """
    job = job_of(ctx)
    if job.kind == "unknown":
        return unread_row(job, "config and the types of its settings")
    evidence: dict = {"read_by": job.read_by, "errors": list(job.config_errors)}
    if job.composed:
        evidence["composed"] = dict(job.composed)
    if job.config_errors:
        return failed(cut("; ".join(e.splitlines()[0] for e in job.config_errors), 600),
                      "\n".join(job.config_errors) + f"\n(settings {job.read_by})", evidence=evidence)
    if job.composed:
        return passed(f"the job's config composes (settings {job.read_by}); its numbers have the types and "
                      "ranges they need", evidence=evidence)
    if job.checked_against:
        evidence["checked_against"] = job.checked_against
        return passed(f"the overrides fit {job.checked_against} (settings {job.read_by}): no `+` on a key it has, "
                      "no plain override of a key it lacks; its numbers have the types and ranges they need",
                      evidence=evidence)
    if job.syntax == "bridge":
        return passed("Megatron-Bridge's recipe launcher takes the command's options and overrides (its own parser's "
                      "rules); its numbers have the types and ranges they need", evidence=evidence)
    if job.kind == "megatron":
        return passed("a Megatron-LM command (no Hydra config): its numeric settings are in range and typed",
                      evidence=evidence)
    return warned(f"not known whether Hydra accepts the overrides: settings {job.read_by}; its numbers have the types "
                  "and ranges they need", evidence=evidence)


CHECKS = [job_cp_args, job_parallelism, job_moe_dispatch, job_indexer_loss, job_dsa_backend, job_env, job_config,
          job_stack_config]
