"""A training command as the doctor reads it: `Setting`s per role, and what they mean for the job (its CP, its DSA
backend, its indexer loss)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model.core import UsageError
from .keys import BRIDGE_DECIDES

if TYPE_CHECKING:
    from .chainstate import Chain


class Unexpanded(str):
    """The value of a setting a whole unexpanded shell word (or a structure the reader does not take apart) may
    hold: the word itself, not known."""


@dataclass
class Setting:
    value: Any  # int, float, bool, None or str, parsed as Hydra/argparse would
    raw: str  # as written in the command
    resolved: str | None = None  # how an interpolation was resolved ("from the environment", ...)
    # Where the value came from: "override" (the command's Hydra override), "flag" (a Megatron-LM flag), "config
    # file" (a config file the command names), "default" (verl's own config tree), "hidden" (an unexpanded shell
    # word may hold it: not known).
    source: str = "override"

    @property
    def type(self) -> str:
        """The value's type as the job gets it (OmegaConf's `oc.env` gives text: "str")."""
        value = self.value
        if isinstance(value, Unexpanded):
            return "not known"
        return "null" if value is None else "bool" if isinstance(value, bool) else "int" if isinstance(value, int) \
            else "float" if isinstance(value, float) else "str"

    def to_dict(self) -> dict:
        value = str(self.value) if isinstance(self.value, Unexpanded) else self.value
        out = {"value": value, "raw": self.raw, "type": self.type, "source": self.source}
        if self.resolved:
            out["resolved"] = self.resolved
        return out


_VARIABLE = re.compile(r"\$(\{|[A-Za-z_(@*])")


def is_interpolation(value: Any) -> bool:
    """A value the command leaves to be filled in: an OmegaConf interpolation (`${...}`) or a shell variable
    (`$NAME`) not expanded before the doctor read it, or a setting such a whole word may hold. Its value is not
    known, never a default."""
    return isinstance(value, Unexpanded) or (isinstance(value, str) and _VARIABLE.search(value) is not None)


@dataclass(frozen=True)
class Decisions:
    """What the doctor made of a command's settings for the profile: how its DSA backend was decided, whether it
    trains the dense indexer loss, and what the options filled in. `profile.job` carries them beside the settings."""

    dsa_backend_decided: str
    dense_indexer_loss: bool | None  # cudnn-fe.dsa's q_causal_offsets rule reads it; None: not known
    cp_given: int | None = None  # --cp, where the command's own CP is not known
    cp_known: bool = True  # False: a command the doctor does not read, checked as CP > 1
    dsa_backend_stated: str | None = None  # a backend Megatron rejects, as the command states it
    dsa_backend_pending: str | None = None  # BRIDGE_DECIDES until Session.resolve reads the bridge's rule
    not_known: str | None = None  # why the command's settings are not known
    dsa_backend_known: bool | None = None  # after Session.resolve: whether the bridge's rule decided it
    dsa_backend_rule: dict | None = None  # the bridge's rule as read, with the imports tried
    # What the options said (--cp, --dsa-backend), for the profile made again from the composed settings; and the
    # usage error the doctor's own reader gives for the CP, held until the composition in the target has answered.
    options: tuple[int | None, str | None] = (None, None)
    cp_pending: str | None = None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        if self.dsa_backend_pending is not None:
            out["dsa_backend_pending"] = self.dsa_backend_pending
        if not self.cp_known:
            out["cp_known"] = False
        if self.cp_given is not None:
            out["cp_given"] = self.cp_given
        if self.dsa_backend_stated is not None:
            out["dsa_backend_stated"] = self.dsa_backend_stated
        out["dsa_backend_decided"] = self.dsa_backend_decided
        if self.not_known is not None:
            out["not_known"] = self.not_known
        out["dense_indexer_loss"] = self.dense_indexer_loss
        if self.dsa_backend_known is not None:
            out["dsa_backend_known"] = self.dsa_backend_known
        if self.dsa_backend_rule is not None:
            out["dsa_backend_rule"] = self.dsa_backend_rule
        return out


@dataclass
class Job:
    """What a training command states. `roles` holds per-role settings (verl: actor, ref, critic; Megatron:
    model); `common` the sequence lengths and the world size."""

    kind: str = "unknown"  # "verl" | "megatron" | "unknown"
    syntax: str = "unknown"  # how a missing setting is written back: "hydra" | "megatron" | "unknown"
    launcher: list[str] = field(default_factory=list)  # the wrappers in front: env, torchrun, python
    entry: str | None = None  # the module or script that trains
    roles: dict[str, dict[str, Setting]] = field(default_factory=dict)
    common: dict[str, Setting] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # `env K=V` in front of the command
    unset: list[str] = field(default_factory=list)  # `env -u NAME` in front of the command
    unknown: list[str] = field(default_factory=list)  # keys and flags not used by any check (names only)
    config_file: list[str] = field(default_factory=list)  # the config-file flags it gives (names only)
    decisions: Decisions | None = None  # set by job_profile: what the profile made of the settings
    # How the settings were read: composed in the target with Hydra and verl's config tree (jobcompose), or by the
    # doctor's own reader; `composed`: the versions and config the composition used.
    read_by: str = "read by the doctor"
    composed: dict | None = None
    # Errors Hydra/OmegaConf (or the doctor's reader where it can judge them) give for the command: job.config fails.
    config_errors: list[str] = field(default_factory=list)
    # Whole words the shell did not expand ($X, ${X}, "${X[@]}", $(...)): the settings they may hold are not known.
    hidden: list[str] = field(default_factory=list)
    hidden_launcher: list[str] = field(default_factory=list)  # such words among the launcher's options
    overrides: list[str] = field(default_factory=list)  # verl: the words after the entry, as given (never reported)
    checked_against: str | None = None  # no Hydra: the verl generated config the overrides were judged against
    unknown_why: str | None = None  # why every setting is not known (the composition failed, Hydra refused it)
    at_preflight: bool = False  # preflight execs the job in this environment: a missing oc.env variable fails it
    trainer: str = "ppo"  # verl's entry: "ppo" (the actor/ref/critic roles) or "sft" (its engine.* keys)
    # What the command runs, as the OS and each launcher in it will run it (job/chain.py): its interpreter and why,
    # entry, working directory, sys.path[0], world size; where it stopped, or the remote host it runs on.
    chain: Chain | None = None
    # The job's Megatron config as the stack's own code built it (job/stackbuild.py, job.stack-config): status
    # ("built", "raised", "not built"), the settings per role, the upstream error, why not, and who decided the
    # profile's settings. None: not asked (no job the probe runs for).
    built: dict | None = None

    def effective(self, role: str) -> dict[str, Setting]:
        """A role's settings as its config sees them: verl's ref inherits the actor's megatron settings
        (`oc.select` in megatron_ref.yaml) unless it states its own."""
        if self.kind == "verl" and role == "ref":
            return {**self.roles.get("actor", {}), **self.roles.get("ref", {})}
        return dict(self.roles.get(role, {}))

    def checked_roles(self) -> list[str]:
        if self.kind == "megatron":
            return ["model"]
        if self.kind == "verl" and self.trainer == "sft":
            return ["engine"]
        if self.kind == "verl":
            return ["actor"] + [r for r in ("ref", "critic") if self.roles.get(r)]
        return []

    def cp(self) -> int | None:
        """The job's CP size: the largest a checked role states (1, the default of verl and Megatron, if none);
        None when a role states one the doctor cannot read (an interpolation it cannot resolve), or states none
        while the command names a config file (which may set it)."""
        sizes = [1]
        for role in self.checked_roles():
            s = self.effective(role).get("cp")
            if s is None:
                if self.config_file:
                    return None
                continue
            if is_interpolation(s.value):
                return None
            spelled = digits_int(s.value)
            if spelled is not None:
                # Text, as OmegaConf's oc.env gives it: the job fails (job.config); its environment is judged for
                # the number it spells.
                sizes.append(positive_int(Setting(spelled, s.raw), "context_parallel_size"))
                continue
            sizes.append(positive_int(s, "context_parallel_size"))
        return max(sizes)

    def dsa_backend(self) -> tuple[str, str]:
        """(backend, how it was decided)."""
        for role in self.checked_roles():
            eff = self.effective(role)
            backend, fusion = eff.get("dsa_kernel_backend"), eff.get("apply_dsa_kernel_fusion")
            if backend is not None and isinstance(backend.value, Unexpanded):
                return "cudnn", (f"not known: {backend.resolved or 'an unexpanded word may hold it'} (the word "
                                 f"{backend.raw[:80]!r}); the environment is checked for cudnn, the stricter")
            if backend is not None and is_interpolation(backend.value):
                # Not known: the environment is judged for the fused kernels, the stricter of the two backends.
                return "cudnn", (f"not known: the command writes dsa_kernel_backend as {backend.raw[:80]!r}, which the "
                                 "doctor cannot resolve; the environment is checked for cudnn, the stricter")
            value = None if backend is None else "null" if backend.value is None else str(backend.value)
            if fusion is not None and is_interpolation(fusion.value) and value in (None, "none"):
                # TransformerConfig folds the deprecated switch in over an unset or "none" backend: not known either.
                return "cudnn", (f"not known: the command writes apply_dsa_kernel_fusion as {fusion.raw[:80]!r}, which "
                                 "the doctor cannot resolve; the environment is checked for cudnn, the stricter")
            if fusion is not None and fusion.value in (True, False) and value in (None, "none"):
                # TransformerConfig folds the deprecated switch in: it wins over an unset or "none" backend.
                legacy = "cudnn" if fusion.value else "none"
                return legacy, (f"stated: apply_dsa_kernel_fusion={fusion.raw} (the deprecated switch; {legacy}"
                                + (", over dsa_kernel_backend=none)" if value else ")"))
            if backend is not None and value is not None:
                return value, f"stated: {backend.raw}" + (f" ({backend.resolved})" if backend.resolved else "")
        if self.config_file:
            # Not known: the environment is judged for the fused kernels, the stricter of the two backends.
            return "cudnn", (f"not stated: the config the command names ({', '.join(self.config_file)}) may set it; "
                             "the environment is checked for cudnn, the stricter")
        if self.kind == "megatron":
            return "cudnn", ("not stated: the Megatron-LM CLI resolves an omitted --dsa-kernel-backend to cudnn for "
                             "dsv4_hybrid")
        if self.kind == "verl":
            # verl leaves it to Megatron-Bridge's DSv4 provider, whose installed rule the session reads (bridge_rule).
            return BRIDGE_DECIDES, "not stated: Megatron-Bridge's DeepSeek-V4 provider decides"
        return "cudnn", ("not known: the command is neither verl nor Megatron-LM, so its DSA setting cannot be read; "
                         "the environment is checked for cudnn, the stricter (state it with --dsa-backend)")

    def dense_indexer_loss(self) -> bool | None:
        """Whether a checked role trains with the dense indexer loss (coeff > 0, dsa_indexer_use_sparse_loss not
        True), which makes Megatron require q_causal_offsets on the dense DSA wrappers too; None: not known."""
        answers = []
        for role in self.checked_roles():
            eff = self.effective(role)
            coeff, sparse = eff.get("dsa_indexer_loss_coeff"), eff.get("dsa_indexer_use_sparse_loss")
            if coeff is None:  # Megatron's default is None (no loss); through verl the Bridge provider decides
                answers.append(False if self.kind == "megatron" and not self.config_file else None)
            elif isinstance(coeff.value, (int, float)) and not isinstance(coeff.value, bool):
                if coeff.value > 0 and sparse is not None and is_interpolation(sparse.value):
                    answers.append(None)  # the sparse switch is written as a variable: not known
                else:
                    answers.append(coeff.value > 0 and not (sparse is not None and sparse.value is True))
            else:
                answers.append(None)
        if any(a is True for a in answers):
            return True
        return None if any(a is None for a in answers) or not answers else False

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "syntax": self.syntax, "launcher": self.launcher[:8], "entry": self.entry,
            "roles": {r: {k: s.to_dict() for k, s in v.items()} for r, v in self.roles.items()},
            "common": {k: s.to_dict() for k, s in self.common.items()},
            "env": dict(self.env), "unset": self.unset[:50], "unknown": self.unknown[:200],
            "unknown_count": len(self.unknown), "config_file": self.config_file[:8],
            "read_by": self.read_by, **({"composed": self.composed} if self.composed else {}),
            **({"config_errors": self.config_errors[:8]} if self.config_errors else {}),
            **({"hidden": self.hidden[:8]} if self.hidden else {}),
            **({"checked_against": self.checked_against} if self.checked_against else {}),
            **({"trainer": self.trainer} if self.kind == "verl" else {}),
            **({"chain": self.chain.to_dict()} if self.chain is not None else {}),
            **({"built": self.built} if self.built is not None else {}),
            **(self.decisions.to_dict() if self.decisions is not None else {}),
        }


def positive_int(setting: Setting, name: str) -> int:
    """The setting's whole number. The profile judges the job's values first (bounds.rejected: a wrong one is
    job.config's finding and not known here), so only a caller of Job.cp() on a job not judged meets this error."""
    value = setting.value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        from .shape import plain_or_hidden

        raise UsageError(f"the job's {name}={plain_or_hidden(setting.raw)} is not a positive whole number")
    return value


MAX_INT_DIGITS = 4000  # int() of longer text raises under Python's int_max_str_digits (4300): never parsed


def digits_int(value: object) -> int | None:
    """A whole number written as text (`'2'`, as OmegaConf's oc.env gives it), exactly; None otherwise."""
    if not isinstance(value, str) or is_interpolation(value):
        return None
    text = value.strip()
    body = text[1:] if text[:1] in "+-" else text
    return int(text) if body.isdigit() and body.isascii() and len(body) <= MAX_INT_DIGITS else None
