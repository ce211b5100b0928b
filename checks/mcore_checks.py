"""Megatron-core: read with ast, never imported (import megatron.core takes about 14 s).

The version string cannot tell dev from a release (dev reports 0.19.0, like the release without DSv4), so these
checks look for the features: files, dataclass fields, parameters.
"""

from __future__ import annotations

import os

from dsv4_doctor.api import (Context, Result, Source, StaticRequest, UpstreamText, check, errored, failed, passed,
                             skipped, warned)

from .fixes import catalogue as fixes
from ._reach import hides, target_entry
from ._anchors import UNEXPECTED_KEYWORD, missing_module
from ._upstream import EAV, VERL, gh, mlm, mlm_change, verl_at

MCORE = "megatron-core"
EAV_MOD = EAV.replace("/", ".").rstrip(".")
PSP = "megatron.core.packed_seq_params"
TC = "megatron.core.transformer.transformer_config"
MPC = "megatron.core.model_parallel_config"
# Marker modules, newest layout first; each tells how far along dev the tree is.
MARKERS = {
    f"{EAV_MOD}.deepseek_v4_hybrid_attention": "dsv4_hybrid attention (dev >= bf4e1db3)",
    f"{EAV_MOD}.csa": "CompressedSparseAttention",
    f"{EAV_MOD}.csa_utils.cp_layout_kernels": "csa_utils/ layout (dev >= 1c44a570)",
    f"{EAV_MOD}.csa_cp_layout_kernels": "older csa_cp_layout_kernels.py (dev before 1c44a570)",
    f"{EAV_MOD}.csa_utils.fused_compressor": "fused CSA compressor (dev >= 108cb6bc)",
    f"{EAV_MOD}.csa_fused_compressor": "fused CSA compressor, older name (dev 108cb6bc to before 1c44a570)",
    "megatron.core.context_parallel_layout": "context_parallel_layout (dev >= 3f49de20)",
}
VERL_ENGINE = "verl.workers.engine.megatron.transformer_impl"
DSV4_MOD = f"{EAV_MOD}.deepseek_v4_hybrid_attention"
DSV4_CLASS = "DSv4HybridAttention"  # what Megatron's dsv4_hybrid spec builds (dev bf4e1db3 .. d48bd6be and later)
STATIC = StaticRequest(distributions=(MCORE, "verl"), modules=("megatron.core", *MARKERS),
                       sources=(PSP, TC, MPC, VERL_ENGINE, DSV4_MOD), contains=("default_dynamic_cp",))

FIX_MCORE = fixes.MCORE
SITE_DIRS = ("site-packages", "dist-packages")

V2 = ("ValueError: cp_layout='contiguous' requires PackedSeqParams.cp_partition_mode, which this Megatron-core "
      "version does not provide. Upgrade Megatron-core or use the zigzag layout.")
R1 = "DSv4 THD CP requires a contiguous CP partition."
# verl's example divides with `/ ACTOR_CP`, which rounds down and leaves the longest sample short when the sum is no
# multiple of CP; this is the same division rounded up (doctor/job/settings.py gives the number for a job command).
CP_ARGS = (
    "++actor_rollout_ref.actor.megatron.override_transformer_config.cp_partition_mode=contiguous",
    "++actor_rollout_ref.actor.megatron.override_transformer_config.sequence_packing_scheduler=dp_balanced",
    "++actor_rollout_ref.actor.megatron.override_transformer_config.max_seqlen_per_dp_cp_rank="
    "$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH + ACTOR_CP - 1) / ACTOR_CP))",
)


def _direct_url(dist: dict | None) -> dict:
    url = (dist or {}).get("direct_url")
    return url if isinstance(url, dict) else {}


def _where(static) -> dict:
    mod = static.module("megatron.core")
    dist = static.dist(MCORE)
    copy = static.copy("megatron.core")
    url = _direct_url(dist)
    vcs = url.get("vcs_info")
    dir_info = url.get("dir_info")
    owner = copy["owner"] or {}
    evidence = {
        "megatron.core": mod.get("origin") or mod.get("locations"),
        "imported_copy": copy["why"],  # which copy the job imports, and why (its folder, PYTHONPATH, an editable)
        "distribution": dist.get("version") if dist else None,
        "distribution_path": dist.get("path") if dist else None,
        "vcs": vcs if isinstance(vcs, dict) else None,
        "editable": bool(dir_info.get("editable")) if isinstance(dir_info, dict) else owner.get("editable", False),
    }
    if copy["version_from"] == "files":
        evidence["files_version"] = copy["version"]  # package_info.py of a checkout no distribution owns
    if copy["owner_not_known"]:
        evidence["owner_not_known"] = copy["owner_not_known"]
    if copy["git"] and copy["git"].get("commit"):
        evidence["git_commit"] = copy["git"]["commit"]
    return evidence


def checkout(static, evidence: dict) -> str | None:
    """The folder megatron.core imports from when pip does not write it: a checkout on PYTHONPATH (Megatron-Bridge's
    3rdparty/Megatron-LM in verl's image), the job's own folder (a Megatron-LM checkout that runs pretrain_gpt.py),
    or an editable install's checkout. pip cannot change what that folder holds."""
    copy = static.copy("megatron.core")
    if copy["place"] == "editable":
        return (copy["owner"] or {}).get("checkout") or copy["root"]
    if target_entry(static, copy, MCORE):
        return None  # a `pip install --target` folder on PYTHONPATH: the pip step is aimed at it (checks/_reach.py)
    return copy["root"] if hides(static, copy, MCORE) else None


def mcore_fix(ctx: Context):
    static = ctx.static
    return mcore_fix_of(static, _where(static))


def mcore_fix_of(static, evidence: dict):
    root = checkout(static, evidence)
    git = static.copy("megatron.core")["git"] or {}
    return fixes.mcore(root, git.get("root") if root else None, static.copy("megatron.core")["why"])


DSV4_TEXTS = (
    UpstreamText("M14", "Invalid experimental attention variant: {variant}",
                 mlm("megatron/core/models/gpt/experimental_attention_variant_module_specs.py", "220"), "ValueError"),
    *missing_module("I-megatron", "megatron"),
)


@check(
    "mcore.dsv4",
    "Megatron-core has the dsv4_hybrid attention (dev branch)",
    texts=DSV4_TEXTS,
    applies_when="always",
    detects="megatron.core location; DSv4/CSA module files; megatron-core metadata and direct_url",
    sources=(
        mlm(EAV + "deepseek_v4_hybrid_attention.py", "59", "Megatron-LM dev deepseek_v4_hybrid_attention.py"),
        mlm("megatron/core/package_info.py", "", "Megatron-LM dev package_info.py (reports 0.19.0)"),
        mlm("megatron/core/models/gpt/experimental_attention_variant_module_specs.py", "",
            "experimental_attention_variant_module_specs.py (Invalid experimental attention variant)"),
        Source("Megatron-Bridge #4460 (DSv4 needs Megatron-LM dev)", "https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/4460"),
        mlm_change("5809", "Megatron-LM #5809 (4b01a1b9): a zero indexer loss still marks the indexer grads ready "
                   "under overlapped DDP (verl's script runs dsa_indexer_loss_coeff=0.0 under CP)"),
        mlm_change("108cb6bcb67415a3577909595064804300bd54f9",
                   "Megatron-LM 108cb6bc (#5984): the fused CSA compressor"),
        mlm_change("6888385f", "Megatron-LM 6888385f (#6020): dsa_kernel_backend (fd1121b8 has only "
                   "apply_dsa_kernel_fusion)"),
        Source("Python docs: the initialization of sys.path (sys.path[0] is the script's folder, or the working "
               "directory for -m and -c)", "https://docs.python.org/3/library/sys_path_init.html"),
        Source("PEP 660: editable installs (the meta-path finders setuptools' pip install -e registers)",
               "https://peps.python.org/pep-0660/"),
    ),
    fixes=(FIX_MCORE,),
    static=STATIC,
)
def mcore_dsv4(ctx: Context) -> Result:
    """DSv4's attention variant `dsv4_hybrid` exists only on Megatron-LM's dev branch; every megatron-core release
    fails at model build with "Invalid experimental attention variant: dsv4_hybrid". Dev reports the same
    version as the 0.19.0 release (and adds +sha only when git works at import), so the check finds the files
    without importing Megatron and reports the branch evidence it can see: the DSv4 module files, the
    csa_utils/ layout, the fused compressor, the context_parallel_layout package, the installed distribution's
    VCS commit, and whether a PYTHONPATH tree shadows the installed distribution. The fix pins dev d48bd6be
    (2026-08-21) or later. verl's DSv4 example was tested with fd1121b8, but that commit predates the fixes a CP
    job with verl's settings needs: 4b01a1b9 (#5809: a zero indexer loss, as verl's script sets under CP, must
    still mark the indexer grads ready under overlapped DDP), #5960/#6349 (indexer-loss fixes), 108cb6bc (the
    fused CSA compressor) and 6888385f (dsa_kernel_backend). When megatron.core imports from a checkout on
    PYTHONPATH (verl's image puts Megatron-Bridge's 3rdparty/Megatron-LM there), `pip install` would not take
    effect: the fix then names that folder instead. The copy judged is the one the job imports: a Megatron-LM
    checkout in the job's own folder (`torchrun pretrain_gpt.py` run there), on PYTHONPATH, or installed editable
    (`pip install -e .`, found through its meta-path finder); a git checkout's fix moves the checkout itself to the
    dev commit (git fetch, git checkout).
    """
    static = ctx.static
    evidence = _where(static)
    if not static.module("megatron.core").get("found"):
        return failed("Megatron-core is not installed", fixes=[FIX_MCORE], evidence=evidence)
    evidence["checkout"] = checkout(static, evidence)
    found = {name: static.module(name).get("found", False) for name in MARKERS}
    evidence["markers"] = {MARKERS[n]: ok for n, ok in found.items()}
    copy = static.copy("megatron.core")
    shadow = ""
    owner = copy["owner"] or {}
    dist_path = evidence["distribution_path"]
    unknown = copy["owner_not_known"]
    if evidence["checkout"] and copy["place"] != "editable":
        installed = (f"the installed megatron-core {evidence['distribution']} distribution "
                     f"({os.path.dirname(dist_path)})") if dist_path and owner.get("path") != dist_path and not (
            unknown and os.path.realpath(os.path.dirname(dist_path)) == os.path.realpath(evidence["checkout"])) \
            else None
        shadow = (f" megatron.core imports from {evidence['checkout']} ({copy['why']})"
                  + (f", not from {installed}, which it shadows." if installed else "."))
    elif copy["place"] == "editable":
        shadow = f" megatron.core imports from an editable install ({copy['why']})."
    if unknown:
        shadow += f" Which distribution installed megatron.core is not known: {unknown}."
    stated = copy["version"] if copy["version_from"] == "files" else None
    # Its owner is the distribution whose RECORD lists megatron/core's files: megatron-bridge shares `megatron`.
    version = owner.get("version") or (None if unknown else evidence["distribution"]) or (
        f"{stated} (package_info.py)" if stated else "(version not known)" if unknown else "(no metadata)")
    if owner.get("version") and str(owner.get("name") or "").lower().replace("_", "-") != MCORE:
        version += f" (as {owner.get('name')}, whose RECORD lists megatron.core's files)"
    # The code that runs is what is named: a shadowing tree is not the distribution whose version pip reports.
    what = (f"the Megatron-core tree at {evidence['checkout']}" if evidence["checkout"] and copy["place"] != "editable"
            else f"Megatron-core {version}")
    if not found[f"{EAV_MOD}.deepseek_v4_hybrid_attention"]:
        return failed(
            f"{what} has no dsv4_hybrid attention: the model build fails with \"Invalid "
            "experimental attention variant: dsv4_hybrid\"",
            "Every megatron-core release lacks DSv4 (it exists only on the dev branch), and dev reports the same "
            "version string, so the files decide." + shadow,
            fixes=[mcore_fix_of(static, evidence)], evidence=evidence)
    source = static.source(DSV4_MOD)
    classes = source.get("classes")
    if (not isinstance(classes, dict) or DSV4_CLASS not in classes) and source.get("truncated"):
        return errored(f"{what} has a deepseek_v4_hybrid_attention module over the read limit, and no {DSV4_CLASS} "
                       f"in what was read of it: whether it defines one is not known ({source.get('error')})",
                       evidence=evidence)
    if not isinstance(classes, dict) or DSV4_CLASS not in classes:
        # A file is not a feature: an empty or foreign deepseek_v4_hybrid_attention.py must not read as dev.
        why = f"it could not be read ({source.get('error')})" if source.get("error") else f"it defines no {DSV4_CLASS}"
        return failed(f"{what} has a deepseek_v4_hybrid_attention module, but {why}",
                      f"{source.get('path') or DSV4_MOD}: the dsv4_hybrid spec builds {DSV4_CLASS} from it." + shadow,
                      fixes=[mcore_fix_of(static, evidence)], evidence=evidence)
    have = [MARKERS[n] for n, ok in found.items() if ok]
    vcs = evidence["vcs"] or {}
    # A checkout the job imports in front of the distribution: its own commit, not the distribution's.
    commit_id = evidence.get("git_commit") if evidence["checkout"] else (vcs.get("commit_id")
                                                                         or evidence.get("git_commit"))
    commit = f" at {commit_id[:8]}" if isinstance(commit_id, str) and commit_id else ""
    return passed(f"Megatron-core dev{commit} (reports {version}): " + "; ".join(have),
                  shadow.strip(), evidence=evidence)


def _class(static, module: str, name: str):
    src = static.source(module)
    if not src.get("found"):
        return None, src
    return (src.get("classes") or {}).get(name), src


PARTITION_TEXTS = (
    UpstreamText("R1", R1, mlm(EAV + "deepseek_v4_hybrid_attention.py", "269-271"), "ValueError"),
    # verl writes the layout it was given ('contiguous' in the doctor's quote) into the text: matched after it.
    UpstreamText("V2", V2.removeprefix("ValueError: "), verl_at("verl/models/mcore/util.py", 547), "ValueError",
                 match=("cp_layout='", V2.partition("'contiguous'")[2])),
    # What the smoke's tier 2 sees where PackedSeqParams or the layer lacks the contiguous layout.
    UpstreamText("S1", "{what} requires cp_partition_mode='contiguous'", mlm(EAV + "csa.py", "2106-2109"),
                 "ValueError", match=("requires cp_partition_mode='contiguous'",)),
    UpstreamText("S2", "__init__() got an unexpected keyword argument 'cp_partition_mode'",
                 UNEXPECTED_KEYWORD, "TypeError",
                 match=("unexpected keyword argument 'cp_partition_mode'",)),
)


@check(
    "mcore.cp-partition-mode",
    "PackedSeqParams carries cp_partition_mode (contiguous CP layout)",
    texts=PARTITION_TEXTS,
    applies_when="Megatron-core installed; required when CP > 1",
    detects="PackedSeqParams dataclass fields / __init__ parameters (ast)",
    sources=(
        mlm("megatron/core/packed_seq_params.py", "37", "Megatron-LM dev packed_seq_params.py L37"),
        mlm(EAV + "deepseek_v4_hybrid_attention.py", "271", "Megatron-LM dev deepseek_v4_hybrid_attention.py L271"),
        Source("verl verl/models/mcore/util.py (PR #7297: _PACKED_SEQ_PARAMS_HAS_CP_PARTITION_MODE)",
               "https://github.com/verl-project/verl/pull/7297"),
    ),
    fixes=(FIX_MCORE,),
    needs=("mcore.dsv4",),
    static=STATIC,
)
def mcore_cp_partition_mode(ctx: Context) -> Result:
    """DSv4 with CP > 1 needs each CP rank to own one contiguous slice of the packed THD buffer, selected by
    `PackedSeqParams.cp_partition_mode = "contiguous"`. The field exists on Megatron-LM dev from bfa33263 and in
    no release. verl detects it exactly this way (the parameter in `PackedSeqParams.__init__`'s signature, or a
    `**kwargs`) and otherwise raises "cp_layout='contiguous' requires PackedSeqParams.cp_partition_mode, which
    this Megatron-core version does not provide"; without verl, Megatron's DSv4 attention raises "DSv4 THD CP
    requires a contiguous CP partition." Read from the dataclass with ast.
    """
    static = ctx.static
    evidence = _where(static)
    if not static.module("megatron.core").get("found"):
        return skipped("Megatron-core is not installed (see mcore.dsv4)", evidence=evidence)
    cls, src = _class(static, PSP, "PackedSeqParams")
    evidence["file"] = src.get("path")
    if src.get("truncated"):
        evidence["read"] = src.get("error")
    if cls is None and src.get("error"):  # a class read before a read limit is whole, and judged
        return errored(f"cannot read {src.get('path')}: {src['error']}", evidence=evidence)
    if cls is None:
        return errored(f"no PackedSeqParams class in {src.get('path') or PSP}", evidence=evidence)
    fields = {f["name"]: f for f in cls["fields"]}
    init = cls["methods"].get("__init__")
    # verl's probe: the parameter in __init__'s signature, or a **kwargs catch-all.
    has = "cp_partition_mode" in fields if init is None else (
        "cp_partition_mode" in init["params"] or bool(init["varkw"]))
    evidence["fields"] = list(fields)
    if has:
        f = fields.get("cp_partition_mode")
        shown = f"{f['annotation']} = {f['default']} (line {f['lineno']})" if f else "accepted through **kwargs"
        return passed(f"PackedSeqParams.cp_partition_mode: {shown}", evidence=evidence)
    if ctx.profile.cp == 1:
        return skipped("CP = 1: no CP partition is made; this Megatron-core's PackedSeqParams has no "
                       "cp_partition_mode (CP > 1 will need it)", evidence=evidence)
    return failed(
        "PackedSeqParams has no cp_partition_mode: verl stops with " + V2,
        f"Without the field verl cannot ask for the contiguous layout, and Megatron's DSv4 attention rejects the "
        f"zigzag default: \"{R1}\". The field exists on Megatron-LM dev from bfa33263 (the CP merge); no release "
        "has it.",
        fixes=[mcore_fix(ctx)], evidence=evidence)

CP_FIELDS = ("cp_partition_mode", "sequence_packing_scheduler", "max_seqlen_per_dp_cp_rank")


def job_settings(static) -> str:
    """The CP settings to give verl, and what verl (>= #6555) will really use for deepseek_v4."""
    text = ("Job settings for CP > 1 (verl run_deepseek_v4_flash_megatron.sh CP_ARGS; needs TE >= 2.9):\n  "
            + "\n  ".join(CP_ARGS))
    if (static.source(VERL_ENGINE).get("contains") or {}).get("default_dynamic_cp"):
        text += ("\nverl " + (static.version("verl") or "") + " (PR #6555) sets cp_partition_mode=contiguous and "
                 "sequence_packing_scheduler=default_dynamic_cp itself for model_type deepseek_v4 with CP > 1, after "
                 "copying these overrides: the scheduler in use is default_dynamic_cp, whose max_seqlen_per_dp_cp_rank "
                 "counts DP x CP ranks.")
    return text


@check(
    "mcore.config",
    "TransformerConfig has the DSv4 CP and DSA settings",
    applies_when="Megatron-core installed; CP fields when CP > 1; DSA knob when dsa_backend=cudnn",
    detects="ModelParallelConfig / TransformerConfig dataclass fields (ast)",
    sources=(
        mlm("megatron/core/model_parallel_config.py", "98", "Megatron-LM dev model_parallel_config.py L98"),
        mlm("megatron/core/transformer/transformer_config.py", "1563-1616",
            "Megatron-LM dev transformer_config.py L1563-1616 (CP partition rules)"),
        Source("verl examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh (CP_ARGS)",
               "https://github.com/verl-project/verl/blob/main/examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh"),
        gh("verl-project/verl", "pull/6555", "verl #6555: for deepseek_v4 with CP > 1 verl sets "
           "sequence_packing_scheduler=default_dynamic_cp itself, after the user's overrides"),
        gh("verl-project/verl", f"blob/{VERL}/verl/workers/engine/megatron/transformer_impl.py",
           f"verl {VERL} workers/engine/megatron/transformer_impl.py (the default_dynamic_cp override)"),
    ),
    fixes=(FIX_MCORE,),
    needs=("mcore.dsv4",),
    static=STATIC,
)
def mcore_config(ctx: Context) -> Result:
    """A DSv4 CP > 1 job sets `cp_partition_mode=contiguous`, a `sequence_packing_scheduler` (dp_balanced or
    default_dynamic_cp) and `max_seqlen_per_dp_cp_rank` (verl's CP_ARGS; verl >= #6555 sets the layout and
    default_dynamic_cp itself for deepseek_v4, after the user's overrides, and the report says which scheduler
    will be used), and selects fused DSA with
    `dsa_kernel_backend=cudnn` (dev >= 6888385f) or the deprecated `apply_dsa_kernel_fusion=True` (older dev, a
    warning: the new knob is preferred). A Megatron-core without these fields cannot take the settings at all.
    Read from ModelParallelConfig and TransformerConfig with ast; the report repeats the exact job settings.
    """
    static = ctx.static
    evidence = _where(static)
    if not static.module("megatron.core").get("found"):
        return skipped("Megatron-core is not installed (see mcore.dsv4)", evidence=evidence)
    fields: dict[str, str] = {}
    for module, name in ((MPC, "ModelParallelConfig"), (TC, "TransformerConfig")):
        cls, src = _class(static, module, name)
        if cls is None and src.get("error"):
            return errored(f"cannot read {src.get('path')}: {src['error']}", evidence=evidence)
        if cls is None:
            return errored(f"no {name} class in {src.get('path') or module}", evidence=evidence)
        fields.update({f["name"]: f"{name}.{f['name']}: {f['annotation']} (line {f['lineno']})"
                       for f in cls["fields"]})
    wanted = CP_FIELDS + ("dsa_kernel_backend", "apply_dsa_kernel_fusion")
    evidence["fields"] = {k: fields.get(k) for k in wanted}
    problems = []
    if ctx.profile.cp > 1:
        problems += [f for f in CP_FIELDS if f not in fields]
    backend_knob = "dsa_kernel_backend" if "dsa_kernel_backend" in fields else (
        "apply_dsa_kernel_fusion" if "apply_dsa_kernel_fusion" in fields else None)
    if ctx.profile.dsa_backend == "cudnn" and backend_knob is None:
        problems.append("dsa_kernel_backend (or the older apply_dsa_kernel_fusion)")
    settings = job_settings(static) if ctx.profile.cp > 1 else ""
    if problems:
        return failed(
            "TransformerConfig lacks " + ", ".join(problems)
            + ": verl's override_transformer_config entries for them fail when the config is built",
            (settings + "\n" if settings else "") + "These fields exist on Megatron-LM dev (cp_partition_mode and "
            "sequence_packing_scheduler from bfa33263; dsa_kernel_backend from 6888385f, apply_dsa_kernel_fusion "
            "before).", fixes=[mcore_fix(ctx)], evidence=evidence)
    knob = {"dsa_kernel_backend": "dsa_kernel_backend=cudnn",
            "apply_dsa_kernel_fusion": "apply_dsa_kernel_fusion=True (older dev: no dsa_kernel_backend)",
            None: "no DSA backend knob"}[backend_knob]
    cp_note = "cp_partition_mode, sequence_packing_scheduler, max_seqlen_per_dp_cp_rank present" \
        if all(f in fields for f in CP_FIELDS) else "CP fields absent (not needed at CP = 1)"
    if ctx.profile.dsa_backend == "cudnn" and backend_knob == "apply_dsa_kernel_fusion":
        return warned(f"{cp_note}; fused DSA is selected with {knob}", settings, evidence=evidence)
    return passed(f"{cp_note}; fused DSA knob: {knob}", settings, evidence=evidence)

CHECKS = [mcore_dsv4, mcore_cp_partition_mode, mcore_config]
