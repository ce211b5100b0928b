"""The ranges a job's numeric settings must lie in. A value outside its range (a 400-digit max_response_length, a CP
of 5000) is no setting any job runs with: job.config fails and states the range, and the setting is not known to the
other rules (never a crash, never a guess). Arithmetic on settings is exact integer arithmetic."""

from __future__ import annotations

import math

from .model import Job, Setting, Unexpanded, is_interpolation

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
MAX_DIGITS = 4000  # int() of longer text raises under Python's int_max_str_digits (4300): such text is never parsed


def digits_int(value: object) -> int | None:
    """A whole number written as text (`'2'`, as OmegaConf's oc.env gives it), exactly; None otherwise."""
    if not isinstance(value, str) or is_interpolation(value):
        return None
    text = value.strip()
    body = text[1:] if text[:1] in "+-" else text
    return int(text) if body.isdigit() and body.isascii() and len(body) <= MAX_DIGITS else None


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else \
        str(value) if isinstance(value, int) and abs(value) < 10**30 else None
    if text is None or len(text) > 30:
        digits = len(str(abs(value))) if isinstance(value, int) else len(str(value))
        return f"a number of {digits} digits" if isinstance(value, int) or str(value).lstrip("+-").isdigit() else \
            "a value of more than 30 characters"
    return text


def out_of_range(job: Job) -> list[str]:
    """Each numeric setting outside its range, as job.config's failure; the setting becomes not known."""
    problems: list[str] = []
    places = [(role, settings) for role, settings in job.roles.items()] + [("", job.common)]
    for role, settings in places:
        for name, setting in list(settings.items()):
            problem = _problem(name, setting)
            if problem is None:
                continue
            problems.append(f"{role + ': ' if role else ''}{name} = {_shown(setting.value)} {problem}")
            settings[name] = Setting(Unexpanded("(out of range)"), setting.raw[:64], "out of range: not known",
                                     setting.source)
    return problems


def _problem(name: str, setting: Setting) -> str | None:
    value = setting.value
    if name == "dsa_indexer_loss_coeff" and isinstance(value, float) and not math.isfinite(value):
        return "is out of range: it must be a finite number"
    if name not in RANGES or isinstance(value, bool) or is_interpolation(value):
        return None
    _, high, what = RANGES[name]
    number = value if isinstance(value, int) else digits_int(value)
    if number is None and isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return f"is out of range: it must be {what}"  # more digits than any integer the doctor parses
    # Below the range (0, -1) the job rows judge it and give the line that fixes it; above it no rule can.
    if number is None or number <= high:
        return None
    return f"is out of range: it must be {what}"


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
