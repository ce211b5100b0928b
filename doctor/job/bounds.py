"""The types and ranges a job's settings must have. The job's config sets them (its command's overrides and flags, a
config file it names, verl's defaults), so a value of the wrong type (`context_parallel_size: "two"`, `2.5`, a
list) or outside its range (a 400-digit max_response_length, a CP of 0 or 5000) is the job's mistake, never the
doctor's usage error: job.config fails and quotes the value, as the job gets it, with what it must be.

The other rows judge such a value where they can: a TP of 0 or a max_seqlen_per_dp_cp_rank of -1 fails their rule
with the line that changes it. Where they cannot (a list or a dict, a number above its range, a CP, node count or
length that is no positive whole number) the setting becomes not known to them (never a crash, never a guess): the
CP is then checked as CP > 1 unless --cp gives it. Arithmetic on settings is exact integer arithmetic."""

from __future__ import annotations

import math
import re

from ..hostio.redact import shorten
from .model import MAX_INT_DIGITS, Job, Setting, Unexpanded, digits_int, is_interpolation  # noqa: F401  (digits_int: read from here)

INT32_MAX = 2**31 - 1  # Megatron's packed THD batches index tokens with int32 cu_seqlens
MAX_PARALLEL = 1024  # --cp's own bound (session.MAX_CP)
# The doctor's setting name -> (lowest, highest, what the range is).
RANGES: dict[str, tuple[int, int, str]] = {
    **{name: (1, MAX_PARALLEL, f"a whole number from 1 to {MAX_PARALLEL}") for name in ("cp", "tp", "pp", "ep")},
    **{name: (1, INT32_MAX, f"a whole number from 1 to {INT32_MAX} (2^31 - 1: Megatron's int32 token offsets)")
       for name in ("max_prompt_length", "max_response_length", "seq_length", "max_seqlen_per_dp_cp_rank",
                    "engine_max_seqlen_per_dp_cp_rank")},
    "nnodes": (1, 100_000, "a whole number from 1 to 100000"),
    "gpus_per_node": (1, MAX_PARALLEL, f"a whole number from 1 to {MAX_PARALLEL}"),
}
# Whole numbers that may be null: "not set" (verl's own default for both).
MAY_BE_NULL = {"max_seqlen_per_dp_cp_rank", "engine_max_seqlen_per_dp_cp_rank"}
# Whole numbers whose rows judge a value below the range or of another scalar type, and give the line that changes
# it (job.parallelism's TP, job.cp-args' max_seqlen_per_dp_cp_rank); for the others no rule can.
ROWS_JUDGE = {"tp", "pp", "max_seqlen_per_dp_cp_rank", "engine_max_seqlen_per_dp_cp_rank"}
BOOLEANS = {"dynamic_context_parallel", "apply_dsa_kernel_fusion", "dsa_indexer_use_sparse_loss", "apply_rope_fusion",
            "overlap_moe_expert_parallel_comm", "csa_dense_mode", "use_varlen_dataset"}
NAMES = {"cp_partition_mode", "sequence_packing_scheduler", "dsa_kernel_backend", "moe_token_dispatcher_type",
         "moe_flex_dispatcher_backend", "experimental_attention_variant"}
NUMBERS = {"dsa_indexer_loss_coeff"}
MAX_DIGITS = MAX_INT_DIGITS  # int() of longer text raises (Python's int_max_str_digits): never parsed
MAX_SHOWN = 64  # a value quoted in a finding: longer ones are cut, or described
MAX_ITEMS = 16  # of a list or dict quoted in a finding
_PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def _digits(text: str) -> bool:
    """Text that is a whole number in ASCII digits, of any length."""
    body = text.strip().lstrip("+-")
    return body.isascii() and body.isdigit()


def _flow(value: object, depth: int = 0) -> str:
    """A value as YAML's flow style and Hydra's overrides write it: null, true, 2, 2.5, 'two', [2, 2], {a: 1}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # more digits than Python writes out (int_max_str_digits)
            return f"a number of more than {MAX_DIGITS} digits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if depth and _PLAIN_WORD.fullmatch(value) and value.lower() not in ("true", "false", "null", "none"):
            return value  # a list's or dict's plain word, as YAML writes it: [contiguous]
        return repr(value[:MAX_SHOWN * 4])  # quoted: text, with any control character escaped
    if depth > 4:
        return "…"
    if isinstance(value, dict):
        items = list(value.items())
        shown = [f"{_flow(k, depth + 1)}: {_flow(v, depth + 1)}" for k, v in items[:MAX_ITEMS]]
        return "{" + ", ".join(shown + (["…"] if len(items) > MAX_ITEMS else [])) + "}"
    if isinstance(value, (list, tuple)):
        items = list(value)
        return "[" + ", ".join([_flow(v, depth + 1) for v in items[:MAX_ITEMS]]
                               + (["…"] if len(items) > MAX_ITEMS else [])) + "]"
    return repr(str(value)[:MAX_SHOWN])


def written(value: object) -> str:
    """A setting's value as a finding quotes it, in the config's own flow style (`'two'`, `2.5`, `[2, 2]`,
    `{a: 1}`, `true`): the whole value when it is short, else its start, or for a long number its digit count."""
    text = _flow(value)
    if len(text) <= MAX_SHOWN:
        return text
    if isinstance(value, int) and not isinstance(value, bool) and text.lstrip("-").isdigit():
        return f"a number of {len(text.lstrip('-'))} digits"
    if isinstance(value, str) and digits_int(value) is None and _digits(value):
        return f"a number of {len(value.strip().lstrip('+-'))} digits"
    short = shorten(text, MAX_SHOWN)  # never through a word: a secret's start would pass redaction
    if len(short) > 1:
        return short
    return f"text of {len(value)} characters" if isinstance(value, str) else f"a value of {len(text)} characters"


def _kind(value: object) -> str:
    return "null" if value is None else "a boolean" if isinstance(value, bool) else \
        "a whole number" if isinstance(value, int) else "a float" if isinstance(value, float) else \
        "text" if isinstance(value, str) else "a list" if isinstance(value, (list, tuple)) else \
        "a dict" if isinstance(value, dict) else type(value).__name__


def _problem(name: str, value: object) -> tuple[str, bool] | None:
    """What is wrong with a setting's value, and whether the other rows lose it (None: nothing is wrong)."""
    # No row judges a list, a dict, an infinity or a NaN (nor can the report's JSON carry the last two).
    container = isinstance(value, (list, tuple, dict)) or (isinstance(value, float) and not math.isfinite(value))
    kind = _kind(value)
    typed = "is not valid" if value is None else f"({kind}) is not valid"
    if name in RANGES:
        low, high, what = RANGES[name]
        number = value if isinstance(value, int) and not isinstance(value, bool) else digits_int(value)
        if isinstance(value, str) and number is None and _digits(value):
            return f"is out of range: it must be {what}", True  # more digits than any integer the doctor parses
        if number is None:
            if value is None and name in MAY_BE_NULL:
                return None
            return f"{typed}: it must be {what}", container or name not in ROWS_JUDGE
        if number > high:
            return f"is out of range: it must be {what}", True
        if number < low:
            return f"is out of range: it must be {what}", name not in ROWS_JUDGE
        return None  # in range; text that spells a number is text_numbers' finding
    if name in BOOLEANS and value is not None and not isinstance(value, bool):
        return f"{typed}: it must be true or false", container
    if name in NAMES and value is not None and not isinstance(value, str):
        return f"{typed}: it must be a name (text)", container
    if name in NUMBERS and value is not None:
        if isinstance(value, float) and not math.isfinite(value):
            return "is out of range: it must be a finite number", True
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{typed}: it must be a finite number", container
    if container:  # no setting the doctor reads takes a list, a dict or an infinity
        return f"({kind}) is not valid", True
    return None


REJECTED = "rejected by job.config"  # the `resolved` of a setting whose value no row can judge


def rejected(job: Job) -> list[str]:
    """Each setting whose value has the wrong type or is out of its range, as job.config's failure quoting it. A
    value the other rows cannot judge becomes not known to them."""
    problems: list[str] = []
    places = [(role, settings) for role, settings in job.roles.items()] + [("", job.common)]
    for role, settings in places:
        for name, setting in list(settings.items()):
            if is_interpolation(setting.value):
                continue  # not known: said as such by the rows that read it
            found = _problem(name, setting.value)
            if found is None:
                continue
            problem, unknown = found
            where = {"config file": " (in the config file)", "default": " (verl's default)"}.get(setting.source, "")
            problems.append(f"{role + ': ' if role else ''}{name} = {written(setting.value)} {problem}{where}")
            if unknown:
                marker = "(out of range)" if problem.startswith("is out of range") else "(not valid)"
                raw = setting.raw[:MAX_SHOWN] if setting.source in ("override", "flag") else written(setting.value)
                settings[name] = Setting(Unexpanded(marker), raw, f"{problem}: {REJECTED}", setting.source)
    return problems


def rejection(setting: Setting | None) -> str | None:
    """Why job.config rejects a setting the rows see as not known (its problem), or None."""
    resolved = setting.resolved if setting is not None and isinstance(setting.value, Unexpanded) else None
    if resolved is None or not resolved.endswith(": " + REJECTED):
        return None
    return resolved[:-len(REJECTED) - 2]


def text_numbers(job: Job) -> list[str]:
    """Each whole-number setting the job gets as text (`${oc.env:CP}` is `'2'`: OmegaConf's oc.env returns a
    string, and verl's config nodes are untyped), as job.config's failure: verl or Megatron does arithmetic on it."""
    from .values import OC_DECODE_ADVICE

    problems = []
    for role, settings in [*job.roles.items(), ("", job.common)]:
        for name, setting in settings.items():
            if name in RANGES and digits_int(setting.value) is not None:
                problems.append(f"{role + ': ' if role else ''}{name} is the text {setting.value[:20]!r}, not a number "
                                f"(written {setting.raw[:80]!r}; OmegaConf's oc.env gives a string, and verl then "
                                "stops with \"TypeError: unsupported operand type(s) for %: 'int' and 'str'\"): "
                                + OC_DECODE_ADVICE)
    return problems
