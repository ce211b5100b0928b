"""The DSA settings of one role of the job: the kernel backend DSv4 accepts (job.dsa-backend) and the SM90 rule on
the dense indexer loss (job.indexer-loss)."""

from __future__ import annotations

from dsv4_doctor.api import (Context, Finding, Fix, Job, Phase, Profile, Result, RoleBackend, SWITCH_BACKEND,
                             UpstreamText, bridge_switch, check, conflict_text, line_to_add, passed, role_backend,
                             skipped, warned)

from .settings import (TC, add_setting, config_files, is_stated, is_unresolved, job_of, maybe_in_file, no_job,
                       not_known, role_label, unread_row, value_of, written)
from .verdict import Found, verdict
from .._upstream import EAV, gh, mlm, pypi

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


INDEXER_LOSS_TEXTS = (UpstreamText("M10", M10, mlm(TC, "1779-1792"), "ValueError"),)
DSA_BACKEND_TEXTS = (
    UpstreamText("M15", "Conflicting DSA kernel controls: apply_dsa_kernel_fusion={fusion} maps to "
                 "dsa_kernel_backend={mapped}, but dsa_kernel_backend={backend} was also selected. Remove "
                 "apply_dsa_kernel_fusion and use dsa_kernel_backend only.", mlm(TC, "1630-1638"), "ValueError"),
    UpstreamText("M12", "apply_dsa_kernel_fusion is deprecated and will be removed in a future release; use "
                 "dsa_kernel_backend={backend} instead.", mlm(TC, "1640-1645"), "warning"),
    UpstreamText("M12-ignored", "apply_dsa_kernel_fusion is deprecated and ignored outside "
                 "experimental_attention_variant='dsv4_hybrid'; use dsa_kernel_backend instead.",
                 mlm(TC, "1622-1628"), "warning"),
    UpstreamText("M13", M13, mlm(TC, "1766-1770"), "ValueError"),
    UpstreamText("R9", "Failed to import DSA kernel backend {module}.", mlm(EAV + "dsa_kernels.py", "57-60"),
                 "RuntimeError"),
)


# ---------------------------------------------------------------------------------------------- job.indexer-loss

@check("job.indexer-loss", "No fused dense indexer loss on SM90", skip_if=no_job, only_with="job",
    texts=INDEXER_LOSS_TEXTS,
    applies_when="job arguments given; CC 9.0 and dsa_kernel_backend=cudnn",
    detects="the training command's indexer-loss settings; the GPU arch",
    sources=(mlm(TC, "1773-1818", "Megatron-LM dev transformer_config.py L1773-1818 (SM90 dense indexer loss)"),))
def job_indexer_loss(ctx: Context) -> Result | list[Finding]:
    """On SM90 with dsa_kernel_backend=cudnn, a ratio-4 indexer and dsa_indexer_loss_coeff > 0, Megatron rejects
    the dense indexer loss ("DSv4 with fused DSA and dense indexer loss is not supported on SM90 ..."): the
    job must set dsa_indexer_use_sparse_loss=True (verl's DSv4 example sets it, with coeff 0.0). A coefficient
    the command does not state is reported as such; a dsa_indexer_use_sparse_loss or csa_dense_mode written as a
    variable the doctor cannot resolve is not known (no failure, no line).
    """
    job = job_of(ctx)
    roles = job.checked_roles()
    profile = ctx.profile
    if profile.dsa_backend != "cudnn":
        return skipped("dsa_kernel_backend=none: the fused DSA kernels (and the SM90 rule) are not used")
    if profile.cc is not None and profile.cc != (9, 0):
        return skipped(f"CC {profile.gpu_arch}: the dense indexer loss rule is for SM90 only")
    if not roles:  # the rule may apply (SM90, or a CC not known), to settings the command hides
        return unread_row(job, "indexer-loss settings")
    if profile.cc is None:
        return skipped("the GPU's compute capability is unknown (no GPU visible; give --gpu-arch): the SM90 rule "
                       "cannot be judged")
    found = Found()
    fails, notes, unknown = found.fails, found.notes, found.unknown
    evidence: dict = {"roles": {}}
    for role in roles:
        judge_indexer_loss(job, role, found, evidence["roles"])
    evidence.update(failures=fails, notes=notes, unknown=unknown)
    return verdict(found, evidence)


# ---------------------------------------------------------------------------------------------- job.dsa-backend

@check("job.dsa-backend", "The job's DSA kernel backend is one DSv4 accepts", skip_if=no_job, only_with="job",
    texts=DSA_BACKEND_TEXTS,
    applies_when="job arguments given",
    detects="the training command's dsa_kernel_backend and apply_dsa_kernel_fusion",
    sources=(
        mlm(TC, "1618-1646", "Megatron-LM dev transformer_config.py L1618-1646 (apply_dsa_kernel_fusion folded in)"),
        mlm(TC, "1766-1770", "Megatron-LM dev transformer_config.py L1766-1770 (tilelang rejected for dsv4_hybrid)"),
        mlm("megatron/training/argument_utils.py", "370-387",
            "Megatron-LM dev argument_utils.py L370-387 (an omitted --dsa-kernel-backend is cudnn for dsv4_hybrid)"),
        pypi("megatron-bridge", "0.5.1", "megatron-bridge 0.5.1 wheel, megatron/bridge/models/deepseek/"
             "deepseek_v4_bridge.py L105-111, L460 (apply_dsa_kernel_fusion on for CC major >= 10)"),
        pypi("megatron-bridge", "0.6.2", "megatron-bridge 0.6.2 wheel, deepseek_v4_bridge.py L114-122, L394, L472 "
             "(and only when cudnn DSA and FlashMLA import)"),
        gh("NVIDIA-NeMo/Megatron-Bridge", "blob/c7774d44/src/megatron/bridge/models/deepseek/deepseek_v4_bridge.py",
           "Megatron-Bridge c7774d44 deepseek_v4_bridge.py (the commit verl's DSv4 example names; the 0.6.x rule)"),
    ))
def job_dsa_backend(ctx: Context) -> Result | list[Finding]:
    """Megatron's DSv4 layer takes `dsa_kernel_backend` `none` (the PyTorch fallback) or `cudnn` (the cuDNN
    frontend's DSA kernels and FlashMLA); it rejects `tilelang` for dsv4_hybrid, and the Megatron-LM CLI's
    choices reject anything else. `TransformerConfig.__post_init__` folds the deprecated `apply_dsa_kernel_fusion`
    into it: True maps to cudnn and False to none; beside a stated backend that is neither `none` nor the mapped one
    it raises "Conflicting DSA kernel controls", otherwise the mapped one replaces it (True turns a stated `none`
    into cudnn); null keeps the stated backend, whose default is `none`.

    Through verl, Megatron-Bridge's DeepSeek-V4 provider always writes the switch, and the command's
    `override_transformer_config` is applied after it. So a verl job's switch is the command's when it states one
    (True, False or null), else the installed bridge's: read from its deepseek_v4_bridge.py with ast (0.5.x: on for
    any CC major >= 10; c7774d44 and 0.6.x: only when `from cudnn import DSA` and `from flash_mla import
    flash_mla_sparse_fwd` also import, which the doctor tries in a probe). Then Megatron's fold: a conflict fails
    quoting Megatron's text (naming the bridge where it wrote the switch), and a stated `none` the switch turns into
    cudnn is a warning, with the environment checked for the cudnn that runs. Every fix is a form Megatron accepts
    through verl: the switch (`...override_transformer_config.apply_dsa_kernel_fusion=True`, or False for the
    PyTorch fallback), or the backend with `...override_transformer_config.apply_dsa_kernel_fusion=null` beside it.

    The Megatron-LM CLI has no bridge: a backend it does not state is cudnn for dsv4_hybrid, and
    `--no-dsa-kernel-fusion` beside `--dsa-kernel-backend cudnn` is the conflict. A wrapper command (bash, srun, a
    launcher), a config file, a bridge whose rule cannot be read, an unknown CC, a remote host's bridge or (on a
    machine without a GPU) an import that cannot load the driver's libcuda leave it not known, naming that link:
    the environment is then checked for cudnn, the stricter. A backend or switch written as a variable the doctor
    cannot resolve is not known, never one Megatron rejects, and the row is no pass.
    """
    job = job_of(ctx)
    roles = job.checked_roles()
    if not roles:
        return unread_row(job, "DSA kernel backend and its switch")
    decided = job.decisions.dsa_backend_decided if job.decisions is not None else ""
    found = Found()
    fails, notes, unknown = found.fails, found.notes, found.unknown
    evidence: dict = {"decided": decided, "roles": {}}
    for role in roles:
        judge_backend(job, role, found, evidence["roles"])
    evidence.update(failures=fails, warnings=found.warns, notes=notes, unknown=unknown)
    if fails or found.warns:
        return verdict(found, evidence, [decided])
    if any(is_unresolved(job.effective(r), name) for r in roles for name in ("dsa_kernel_backend",
                                                                              "apply_dsa_kernel_fusion")):
        return verdict(found, evidence)  # a backend or switch written as a variable is not known: no pass on it
    if unknown and job.kind == "verl":
        return verdict(found, evidence, [decided])
    if unknown and not notes:
        why = decided[len("not stated: "):] if decided.startswith("not stated: ") else decided
        return warned("not known: " + "; ".join(unknown) + f": {why}", evidence=evidence)
    return passed("; ".join(notes + unknown), decided, evidence=evidence)
