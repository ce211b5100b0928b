"""Kernel extras DSv4 attention reaches for: FlashMLA, fast-hadamard-transform, triton."""

from __future__ import annotations

from dsv4_doctor.api import (Context, Fix, Phase, Result, Source, StaticRequest, UpstreamText, check, error_text,
                             failed, import_probe, outcome, passed, version, warned)

from .fixes import catalogue as fixes
from ._archs import NO_KERNEL_IMAGE, RULES_SOURCE, judge
from .job.dsa import backend_none_fix
from ._cudnn_fe_common import M8_FLASH_MLA, m8
from ._cutedsl_stack import FE
from ._anchors import UNEXPECTED_KEYWORD, missing_module, missing_prefix, undefined_symbols
from ._upstream import EAV, measured, mlm, pypi, verl_at

FIX_BACKEND_NONE = fixes.BACKEND_NONE

FLASH_MLA_API = "flash_mla.flash_mla_interface"  # where flash_mla_sparse_fwd is defined (main and nv_dev)
STATIC = StaticRequest(
    distributions=("flash-mla", "flash_mla", "fast-hadamard-transform", "triton", "torch", FE, "megatron-bridge"),
    modules=("flash_mla", "fast_hadamard_transform", "triton", "verl.models.mcore.patch", "cudnn"),
    sources=("verl.models.mcore.patch", FLASH_MLA_API),
    device_code=("flash_mla", "fast_hadamard_transform_cuda"),
)
SPARSE_FWD = "flash_mla:flash_mla_sparse_fwd"
FLASH_MLA = import_probe(SPARSE_FWD, signatures=[SPARSE_FWD])
HADAMARD = import_probe("fast_hadamard_transform:hadamard_transform")

FIX_FLASH_MLA = fixes.FLASH_MLA
FIX_HADAMARD = fixes.FAST_HADAMARD


def arch_failure(ctx: Context, module: str, label: str, fix_list: list[Fix], evidence: dict) -> Result | None:
    """A failure when the module's compiled extension holds no device code that runs on the target GPU; else None,
    with what was read in the evidence (`device_code`)."""
    verdict = judge(ctx.static.device_code(module), ctx.profile)
    evidence["device_code"] = verdict
    if verdict["state"] != "none-runs":
        return None
    return failed(f"{label} is built for the wrong GPU: {verdict['text']}",
                  f"It imports, but its first kernel launch fails with \"{NO_KERNEL_IMAGE}\" (on an H200, FlashMLA's "
                  "SM100-only build printed that CUDA error and then segfaulted).", fixes=fix_list, evidence=evidence)


def arch_note(evidence: dict) -> str:
    """The device code's part of a passing summary: what runs on the target, or that it could not be judged."""
    verdict = evidence.get("device_code") or {}
    if verdict.get("state") == "runs":
        return f"; device code {verdict['text']}, for {verdict.get('target_cc')}"
    if verdict.get("state") == "not-known":
        return f"; whether its device code runs on the target is not known: {verdict['text']}"
    return ""


HADAMARD_DEFAULT_ARCHS = ("sm_70", "sm_80", "sm_90")  # its setup.py's -gencode list


def hadamard_arch_fix(ctx: Context, build: Fix) -> Fix:
    """The fast-hadamard build for the target: the plain build where its default gencodes cover the CC, else the
    gencode to add to its setup.py (it passes its own -gencode flags, so TORCH_CUDA_ARCH_LIST is not used)."""
    from ._archs import runs_on

    cc = ctx.profile.cc
    if cc is None or any(runs_on(a, cc) for a in HADAMARD_DEFAULT_ARCHS):
        return build
    arch = f"{cc[0]}{cc[1]}"
    return Fix(f"{build.description}, for CC {cc[0]}.{cc[1]}: its setup.py passes -gencode for "
               f"{', '.join(HADAMARD_DEFAULT_ARCHS)} only, so add `-gencode arch=compute_{arch},code=sm_{arch}` to its "
               "cc_flag list before building (torch's TORCH_CUDA_ARCH_LIST is ignored once an extension passes its own "
               "-gencode)", [], key=f"fast-hadamard-arch:{arch}", phase=Phase.BUILD, manual=True,
               notes=[f"then: {' '.join(build.commands[0].argv)}" if build.commands else ""])


FLASH_MLA_TEXTS = (
    # The package, or its compiled sibling; a submodule missing under a flash_mla that imports (flash_mla.cuda: a
    # source tree ahead of the build) is not the missing package.
    *missing_module("I-flash-mla", "flash_mla", submodules=False),
    *missing_module("I-flash-mla-cuda", "flash_mla_cuda", submodules=False),
    *undefined_symbols("I-flash-mla-so", "flash_mla", "FlashMLA's extension built against another torch or CUDA",
                     "https://github.com/deepseek-ai/FlashMLA/tree/nv_dev"),
    # Megatron's dependency check names the package it misses, with where to get it (utils.py), and FlashMLA's main
    # branch lacks the indexer_topk argument Megatron passes (the nv_dev branch has it).
    UpstreamText("S1", "FlashMLA is required {what}", mlm(EAV + "csa_utils/fused_sparse_attention.py", "99-106"),
                 "ImportError", match=("FlashMLA is required",)),
    UpstreamText("S2", "flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev)", mlm("megatron/core/utils.py",
                 "509-548"), "RuntimeError", match=("flash_mla (https:",)),
    UpstreamText("S3", "flash_mla_sparse_fwd() got an unexpected keyword argument 'indexer_topk'", UNEXPECTED_KEYWORD,
                 "TypeError",
                 match=("unexpected keyword argument 'indexer_topk'",)),
    UpstreamText("R7", "FlashMLA is required for DSA sparse attention forward. Install from "
                 "https://github.com/deepseek-ai/FlashMLA/tree/nv_dev so that `from flash_mla import "
                 "flash_mla_sparse_fwd` succeeds.", mlm(EAV + "csa_utils/fused_sparse_attention.py", "99-106"),
                 "ImportError"),
)


@check(
    "kernels.flash-mla",
    "FlashMLA sparse forward loads (cudnn backend)",
    texts=FLASH_MLA_TEXTS,
    applies_when="dsa_backend=cudnn",
    detects="from flash_mla import flash_mla_sparse_fwd (subprocess), its indexer_topk parameter (signature, ast) and "
            "the cubin archs of flash_mla's extension (its .nv_fatbin, read without loading it)",
    sources=(
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "99-106",
            "Megatron-LM dev fused_sparse_attention.py L99-106 (FlashMLA is required)"),
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "157-166",
            "Megatron-LM dev fused_sparse_attention.py L157-166 (flash_mla_sparse_fwd(..., indexer_topk=...))"),
        Source("FlashMLA nv_dev flash_mla/flash_mla_interface.py (indexer_topk: int = 0)",
               "https://github.com/deepseek-ai/FlashMLA/blob/b7643bd54521f563b839b98289b5cd048c062ba2/flash_mla/"
               "flash_mla_interface.py#L176"),
        mlm("megatron/core/utils.py", "509-520", "Megatron-LM dev utils.py L509-520 (flash_mla dependency)"),
        Source("FlashMLA nv_dev at b7643bd5 setup.py (FLASH_MLA_DISABLE_SM90 / FLASH_MLA_DISABLE_SM100)",
               "https://github.com/deepseek-ai/FlashMLA/blob/b7643bd54521f563b839b98289b5cd048c062ba2/setup.py#L36-L44"),
        measured("docs/gpu-runs", "FlashMLA b7643bd5 built on an H200 with CUDA 13: fails without "
                 "CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl, builds with it and FLASH_MLA_DISABLE_SM100=1 (119 s)"),
        measured("docs/gpu-runs", "H200, 2026-12-04: the FLASH_MLA_DISABLE_SM100=1 build holds 24 sm_90a cubins, the "
                 "FLASH_MLA_DISABLE_SM90=1 build 24 sm_100f cubins (cuobjdump --list-elf); the latter on the H200: "
                 "'no kernel image is available for execution on the device', then SIGSEGV"),
        RULES_SOURCE,
    ),
    fixes=(FIX_FLASH_MLA, FIX_BACKEND_NONE),
    skip_if=lambda p: "dsa_kernel_backend=none: FlashMLA is not used" if p.dsa_backend == "none" else None,
    static=STATIC,
    probes=(FLASH_MLA,),
)
def kernels_flash_mla(ctx: Context) -> Result:
    """With dsa_kernel_backend=cudnn, Megatron's DSv4 sparse attention calls FlashMLA's `flash_mla_sparse_fwd`
    (nv_dev branch; not on PyPI). Megatron lists it as missing at config time ("dsa_kernel_backend=cudnn
    requires fused DSA kernels ... flash_mla") and raises "FlashMLA is required" at run time. Importing it is not
    enough: Megatron d48bd6be always passes `indexer_topk=` (fused_sparse_attention.py L157-166), which only the
    nv_dev branch's `flash_mla_sparse_fwd` takes; a FlashMLA built from main imports fine and raises TypeError
    at the first DSA step. The parameter is read from the signature in the probe, or with ast from the installed
    flash_mla/flash_mla_interface.py. The fix builds nv_dev at commit b7643bd5 (not the moving branch) for the
    target arch: FLASH_MLA_DISABLE_SM100=1 for 9.0, FLASH_MLA_DISABLE_SM90=1 for 10.x (as the Megatron recipes
    set for Blackwell), with CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl, without which the host compiler stops
    at `cuda/std/utility: No such file or directory` on CUDA 13 (measured on an H200). A build with no device
    code for the target GPU imports fine and fails at its first kernel launch ("no kernel image is available for
    execution on the device", then a segfault, measured on an H200 with the SM100-only build), so the archs of
    the extension's cubins and PTX are read from its `.nv_fatbin` section and compared with the target CC (the
    visible GPU's, or --gpu-arch) by CUDA's rules; nothing that runs is a failure.
    """
    static = ctx.static
    fix_flash_mla = fixes.flash_mla(ctx.profile.cc)
    evidence = {"module": static.module("flash_mla").get("origin"),
                "version": static.version("flash-mla") or static.version("flash_mla"),
                "imported_copy": static.copy("flash_mla")["why"]}  # which copy the job imports, and why
    if not static.module("flash_mla").get("found"):
        # FlashMLA's part of Megatron's one dependency error; cudnn-fe.version states the frontend's.
        return failed(f"flash_mla is not installed. {m8(M8_FLASH_MLA)}",
                      fixes=[fix_flash_mla, backend_none_fix(ctx.profile)], evidence=evidence)
    result = outcome(ctx.require(FLASH_MLA), "flash_mla:flash_mla_sparse_fwd")
    if not result.get("ok"):
        evidence["error"] = result.get("error")
        return failed(f"flash_mla is installed but flash_mla_sparse_fwd does not load ({error_text(result)})",
                      "Megatron reports flash_mla as missing at config time, or raises \"FlashMLA is required\" at the "
                      "first sparse attention call.", fixes=[fix_flash_mla, backend_none_fix(ctx.profile)],
                                                      evidence=evidence)
    # Megatron always passes indexer_topk= (nv_dev has it; main does not): import is not enough, the parameter is.
    params = result.get("params")
    source = "signature"
    if not isinstance(params, list):
        fn = (static.source(FLASH_MLA_API).get("functions") or {}).get("flash_mla_sparse_fwd") or {}
        params, source = fn.get("params"), "ast of flash_mla/flash_mla_interface.py"
    evidence.update(params=params, params_from=source)
    wrong_arch = arch_failure(ctx, "flash_mla", "FlashMLA", [fix_flash_mla, backend_none_fix(ctx.profile)], evidence)
    if wrong_arch is not None:
        return wrong_arch
    if not isinstance(params, list):
        return warned("flash_mla_sparse_fwd loads, but its parameters could not be read (no signature, no source): "
                      "whether it takes the indexer_topk Megatron passes is unknown", evidence=evidence)
    if "indexer_topk" not in params:
        return failed("flash_mla_sparse_fwd has no indexer_topk parameter (a FlashMLA built from main, not nv_dev): "
                      "Megatron passes indexer_topk= at every sparse attention call, so the first DSA step raises "
                      "TypeError: flash_mla_sparse_fwd() got an unexpected keyword argument 'indexer_topk'",
                      fixes=[fix_flash_mla, backend_none_fix(ctx.profile)], evidence=evidence)
    return passed(f"flash_mla_sparse_fwd loads and takes indexer_topk ({evidence['version'] or 'no metadata'})"
                  + arch_note(evidence), evidence=evidence)


FAST_HADAMARD_TEXTS = (
    *missing_prefix("I-fast-hadamard", "fast_hadamard_transform"),
    *undefined_symbols("I-fast-hadamard-so", "fast_hadamard_transform", "fast-hadamard-transform's extension built "
                     "against another torch or CUDA", "https://github.com/Dao-AILab/fast-hadamard-transform"),
    UpstreamText("R10", "fast_hadamard_transform is not installed.", mlm(EAV + "dsa.py", "267"), "AssertionError"),
    UpstreamText("V3", "fast_hadamard_transform is unavailable; falling back to a pure-torch Fast Walsh-Hadamard "
                 "transform. Results match the CUDA kernel but DSA forward will be slower.",
                 verl_at("verl/models/mcore/patch.py", 90), "warning"),
)


@check(
    "kernels.fast-hadamard",
    "fast-hadamard-transform for the ratio-4 CSA indexer",
    texts=FAST_HADAMARD_TEXTS,
    applies_when="always (DSv4 has ratio-4 layers)",
    detects="fast_hadamard_transform location and import; verl's shim (ast); the cubin archs of its extension "
            "(fast_hadamard_transform_cuda's .nv_fatbin, read without loading it)",
    sources=(
        mlm(EAV + "dsa.py", "267", "Megatron-LM dev dsa.py L267 (fast_hadamard_transform is not installed)"),
        Source("verl verl/models/mcore/patch.py (pure-torch shim, PR #7241)", "https://github.com/verl-project/verl/pull/7241"),
        mlm("pyproject.toml", "", "Megatron-LM dev pyproject.toml (fast-hadamard-transform git pin f134af63)"),
        pypi("megatron-bridge", "0.6.2", "megatron-bridge 0.6.2 METADATA: Requires-Dist fast-hadamard-transform>=1.1.0 "
             "(the fix then builds git tag v1.1.0, 1cc807ef)"),
        Source("fast-hadamard-transform setup.py (-gencode for sm_70, sm_80 and sm_90 cubins only)",
               "https://github.com/Dao-AILab/fast-hadamard-transform/blob/master/setup.py"),
        RULES_SOURCE,
    ),
    fixes=(FIX_HADAMARD,),
    static=STATIC,
    probes=(HADAMARD,),
)
def kernels_fast_hadamard(ctx: Context) -> Result:
    """DSv4's ratio-4 CSA layers run the indexer's Hadamard rotation through `fast_hadamard_transform` (bf16);
    without it Megatron asserts "fast_hadamard_transform is not installed." verl (PR #7241) installs a pure-torch
    stand-in when the package is missing: correct but slower ("DSA forward will be slower"), hence a warning.
    The package is not on PyPI as a wheel; Megatron-LM dev pins a git commit. Its extension
    (fast_hadamard_transform_cuda) must hold device code for the target GPU: the archs in its `.nv_fatbin` are
    compared with the target CC by CUDA's rules, and a build with nothing that runs there fails. Its setup.py
    passes `-gencode` for sm_70, sm_80 and sm_90 cubins only (no PTX), so a default build cannot run on CC 10.x:
    the fix then says which gencode to add.
    """
    static = ctx.static
    fix_hadamard = fixes.fast_hadamard(static)
    evidence = {"module": static.module("fast_hadamard_transform").get("origin"),
                "version": static.version("fast-hadamard-transform"),
                "imported_copy": static.copy("fast_hadamard_transform")["why"]}  # which copy the job imports, and why
    if static.module("fast_hadamard_transform").get("found"):
        result = outcome(ctx.require(HADAMARD), "fast_hadamard_transform:hadamard_transform")
        if result.get("ok"):
            wrong_arch = arch_failure(ctx, "fast_hadamard_transform_cuda", "fast-hadamard-transform",
                                      [hadamard_arch_fix(ctx, fix_hadamard)], evidence)
            if wrong_arch is not None:
                return wrong_arch
            return passed(f"fast_hadamard_transform.hadamard_transform loads ({evidence['version'] or 'no metadata'})"
                          + arch_note(evidence), evidence=evidence)
        evidence["error"] = result.get("error")
        return failed(f"fast_hadamard_transform is installed but does not load ({error_text(result)})",
                      fixes=[fix_hadamard], evidence=evidence)
    patch = static.source("verl.models.mcore.patch")
    if patch.get("found") and "apply_fast_hadamard_transform_shim" in (patch.get("functions") or {}):
        return warned(
            "fast_hadamard_transform is not installed: verl's pure-torch shim will stand in, and DSA forward will be "
            "slower",
            "verl logs: \"fast_hadamard_transform is unavailable; falling back to a pure-torch Fast Walsh-Hadamard "
            "transform. Results match the CUDA kernel but DSA forward will be slower.\"",
            fixes=[fix_hadamard], evidence=evidence)
    if patch.get("found") and patch.get("error"):  # the shim not found in a file not read whole: not known
        evidence["verl_patch"] = patch.get("error")
        return warned("fast_hadamard_transform is not installed, and whether verl's pure-torch shim stands in is not "
                      f"known ({patch.get('path')} could not be read whole or parsed); without it every ratio-4 "
                      "CSA layer asserts \"fast_hadamard_transform is not installed.\"", fixes=[fix_hadamard],
                      evidence=evidence)
    return failed("fast_hadamard_transform is not installed: every ratio-4 CSA layer asserts \"fast_hadamard_transform "
                  "is not installed.\"", fixes=[fix_hadamard], evidence=evidence)


@check(
    "kernels.triton",
    "triton for the fused MLA RoPE",
    applies_when="always (matters with apply_rope_fusion=True)",
    detects="triton location and version (metadata)",
    sources=(
        mlm(EAV + "deepseek_v4_hybrid_attention.py", "636",
            "Megatron-LM dev deepseek_v4_hybrid_attention.py L636 (fused_mla_rope_inplace assert)"),
        Source("Megatron-Bridge #4321 (NaN from fused_mla_rope_inplace on H100)",
               "https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/4321"),
        pypi("torch", "2.11.0", "torch 2.11.0 METADATA: Requires-Dist triton==3.6.0 (the pin the check reads from the "
             "installed torch)"),
        pypi("torch", "2.15.0", "torch 2.15.0 METADATA: Requires-Dist triton~=3.9.0 (2.14.x: triton~=3.8.0); any "
             "specifier is read"),
    ),
    fixes=(fixes.TRITON_DOC,),
    static=STATIC,
)
def kernels_triton(ctx: Context) -> Result:
    """With `apply_rope_fusion=True`, DSv4 attention applies RoPE with the triton kernel `fused_mla_rope_inplace`;
    without triton Megatron substitutes a placeholder and the layer asserts `fused_mla_rope_inplace is not
    None`. A warning, since jobs with rope fusion off do not need it (MB #4321 recommends it off on H100).
    """
    static = ctx.static
    module = static.module("triton")
    evidence = {"module": module.get("origin"), "kind": module.get("kind"), "version": static.version("triton")}
    if not module.get("found"):
        return warned("triton is not installed: apply_rope_fusion=True then fails (fused_mla_rope_inplace is None)",
                      "Megatron's DSv4 attention asserts `fused_mla_rope_inplace is not None` when rope fusion is "
                      "on; with apply_rope_fusion=False the job runs without triton.", fixes=[fixes.triton(static)],
                      evidence=evidence)
    fix = fixes.triton(static)
    if module.get("kind") == "namespace":
        return warned("`triton` is only a namespace directory (no triton/__init__.py): nothing to import",
                      f"found at {', '.join(map(str, module.get('locations') or [])) or '?'}; a leftover directory, "
                      "or a PYTHONPATH entry that shadows the installed triton.", fixes=[fix], evidence=evidence)
    found = version(evidence["version"])
    req = fixes.torch_triton_requirement(static)
    evidence["torch_requires"] = str(req.specifier) if req is not None else None
    if found is None:
        return warned("triton is present but its version is unknown (no readable metadata)", fixes=[fix],
                      evidence=evidence)
    if req is not None and not req.specifier.contains(found, prereleases=True):
        return warned(f"triton {found} is not the triton{req.specifier} the installed torch {static.version('torch')} "
                      "requires: its kernels are compiled with a triton torch was not built and tested with",
                      fixes=[fix], evidence=evidence)
    pinned = f" (meets torch's triton{req.specifier})" if req is not None else " (torch declares no pin)"
    return passed(f"triton {found}{pinned}", evidence=evidence)

CHECKS = [kernels_flash_mla, kernels_fast_hadamard, kernels_triton]
