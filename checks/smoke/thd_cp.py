"""The smoke forward: run a contiguous-CP THD attention on the GPU and compare it with an unsharded reference."""

from __future__ import annotations

import os
from dataclasses import replace

from dsv4_doctor.api import check
from dsv4_doctor.model import (Context, Fix, Profile, Result, Source, Status, errored, failed,
                               needs_failed, passed, warned)
from dsv4_doctor.probes import Probe

from .. import fixes, frontend_fixes
from .._upstream import EAV, gh, mlm
from ..mcore_checks import mcore_fix

MEMORY_LIMIT_MIB = 1024

# Upstream texts and missing modules a tier-2 failure can show: the rule that reports the cause, and its fix.
TIER2_TEXTS: tuple[tuple[str, str], ...] = (
    ("requires cp_partition_mode='contiguous'", "mcore.cp-partition-mode"),
    ("unexpected keyword argument 'cp_partition_mode'", "mcore.cp-partition-mode"),
    ("DSv4 THD CP requires a contiguous CP partition", "mcore.cp-partition-mode"),
    ("Invalid experimental attention variant", "mcore.dsv4"),
    ("SFT sequence packing requires Transformer Engine", "te.version"),
    ("requires CUDA tensors and CuTeDSL", "cutlass-dsl.import"),
    ("CSA CP CuTe kernels", "gpu.arch"),
    ("FlashMLA is required", "kernels.flash-mla"),
    ("flash_mla (https:", "kernels.flash-mla"),  # an item of Megatron's dependency check (utils.py)
    ("indexer_topk", "kernels.flash-mla"),
    ("fast_hadamard_transform is not installed", "kernels.fast-hadamard"),
    ("q_causal_offsets", "cudnn-fe.dsa"),
    ("cudnn-frontend DSA namespace not available", "cudnn-fe.dsa"),
    ("requires fused DSA kernels", "cudnn-fe.dsa"),
)
TIER2_MODULES = {
    "transformer_engine": "te.import", "cudnn": "cudnn-fe.version", "cutlass": "cutlass-dsl.import",
    "cuda": "cutlass-dsl.import", "flash_mla": "kernels.flash-mla", "fast_hadamard_transform": "kernels.fast-hadamard",
    "megatron": "mcore.dsv4", "tvm_ffi": "tvm-ffi.version", "torch": "torch.install",
}
RULE_FIXES = {
    "mcore.cp-partition-mode": lambda s: [fixes.mcore()], "mcore.dsv4": lambda s: [fixes.mcore()],
    "te.version": lambda s: [fixes.TE], "te.import": lambda s: [fixes.TE],
    "cutlass-dsl.import": lambda s: [frontend_fixes.cutlass(s)], "gpu.arch": lambda s: [fixes.SUPPORTED_GPU],
    "kernels.flash-mla": lambda s: [fixes.FLASH_MLA], "kernels.fast-hadamard": lambda s: [fixes.fast_hadamard(s)],
    "cudnn-fe.dsa": lambda s: [frontend_fixes.frontend_stack(s)],
    "cudnn-fe.version": lambda s: [frontend_fixes.frontend_stack(s)],
    "tvm-ffi.version": lambda s: [frontend_fixes.tvm_ffi(s)], "torch.install": lambda s: [fixes.torch(s)],
}


def tier2_rules(error: dict) -> list[str]:
    """Every rule that reports what a tier-2 error shows, most specific first (Megatron's dependency check can name
    several missing packages in one message)."""
    text = f"{error.get('type')}: {error.get('message')}"
    missing = (error.get("missing_module") or "").split(".")[0]
    rules = [TIER2_MODULES[missing]] if missing in TIER2_MODULES else []
    rules += [rule for needle, rule in TIER2_TEXTS if needle in text and rule not in rules]
    return rules


def tier2_rule(error: dict) -> str | None:
    """The most specific rule that reports what a tier-2 error shows, or None."""
    rules = tier2_rules(error)
    return rules[0] if rules else None


def rule_fixes(rule: str | None, ctx: Context) -> list[Fix]:
    """The fixes of the rule that reports a finding (tier 2's, and the kernel smoke's for a missing module)."""
    if rule in ("mcore.dsv4", "mcore.cp-partition-mode"):
        return [mcore_fix(ctx)]  # names a PYTHONPATH copy that shadows the installed one (pip cannot fix that)
    return RULE_FIXES[rule](ctx.static) if rule in RULE_FIXES else []


def tier2_fixes(error: dict, ctx: Context) -> list[Fix]:
    return rule_fixes(tier2_rule(error), ctx)


def not_run(profile: Profile) -> str | None:
    if profile.smoke == "off":
        return "--no-smoke"
    if profile.smoke == "auto" and profile.device == "auto" and not profile.gpus:
        return "no GPU visible (nvidia-smi): the smoke forward runs on a GPU; --device cpu runs it on the CPU"
    return None


def smoke_probe(profile: Profile) -> Probe:
    """Tier 2 runs when the probe finds Megatron's DSv4 attention file (it looks without importing Megatron)."""
    request = {"cp": profile.cp, "device": profile.device, "tier2": "auto", "dsa_backend": profile.dsa_backend,
               "gpus": profile.gpus, "device_index": profile.device_index}
    if profile.fleet:
        # A fleet rank never starts processes of its own (they would take the other ranks' GPUs): with --cp N its
        # probe joins a CP group of N consecutive fleet ranks and plays one CP rank, or simulates the N ranks on its
        # own device when the fleet does not divide into such groups (the reason is in the evidence).
        from dsv4_doctor.fleet import cp_plan

        request["distributed"] = "off"
        plan = cp_plan(profile.fleet, profile.cp, os.environ) if profile.cp > 1 else {"mode": "simulated"}
        if plan["mode"] == "fleet":
            request["fleet_cp"] = plan
        elif profile.cp > 1:
            request["simulated_because"] = plan["reason"]
    probe = Probe.beside(__file__, f"smoke:cp={profile.cp}:device={profile.device}:gpu={profile.device_index}",
                         "dsv4probe_smoke.py", request)
    return replace(probe, long=True)


def _describe(cmp_: dict) -> str:
    return (f"max |err| {cmp_['max_abs_error']:.2e} <= {cmp_['tolerance']:g}, "
            f"zigzag control {cmp_['negative_control_zigzag_error']:.2f}")


def _run_failure(dist: dict, nothing_back: str) -> str | None:
    """Why a multi-process run failed as a whole (its error, a crashed worker, no comparison), or None."""
    crash = dist.get("probe_error") or {}
    if dist.get("error") or crash or not dist.get("comparisons"):
        return dist.get("error") or (f"{crash.get('type')}: {crash.get('message')}" if crash else nothing_back)
    return None


def _fleet_rank(data: dict, dist: dict, evidence: dict) -> Result | None:
    """A fleet rank's part of its CP group's run: its own rows are its finding; other members' rows are theirs."""
    fleet = dist.get("fleet") or {}
    cp, me = data["cp"], int(fleet.get("cp_rank") or 0)
    group = f"the CP group of fleet ranks {fleet.get('members')}"
    if dist.get("join_error"):
        return errored(f"{dist['join_error']} ({group}): the distributed smoke forward did not run on this rank",
                       evidence=evidence)
    why = _run_failure(dist, "no comparison came back")
    if why:
        return failed(f"the {cp}-rank {dist.get('process_backend')} run of {group} failed on CP rank {me}: {why}",
                      evidence=evidence)
    for kind, cmp_ in dist["comparisons"].items():
        per_rank = cmp_.get("per_rank") or []
        mine = per_rank[me] if me < len(per_rank) and isinstance(per_rank[me], dict) else None
        if mine is None:
            return errored(f"the {kind} comparison of {group} came back without CP rank {me}'s rows",
                           evidence=evidence)
        lo, hi = (mine.get("rows") or ["?", "?"])[:2]
        if not mine.get("finite", False):
            return failed(f"{kind} attention on CP rank {me} of {cp} ({group}, "
                          f"{dist.get('process_backend')}) produced non-finite values in its rows [{lo}, {hi})",
                          evidence=evidence)
        if mine.get("max_abs_error", 0.0) > cmp_.get("tolerance", 0.0):
            return failed(f"{kind} attention on CP rank {me} of {cp} ({group}, {dist.get('process_backend')}) "
                          f"differs from the float32 reference by {mine['max_abs_error']:.3g} (> "
                          f"{cmp_.get('tolerance'):g}) in its rows [{lo}, {hi})", evidence=evidence)
        if cmp_.get("negative_control_zigzag_error", 0.0) < 10 * cmp_.get("tolerance", 0.0):
            return errored(f"the {kind} negative control of {group} did not fail (zigzag error "
                           f"{cmp_.get('negative_control_zigzag_error', 0.0):.3g}): the comparison could not tell "
                           "layouts apart", evidence=evidence)
    return None


def _fleet_note(dist: dict) -> str:
    """The members of this rank's CP group whose rows differ (their own rows say so)."""
    fleet = dist.get("fleet") or {}
    first = int(str(fleet.get("members") or "0").split("-")[0] or 0)
    off = sorted({first + r for cmp_ in (dist.get("comparisons") or {}).values()
                  for r, row in enumerate(cmp_.get("per_rank") or [])
                  if not row.get("finite", True) or row.get("max_abs_error", 0.0) > cmp_.get("tolerance", 0.0)})
    return f"; the rows of fleet rank(s) {','.join(map(str, off))} in this CP group differ (see theirs)" if off else ""


def _tier2(ctx: Context, data: dict, evidence: dict):
    """A Result for a failed tier 2, or None when it passed, did not run, or stopped at what a rule reports."""
    for name, t2 in (data.get("tier2") or {}).items():
        if name == "fused":
            continue
        label = "CP=1" if name == "cp1" else f"CP={t2.get('cp')}"
        if t2.get("skipped"):
            continue
        if t2.get("error"):
            err = t2["error"]
            failing = [r for r in tier2_rules(err)
                       if (ctx.outcome(r) is not None and ctx.outcome(r).status in (Status.FAIL, Status.ERROR))]
            rule = failing[0] if failing else None
            if rule is not None:
                # The finding is that rule's, which already failed; tier 2 says where it stopped instead of
                # repeating it. When the rule passed (or did not run), the layer's failure is this check's finding.
                t2["deferred_to"] = rule
                continue
            return failed(
                f"the DSv4 hybrid attention layer ({label}) failed at {t2.get('stage')}: {err.get('type')}: "
                f"{err.get('message')}", "\n".join(map(str, err.get("where", []))),
                fixes=tier2_fixes(err, ctx), evidence=evidence)
        if not t2.get("finite", True):
            settings = ", ".join(f"{k}={v}" for k, v in (t2.get("settings") or {}).items())
            return failed(f"the DSv4 hybrid attention layer ({label}) produced non-finite output",
                          f"Kernel settings in use: {settings}. Compare with --dsa-backend none (Megatron's PyTorch "
                          "fallback) to see which kernel produces it.", evidence=evidence)
        if "max_abs_diff_vs_cp1" in t2 and not t2.get("ok"):
            return failed(f"the DSv4 hybrid attention layer at {label} differs from CP=1 by "
                          f"{t2['max_abs_diff_vs_cp1']:.3g} (> {t2.get('parity_tolerance')})", evidence=evidence)
        layouts = t2.get("layouts") or {}
        if layouts and layouts.get("max_abs_diff_packed_vs_alone", 0) > layouts.get("tolerance", 0):
            return failed(f"the DSv4 hybrid attention layer ({label}) gives a packed sequence another output than the "
                          f"same sequence alone: max |diff| {layouts['max_abs_diff_packed_vs_alone']:.3g} (> "
                          f"{layouts['tolerance']:.3g}): packing leaks across sequence boundaries", evidence=evidence)
        if layouts and not layouts.get("control_separates"):
            return errored(f"the DSv4 layer's negative control did not separate ({label}): merging two sequences "
                           "left the output unchanged, so the packed-vs-alone comparison cannot tell right from wrong",
                           evidence=evidence)
    return _tier2_fused(ctx, (data.get("tier2") or {}).get("fused") or {}, evidence)


HANG_NOTE = ("cudnn-frontend #676 reports NaN gradients and a GPU deadlock on empty top-k rows in the DSA backward; "
             "the first ratio-1 tokens of every sequence have no compressed block to select, so every packed batch "
             "has such rows. Where it stopped is in the build's log tail (evidence tier2.fused.builds).")


def _tier2_fused(ctx: Context, fused: dict, evidence: dict) -> Result | None:
    """The fused build (cuDNN indexer + FlashMLA) against the unfused one, forward and backward, at CP 1."""
    if not fused or fused.get("skipped"):
        return None
    builds = fused.get("builds") or {}
    for label in ("fused", "unfused"):
        b = builds.get(label) or {}
        if b.get("hang"):
            return failed(f"the {label} DSv4 layer build (dsa_kernel_backend={'cudnn' if label == 'fused' else 'none'})"
                          f" hung: its forward + backward did not finish within {b.get('timeout_s')} s and was killed",
                          HANG_NOTE if label == "fused" else "Megatron's PyTorch DSA path, no fused kernel: where it "
                          "stopped is in the build's log tail (evidence tier2.fused.builds).", evidence=evidence)
        if b.get("timed_out"):
            return errored(f"the {label} DSv4 layer build was stopped at its time limit ({b.get('timeout_s')} s) "
                           f"while still at {b.get('stage')}, before its kernels ran to the end: that is no proven "
                           "hang, and the fused-vs-unfused comparison was not made", "Where it stopped is in the "
                           "build's log tail (evidence tier2.fused.builds); a longer --timeout gives it more time.",
                           evidence=evidence)
        if b and not b.get("ok"):
            err = b.get("error") or {}
            failing = [r for r in tier2_rules(err)
                       if (ctx.outcome(r) is not None and ctx.outcome(r).status in (Status.FAIL, Status.ERROR))]
            if failing:
                fused["deferred_to"] = failing[0]
                return None
            return failed(f"the {label} DSv4 layer build failed at {b.get('stage')}: {err.get('type')}: "
                          f"{err.get('message')}", "\n".join(map(str, err.get("where", []))) or b.get("log_tail", ""),
                          fixes=tier2_fixes(err, ctx), evidence=evidence)
    if fused.get("error"):
        err = fused["error"]
        return errored(f"the fused-vs-unfused comparison could not be made: {err.get('type')}: {err.get('message')}",
                       evidence=evidence)
    cmp_ = fused.get("comparison") or {}
    if not cmp_:
        return errored("the fused-vs-unfused comparison came back empty", evidence=evidence)
    if cmp_.get("problems"):
        return errored("the fused-vs-unfused comparison is not valid: " + "; ".join(cmp_["problems"]),
                       evidence=evidence)
    rows = cmp_.get("tensors") or {}
    if cmp_.get("nonfinite"):
        names = cmp_["nonfinite"]
        which = ["fused" if not rows[n].get("finite") else "unfused" for n in names]
        return failed(f"the DSv4 layer's {', '.join(sorted(set(which)))} build produced non-finite "
                      f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''} (forward + backward, CP 1)",
                      HANG_NOTE.split(";")[0] + ".", evidence=evidence)
    if cmp_.get("over_tolerance"):
        names = cmp_["over_tolerance"]
        detail = ", ".join(f"{n} {rows[n]['rel_l2']:.3g} (> {rows[n]['tolerance']:.3g})" for n in names[:6])
        return failed(f"the fused DSv4 layer (cuDNN indexer + FlashMLA) differs from the unfused one beyond the bf16 "
                      f"tolerance: relative L2 {detail}", (cmp_.get("tolerances") or {}).get("derivation", ""),
                      evidence=evidence)
    control = cmp_.get("control") or {}
    if not control.get("separates"):
        return errored("the fused-vs-unfused negative control did not separate (a perturbed output projection "
                       f"passed the comparison: {control}), so the comparison cannot tell right from wrong",
                       evidence=evidence)
    return None


def _tier2_note(t2: dict) -> str:
    if not t2:
        return "; tier 2 (DSv4 layer) not run: Megatron-core dsv4_hybrid not installed"
    parts = []
    for key, v in t2.items():
        if key == "fused":
            parts.append(_fused_note(v))
            continue
        label = "CP=1" if key == "cp1" else f"CP={v.get('cp')}"
        if v.get("skipped"):
            parts.append(f"{label} skipped: {str(v['skipped']).split(':')[0]}")
        elif v.get("deferred_to"):
            parts.append(f"{label} stopped at {v.get('stage')}: see {v['deferred_to']}")
        elif "layouts" in v:
            parts.append(f"{label} packed output = each sequence alone (max |diff| "
                         f"{v['layouts']['max_abs_diff_packed_vs_alone']:.1e})")
        elif "max_abs_diff_vs_cp1" in v:
            parts.append(f"{label} = CP=1 (max |diff| {v['max_abs_diff_vs_cp1']:.1e})")
        else:
            parts.append(f"{label} ok")
    return "; DSv4 layer " + ", ".join(parts)


def _fused_note(fused: dict) -> str:
    if fused.get("skipped"):
        return f"fused vs unfused not run: {str(fused['skipped']).split(':')[0]}"
    if fused.get("deferred_to"):
        return f"fused vs unfused stopped: see {fused['deferred_to']}"
    cmp_ = fused.get("comparison") or {}
    worst, control = cmp_.get("worst") or {}, cmp_.get("control") or {}
    return (f"fused (cuDNN indexer + FlashMLA) = unfused, forward + backward, {len(cmp_.get('tensors') or {})} "
            f"tensors (worst {worst.get('tensor')} rel. L2 {worst.get('rel_l2', 0.0):.1e} <= "
            f"{worst.get('tolerance', 0.0):.1e}; perturbed-weight control {control.get('rel_l2', 0.0):.1e})")


def torch_missing(ctx: Context) -> Result | None:
    """A skip pointing at torch.install when torch does not import at all (a CPU-only torch still runs the smoke on
    the CPU, so that is no reason to skip)."""
    blocked = needs_failed(ctx, "torch.install")
    other = ctx.outcome("torch.install")
    if blocked is not None and other is not None and not other.evidence.get("version"):
        return blocked
    return None


@check(
    "smoke.thd-cp",
    "Smoke forward: contiguous-CP THD attention computes the right numbers",
    applies_when="a GPU is visible (or --device cpu); not with --no-smoke",
    detects="a THD attention forward in a subprocess: finiteness, error vs float32 reference, zigzag control",
    sources=(
        mlm(EAV + "deepseek_v4_hybrid_attention.py", "271",
            "Megatron-LM dev deepseek_v4_hybrid_attention.py (contiguous CP partition required)"),
        mlm("tests/unit_tests/transformer/experimental_attention_variant/test_dsv4_hybrid_attention_cp.py", "",
            "Megatron-LM dev test_dsv4_hybrid_attention_cp.py (CP=N vs CP=1 parity)"),
        mlm("tests/unit_tests/transformer/experimental_attention_variant/test_dsv4_hybrid_native_parity.py",
            "54-79", "Megatron-LM dev test_dsv4_hybrid_native_parity.py (fused and unfused DSv4 layer, forward and "
            "backward, and their tolerance buckets)"),
        mlm("megatron/core/transformer/transformer_config.py", "1773-1791",
            "Megatron-LM dev transformer_config.py (SM90 rejects the fused dense indexer loss: use the sparse loss)"),
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "87-140",
            "Megatron-LM dev fused_sparse_attention.py (FlashMLA sparse forward, d_v 512, TopK alignment)"),
        gh("NVIDIA/cudnn-frontend", "issues/676",
           "cudnn-frontend #676 (NaN gradients and a deadlock on empty top-k rows in the DSA backward)"),
        Source("PyTorch torch.nn.attention.varlen.varlen_attn",
               "https://docs.pytorch.org/docs/stable/nn.attention.varlen.html"),
        Source("NVIDIA gpu-operator #2685 (validator said Ready while CUDA workloads failed)",
               "https://github.com/NVIDIA/gpu-operator/issues/2685"),
    ),
    fixes=(fixes.TORCH,),
    skip_if=not_run,
    after=("torch.install", *sorted(set(RULE_FIXES) - {"torch.install"})),
    probes=lambda profile: [] if not_run(profile) else [smoke_probe(profile)],
    per_gpu=True,
)
def smoke_thd_cp(ctx: Context) -> Result:
    """Version rules say what should work; only running a kernel shows what does. The smoke forward packs a small
    bf16 THD batch (one sequence shorter than the attention window, one crossing a rank boundary and spanning
    more than one rank, tail padding so the total divides by the CP size) and shards it contiguously: rank r
    owns rows [r*L, (r+1)*L), the layout DSv4 requires (the zigzag layout "silently produces wrong attention
    results"). Each rank attends its local queries to all-gathered keys/values, for full causal and causal
    sliding-window attention (DSv4's window branch, which needs the previous rank's boundary rows), with
    torch's varlen_attn on the GPU (SDPA per segment with an explicit bottom-right mask elsewhere). The
    concatenated outputs must match an unsharded float32 reference within the bf16 tolerance (2e-2), and the
    same outputs re-assembled as if the layout were zigzag must not (the negative control). With --cp N and N
    GPUs the ranks are real NCCL processes; with --device cpu, gloo processes; in fleet mode, groups of N
    consecutive fleet ranks, each rank judging its own rows. When Megatron-core with
    dsv4_hybrid is installed, tier 2 also builds the smallest DSv4 hybrid attention layer and runs it on THD
    input with PackedSeqParams(cp_partition_mode="contiguous"), CP=1 and, with N GPUs, CP=N against CP=1.
    With dsa_kernel_backend=cudnn on a GPU it builds the layer twice more, each in its own process with a hard
    timeout, fused (the cuDNN indexer and FlashMLA) and unfused, on the same weights and packed batch, and
    compares the forward output and every gradient of a backward pass within bf16-derived tolerances, with a
    perturbed-weight control; a build that hangs is a finding (cudnn-frontend #676).
    """
    blocked = torch_missing(ctx)
    if blocked:
        return blocked
    data = ctx.require(smoke_probe(ctx.profile))
    if not data.get("imported"):
        err = data.get("error", {})
        return failed(f"torch does not import, so nothing can run: {err.get('type')}: {err.get('message')}",
                      fixes=[fixes.torch(ctx.static)], evidence={"error": err})
    if data.get("device_error"):
        return failed(data["device_error"], fixes=[fixes.torch(ctx.static)], evidence={"torch": data.get("torch")})
    t1 = data.get("tier1", {})
    evidence = {
        "device": data.get("device"), "torch": data.get("torch"), "cp": data.get("cp"),
        "backend": t1.get("backend"), "shape": t1.get("shape"), "comparisons": t1.get("comparisons"),
        "ranks": t1.get("ranks"), "distributed": data.get("distributed"), "tier2": data.get("tier2"),
        "timing": data.get("timing"), "gpu_memory_peak_mib": data.get("gpu_memory_peak_mib"),
    }
    if t1.get("error"):
        err = t1["error"]
        return failed(f"the THD attention forward raised {err.get('type')}: {err.get('message')}",
                      "\n".join(err.get("where", [])), evidence=evidence)
    device = data["device"]
    where = device["type"] if device["type"] == "cpu" else f"cuda ({device['name']}, CC {device['capability']})"
    for kind, cmp_ in t1["comparisons"].items():
        backend = t1["backend"].get(kind)
        if not cmp_["finite"]:
            return failed(f"{kind} attention produced non-finite values on {where} ({backend})", evidence=evidence)
        if cmp_["max_abs_error"] > cmp_["tolerance"]:
            return failed(f"{kind} attention with the contiguous CP layout differs from the float32 reference by "
                          f"{cmp_['max_abs_error']:.3g} (> {cmp_['tolerance']:g}) on {where} ({backend})",
                          evidence=evidence)
        if not cmp_["ok"]:
            return errored(f"the {kind} negative control did not fail (zigzag error "
                           f"{cmp_['negative_control_zigzag_error']:.3g}): the comparison could not tell layouts apart",
                           evidence=evidence)
    dist = data.get("distributed") or {}
    if dist.get("ran") and dist.get("fleet"):
        bad = _fleet_rank(data, dist, evidence)
        if bad is not None:
            return bad
    elif dist.get("ran"):
        why = _run_failure(dist, "rank 0 returned no comparison")
        if why:
            crash = dist.get("probe_error") or {}
            return failed(f"the {data['cp']}-process {dist.get('process_backend')} run failed: {why}",
                          dist.get("log_tail", "") or "\n".join(crash.get("where", [])), evidence=evidence)
        for kind, cmp_ in dist.get("comparisons", {}).items():
            if not cmp_.get("ok"):
                return failed(f"{kind} attention across {data['cp']} {dist.get('process_backend')} ranks differs "
                              f"from the reference: {_describe(cmp_)}, {cmp_.get('max_abs_diff_vs_single_device'):.3g}"
                              " from the single-device result", evidence=evidence)
    bad = _tier2(ctx, data, evidence)
    if bad is not None:
        return bad
    procs = dist.get("processes") if isinstance(dist.get("processes"), int) else data["cp"]
    # What ran, not what was asked (otherwise: CP 16 on 2 CPUs ran 2 processes of 8 ranks each).
    if dist.get("ran") and dist.get("fleet"):
        # The same words on every healthy rank, so that the fleet merge groups them (the rank is in the evidence).
        ranks = (f"{data['cp']} CP ranks as a group of {data['cp']} fleet ranks over "
                 f"{str(dist.get('process_backend')).upper()}, each rank's own rows checked")
    elif dist.get("ran"):
        ranks = (f"{data['cp']} CP ranks in {procs} {dist['process_backend'].upper()} processes" if procs != data["cp"]
                 else f"{data['cp']} {dist['process_backend'].upper()} processes")
    else:
        ranks = f"{data['cp']} simulated rank(s)"
    worst = max(c["max_abs_error"] for c in t1["comparisons"].values())
    tier2_note = _tier2_note(data.get("tier2") or {}) + (_fleet_note(dist) if dist.get("fleet") else "")
    summary = (f"contiguous-CP THD attention matches the float32 reference on {where}, {ranks}: max |err| "
               f"{worst:.1e} <= {t1['comparisons']['causal']['tolerance']:g}, zigzag control "
               f"{min(c['negative_control_zigzag_error'] for c in t1['comparisons'].values()):.1f}{tier2_note}")
    memory = data.get("gpu_memory_peak_mib")
    if memory is not None and memory > MEMORY_LIMIT_MIB:
        return warned(summary + f"; but it used {memory:.0f} MiB of GPU memory (> {MEMORY_LIMIT_MIB})",
                      evidence=evidence)
    return passed(summary, evidence=evidence)

CHECKS = [smoke_thd_cp]
