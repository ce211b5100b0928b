"""Tier 2's answer judged: the DSv4 hybrid attention layer at CP 1 and CP N (finite, CP N = CP 1, a packed sequence
= the same sequence alone), and its fused build (the cuDNN indexer and FlashMLA) against the unfused one, forward and
backward; and the words that say what tier 2 showed."""

from __future__ import annotations

from dsv4_doctor.api import Context, Result, Status, errored, failed

from ._causes import cause_result, crash_cause, crash_text, tier2_fixes, tier2_rules


def _known_crash(ctx: Context, err: dict, what: str, evidence: dict, log_tail: str = "") -> Result | None:
    """A tier-2 error of a known GPU cause (no kernel image, out of memory, ...): that cause's sentence and fix."""
    text = crash_text(f"{err.get('type')}: {err.get('message')}", "\n".join(map(str, err.get("where", []))), log_tail)
    cause = crash_cause(ctx, text, what=what)
    if cause is None:
        return None
    return cause_result(cause, text, dict(evidence, crash_text=text))

def tier2_result(ctx: Context, data: dict, evidence: dict) -> Result | None:
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
            known = _known_crash(ctx, err, f"the DSv4 hybrid attention layer ({label})", evidence)
            if known is not None:
                return known
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
    return fused_result(ctx, (data.get("tier2") or {}).get("fused") or {}, evidence)


HANG_NOTE = ("cudnn-frontend #676 reports NaN gradients and a GPU deadlock on empty top-k rows in the DSA backward; "
             "the first ratio-1 tokens of every sequence have no compressed block to select, so every packed batch "
             "has such rows. Where it stopped is in the build's log tail (evidence tier2.fused.builds).")


def fused_result(ctx: Context, fused: dict, evidence: dict) -> Result | None:
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
            # A build that died (a segfault after a CUDA error) left its words in its log tail, not in an exception.
            said = dict(err, message=f"{err.get('message') or ''}\n{b.get('log_tail') or ''}")
            failing = [r for r in tier2_rules(said)
                       if (ctx.outcome(r) is not None and ctx.outcome(r).status in (Status.FAIL, Status.ERROR))]
            if failing:
                fused["deferred_to"] = failing[0]
                return None
            known = _known_crash(ctx, err, f"the {label} DSv4 layer build", evidence, str(b.get("log_tail") or ""))
            if known is not None:
                return known
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


NOT_INSTALLED = "Megatron-core's DSv4 hybrid attention (dsv4_hybrid) is not installed"
FUSED = "its fused build (cuDNN indexer + FlashMLA) against the unfused one (forward and backward)"


def default_note(found: bool | None) -> str:
    """What a default-level smoke left out, and how to ask for it."""
    where = " where Megatron-core's dsv4_hybrid is installed (it is not here)" if found is False else ""
    return (f"; tier 2 not run (default level): the DSv4 layer and {FUSED} were not compared: --deep compares "
            f"them{where}")


def deep_not_compared(deep: bool, data: dict) -> dict:
    """What the smoke did not compare, each with why: at the default level, tier 2 as a whole; with --deep, the
    parts this stack or device could not run (no Megatron DSv4 layer, no fused path, no CP=N run)."""
    t2 = data.get("tier2") or {}
    if not deep:
        return {"tier2": "the default level runs no tier 2: --deep runs it"}
    if not t2:
        return {"dsv4_layer": NOT_INSTALLED, "fused_vs_unfused": NOT_INSTALLED}
    out = {}
    for key, label in (("cp1", "dsv4_layer"), ("cpN", "dsv4_layer_cp_n"), ("fused", "fused_vs_unfused")):
        if isinstance(t2.get(key), dict) and t2[key].get("skipped"):
            out[label] = str(t2[key]["skipped"])
    return out


def describe_tier2(t2: dict, deep: bool = True, found: bool | None = None, fleet: bool = False) -> str:
    """Tier 2's part of the smoke's summary: what it showed, or what it did not compare and why (the default level
    runs none of it; --deep on a stack without the DSv4 layer or the fused path says what it could not compare).

    Across fleet ranks each rank compares its own rows of the CP=N output, so its figure is its own: the words say the
    bound it met instead, the same on every healthy rank, so that the fleet merge groups them (the figure stays in
    each rank's evidence)."""
    if not deep:
        return default_note(found)
    if not t2:
        return f"; --deep: no DSv4 layer built, so neither its CP parity nor {FUSED} was compared: {NOT_INSTALLED}"
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
        elif "max_abs_diff_vs_cp1" in v and fleet and key != "cp1":
            parts.append(f"{label} = CP=1 (max |diff| <= {v.get('parity_tolerance', 0.0):g} on each rank's own rows)")
        elif "max_abs_diff_vs_cp1" in v:
            parts.append(f"{label} = CP=1 (max |diff| {v['max_abs_diff_vs_cp1']:.1e})")
        else:
            parts.append(f"{label} ok")
    return "; DSv4 layer " + ", ".join(parts) + _hadamard_note(t2)


def _hadamard_note(t2: dict) -> str:
    """Said when a build ran on verl's pure-torch fast_hadamard_transform: the layer ran as a verl job runs it, not
    as a Megatron job without verl would (that one stops at Megatron's assertion; kernels.fast-hadamard says which)."""
    runs = [t2.get(k) for k in t2 if k != "fused"] + list(((t2.get("fused") or {}).get("builds") or {}).values())
    if any(isinstance(r, dict) and (r.get("hadamard") or {}).get("fast_hadamard_transform") == "verl shim"
           for r in runs):
        return " (fast_hadamard_transform: verl's pure-torch shim, as verl's apply_patch installs it; see " \
               "kernels.fast-hadamard)"
    return ""


def _fused_note(fused: dict) -> str:
    if fused.get("skipped"):
        return f"fused (cuDNN indexer + FlashMLA) vs unfused not compared: {fused['skipped']}"
    if fused.get("deferred_to"):
        return f"fused vs unfused stopped: see {fused['deferred_to']}"
    cmp_ = fused.get("comparison") or {}
    worst, control = cmp_.get("worst") or {}, cmp_.get("control") or {}
    return (f"fused (cuDNN indexer + FlashMLA) = unfused, forward + backward, {len(cmp_.get('tensors') or {})} "
            f"tensors (worst {worst.get('tensor')} rel. L2 {worst.get('rel_l2', 0.0):.1e} <= "
            f"{worst.get('tolerance', 0.0):.1e}; perturbed-weight control {control.get('rel_l2', 0.0):.1e})")
