"""verl: the contiguous CP layout plumbing, read statically (importing verl.models.mcore imports Megatron)."""

from __future__ import annotations

from dsv4_doctor.api import (Context, Result, Source, StaticRequest, UpstreamText, check, errored, failed, passed,
                             skipped)

from .fixes import catalogue as fixes
from ._upstream import verl_at

UTIL = "verl.models.mcore.util"
ENGINE = "verl.workers.engine.megatron.transformer_impl"
REPLAY = "verl.utils.megatron.router_replay_utils"
STATIC = StaticRequest(distributions=("verl",), modules=("verl",), sources=(UTIL, ENGINE, REPLAY),
                       contains=("default_dynamic_cp", "torch.int16"))
FIX_VERL = fixes.VERL


def markers(static) -> dict:
    util, engine, replay = static.source(UTIL), static.source(ENGINE), static.source(REPLAY)
    fn = (util.get("functions") or {})

    def has_param(name):
        return "cp_layout" in (fn.get(name) or {}).get("params", [])

    engine_cls = (engine.get("classes") or {}).get("MegatronEngine") or {}
    return {
        "#7221 contiguous layout (cp_layout in preprocess/postprocess_thd_engine)":
            has_param("preprocess_thd_engine") and has_param("postprocess_thd_engine"),
        "#7221 MegatronEngine._get_context_parallel_layout":
            "_get_context_parallel_layout" in engine_cls.get("methods", {}),
        "#7297 PackedSeqParams probe (_PACKED_SEQ_PARAMS_HAS_CP_PARTITION_MODE)":
            "_PACKED_SEQ_PARAMS_HAS_CP_PARTITION_MODE" in (util.get("names") or []),
        "#7297 router replay follows the layout (_context_parallel_layout)":
            "_context_parallel_layout" in (replay.get("functions") or {}),
        "#6555 dynamic CP (default_dynamic_cp)": bool((engine.get("contains") or {}).get("default_dynamic_cp")),
        "#7407 int16 routed experts": bool((replay.get("contains") or {}).get("torch.int16")),
    }


LAYOUT_TEXTS = (
    UpstreamText("V1", "Unsupported context parallel layout: {cp_layout}", verl_at("verl/models/mcore/util.py", 354),
                 "ValueError"),
)


@check(
    "verl.cp-layout",
    "verl carries the contiguous CP layout plumbing",
    texts=LAYOUT_TEXTS,
    applies_when="verl installed, CP > 1",
    detects="verl source markers of PRs #7221, #7297, #6555, #7407 (ast)",
    sources=(
        Source("verl PR #7221 (contiguous CP layout)", "https://github.com/verl-project/verl/pull/7221"),
        Source("verl PR #7297 (PackedSeqParams probe, router replay layout)", "https://github.com/verl-project/verl/pull/7297"),
        Source("verl PR #6555 (dynamic CP)", "https://github.com/verl-project/verl/pull/6555"),
    ),
    fixes=(FIX_VERL,),
    static=STATIC,
)
def verl_cp_layout(ctx: Context) -> Result:
    """verl packs THD batches for Megatron. For DSv4 with CP > 1 it must use the contiguous layout (PR #7221:
    `cp_layout` in preprocess/postprocess_thd_engine, `MegatronEngine._get_context_parallel_layout`), probe
    PackedSeqParams for `cp_partition_mode` and pack router-replay tensors in the same layout (PR #7297);
    before #7297, replayed routes are packed zigzag while model rows are contiguous: a shape error or routes
    silently attached to the wrong tokens. The version string does not help (main reported 0.9.0.dev across
    that window; #7297 changed no signature), so the markers are read from the source with ast.
    """
    static = ctx.static
    if not static.module("verl").get("found"):
        return skipped("verl is not installed")
    found = markers(static)
    version = static.version("verl") or "(no metadata)"
    unreadable = {m: static.source(m).get("error") for m in (UTIL, ENGINE, REPLAY) if static.source(m).get("error")}
    module = static.module("verl")
    evidence = {"version": version, "markers": found, "unreadable": unreadable,
                "module": module.get("origin") or module.get("locations"),
                "imported_copy": static.copy("verl")["why"]}  # the copy whose source markers are read, and why
    missing_7221 = [k for k in found if k.startswith("#7221") and not found[k]]
    missing_7297 = [k for k in found if k.startswith("#7297") and not found[k]]
    if ctx.profile.cp == 1:
        state = "present" if not (missing_7221 or missing_7297) else "absent"
        return skipped(f"CP = 1: the CP layout plumbing is not used (verl {version}: contiguous layout {state})",
                       evidence=evidence)
    if (missing_7221 or missing_7297) and unreadable:
        # A marker not found in a file that was not (wholly) read is not known to be missing.
        return errored(f"verl {version}: cannot tell whether it has the CP layout plumbing: "
                       + "; ".join(f"{m}: {why}" for m, why in unreadable.items()),
                       "Not found in what was read: " + "; ".join(missing_7221 + missing_7297), evidence=evidence)
    if missing_7221:
        return failed(
            f"verl {version} lacks the contiguous CP layout (PR #7221): it packs DSv4 THD batches zigzag",
            "Megatron's DSv4 attention then raises \"DSv4 THD CP requires a contiguous CP partition.\" Missing: "
            + "; ".join(missing_7221), fixes=[FIX_VERL], evidence=evidence)
    if missing_7297:
        return failed(
            f"verl {version} lacks PR #7297: router replay is packed zigzag while model rows are contiguous",
            "That is a shape error, or routes silently attached to the wrong tokens. Missing: "
            + "; ".join(missing_7297), fixes=[FIX_VERL], evidence=evidence)
    extra = "" if found["#6555 dynamic CP (default_dynamic_cp)"] else "; no dynamic CP (#6555)"
    return passed(f"verl {version}: contiguous CP layout (#7221), PackedSeqParams probe and router-replay layout "
                  f"(#7297){extra}",
                  "For model_type deepseek_v4 with CP > 1, verl (#6555) sets cp_partition_mode=contiguous and "
                  "sequence_packing_scheduler=default_dynamic_cp after copying the user's overrides, so a script's "
                  "dp_balanced is replaced." if not extra else "", evidence=evidence)

CHECKS = [verl_cp_layout]
