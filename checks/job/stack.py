"""job.stack-config: the job's Megatron config as the stack's own code builds it (doctor/job/stackbuild.py runs the
settings probe in the job's interpreter; its answer is `job.built`)."""

from __future__ import annotations

from dsv4_doctor.api import Context, Result, Source, StaticRequest, check, cut, failed, passed, warned

from .settings import job_of, no_job, unread_row
from .._upstream import gh, mlm

STATIC = StaticRequest(distributions=("torch", "megatron-core", "megatron-bridge", "verl"),
                       modules=("torch", "megatron.core", "megatron.bridge", "verl"))
KEY_SETTINGS = ("context_parallel_size", "cp_partition_mode", "dsa_kernel_backend", "apply_dsa_kernel_fusion",
                "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                "sequence_parallel", "sequence_packing_scheduler", "max_seqlen_per_dp_cp_rank", "apply_rope_fusion",
                "mtp_num_layers")


def _rule_of(message: str) -> list[dict]:
    """The declared rules whose upstream text the message holds (doctor/upstream/registry.py)."""
    from dsv4_doctor.api import classify

    try:
        return [m.to_dict() for m in classify(message)][:3]
    except Exception:  # the registry is no verdict: the row quotes the message either way
        return []


def _versions(built: dict) -> str:
    versions = built.get("versions") or {}
    bridge = versions.get("megatron_bridge") or "(not installed)"
    core = versions.get("megatron_core") or "(no version)"
    return f"Megatron-Bridge {bridge}'s provider and Megatron-core {core}"


def _by_whom(built: dict) -> str:
    mode = built.get("mode")
    if mode == "verl":
        return f"built by verl {(built.get('versions') or {}).get('verl')}'s _build_tf_config with {_versions(built)}"
    if mode == "direct":
        return (f"built by Megatron-core {(built.get('versions') or {}).get('megatron_core')}'s MLATransformerConfig "
                f"from the model's config and verl's overrides; Megatron-Bridge's provider did not run here "
                f"({str(built.get('why_direct'))[:200]}), its fused-DSA decision was supplied "
                f"(apply_dsa_kernel_fusion={built.get('bridge_decision')})")
    return f"built by Megatron-core {(built.get('versions') or {}).get('megatron_core')}'s own argument validation"


def _shown(settings: dict) -> str:
    return ", ".join(f"{k}={settings[k]}" for k in KEY_SETTINGS if k in settings)


@check("job.stack-config", "The stack's own code builds the job's Megatron config", skip_if=no_job, only_with="job",
    applies_when="job arguments given; a verl or Megatron-LM command",
    detects="the settings probe: verl's config validation and _build_tf_config, Megatron-Bridge's provider and "
            "Megatron-Core's config validation, run in the job's interpreter on the CPU",
    sources=(
        gh("verl-project/verl", "blob/v0.9.1/verl/workers/engine/megatron/transformer_impl.py#L283-L440",
           "verl 0.9.1 workers/engine/megatron/transformer_impl.py L283-440 (_build_tf_config)"),
        gh("verl-project/verl", "blob/v0.9.1/verl/workers/config/engine.py#L148-L236",
           "verl 0.9.1 workers/config/engine.py (McoreEngineConfig.__post_init__)"),
        Source("Megatron-Bridge 0.6.2 models/deepseek/deepseek_v4_bridge.py L105-122, L390-472 (the fused-DSA "
               "decision, the DeepSeek-V4 provider)", "https://pypi.org/project/megatron-bridge/0.6.2/"),
        mlm("megatron/core/transformer/transformer_config.py", "1563-1800",
            "Megatron-LM dev transformer_config.py L1563-1800 (TransformerConfig.__post_init__: CP, DSA rules)"),
    ),
    static=STATIC)
def job_stack_config(ctx: Context) -> Result:
    """The job's Megatron config as the stack builds it: in the job's interpreter, on the CPU, without weights, a
    GPU or a process group. For a verl job: its config composed as Hydra will, verl's own validation of it (each
    Megatron role's McoreEngineConfig and the actor's config, validate_config), then verl's `_build_tf_config`
    (Megatron-Bridge's AutoBridge and DeepSeek-V4 provider, verl's provider overrides, the command's
    override_transformer_config, `apply_overrides_and_finalize`, so Megatron's `TransformerConfig.__post_init__`).
    For a Megatron-LM command: Megatron's own argument validation and config. The model's config.json is read
    from a local folder or the local Hugging Face cache only (never the network), and never with
    `trust_remote_code`. The GPU facts the stack reads (its compute capability, whether `from cudnn import DSA`
    and FlashMLA import) are the profile's, supplied inside the probe's own process. A pass names who built the
    config and its key settings, which become the profile's ("as Megatron-Core built it") where the doctor's
    readers said the same (the other rows, judged while the probe ran, were checked for the readers' settings: a
    setting they stated otherwise fails this row, one they did not know is said); an exception fails,
    quoting the upstream message and its file:line; where the probe cannot run (no torch in the target,
    --static-only, a model config that is not local or needs its own code) the row is not known and the
    doctor's own readers decide the settings.
    """
    job = job_of(ctx)
    built = job.built
    if job.kind == "unknown":
        return unread_row(job, "settings as the stack's own code builds them")
    if job.kind not in ("verl", "megatron"):
        return warned("not known: the command is neither verl nor Megatron-LM, so the stack's own code was not run "
                      "for it", evidence={"kind": job.kind})
    if not isinstance(built, dict):
        return warned("not known: the stack's own code was not run for this job (the doctor's readers decided its "
                      "settings)", evidence={"built": None})
    evidence: dict = {"built": built}
    status = built.get("status")
    if status == "built":
        roles = built.get("roles") or {}
        parts = [f"{role}: {_shown(value.get('settings') or {})}" for role, value in sorted(roles.items())]
        said = f"{_by_whom(built)}: " + "; ".join(parts)[:900]
        if built.get("differs"):  # the other rows were judged on the readers' settings: not the job's
            return failed(cut("the stack builds other settings than the doctor's readers, which the other rows were "
                              "checked for: " + "; ".join(map(str, built["differs"])), 600),
                          f"{said}\nCheck again stating them (--dsa-backend, --cp), and report the difference: the "
                          "readers' model of the stack is out of date.", evidence=evidence)
        if built.get("mode") == "direct":  # the bridge's provider did not run: its part is not known
            return warned(cut("not known whether Megatron-Bridge's provider accepts the job: it does not import here "
                              f"({built.get('why_direct')}); Megatron-core's own config accepts the settings", 600),
                          f"{said}\nThese settings are the profile's (as Megatron-Core built it, with the bridge's "
                          "decision supplied).", evidence=evidence)
        if built.get("unchecked"):  # checked as the stricter value: no false pass, maybe a needless fail
            return passed(cut(f"{said}; the other rows were checked for the stricter value where the doctor's "
                              "readers did not know: " + "; ".join(map(str, built["unchecked"])), 900),
                          "Check again stating the stack's value (--dsa-backend, --cp) to judge the rows for it.",
                          evidence=evidence)
        return passed(said, "These settings are the profile's (as Megatron-Core built it).", evidence=evidence)
    if status == "raised":
        error = built.get("error") or {}
        where = f"{error.get('file')}:{error.get('line')}" if error.get("file") else "a frame outside the stack"
        message = str(error.get("message") or "")
        rules = _rule_of(message)
        evidence["rules"] = rules
        named = f" (the rule of {', '.join(sorted({r['check_id'] for r in rules}))})" if rules else ""
        first = message.splitlines()[0] if message else "(no message)"
        return failed(cut(f"{error.get('type')}: {first} ({where}, at {error.get('stage')}){named}", 600),
                      f"{error.get('type')}: {message}\nraised at {where} while {error.get('stage')}; the stack's "
                      f"own code stops the job there. The profile's settings are the doctor's readers'.",
                      evidence=evidence)
    return warned(cut(f"not known: not built: {built.get('why')}", 600),
                  f"the job's settings are {built.get('decided_by') or 'the doctor readers'}'s", evidence=evidence)
