"""smoke.dsv4-kernels: the DSv4 stack's own CP kernels on the GPU against independent references.

Each sub-run is its own probe (dsv4probe_kernels.py beside this module), started with the run so that their first-call
JIT compiles overlap; a crash or hang in one costs only that sub-run.
"""

from __future__ import annotations

from dataclasses import replace

from dsv4_doctor.api import (Context, Fix, Probe, Profile, Result, Source, StaticFacts, StaticRequest, check, errored,
                             failed, passed, warned)

from ..fixes import catalogue as fixes, frontend as frontend_fixes
from .._upstream import EAV, mlm, pypi
from .._gates import FUSED_COMPRESSOR
from ..cudnn_fe_checks import megatron_compressor
from ..mcore_checks import mcore_fix
from ._causes import RULE_FIXES, crash_cause, crash_text, module_rule, rule_fixes
from .rope import HINT as ROPE_HINT, ROPE_OFF_DOC, ROPE_SOURCES, rope_decided, rope_off_fix, rope_skip
from .thd_cp import not_run, torch_missing

SUBRUN_TITLES = {"dsa": "cuDNN-FE DSA indexer forward", "layout": "Megatron CP layout kernels",
                 "csa": "fused CSA compressor", "flashmla": "FlashMLA sparse forward", "rope": "fused MLA RoPE"}
# Who to fix when a sub-run's call raises or computes wrong numbers (unless a missing module names another rule).
SUBRUN_RULE = {"dsa": "cudnn-fe.dsa", "layout": "cutlass-dsl.import", "csa": "cudnn-fe.csa",
               "flashmla": "kernels.flash-mla", "rope": "kernels.triton"}
# The top-level module each sub-run tests: a missing submodule of it (cudnn.csa in a frontend without it) is that
# sub-run's own finding, not the finding of the rule that reports the package missing.
SUBRUN_MODULE = {"dsa": "cudnn", "layout": "megatron", "csa": "cudnn", "flashmla": "flash_mla", "rope": "megatron"}
# Rule ids a probe may point at (its answer is hostile input: anything else is dropped).
KNOWN_RULES = frozenset(RULE_FIXES) | frozenset(SUBRUN_RULE.values())


def subruns(profile: Profile) -> dict[str, str | None]:
    """Each sub-run, and why it does not apply to this profile (None when it does)."""
    cudnn = profile.dsa_backend == "cudnn"
    return {
        "dsa": None if cudnn else "dsa_kernel_backend=none: the frontend's DSA kernels are not used",
        "layout": None if profile.cp > 1 else "not used at CP 1: Megatron runs the CP layout kernels only with CP > 1",
        "csa": None if cudnn and profile.cc is not None and profile.cc[0] >= 10 and profile.cp == 1 else
        "Megatron uses the fused CSA compressor only on CC >= 10 (as its installed gate admits) with "
        "dsa_kernel_backend=cudnn and CP 1",
        "flashmla": None if cudnn else "dsa_kernel_backend=none: FlashMLA is not used",
        "rope": rope_skip(profile),
    }


def kernel_probe(profile: Profile, name: str) -> Probe:
    # Where nvidia-smi lists a GPU, a sub-run runs on it or fails: it never falls back to the CPU, which would test
    # nothing of what the job runs.
    device = "cuda" if profile.device == "auto" and profile.gpus > 0 else profile.device
    request = {"subrun": name, "cp": profile.cp, "device": device, "device_index": profile.device_index}
    return replace(Probe.beside(__file__, f"smoke-kernels:{name}:cp={profile.cp}:device={profile.device}"
                                f":gpu={profile.device_index}", "dsv4probe_kernels.py", request), long=True)


def _probes(profile: Profile) -> list[Probe]:
    if not_run(profile):
        return []
    return [kernel_probe(profile, name) for name, why in subruns(profile).items() if why is None]


def missing_rule(name: str, error) -> str | None:
    """The rule that reports the module an ImportError names (the registry's, as tier 2 reads it), or None."""
    missing = str((error or {}).get("missing_module") or "") if isinstance(error, dict) else ""
    top = missing.split(".")[0]
    if top == SUBRUN_MODULE[name] and "." in missing:
        return None
    return module_rule(missing)


def subrun_rule(name: str, row: dict) -> str | None:
    """Who reports what a sub-run shows: a missing module's rule, else the probe's pointer (a known rule id), else,
    for a fail, the sub-run's own rule."""
    rule = missing_rule(name, row.get("error"))
    if rule:
        return rule
    pointer = row.get("rule")
    if isinstance(pointer, str) and pointer in KNOWN_RULES:
        return pointer
    return SUBRUN_RULE[name] if row.get("status") == "fail" else None


def _fixes(ctx: Context, name: str, row: dict) -> list[Fix]:
    if missing_rule(name, row.get("error")):
        # e.g. the layout kernels (compiled with --enable-tvm-ffi) or the frontend's DSA kernels without tvm_ffi.
        return rule_fixes(row["rule"], ctx)
    static = ctx.static
    if name in ("dsa", "csa"):
        # A NaN or a wrong mask from the indexer: the seed incident's cure (reinstall the frontend and tvm-ffi).
        return [frontend_fixes.frontend_stack(static, ctx.profile.cc)]
    if name == "layout":
        return [frontend_fixes.cutlass(static), mcore_fix(ctx)]  # the latter names a PYTHONPATH copy that shadows pip's
    if name == "rope":
        return [rope_off_fix(ctx.profile.job)]
    return [fixes.flash_mla(ctx.profile.cc)]


def _not_run(profile: Profile) -> str | None:
    why = not_run(profile)
    if why:
        return why
    if all(reason is not None for reason in subruns(profile).values()):
        return "no kernel sub-run applies: " + "; ".join(f"{SUBRUN_TITLES[n]}: {r}" for n, r in
                                                        subruns(profile).items())
    return None


@check(
    "smoke.dsv4-kernels",
    "Smoke forward: the DSv4 stack's own CP kernels compute the right numbers",
    applies_when="a GPU is visible (or --device cpu); not with --no-smoke; sub-runs by profile",
    detects="the stack's DSA indexer, CP layout kernels, CSA compressor and FlashMLA against independent references; "
            "Megatron's fused MLA RoPE against its unfused path",
    sources=(
        mlm(EAV + "csa_utils/cp_utils.py", "277-301", "Megatron-LM dev cp_utils._build_cp_indexer_layout"),
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "883-926",
            "Megatron-LM dev fused_sparse_attention.py: the indexer_forward_wrapper call"),
        mlm(EAV + "csa_utils/cp_layout_kernels.py", "648-840",
            "Megatron-LM dev cp_layout_kernels.py: CompressorInputCompact, build_attention_indices"),
        mlm("tests/unit_tests/transformer/experimental_attention_variant/test_csa_cp_layout_kernels.py", "",
            "Megatron-LM dev test_csa_cp_layout_kernels.py (the semantics the references follow)"),
        pypi("nvidia-cudnn-frontend", "1.27.0", "nvidia-cudnn-frontend 1.27.0 indexer_forward/api.py docstring and "
             "SM90 mask code; csa/compressor/api.py csa_compressor_forward_wrapper"),
        mlm(EAV + "csa_utils/fused_compressor.py", "187-197",
            "Megatron-LM dev fused_compressor.py: the csa_compressor_forward_wrapper call"),
        mlm(EAV + "csa_utils/fused_sparse_attention.py", "125-179",
            "Megatron-LM dev fused_sparse_attention.py _csa_fwd_flash_mla: the flash_mla_sparse_fwd call"),
        Source("verl PR #7297 (the seed incident: NaN cured by reinstalling the frontend and tvm-ffi)",
               "https://github.com/verl-project/verl/pull/7297"),
        *ROPE_SOURCES,
    ),
    fixes=(frontend_fixes.frontend_stack(StaticFacts({})), fixes.FLASH_MLA, ROPE_OFF_DOC),
    skip_if=_not_run,
    after=("torch.install", "gpu.devices", "gpu.memory", "kernels.flash-mla", "kernels.fast-hadamard", "te.import"),
    static=StaticRequest(modules=FUSED_COMPRESSOR, sources=FUSED_COMPRESSOR),
    probes=_probes,
    per_gpu=True,
)
def smoke_dsv4_kernels(ctx: Context) -> Result:
    """A CP job runs the cuDNN frontend's DSA kernels with q_causal_offsets and Megatron's CuTe-DSL CP layout
    kernels; these are what broke in the seed incident (an H100 job went NaN until the frontend and tvm-ffi were
    reinstalled). Each sub-run calls the installed stack's public entry point the way Megatron calls it, in its
    own probe process under the probe timeout, and compares with a float32 (or exact integer) reference this
    doctor implements from the documented semantics (the RoPE: with Megatron's own unfused path), never with the
    same kernel:
    (1) the frontend's DSA indexer forward (cudnn.DSA.indexer_forward_wrapper) on a packed THD batch split
    contiguously over at least two simulated CP ranks, each rank's arguments built as Megatron's
    cp_utils._build_cp_indexer_layout does (its query segment per sequence, the sequences' full compressed keys,
    q_causal_offsets, the trailing padding segment): identical -inf masks, finite scores within 1e-2, no NaN, and
    a negative control (zero offsets on a crossing sequence) whose mask must differ, else the check cannot
    discriminate and says so (`error`); (2) Megatron's CP layout kernels (csa_utils/cp_layout_kernels.py, loaded
    by file path without importing megatron.core): CompressorInputCompact forward and backward and
    build_attention_indices for every CP rank, exact, on a ragged layout with boundary-crossing sequences; not
    used at CP 1; (3) the fused CSA compressor (cudnn.csa) on CC 10.0 with CP 1, against Megatron's eager
    compressor, whose output must change without the position embedding (the control); (4) FlashMLA's
    flash_mla_sparse_fwd called as Megatron calls it (indexer_topk=0), returning (out, max_logits, lse), finite
    and of the right shapes; (5) Megatron's fused MLA RoPE (fused_mla_rope_inplace, triton) against Megatron's
    own unfused apply_rotary_pos_emb path, called as the DSv4 layer calls them (both of its rotary tables, the
    query and the key, THD with cu_seqlens; per contiguous CP rank through cp_utils at CP > 1), forward and
    backward, within tolerances set from a GPU run, with an inverse-rotation control that must fail the same
    comparison; it runs when the job would use the fused RoPE (apply_rope_fusion: Megatron-Bridge's DSv4
    provider turns it on, so unless the command turns it off, or without a job command), and a NaN, an inf or a
    mismatch fails with the workaround of Megatron-Bridge #4321 (apply_rope_fusion=False). A sub-run whose package
    is absent, or whose entry point does not resolve, is a skip
    pointing to the rule that reports it (a FlashMLA without indexer_topk: kernels.flash-mla); one whose call
    raises is a fail naming the exception, with the rule and fix of the module an ImportError names (no tvm_ffi:
    tvm-ffi.version; no cuda-python: cutlass-dsl.import), else the sub-run's own. A Megatron fix names a
    PYTHONPATH copy that shadows the installed megatron-core. On the CPU (--device cpu) the real kernels refuse
    CPU tensors (a skip: needs CUDA).
    """
    blocked = torch_missing(ctx)
    if blocked:
        return blocked
    profile = ctx.profile
    rows: dict[str, dict] = {}
    cause_fixes: dict[str, list[Fix]] = {}  # a crash's known cause and its fixes, by sub-run
    for name, why in subruns(profile).items():
        if why is None and name == "csa" and profile.cc is not None:
            _, gate = megatron_compressor(ctx.static)
            if gate is not None and not gate.accepts(profile.cc):
                why = (f"the installed Megatron's fused-compressor gate ({gate.describe()}) rejects compute "
                       f"capability {profile.gpu_arch}: the eager compressor runs (see cudnn-fe.csa)")
        if why is not None:
            rows[name] = {"status": "skip", "summary": why, "rule": None}
            continue
        result = ctx.probe(kernel_probe(profile, name))
        what = f"the {SUBRUN_TITLES[name]} sub-run"
        if not result.ok:
            text = crash_text(result.error, result.stderr_tail)
            rows[name] = {"status": "error", "summary": f"its probe {result.error}", "crash_text": text,
                          "signal": result.signal, "timed_out": result.timed_out}
            cause = None if result.timed_out else crash_cause(ctx, text, what=what, hint=SUBRUN_RULE[name])
            if cause is not None:
                rows[name].update(status="error" if cause["cause"] == "oom" else "fail", summary=cause["summary"],
                                  rule=cause["rule"], cause=cause["cause"])
                cause_fixes[name] = cause["fixes"]
            continue
        data = result.data if isinstance(result.data, dict) else {}
        rows[name] = {k: data.get(k) for k in ("status", "summary", "rule", "package", "evidence", "error", "device",
                                              "gpu_memory_peak_mib", "total_s", "torch_start_s")}
        if rows[name]["status"] not in ("pass", "fail", "error", "skip"):
            rows[name] = {"status": "error", "summary": f"the probe answered an unknown status {data.get('status')!r}"}
            continue
        if data.get("no_gpu"):  # asked for the GPU nvidia-smi lists, and torch sees none: nothing was tested
            cause = crash_cause(ctx, "No CUDA GPUs are available", what=what)
            rows[name].update(status="fail", summary=cause["summary"] if cause else rows[name]["summary"],
                              rule="gpu.devices", cause="no-device")
            cause_fixes[name] = cause["fixes"] if cause else []
            continue
        err = rows[name].get("error")
        said = f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else ""
        cause = crash_cause(ctx, crash_text(said), what=what, hint=SUBRUN_RULE[name]) \
            if rows[name]["status"] in ("fail", "error") and said else None
        if cause is not None:
            rows[name].update(status="error" if cause["cause"] == "oom" else "fail", summary=cause["summary"],
                              rule=cause["rule"], cause=cause["cause"], crash_text=crash_text(said))
            cause_fixes[name] = cause["fixes"]
            continue
        rows[name]["rule"] = rule = subrun_rule(name, rows[name])
        if rule and rows[name]["status"] == "skip":
            rows[name]["summary"] = f"{rows[name]['summary']}: see {rule}"
    from dsv4_doctor.api import run_kernel_cache

    evidence: dict = {"subruns": rows, "kernel_cache": run_kernel_cache().evidence(),  # the probes' CuTe DSL cache
                      "kernel_store": store_served(rows), "rope_fusion": rope_decided(profile)}
    if profile.fleet and profile.cp > 1:  # each sub-run is one process by design: per-rank arguments, no collectives
        evidence["ranks"] = f"the {profile.cp} CP ranks simulated on this fleet rank's own GPU (single-process kernels)"
    devices = {str((r.get("device") or {}).get("capability")) for r in rows.values() if r.get("device")}
    visible = next(iter(devices), None)
    if profile.gpu_arch and visible and visible != "None" and visible != profile.gpu_arch:
        evidence["note"] = (f"the profile is for CC {profile.gpu_arch}, but these sub-runs ran on this host's CC "
                            f"{visible}: what this GPU supports ran, under its own arch")
    line = "; ".join(f"{SUBRUN_TITLES[n]}: {r['status']}" + (f" (see {r['rule']})" if r["status"] == "skip" and
                                                              r.get("rule") else "") for n, r in rows.items())
    line += store_line(evidence["kernel_store"])
    failed_runs = [n for n, r in rows.items() if r["status"] == "fail"]
    if failed_runs:
        n = failed_runs[0]
        # A crash of known cause is its own sentence (it names the sub-run); any other finding gets the title.
        summary = rows[n]["summary"] if rows[n].get("cause") else \
            f"{SUBRUN_TITLES[n]} ({rows[n]['rule']}): {rows[n]['summary']}"
        hint = ""
        if n == "dsa" and not rows[n].get("error"):  # wrong numbers, not a call that raised
            hint = ("A NaN or a wrong mask from the DSA indexer is the seed incident's signature (an H100 job went NaN "
                    "until the cuDNN frontend and apache-tvm-ffi were reinstalled).")
        if n == "rope" and not rows[n].get("error"):
            hint = ROPE_HINT
        if rows[n].get("cause") == "no-device":
            hint = "The GPU was not tested: with a GPU listed by nvidia-smi, no sub-run falls back to the CPU."
        return failed(summary, "\n".join(x for x in (hint, "Sub-runs: " + line) if x),
                      fixes=cause_fixes[n] if n in cause_fixes else _fixes(ctx, n, rows[n]), evidence=evidence)
    errors = [n for n, r in rows.items() if r["status"] == "error"]
    if errors:
        n = errors[0]
        return errored(rows[n]["summary"] if rows[n].get("cause") else f"{SUBRUN_TITLES[n]}: {rows[n]['summary']}",
                       "Sub-runs: " + line, evidence=evidence)
    ran = [n for n, r in rows.items() if r["status"] == "pass"]
    # The summary is what the text report shows: which sub-runs ran, and why each other one did not.
    not_ran = "; ".join(f"{SUBRUN_TITLES[n]} did not run: {r['summary']}" for n, r in rows.items()
                        if r["status"] == "skip")
    if ran:
        peak = max((float(r.get("gpu_memory_peak_mib") or 0) for r in rows.values()), default=0.0)
        return passed("ran " + "; ".join(f"{SUBRUN_TITLES[n]}: {rows[n]['summary']}" for n in ran)
                      + (f" (peak GPU memory {peak:.0f} MiB)" if peak else "") + (f". {not_ran}" if not_ran else ""),
                      "Sub-runs: " + line, evidence=evidence)
    # Sub-runs applied but none ran: the DSv4 kernels are untested, which is not a pass of the smoke.
    return warned(f"no DSv4 kernel ran, so the stack's own kernels are untested here: {not_ran}",
                  "Sub-runs: " + line, evidence=evidence)

def store_served(rows: dict) -> dict:
    """Which CuTe DSL kernels the doctor's AOT kernel store served, and which were compiled (and stored), from each
    sub-run's answer (names cut, counts bounded: a probe's answer is read as untrusted data)."""
    out: dict = {"served": [], "compiled": [], "uncached": []}
    for name, row in rows.items():
        evidence = row.get("evidence")
        store = evidence.get("aot_kernel_store") if isinstance(evidence, dict) else None
        calls = store.get("calls") if isinstance(store, dict) else None
        if not isinstance(calls, list):
            continue
        for call in calls[:64]:
            if isinstance(call, dict):
                result = call.get("result")
                where = "served" if result == "served" else "uncached" if result == "uncached" else "compiled"
                out[where].append(f"{name}: {str(call.get('kernel'))[:80]}")
    return out


def store_line(store: dict) -> str:
    served, compiled, uncached = (len(store.get(k) or []) for k in ("served", "compiled", "uncached"))
    if not (served or compiled or uncached):
        return ""
    return (f". Kernel store: {served} kernel(s) loaded, {compiled} compiled"
            + (f", {uncached} not storable" if uncached else "") + " (evidence kernel_store)")


CHECKS = [smoke_dsv4_kernels]
