"""The DSA settings of one role of the job: the kernel backend DSv4 accepts (job.dsa-backend) and the SM90 rule on
the dense indexer loss (job.indexer-loss)."""

from __future__ import annotations

from dsv4_doctor.api import (SWITCH_BACKEND, Fix, Job, Phase, Profile, RoleBackend, bridge_switch, conflict_text,
                             line_to_add, role_backend)

from .settings import (add_setting, config_files, is_stated, is_unresolved, maybe_in_file, not_known, role_label,
                       value_of, written)
from .verdict import Found

# Megatron's texts (d48bd6be), quoted in the findings.
M10 = ("DSv4 with fused DSA and dense indexer loss is not supported on SM90 because the cuDNN Frontend SM90 dense DSA "
       "kernels are not reliable for this path. Use sparse indexer loss or set dsa_kernel_backend='none'.")
M13 = ("dsv4_hybrid does not support dsa_kernel_backend='tilelang'; use 'cudnn' for fused CSA kernels or 'none' for "
       "the PyTorch fallback.")
BACKENDS = ("none", "cudnn")


def _drop_fusion_switch(job: Job, role: str, backend: str) -> Fix:
    """The Megatron-LM CLI's conflict fix: drop the deprecated switch (dsa_kernel_backend says what the job wants)."""
    why = f"dsa_kernel_backend={backend} states the backend; apply_dsa_kernel_fusion is the deprecated switch"
    return Fix(f"Remove --no-dsa-kernel-fusion from the training command ({why})",
               key="job:remove --no-dsa-kernel-fusion", phase=Phase.SETTING)


def _lines_fix(what: str, lines: list[str], key: str = "job") -> Fix:
    """A job-setting fix of several arguments, each on its own indented line (renderers keep them whole)."""
    body = "".join(f"\n  {line}" for line in lines)
    return Fix(f"{what}:{body}", key=f"{key}:{' '.join(lines)}", phase=Phase.SETTING)


def verl_backend_lines(job: Job, role: str, backend: str) -> list[str]:
    """The arguments that make one verl role run `backend` in a form Megatron accepts through verl (Megatron-Bridge
    writes apply_dsa_kernel_fusion, Megatron folds it in): the switch alone where the command states no backend or
    the same one (True for cudnn, False for none), else the backend with apply_dsa_kernel_fusion=null beside it."""
    st = job.effective(role)
    if not is_stated(st, "dsa_kernel_backend") or value_of(st, "dsa_kernel_backend") == backend:
        return [line_to_add(job, role, "apply_dsa_kernel_fusion", SWITCH_OF[backend])]
    return [line_to_add(job, role, "dsa_kernel_backend", backend),
            line_to_add(job, role, "apply_dsa_kernel_fusion", "null")]


SWITCH_OF = {backend: switch for switch, backend in SWITCH_BACKEND.items()}


def backend_none_fix(profile: Profile) -> Fix:
    """The "or run Megatron's PyTorch fallback" alternative: for a verl job, the arguments that make each role run
    none in a form Megatron accepts through verl (verl_backend_lines); otherwise the generic BACKEND_NONE."""
    from ..fixes.catalogue import BACKEND_NONE

    job = profile.job
    if job is None or job.kind != "verl" or not job.checked_roles():
        return BACKEND_NONE
    roles = [r for r in job.checked_roles() if r != "ref" or any(
        k in job.roles.get("ref", {}) for k in ("dsa_kernel_backend", "apply_dsa_kernel_fusion"))]
    lines = [line for role in roles for line in verl_backend_lines(job, role, "none")]
    return _lines_fix("Or run Megatron's PyTorch fallback (dsa_kernel_backend=none; check again with --dsa-backend "
                      "none): through verl, add to the training command", lines, key="setting:dsa-backend-none")


def _verl_conflict_fixes(job: Job, role: str, rb: RoleBackend) -> list[Fix]:
    """The two forms Megatron accepts for a stated backend the switch contradicts: keep the backend and make the
    switch null, or select the same backend with the switch."""
    st = job.effective(role)
    now = written(st, "apply_dsa_kernel_fusion")
    writer = ("Megatron-Bridge's DeepSeek-V4 provider writes the switch for verl" if rb.switch_by == "bridge" else
              "the switch is deprecated")
    keep = add_setting(job, role, "apply_dsa_kernel_fusion", "null",
                       f"keeps dsa_kernel_backend={rb.backend}: {writer}, and null leaves the backend to "
                       "dsa_kernel_backend", now)
    fixes = [keep]
    if rb.backend in SWITCH_OF:
        fixes.append(add_setting(job, role, "apply_dsa_kernel_fusion", SWITCH_OF[rb.backend],
                                 f"or select {rb.backend} with the switch itself, as verl's DSv4 example does", now))
    return fixes


def _judge_verl_backend(job: Job, role: str, found: Found, rows: dict) -> None:
    """One verl role: the command's switch, else the bridge's, folded into the backend as Megatron does."""
    fails, notes, fixes, unknown = found.fails, found.notes, found.fixes, found.unknown
    st, lab = job.effective(role), role_label(job, role)
    rb = role_backend(job, role, bridge_switch(job))
    rows[role] = {"dsa_kernel_backend": value_of(st, "dsa_kernel_backend"),
                  "apply_dsa_kernel_fusion": value_of(st, "apply_dsa_kernel_fusion"),
                  "switch": rb.switch, "switch_by": rb.switch_by or None, "runs": rb.runs}
    if is_unresolved(st, "dsa_kernel_backend"):
        unknown.append(not_known(lab, "dsa_kernel_backend", st["dsa_kernel_backend"]))
        return
    if rb.unknown and is_unresolved(st, "apply_dsa_kernel_fusion"):
        consequence = (f", so whether it conflicts with dsa_kernel_backend={rb.backend} is not known" if rb.backend
                       else ", so the DSA backend it selects is not known")
        unknown.append(not_known(lab, "apply_dsa_kernel_fusion", st["apply_dsa_kernel_fusion"], consequence))
        return
    if rb.unknown:
        unknown.append(f"{lab}{rb.unknown}")
        return
    bridge = bridge_switch(job)
    by_bridge = (f" (Megatron-Bridge's DeepSeek-V4 provider writes apply_dsa_kernel_fusion={rb.switch}: {bridge[1]})"
                 if rb.switch_by == "bridge" and bridge is not None else "")
    if rb.error:
        fails.append(f"{lab}apply_dsa_kernel_fusion={rb.switch} with dsa_kernel_backend={rb.backend!r}{by_bridge}: "
                     f"Megatron stops with \"ValueError: {rb.error}\"")
    elif rb.rejected == "tilelang":
        fails.append(f"{lab}dsa_kernel_backend=tilelang: Megatron stops with \"{M13}\"")
    elif rb.rejected:
        fails.append(f"{lab}dsa_kernel_backend={rb.backend!r}: Megatron accepts only 'none' and 'cudnn' for DSv4")
    if rb.rejected:
        lines = verl_backend_lines(job, role, "cudnn")
        fixes.append(_lines_fix(f"Change in the training command (the fused kernels; or none for the PyTorch "
                                f"fallback), from {written(st, 'dsa_kernel_backend')!r} to", lines))
        return
    if rb.error:
        fixes.extend(_verl_conflict_fixes(job, role, rb))
        return
    if rb.backend == "none" and rb.runs != "none":
        found.warns.append(f"{lab}dsa_kernel_backend=none is stated, but apply_dsa_kernel_fusion={rb.switch}"
                           f"{by_bridge or ' (stated)'} folds over it: the job runs {rb.runs}, not the none it states")
        fixes.append(add_setting(job, role, "apply_dsa_kernel_fusion", "null",
                                 "to run the none it states: null leaves the backend to dsa_kernel_backend",
                                 written(st, "apply_dsa_kernel_fusion")))
        return
    notes.append(f"{lab}dsa_kernel_backend {rb.runs} ({rb.how})")


def judge_backend(job: Job, role: str, found: Found, rows: dict) -> None:
    """One role's dsa_kernel_backend and apply_dsa_kernel_fusion; its evidence row goes into `rows`."""
    if job.kind == "verl":
        _judge_verl_backend(job, role, found, rows)
        return
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
        fails.append(f"{lab}Megatron stops with \"ValueError: {conflict_text(fusion, backend)}\"")
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
