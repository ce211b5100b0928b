"""Megatron-Bridge's recipe launcher (`scripts/training/run_recipe.py`): its own options and its trailing OmegaConf
overrides, read with the precedence the script gives them.

The script (Megatron-Bridge 067f987d; a copy with its licence is tests/fixtures/megatron-bridge-067f987d) parses its
options with argparse (`allow_abbrev=False`, `parse_known_args`): `--model`/`--recipe` pick the recipe function,
convenience options such as `-cp N` become ConfigContainer overrides (`model.context_parallel_size=N`,
COMMON_OVERRIDE_FIELDS, in that table's order), and every word argparse does not take is a trailing `KEY=VALUE`
override; a trailing word that starts with `-` or has no `=` stops the script ("Unknown option: ...", "Expected
override in KEY=VALUE form, got ..."). The overrides are applied in order, convenience ones first, so a trailing
override of the same field wins. Hydra's override grammar (`+`, `++`, `~`) applies to them
(megatron.bridge.training.utils.omegaconf_utils).

The recipe function sets every field the command does not state: those are not known here (the recipe may set them),
never a default. Nothing is run or imported.
"""

from __future__ import annotations

from .keys import CONFIG_FIELDS, HYDRA_OVERRIDE
from .model import Job, Setting
from .values import hidden_shown, is_hidden_word, parse_value

SCRIPT = "run_recipe.py"
SOURCE = ("Megatron-Bridge 067f987d scripts/training/run_recipe.py (_build_parser, _collect_overrides, "
          "COMMON_OVERRIDE_FIELDS)")

# The options the script's parser has, and whether each takes a value (argparse: `--opt VALUE`, `--opt=VALUE`).
_VALUE_OPTIONS = {
    "--model", "--recipe", "--mode", "--step-func", "--step_func", "--dataset", "-ms", "--max_steps", "-gb",
    "--global_batch_size", "-mb", "--micro_batch_size", "-sl", "--seq_length", "-tp", "--tensor_model_parallel_size",
    "-pp", "--pipeline_model_parallel_size", "-cp", "--context_parallel_size", "-vp",
    "--virtual_pipeline_model_parallel_size", "-ep", "--expert_model_parallel_size", "-etp",
    "--expert_tensor_parallel_size", "--lr", "--min_lr", "--warmup_iters", "--pretrained_checkpoint", "--save_dir",
    "--load_dir", "--save_interval",
}
_FLAGS = {"-h", "--help", "--dry-run", "--dry_run", "--deterministic", "--dump-env", "--dump_env"}
# COMMON_OVERRIDE_FIELDS: each convenience option's destination and the field it sets, in the script's order.
_COMMON = (
    (("-ms", "--max_steps"), "train.train_iters"), (("-gb", "--global_batch_size"), "train.global_batch_size"),
    (("-mb", "--micro_batch_size"), "train.micro_batch_size"), (("-sl", "--seq_length"), "dataset.seq_length"),
    (("-tp", "--tensor_model_parallel_size"), "model.tensor_model_parallel_size"),
    (("-pp", "--pipeline_model_parallel_size"), "model.pipeline_model_parallel_size"),
    (("-cp", "--context_parallel_size"), "model.context_parallel_size"),
    (("-vp", "--virtual_pipeline_model_parallel_size"), "model.virtual_pipeline_model_parallel_size"),
    (("-ep", "--expert_model_parallel_size"), "model.expert_model_parallel_size"),
    (("-etp", "--expert_tensor_parallel_size"), "model.expert_tensor_parallel_size"),
)
# The fields the doctor's checks read, as the ConfigContainer names them, by the doctor's setting names.
MODEL_FIELDS = {**{f: f for f in CONFIG_FIELDS}, "context_parallel_size": "cp", "tensor_model_parallel_size": "tp",
                "pipeline_model_parallel_size": "pp", "expert_model_parallel_size": "ep"}


MODES = ("pretrain", "sft", "lora", "dora")


def infer_recipe_mode(recipe_name: str) -> str | None:
    """The training mode a complete recipe name encodes (recipe_metadata.infer_recipe_mode), or None."""
    normalized = f"_{recipe_name.lower().strip('_')}_"
    for marks, mode in ((("_pretrain_",), "pretrain"), (("_sft_", "_finetune_"), "sft"), (("_dora_",), "dora"),
                        (("_peft_", "_lora_"), "lora")):
        if any(mark in normalized for mark in marks):
            return mode
    return None


def is_recipe_launcher(entry: str | None) -> bool:
    return bool(entry) and (entry or "").replace("\\", "/").rsplit("/", 1)[-1] == SCRIPT


_INT_OPTIONS = {"-ms", "--max_steps", "-gb", "--global_batch_size", "-mb", "--micro_batch_size", "-sl", "--seq_length",
                "-tp", "--tensor_model_parallel_size", "-pp", "--pipeline_model_parallel_size", "-cp",
                "--context_parallel_size", "-vp", "--virtual_pipeline_model_parallel_size", "-ep",
                "--expert_model_parallel_size", "-etp", "--expert_tensor_parallel_size", "--warmup_iters",
                "--save_interval"}
_SPELLING = {short: f"{short}/{long}" for (short, long), _ in _COMMON}  # as argparse names an argument
_SPELLING.update({long: f"{short}/{long}" for (short, long), _ in _COMMON})
_DEST = {short: long for (short, long), _ in _COMMON} | {"--step-func": "--step_func"}


def _number_word(word: str) -> bool:
    """argparse takes a word that looks like a negative number as a value, not an option (the parser has none)."""
    try:
        float(word)
    except ValueError:
        return False
    return True


def read_launcher(args: list[str]) -> tuple[list[str], list[str], str | None, list[str]]:
    """(the ConfigContainer overrides in the order the script applies them, the script's refusals in its own words,
    the recipe the command names, the unexpanded words): what `parse_args` and `_collect_overrides` make of `args`."""
    given: dict[str, str] = {}
    trailing: list[str] = []
    hidden: list[str] = []
    errors: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        name, eq, value = word.partition("=")
        if is_hidden_word(word):  # any option or override may be in it
            hidden.append(hidden_shown(word))
        elif word.startswith("-") and name in _VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(args) or (args[i + 1].startswith("-") and not _number_word(args[i + 1])):
                    errors.append(f"argument {_SPELLING.get(name, name)}: expected one argument")
                    i += 1
                    continue
                value = args[i + 1]
                i += 1
            if name in _INT_OPTIONS and not value.strip().lstrip("+-").isdigit():
                errors.append(f"argument {_SPELLING.get(name, name)}: invalid int value: {value[:80]!r}")
            elif name in ("--lr", "--min_lr") and not _number_word(value):
                errors.append(f"argument {name}: invalid float value: {value[:80]!r}")
            elif name == "--mode" and value not in MODES:
                errors.append(f"argument --mode: invalid choice: {value[:80]!r} (choose from "
                              + ", ".join(repr(m) for m in MODES) + ")")
            given[_DEST.get(name, name)] = value  # the last of a field's spellings wins, as argparse's store does
        elif not (word.startswith("-") and name in _FLAGS):
            trailing.append(word)
        i += 1
    if "--model" in given and "--recipe" in given:
        errors.append("argument --recipe: not allowed with argument --model")
    elif "--model" not in given and "--recipe" not in given:
        errors.append("one of the arguments --model --recipe is required")
    for word in trailing:  # _collect_overrides
        if word.startswith("-"):
            errors.append(f"Unknown option: {word[:80]}")
        elif "=" not in word:
            errors.append(f"Expected override in KEY=VALUE form, got {word[:80]!r}")
    if not errors and given.get("--mode") is None and infer_recipe_mode(given.get("--recipe") or "") is None:
        errors.append("Unable to infer training mode; pass --mode or use a conventional --recipe name.")
    recipe = next((f"{flag} {given[flag]}" for flag in ("--recipe", "--model") if flag in given), None)
    overrides = []
    for (_, long), field in _COMMON:  # _common_config_overrides, in the table's order
        if long in given:
            overrides.append(f"{field}={given[long]}")
    # argparse and the script stop at the first refusal: only that one is the job's
    return overrides + [w for w in trailing if "=" in w and not w.startswith("-")], errors[:1], recipe, hidden


def parse_recipe_launcher(args: list[str], job: Job) -> None:
    """The launcher's settings from its words, as the script applies them: `job.roles["model"]`, `job.common`
    (seq_length), the recipe it names as the config the unstated settings come from, and its refusals as
    `job.config_errors` (in its own words, naming the script)."""
    overrides, errors, recipe, hidden = read_launcher(args)
    job.hidden += hidden
    job.config_errors += [f"run_recipe.py: {e} ({SOURCE})" for e in errors]
    job.config_file = [recipe[:120] if recipe else "the recipe run_recipe.py loads"]
    for word in overrides:
        _apply(word, job)


def _apply(word: str, job: Job) -> None:
    m = HYDRA_OVERRIDE.fullmatch(word)
    if m is None or m.group("value") is None and m.group("prefix") != "~":
        return
    key = m.group("key")
    head, _, field = key.partition(".")
    target, name = None, None
    if head == "model" and field in MODEL_FIELDS:
        target, name = job.roles.setdefault("model", {}), MODEL_FIELDS[field]
    elif key == "dataset.seq_length":
        target, name = job.common, "seq_length"
    if target is None or name is None:
        job.unknown.append(key[:200])
        return
    if m.group("prefix") == "~":  # deleted: the recipe's default applies again (not known)
        target.pop(name, None)
        return
    raw = m.group("value") or ""
    target[name] = Setting(parse_value(raw), raw, source="override")
