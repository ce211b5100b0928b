"""Tier 2's fused-vs-unfused builds: the fused and the unfused DSv4 layer, each forward + backward in a process of
its own (a child running dsv4probe_smoke.py with a `tier2_build` request), then compared.

A part of the smoke probe (dsv4probe_smoke.py), loaded by path (dsv4probe_common.load_module).
"""

import os
import subprocess
import time

from dsv4probe_common import (  # in sys.modules: it loads this part
    ANSWER_LIMIT, LIB, ReadRefused, cache_fds, cut_text, error_info, launch_argv, load_json, load_module,
    request_beside, stage)

HERE = os.path.dirname(os.path.realpath(__file__))
for _part in ("dsv4probe_device", "dsv4probe_files", "dsv4probe_smoke_batch", "dsv4probe_smoke_tier2",
              "dsv4probe_smoke_tolerances"):
    load_module(_part, HERE)
# The parts just loaded by path, read from sys.modules (never looked up on sys.path):
from dsv4probe_device import free_port, sync
from dsv4probe_files import log_tail
from dsv4probe_smoke_batch import SEED
from dsv4probe_smoke_tier2 import cums, hadamard_stand_in, quietly_destroy_model_parallel
from dsv4probe_smoke_tolerances import (FUSED_BUILD_TIMEOUT_S, FUSED_CONTROL_FACTOR, FUSED_HIDDEN, FUSED_INIT_STD,
                                        FUSED_LENS, FUSED_SETTINGS, compare_builds, fused_config, fused_tolerances)


def _weight_digest(torch, layer):
    return {n: "%.10e" % float(p.detach().cpu().double().sum().item()) for n, p in sorted(layer.named_parameters())}


def _set_weights(torch, layer):
    """Every matrix from a generator seeded by its name, so both builds hold the same weights whatever order they
    create their modules in; vectors (norm scales, sinks) keep their deterministic initial values."""
    import zlib

    with torch.no_grad():
        for name, p in sorted(layer.named_parameters()):
            if p.dim() >= 2:
                gen = torch.Generator().manual_seed(SEED + zlib.crc32(name.encode()))
                p.copy_((torch.randn(tuple(p.shape), generator=gen) * FUSED_INIT_STD).to(p.dtype))


def _control_parameter(layer):
    names = [n for n, p in layer.named_parameters() if p.dim() >= 2]
    for n in names:
        if n.endswith("linear_proj.weight"):
            return n
    return names[-1] if names else None


# The stages at which a build runs the layer's kernels: a timeout there is a hang; one before (importing TE and
# megatron.core, building the layer) is a build that was slow to start, which proves nothing about the kernels.
KERNEL_STAGES = ("forward+backward", "steady step", "control")


def _stage(out, job, name):
    """Record the build's stage, also in its stage file: a build killed at its timeout writes no answer, and the
    parent must tell a hang in the kernels from a slow start."""
    out["stage"] = name
    path = job.get("stage_file")
    if path:
        try:
            with open(path, "w") as fh:
                fh.write(name)
        except OSError:
            pass


def tier2_build(request):
    """One build of the DSv4 layer (its own process): forward + backward on the fixed packed batch, saved to a file.

    The fused build also reruns with a perturbed output projection (the control) and times a second, steady step."""
    job = request["tier2_build"]
    backend, save = job["backend"], job["save"]
    out = {"backend": backend}
    _stage(out, job, "import")
    t_start = time.monotonic()
    events = _watch_dsl_cache()
    try:
        import torch

        device = torch.device(job.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = _install_store(torch, device, events)
        try:
            import transformer_engine.pytorch  # noqa: F401
        except BaseException as exc:  # as tier 2 at CP 1: the TE rules report it
            out.update(ok=False, skipped="needs Transformer Engine (see te.version and te.import): %s: %s"
                       % (type(exc).__name__, cut_text(str(exc), 300)))
            return out
        out["hadamard"] = hadamard_stand_in()
        from megatron.core import parallel_state
        from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider
        from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
            get_dsv4_hybrid_module_spec_for_backend)
        from megatron.core.packed_seq_params import PackedSeqParams
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        from megatron.core.transformer.spec_utils import build_module
        from megatron.core.transformer.transformer_config import MLATransformerConfig
        import torch.distributed as dist

        out["import_s"] = round(time.monotonic() - t_start, 3)
        _stage(out, job, "init")
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    init_method="tcp://127.0.0.1:%d" % free_port(), rank=0, world_size=1)
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                                 context_parallel_size=1)
        torch.manual_seed(SEED)
        model_parallel_cuda_manual_seed(SEED)
        _stage(out, job, "config")
        config = fused_config(torch, MLATransformerConfig, backend)
        out["settings"] = dict(FUSED_SETTINGS, dsa_kernel_backend=backend)
        _stage(out, job, "build")
        spec = get_dsv4_hybrid_module_spec_for_backend(config=config, backend=TESpecProvider())
        layer = build_module(spec, config=config, layer_number=1,
                             pg_collection=ProcessGroupCollection.use_mpu_process_groups()).to(device)
        _set_weights(torch, layer)
        layer.train()
        weights = _weight_digest(torch, layer)
        lens = list(FUSED_LENS)
        cu = cums(torch, lens, device)
        packed = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu,
                                 cu_seqlens_kv_padded=cu, max_seqlen_q=max(lens), max_seqlen_kv=max(lens),
                                 cp_partition_mode="contiguous")
        gen = torch.Generator().manual_seed(SEED + 1)
        hidden0 = torch.randn(sum(lens), 1, FUSED_HIDDEN, generator=gen).to(torch.bfloat16)
        grad_out = torch.randn(sum(lens), 1, FUSED_HIDDEN, generator=gen).to(torch.bfloat16).to(device)

        def step():
            layer.zero_grad(set_to_none=True)
            hidden = hidden0.to(device).clone().requires_grad_(True)  # a fresh leaf: no gradient carried over
            t0 = time.monotonic()
            result, _ = layer(hidden_states=hidden, attention_mask=None, packed_seq_params=packed)
            sync(torch, device)
            t1 = time.monotonic()
            result.backward(grad_out)
            sync(torch, device)
            tensors = {"output": result.detach().cpu().clone(), "grad.input": hidden.grad.detach().cpu().clone()}
            for n, p in layer.named_parameters():
                if p.grad is not None:
                    tensors["grad." + n] = p.grad.detach().cpu().clone()
            return tensors, round(t1 - t0, 4), round(time.monotonic() - t1, 4)

        _stage(out, job, "forward+backward")
        seen = len(events)
        tensors, out["first_forward_s"], out["first_backward_s"] = step()
        out["cute_dsl_cache"] = {"first_step": _count_events(events[seen:])}
        _stage(out, job, "steady step")
        seen = len(events)
        _, out["steady_forward_s"], out["steady_backward_s"] = step()
        out["cute_dsl_cache"]["steady_step"] = _count_events(events[seen:])
        saved = {"tensors": tensors, "weights": weights}
        if job.get("control"):
            _stage(out, job, "control")
            name = _control_parameter(layer)
            factor = 1.0 + FUSED_CONTROL_FACTOR * fused_tolerances()["forward"]
            with torch.no_grad():
                dict(layer.named_parameters())[name].mul_(factor)
            control, _, _ = step()
            saved["control"] = {"output": control["output"], "perturbed": "%s x %.4f" % (name, factor)}
        torch.save(saved, save)
        if store is not None:
            out["aot_kernel_store"] = store.summary()
        out["finite"] = all(bool(torch.isfinite(t.float()).all().item()) for t in tensors.values())
        out["tensors"] = sorted(tensors)
        _stage(out, job, "done")
        out["ok"] = True
        quietly_destroy_model_parallel(parallel_state)
    except BaseException as exc:
        out["ok"] = False
        out["error"] = error_info(exc, frames=6)
    out["wall_s"] = round(time.monotonic() - t_start, 3)
    return out


def fused_not_run(request, device):
    """Why the fused-vs-unfused comparison does not run here, or None."""
    if request.get("dsa_backend", "cudnn") != "cudnn":
        return "dsa_kernel_backend=%s: the job does not run the fused DSA kernels" % request.get("dsa_backend")
    if device.type != "cuda":
        return "the fused DSA kernels (cuDNN indexer, FlashMLA) run on a CUDA GPU only"
    import importlib.util

    try:
        found = importlib.util.find_spec("transformer_engine") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "needs Transformer Engine (see te.version and te.import)"
    return None


def _watch_dsl_cache():
    """The kernel probe's count of CuTe DSL file-cache reads and writes (dsv4probe_kernels_ran), or an empty list."""
    try:
        kernels_ran = load_module("dsv4probe_kernels_ran", HERE)
        kernels_ran.watch_cute_dsl_cache()
        return kernels_ran.CACHE_EVENTS
    except Exception:
        return []


def _install_store(torch, device, events):
    """The doctor's AOT kernel store in this build's process (dsv4probe_kernelstore), or None where it cannot load."""
    try:
        store = load_module("dsv4probe_kernelstore", HERE)
        store.install(store.arch_of(torch, device), events=events)
        return store
    except Exception:
        return None


def _count_events(events):
    """How the step's CuTe DSL kernels were obtained: modules read from the file cache, compiled and written, and
    compiled by cute.compile, which bypasses the file cache (no kernel cache can serve those)."""
    return {"read_from_cache": sum(1 for e in events if e[0] == "load-hit"),
            "compiled_and_written": sum(1 for e in events if e[0] == "write"),
            "lookups": sum(1 for e in events if e[0] in ("load-hit", "load-miss")),
            "compiled_cache_bypassed": sum(1 for e in events if e[0] == "compile-no-cache"),
            "served_by_store": sum(1 for e in events if e[0] == "aot-served"),
            "stored": sum(1 for e in events if e[0] == "aot-stored")}


def start_fused_builds(request, outdir, extra_env=None):
    """Start the fused and the unfused build, each its own process in this probe's process group (a timeout of the
    probe kills them), before the rest of the smoke runs: they are its longest part. `extra_env`: the prewarm's
    (where its markers are)."""
    here = os.path.join(HERE, "dsv4probe_smoke.py")  # the probe script: a tier2_build request makes it a build
    # faulthandler in the child dumps where a hung build waits, one second before it is killed.
    env = dict(os.environ, DSV4_DOCTOR_PROBE_LIB=LIB,
               DSV4_DOCTOR_PROBE_TIMEOUT=str(request.get("build_timeout_s") or FUSED_BUILD_TIMEOUT_S))
    env.pop("DSV4_DOCTOR_AOT_PENDING", None)  # only the prewarm's, through extra_env
    env.update(extra_env or {})
    builds = {}
    for label, backend in (("fused", "cudnn"), ("unfused", "none")):
        save = os.path.join(outdir, "tier2_%s.pt" % label)
        out = os.path.join(outdir, "tier2_%s.json" % label)
        job = {"backend": backend, "save": save, "control": label == "fused", "device": request.get("build_device"),
               "stage_file": out + ".stage"}
        log = open(os.path.join(outdir, "tier2_%s.log" % label), "wb")
        proc = subprocess.Popen(launch_argv(here, out, request_beside(out, {"tier2_build": job})), stdout=log,
                                stderr=subprocess.STDOUT, env=env, pass_fds=cache_fds())
        log.close()
        builds[label] = {"proc": proc, "out": out, "save": save, "log": log.name, "started": time.monotonic(),
                         "stage_file": job["stage_file"]}
    return builds


def _read_build(build):
    try:
        data = load_json(build["out"], ANSWER_LIMIT)
    except ReadRefused:
        return {"ok": False, "error": {"type": "NoAnswer", "message": "the build process gave no answer"},
                "log_tail": log_tail(build["log"])}
    return data.get("result", data) if isinstance(data, dict) else {"ok": False, "error": {"type": "BadAnswer"}}


def _wait_saying_stages(build, until, builds):
    """The build's exit code, waiting until the monotonic time `until` (TimeoutExpired after it), while the probe's
    stage says where each build is ("tier 2: fused build at forward+backward, unfused build done")."""
    while True:
        stage("tier 2: " + ", ".join(
            "%s build %s" % (label, "stopped at its limit" if b.get("hung") else "done" if b["proc"].poll() is not None
                             else "at " + (log_tail(b.get("stage_file") or "", 64).strip() or "import"))
            for label, b in builds.items()))
        try:
            return build["proc"].wait(timeout=max(0.1, min(until - time.monotonic(), 1.0)))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= until:
                raise


def finish_fused_builds(torch, builds, deadline, timeout_s=FUSED_BUILD_TIMEOUT_S):
    """Wait for both builds (each at most timeout_s from its start, and never past the probe's deadline), then
    compare them. A build still running then is a hang: a finding, killed, never waited for again."""
    out = {"tolerances": fused_tolerances(), "builds": {}}
    for label, b in builds.items():
        try:
            code = _wait_saying_stages(b, min(b["started"] + timeout_s, deadline), builds)
        except subprocess.TimeoutExpired:
            b["proc"].kill()
            b["proc"].wait()
            b["hung"] = True
            waited = round(min(timeout_s, max(0.0, deadline - b["started"])), 1)
            stage = log_tail(b.get("stage_file") or "", 64).strip() or "import"
            # A hang only where the layer's kernels run, and only when the build had its whole timeout: a build
            # still importing, or cut short by the probe's own deadline, is not proven to hang.
            hang = stage in KERNEL_STAGES and b["started"] + timeout_s <= deadline
            what = "did not finish its forward + backward" if hang else "had not got past %s" % stage
            out["builds"][label] = {
                "ok": False, "hang": hang, "timed_out": True, "stage": stage, "timeout_s": waited,
                "log_tail": log_tail(b["log"]),
                "error": {"type": "Timeout", "message": "the %s build %s within %.0f s" % (label, what, waited)}}
            continue
        answer = _read_build(b)
        answer["exit_code"] = code
        out["builds"][label] = answer
    skipped = [v["skipped"] for v in out["builds"].values() if v.get("skipped")]
    if skipped:
        out["skipped"] = skipped[0]
        return out
    if not all(v.get("ok") for v in out["builds"].values()):
        out["ok"] = False
        return out
    try:
        fused = torch.load(builds["fused"]["save"])
        unfused = torch.load(builds["unfused"]["save"])
        out["comparison"] = compare_builds(torch, fused, unfused)
        out["ok"] = out["comparison"]["ok"]
    except BaseException as exc:
        out["ok"] = False
        out["error"] = error_info(exc, frames=4)
    return out
