"""The smoke forward: run a contiguous-CP THD attention on the GPU and compare it with an unsharded reference."""

from __future__ import annotations

import os
from dataclasses import replace

from dsv4_doctor.api import (Context, Probe, Profile, Result, Source, check, errored, failed, needs_failed, passed,
                             warned)

from ..fixes import catalogue as fixes
from .._upstream import EAV, gh, mlm
from ._causes import RULE_FIXES, cause_result, crash_cause, crash_text
from ._tier2 import deep_not_compared, describe_tier2, tier2_result

MEMORY_LIMIT_MIB = 1024


def not_run(profile: Profile) -> str | None:
    if profile.smoke == "off":
        return "--no-smoke"
    if profile.smoke == "auto" and profile.device == "auto" and not profile.gpus:
        return "no GPU visible (nvidia-smi): the smoke forward runs on a GPU; --device cpu runs it on the CPU"
    return None


def level(profile: Profile) -> str:
    """The smoke's level: "deep" (--deep: tier 1, the kernel sub-runs and tier 2) or "default" (no tier 2)."""
    return "deep" if profile.deep else "default"


def smoke_probe(profile: Profile) -> Probe:
    """Tier 2 runs at the deep level (--deep) when the probe finds Megatron's DSv4 attention file (it looks without
    importing Megatron); at the default level the probe only says whether it found it."""
    request = {"cp": profile.cp, "device": profile.device, "tier2": "auto" if profile.deep else False,
               "level": level(profile), "dsa_backend": profile.dsa_backend, "gpus": profile.gpus,
               "device_index": profile.device_index}
    if profile.fleet:
        # A fleet rank never starts processes of its own (they would take the other ranks' GPUs): with --cp N its
        # probe joins a CP group of N consecutive fleet ranks and plays one CP rank, or simulates the N ranks on its
        # own device when the fleet does not divide into such groups (the reason is in the evidence).
        from dsv4_doctor.api import cp_plan

        request["distributed"] = "off"
        plan = cp_plan(profile.fleet, profile.cp, os.environ) if profile.cp > 1 else {"mode": "simulated"}
        if plan["mode"] == "fleet":
            request["fleet_cp"] = plan
        elif profile.cp > 1:
            request["simulated_because"] = plan["reason"]
    probe = Probe.beside(__file__, f"smoke:cp={profile.cp}:device={profile.device}:gpu={profile.device_index}"
                         f":level={level(profile)}",
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


def crashed(ctx: Context, result) -> Result:
    """The smoke probe gave no answer: its known cause in one sentence, with its fix, else what ended it; the crash
    text (redacted, then cut) in the details and the evidence."""
    text = crash_text(result.error, result.stderr_tail)
    evidence = dict(result.evidence(), crash_text=text)
    evidence.pop("stderr_tail", None)
    cause = None if result.timed_out else crash_cause(ctx, text, what="the smoke probe")
    if cause is None:
        return errored(f"the smoke probe {result.error}", text, evidence=evidence)
    evidence["cause"] = cause["cause"]
    return cause_result(cause, text, evidence)


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
    detects="a THD attention forward in a subprocess: finiteness, error vs float32 reference, zigzag control; "
            "with --deep, the DSv4 layer's CP parity and its fused build against the unfused one",
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
    after=("torch.install", "gpu.devices", "gpu.memory", *sorted(set(RULE_FIXES) - {"torch.install"})),
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
    consecutive fleet ranks, each rank judging its own rows. That is the default level (with the kernel sub-runs
    of smoke.dsv4-kernels), and the row says that the DSv4 layer and its fused build were not compared and that
    --deep compares them. With --deep (the deep level: a GPU CI job, a new node's first check), when
    Megatron-core with dsv4_hybrid is installed, tier 2 also builds the smallest DSv4 hybrid attention layer and
    runs it on THD input with PackedSeqParams(cp_partition_mode="contiguous"), CP=1 and, with N GPUs, CP=N
    against CP=1. With dsa_kernel_backend=cudnn on a GPU it builds the layer twice more, each in its own process
    with a hard timeout, fused (the cuDNN indexer and FlashMLA) and unfused, on the same weights and packed batch,
    and compares the forward output and every gradient of a backward pass within bf16-derived tolerances, with a
    perturbed-weight control; a build that hangs is a finding (cudnn-frontend #676). A --deep run that could not
    compare a part (no DSv4 layer installed, no fused path: another backend, the CPU, no Transformer Engine) says
    which and why (evidence not_compared).
    """
    blocked = torch_missing(ctx)
    if blocked:
        return blocked
    result = ctx.probe(smoke_probe(ctx.profile))
    if not result.ok:
        return crashed(ctx, result)
    data = result.data
    if not data.get("imported"):
        err = data.get("error", {})
        return failed(f"torch does not import, so nothing can run: {err.get('type')}: {err.get('message')}",
                      fixes=[fixes.torch(ctx.static)], evidence={"error": err})
    if data.get("device_error"):
        from .._gpu_facts import hidden_cause
        from ..gpu_checks import driver_gets

        hidden, found = hidden_cause(ctx, driver_gets(ctx)[0])
        return failed(f"torch sees no GPU, so the GPU was not tested: {hidden}", data["device_error"], fixes=found,
                      evidence={"torch": data.get("torch"), "device_error": data["device_error"]})
    t1 = data.get("tier1", {})
    evidence = {
        "device": data.get("device"), "torch": data.get("torch"), "cp": data.get("cp"),
        "backend": t1.get("backend"), "shape": t1.get("shape"), "comparisons": t1.get("comparisons"),
        "ranks": t1.get("ranks"), "distributed": data.get("distributed"), "tier2": data.get("tier2"),
        "timing": data.get("timing"), "gpu_memory_peak_mib": data.get("gpu_memory_peak_mib"),
        "level": level(ctx.profile),
    }
    not_compared = deep_not_compared(ctx.profile.deep, data)
    if not_compared:
        evidence["not_compared"] = not_compared
    if t1.get("error"):
        err = t1["error"]
        text = crash_text(f"{err.get('type')}: {err.get('message')}", "\n".join(map(str, err.get("where", []))))
        cause = crash_cause(ctx, text, what="the THD attention forward")
        if cause is not None:
            evidence["crash_text"] = text
            return cause_result(cause, text, evidence)
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
            text = crash_text(why, dist.get("log_tail", ""))
            cause = crash_cause(ctx, text, what=f"the {data['cp']}-process {dist.get('process_backend')} run")
            if cause is not None:
                return cause_result(cause, text, dict(evidence, crash_text=text))
            return failed(f"the {data['cp']}-process {dist.get('process_backend')} run failed: {why}",
                          dist.get("log_tail", "") or "\n".join(crash.get("where", [])), evidence=evidence)
        for kind, cmp_ in dist.get("comparisons", {}).items():
            if not cmp_.get("ok"):
                return failed(f"{kind} attention across {data['cp']} {dist.get('process_backend')} ranks differs "
                              f"from the reference: {_describe(cmp_)}, {cmp_.get('max_abs_diff_vs_single_device'):.3g}"
                              " from the single-device result", evidence=evidence)
    bad = tier2_result(ctx, data, evidence)
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
    tier2_note = (describe_tier2(data.get("tier2") or {}, ctx.profile.deep, data.get("dsv4_layer_found"),
                                 fleet=bool(dist.get("ran") and dist.get("fleet")))
                  + (_fleet_note(dist) if dist.get("fleet") else ""))
    summary = (f"contiguous-CP THD attention matches the float32 reference on {where}, {ranks}: max |err| "
               f"{worst:.1e} <= {t1['comparisons']['causal']['tolerance']:g}, zigzag control "
               f"{min(c['negative_control_zigzag_error'] for c in t1['comparisons'].values()):.1f}{tier2_note}")
    memory = data.get("gpu_memory_peak_mib")
    if memory is not None and memory > MEMORY_LIMIT_MIB:
        return warned(summary + f"; but it used {memory:.0f} MiB of GPU memory (> {MEMORY_LIMIT_MIB})",
                      evidence=evidence)
    return passed(summary, evidence=evidence)

CHECKS = [smoke_thd_cp]
