"""job.env: the job's environment variables, as the job will see them."""

from __future__ import annotations

import os

from dsv4_doctor.api import Context, Finding, Fix, Phase, Result, Source, check, command_not_read, passed, warned
from .settings import is_unresolved, job_of, no_job, not_known, remote_of, value_of
from .._upstream import EAV, mlm


# --------------------------------------------------------------------------------------------------------- job.env

@check("job.env", "The job's environment variables", skip_if=no_job, only_with="job",
    applies_when="job arguments given",
    detects="the job's environment and GPU names",
    sources=(
        Source("verl run_deepseek_v4_flash_megatron.sh (environment)",
               "https://github.com/verl-project/verl/blob/main/examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh"),
        Source("Megatron-LM #6319 (NVLS on by default in DDP)", "https://github.com/NVIDIA/Megatron-LM/issues/6319"),
        Source("NCCL #2186 (MNNVL on GB200 NVL72)", "https://github.com/NVIDIA/nccl/issues/2186"),
        mlm(EAV + "deepseek_v4_hybrid_attention.py", "", "Megatron-LM dev DSv4 attention"),
    ))
def job_env(ctx: Context) -> Result | list[Finding]:
    """Judges the environment the job runs in (the doctor runs inside it at preflight; `env K=V` in front of the
    command counts too). NCCL_NVLS_ENABLE=0, as verl's DSv4 script and the Megatron recipes set it (Megatron's
    DDP enables NVLS unless it is set). CUDA_DEVICE_MAX_CONNECTIONS: verl's script sets 1, while Megatron's EP
    all-to-all overlap wants more than 1, a trade-off the warning states. NCCL_MNNVL_ENABLE on GB200/GB300
    NVL72 hosts. Warnings only; each names the `export` line to put in the job script, which the fix plan
    and the text report list as job settings (never run). An overlap_moe_expert_parallel_comm written as a
    variable the doctor cannot resolve leaves CUDA_DEVICE_MAX_CONNECTIONS=1 not known (a skip).
    """
    job = job_of(ctx)
    remote = remote_of(job)
    env = {} if remote else dict(os.environ)  # on another host only what the command sets is known
    for name in job.unset:  # `env -u NAME` in front of the command
        env.pop(name, None)
    env.update(job.env)
    names = [] if remote else [str(g.get("name", "")) for g in ctx.gpus()]
    warns, notes, exports, unknown = [], [], [], []
    nvls = env.get("NCCL_NVLS_ENABLE")
    if nvls != "0":
        exports.append(("NCCL_NVLS_ENABLE", "0", "as verl's DSv4 script and the Megatron recipes set it"))
        warns.append(f"NCCL_NVLS_ENABLE is {'unset' if nvls is None else repr(nvls)}: verl's DSv4 script and the "
                     "Megatron recipes set NCCL_NVLS_ENABLE=0 (Megatron's DDP enables NVLS unless it is set, MLM "
                     "#6319)")
    else:
        notes.append("NCCL_NVLS_ENABLE=0")
    connections = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    overlap = any(value_of(job.effective(r), "overlap_moe_expert_parallel_comm") is True
                  for r in job.checked_roles())
    overlap_written = next((job.effective(r)["overlap_moe_expert_parallel_comm"] for r in job.checked_roles()
                            if is_unresolved(job.effective(r), "overlap_moe_expert_parallel_comm")), None)
    if connections is None:
        exports.append(("CUDA_DEVICE_MAX_CONNECTIONS", "1", "verl's DSv4 script's choice; more than 1 for Megatron's "
                        "EP all-to-all overlap"))
        warns.append("CUDA_DEVICE_MAX_CONNECTIONS is unset: verl's DSv4 script sets 1 (communication kernels keep "
                     "their launch order), while Megatron's EP all-to-all overlap wants more than 1; choose one")
    elif connections == "1" and overlap:
        warns.append("CUDA_DEVICE_MAX_CONNECTIONS=1 with overlap_moe_expert_parallel_comm: the EP all-to-all "
                     "overlap needs more than one connection to overlap anything")
    elif connections == "1" and overlap_written is not None:
        unknown.append(not_known("", "overlap_moe_expert_parallel_comm", overlap_written, ", so whether "
                                 "CUDA_DEVICE_MAX_CONNECTIONS=1 holds the EP all-to-all overlap back is not known"))
    else:
        notes.append(f"CUDA_DEVICE_MAX_CONNECTIONS={connections}")
    if any("GB200" in n or "GB300" in n for n in names):
        mnnvl = env.get("NCCL_MNNVL_ENABLE")
        if mnnvl is None:
            exports.append(("NCCL_MNNVL_ENABLE", "1", "multi-node NVLink on GB200/GB300 NVL72"))
            warns.append("NCCL_MNNVL_ENABLE is unset on a GB200/GB300 host: multi-node NVLink on NVL72 depends on it "
                         "(NCCL #2186)")
        else:
            notes.append(f"NCCL_MNNVL_ENABLE={mnnvl}")
    evidence = {"NCCL_NVLS_ENABLE": nvls, "CUDA_DEVICE_MAX_CONNECTIONS": connections,
                "NCCL_MNNVL_ENABLE": env.get("NCCL_MNNVL_ENABLE"), "gpus": names[:8],
                "from_command": sorted(job.env),
                "exports": [f"export {name}={value}" for name, value, _ in exports]}
    fixes = [Fix(f"Set in the job script, before the training command ({why}):\n  export {name}={value}",
                 key=f"env:{name}={value}", phase=Phase.SETTING) for name, value, why in exports]
    if remote and warns:
        where = f"the job runs after `{remote}`: the remote host's environment is not known here"
        return warned("; ".join(warns) + f" ({where})", "\n".join(unknown + notes), fixes=fixes, evidence=evidence)
    if job.kind not in ("verl", "megatron"):
        # A wrapper (bash x.sh, srun ...) runs a script that may export or override them after the doctor looked.
        hides = command_not_read(job) or "the command runs a script the doctor does not read"
        script = f"{hides}, which may set them itself"
        if warns:
            return warned("; ".join(warns) + f" ({script})", "\n".join(notes), fixes=fixes, evidence=evidence)
        return warned(f"not known: {'; '.join(notes)} before the command starts, but {script}", evidence=evidence)
    if warns:
        return warned("; ".join(warns), "\n".join(unknown + notes), fixes=fixes, evidence=evidence)
    if unknown:
        return warned("not known: " + "; ".join(unknown), "\n".join(notes), evidence=evidence)
    return passed("; ".join(notes), evidence=evidence)
