"""The DSA settings of one role of the job: the kernel backend DSv4 accepts (job.dsa-backend) and the SM90 rule on
the dense indexer loss (job.indexer-loss)."""

from __future__ import annotations

from dsv4_doctor.job.keys import role_head
from dsv4_doctor.job.model import Job
from dsv4_doctor.model import Fix, Phase

from ._job_settings import (add_setting, config_files, is_stated, is_unresolved, maybe_in_file, not_known, role_label,
                            value_of, written)
from ._job_verdict import Found

# Megatron's texts (d48bd6be), quoted in the findings.
M10 = ("DSv4 with fused DSA and dense indexer loss is not supported on SM90 because the cuDNN Frontend SM90 dense DSA "
       "kernels are not reliable for this path. Use sparse indexer loss or set dsa_kernel_backend='none'.")
M13 = ("dsv4_hybrid does not support dsa_kernel_backend='tilelang'; use 'cudnn' for fused CSA kernels or 'none' for "
       "the PyTorch fallback.")
BACKENDS = ("none", "cudnn")


def _drop_fusion_switch(job: Job, role: str, backend: str) -> Fix:
    """The conflict's fix: drop the deprecated switch (dsa_kernel_backend says what the job wants)."""
    why = f"dsa_kernel_backend={backend} states the backend; apply_dsa_kernel_fusion is the deprecated switch"
    if job.syntax == "megatron":
        return Fix(f"Remove --no-dsa-kernel-fusion from the training command ({why})",
                   key="job:remove --no-dsa-kernel-fusion", phase=Phase.SETTING)
    key = f"{role_head(role)}override_transformer_config.apply_dsa_kernel_fusion"
    return Fix(f"Drop the deprecated switch ({why}): remove the argument that sets it from the training command, or "
               f"add after it:\n  ~{key}", key=f"job:~{key}", phase=Phase.SETTING)


def judge_backend(job: Job, role: str, found: Found, rows: dict) -> None:
    """One role's dsa_kernel_backend and apply_dsa_kernel_fusion; its evidence row goes into `rows`."""
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    st, lab = job.effective(role), role_label(job, role)
    backend, fusion = value_of(st, "dsa_kernel_backend"), value_of(st, "apply_dsa_kernel_fusion")
    rows[role] = {"dsa_kernel_backend": backend, "apply_dsa_kernel_fusion": fusion}
    if is_unresolved(st, "dsa_kernel_backend"):
        unknown.append(not_known(lab, "dsa_kernel_backend", st["dsa_kernel_backend"]))
        return
    fusion_known = not is_unresolved(st, "apply_dsa_kernel_fusion")
    if not is_stated(st, "dsa_kernel_backend") and not fusion_known:
        unknown.append(not_known(lab, "apply_dsa_kernel_fusion", st["apply_dsa_kernel_fusion"],
                                 ", so the DSA backend it selects is not known"))
        return
    if not is_stated(st, "dsa_kernel_backend"):
        (notes if is_stated(st, "apply_dsa_kernel_fusion") else unknown).append(
            f"{lab}dsa_kernel_backend not stated" + (f" (apply_dsa_kernel_fusion={fusion})"
                                                     if is_stated(st, "apply_dsa_kernel_fusion") else ""))
        return
    if backend == "tilelang":
        fails.append(f"{lab}dsa_kernel_backend=tilelang: Megatron stops with \"{M13}\"")
    elif backend not in BACKENDS:
        fails.append(f"{lab}dsa_kernel_backend={backend!r}: Megatron accepts only 'none' and 'cudnn' for DSv4 "
                     "(its CLI's choices are none, tilelang and cudnn, and tilelang is rejected for dsv4_hybrid)")
    elif not fusion_known:
        unknown.append(not_known(lab, "apply_dsa_kernel_fusion", st["apply_dsa_kernel_fusion"],
                                 f", so whether it conflicts with dsa_kernel_backend={backend} is not known"))
        return
    elif fusion in (True, False) and backend not in ("none", "cudnn" if fusion else "none"):
        legacy = "cudnn" if fusion else "none"
        fails.append(f"{lab}apply_dsa_kernel_fusion={fusion} maps to dsa_kernel_backend={legacy!r}, but "
                     f"dsa_kernel_backend={backend!r} is stated too: Megatron raises \"Conflicting DSA kernel "
                     "controls\"")
        fixes.append(_drop_fusion_switch(job, role, backend))
        return
    else:
        notes.append(f"{lab}dsa_kernel_backend={backend}")
        return
    fixes.append(add_setting(job, role, "dsa_kernel_backend", "cudnn", "the fused kernels; or none for the PyTorch "
                             "fallback", written(st, "dsa_kernel_backend")))


def judge_indexer_loss(job: Job, role: str, found: Found, rows: dict) -> None:
    """One role's indexer loss on SM90 with the fused DSA kernels; its evidence row goes into `rows`."""
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    st, lab = job.effective(role), role_label(job, role)
    coeff, sparse = value_of(st, "dsa_indexer_loss_coeff"), value_of(st, "dsa_indexer_use_sparse_loss")
    rows[role] = {"dsa_indexer_loss_coeff": coeff, "dsa_indexer_use_sparse_loss": sparse}
    if value_of(st, "csa_dense_mode") is True:
        notes.append(f"{lab}csa_dense_mode: no ratio-4 indexer")
        return
    if not is_stated(st, "dsa_indexer_loss_coeff") and job.kind == "megatron" and not config_files(job):
        notes.append(f"{lab}dsa_indexer_loss_coeff not stated: Megatron's default None, no indexer loss")
        return
    if not is_stated(st, "dsa_indexer_loss_coeff") or is_unresolved(st, "dsa_indexer_loss_coeff"):
        # Megatron-Bridge's DSv4 provider decides what verl does not state: not known from the command.
        unknown.append((f"{lab}dsa_indexer_loss_coeff: not stated{maybe_in_file(job)}" if config_files(job) else
                        f"{lab}dsa_indexer_loss_coeff: not stated (Megatron-Bridge's DSv4 provider decides)")
                       if not is_stated(st, "dsa_indexer_loss_coeff") else
                       f"{lab}dsa_indexer_loss_coeff={written(st, 'dsa_indexer_loss_coeff')!r}: not known")
        return
    if not isinstance(coeff, (int, float)) or isinstance(coeff, bool):
        notes.append(f"{lab}dsa_indexer_loss_coeff={coeff!r} is not a number")
        return
    if coeff <= 0:
        notes.append(f"{lab}indexer loss off (coeff {coeff})")
        return
    if sparse is True:
        notes.append(f"{lab}sparse indexer loss (coeff {coeff})")
        return
    for name in ("dsa_indexer_use_sparse_loss", "csa_dense_mode"):  # either one keeps the dense loss off
        if is_unresolved(st, name):
            unknown.append(not_known(lab, name, st[name], f" (dsa_indexer_loss_coeff {coeff}), so whether the dense "
                                     "indexer loss is on is not known"))
            return
    fails.append(f"{lab}dense indexer loss (coeff {coeff}, dsa_indexer_use_sparse_loss "
                 f"{'not stated' if sparse is None else sparse}) with fused DSA on SM90: Megatron stops with "
                 f"\"{M10}\"")
    fixes.append(add_setting(job, role, "dsa_indexer_use_sparse_loss", True, "as verl's DSv4 example sets it",
                             written(st, "dsa_indexer_use_sparse_loss")))
