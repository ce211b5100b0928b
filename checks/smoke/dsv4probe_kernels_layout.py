"""Megatron's CuTe-DSL CP layout kernels (csa_utils/cp_layout_kernels.py, loaded by file path without importing
megatron.core): CompressorInputCompact forward and backward, build_attention_indices in both modes.

A part of the kernel smoke probe (dsv4probe_kernels.py), loaded by path (dsv4probe_common.load_module).
"""

import importlib.util
import os
import re
import time

from dsv4probe_common import (  # in sys.modules: it loads this part
    ANSWER_LIMIT, LIB, cache_fds, launch_argv, load_json, load_module, request_beside, stage)

HERE = os.path.dirname(os.path.realpath(__file__))
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a git object name: SHA-1 or SHA-256
for _part in ("dsv4ref", "dsv4probe_device", "dsv4probe_files", "dsv4probe_kernels_base", "dsv4probe_kernels_ran"):
    load_module(_part, HERE)
# The modules just loaded by path, read from sys.modules (never looked up on sys.path):
import dsv4ref as ref
from dsv4probe_device import sync
from dsv4probe_kernels_base import RATIO, ROWS_PER_RANK, SEED, Skip, _stack_versions, layout
from dsv4probe_kernels_ran import _named, _timed


# ------------------------------------------------------------------------------------- which Megatron this is

def megatron_commit(core_dir):
    """(commit, where it was read) for the Megatron tree holding `core_dir` (.../megatron/core): the tree's git HEAD,
    else the installed megatron-core's direct_url.json when that distribution is this tree; ("unknown", None) else."""
    tree = os.path.dirname(os.path.dirname(core_dir))
    found = load_module("dsv4probe_static_checkout", LIB).git_commit(tree, 1)  # the library's one git reader
    sha = found and found.get("commit")
    if sha:
        return sha, os.path.join(tree, ".git")
    try:
        from importlib import metadata
        dist = metadata.distribution("megatron-core")
        if os.path.realpath(str(dist.locate_file(os.path.join("megatron", "core")))) == os.path.realpath(core_dir):
            # Its file read as the probes read every file of the environment (never Distribution.read_text, which
            # waits on a FIFO); a distribution that is no folder of files has no direct_url.json to read.
            folder = getattr(dist, "_path", None)
            url = load_json(os.path.join(str(folder), "direct_url.json"), 1 << 16) if folder else None
            vcs = (url.get("vcs_info") if isinstance(url, dict) else None) or {}
            sha = vcs.get("commit_id") if isinstance(vcs, dict) else None
            if isinstance(sha, str) and COMMIT.fullmatch(sha):
                return sha, "direct_url.json"
    except Exception:
        pass
    return "unknown", None


# ---------------------------------------------------------------------------------------- the CP layout kernels

def megatron_layout_file():
    """(the layout kernels' file, the megatron/core folder holding it)."""
    try:
        spec = importlib.util.find_spec("megatron.core")  # imports `megatron` (a namespace), never megatron.core
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise Skip("Megatron-core is not installed", "mcore.dsv4")
    for root in spec.submodule_search_locations:
        eav = os.path.join(root, "transformer", "experimental_attention_variant")
        for rel in (os.path.join("csa_utils", "cp_layout_kernels.py"), "csa_cp_layout_kernels.py"):
            if os.path.isfile(os.path.join(eav, rel)):
                return os.path.join(eav, rel), root
    raise Skip("this Megatron-core has no CP layout kernels (csa_utils/cp_layout_kernels.py; dev >= bfa33263)",
               "mcore.dsv4")


INDEX_MODES = ("all visible", "top-k")


def _layout_setup(torch, device, request):
    cp = int(request.get("cp", 1))
    if cp < 2:
        raise Skip("not used at CP 1: Megatron runs the CP layout kernels only with CP > 1")
    path, core_dir = megatron_layout_file()
    t0 = time.monotonic()
    spec = importlib.util.spec_from_file_location("dsv4doctor_cp_layout_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    load_s = time.monotonic() - t0
    if getattr(module, "_CUTE_AVAILABLE", True) is False:
        raise Skip("the CuTe DSL does not import, so Megatron's layout kernels are unavailable", "cutlass-dsl.import")
    d_comp, window = 8, 16  # Megatron: d_comp = 8 at ratio 4; d_window = max(csa_window_size, d_comp)
    lens, cu, total = layout(cp)
    cu_comp = ref.cumsum([n // RATIO for n in lens])
    c_cap = ref.compact_capacity(ROWS_PER_RANK, RATIO, d_comp)
    row_map = ref.seq_to_rank_row(cu, cu_comp, ROWS_PER_RANK, cp, RATIO, d_comp, c_cap)
    return {"cp": cp, "path": path, "core_dir": core_dir, "module": module, "load_s": load_s, "d_comp": d_comp,
            "window": window, "d_window": max(window, d_comp), "lens": lens, "cu": cu, "total": total,
            "cu_comp": cu_comp, "width": max(lens) // RATIO, "c_cap": c_cap, "row_map": row_map,
            "cu_t": torch.tensor(cu, dtype=torch.int32, device=device),
            "cu_comp_t": torch.tensor(cu_comp, dtype=torch.int32, device=device),
            "map_t": torch.tensor(row_map, dtype=torch.int32, device=device)}


def _layout_indices(torch, device, st, mode):
    """build_attention_indices in one mode on every rank: {rank: exact}, {rank: call seconds}."""
    indices_fn = st["module"].build_attention_indices
    cu, cu_comp, d_window, window, row_map = st["cu"], st["cu_comp"], st["d_window"], st["window"], st["row_map"]
    base = d_window + ROWS_PER_RANK
    exact, call_s = {}, {}
    named = _named(indices_fn, "build_attention_indices (%s)" % mode)
    for r in range(st["cp"]):
        gs = r * ROWS_PER_RANK
        topk = None if mode == "all visible" else _recent_topk(cu, gs, ROWS_PER_RANK, RATIO, 3)
        topk_t = None if topk is None else torch.tensor(topk, dtype=torch.int32, device=device)
        w = st["width"] if topk is None else 3
        got, took = _timed(torch, device, named, st["cu_t"], gs, ROWS_PER_RANK, d_window, window, RATIO, w, topk_t,
                           cu_seqlens_compressed=st["cu_comp_t"], seq_to_rank_row=st["map_t"])
        rows, lengths = ref.attention_indices(cu, cu_comp, gs, ROWS_PER_RANK, d_window, window, RATIO, w, row_map,
                                              base, topk)
        exact[r] = bool(torch.equal(got[0].cpu().to(torch.int32), torch.tensor(rows, dtype=torch.int32)) and
                        torch.equal(got[1].cpu().to(torch.int32), torch.tensor(lengths, dtype=torch.int32)))
        call_s[r] = round(took, 4)
    return exact, call_s


def start_index_modes(request):
    """Each index mode in a process of its own, so that its first-call JIT compiles while this process compiles and
    checks CompressorInputCompact (each pays its own `import torch`, overlapped). Children are in this probe's
    process group: a timeout of the probe kills them."""
    import subprocess
    import tempfile

    outdir = tempfile.mkdtemp(prefix="dsv4-layout-")
    kids = {}
    for mode in INDEX_MODES:
        out = os.path.join(outdir, "%s.json" % mode.replace(" ", "-"))
        req = dict(request, layout_part=mode)
        kids[mode] = (subprocess.Popen(launch_argv(os.path.join(HERE, "dsv4probe_kernels.py"), out,
                                                    request_beside(out, req)),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       env=dict(os.environ, DSV4_DOCTOR_PROBE_LIB=LIB), pass_fds=cache_fds()),
                      out, time.monotonic())
    return kids


def finish_index_modes(kids, deadline):
    stage("build_attention_indices: waiting for the index modes' own processes")
    results = {}
    for mode, (proc, out, started) in kids.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            results[mode] = load_json(out, ANSWER_LIMIT)
        except Exception as exc:
            proc.kill()
            results[mode] = {"error": "the %s process gave no answer (%s)" % (mode, type(exc).__name__)}
        results[mode]["wall_s"] = round(time.monotonic() - started, 3)
    return results


def run_layout_part(torch, device, request):
    """A child of a split layout sub-run: one index mode on every rank."""
    st = _layout_setup(torch, device, request)
    exact, call_s = _layout_indices(torch, device, st, request["layout_part"])
    return "part", "build_attention_indices (%s)" % request["layout_part"], {
        "exact": {str(r): v for r, v in exact.items()}, "call_s": {str(r): v for r, v in call_s.items()}}


def run_layout(torch, device, request):
    # On a GPU the two index modes compile in processes of their own while this one does the compact kernels.
    split = request.get("split_layout", device.type == "cuda") and int(request.get("cp", 1)) > 1
    kids = start_index_modes(request) if split else None
    deadline = time.monotonic() + float(os.environ.get("DSV4_DOCTOR_PROBE_TIMEOUT", "60") or 60) - 5.0
    st = _layout_setup(torch, device, request)
    compact_fn, cp, cu, d_comp, d_window, c_cap = (st["module"].CompressorInputCompact.apply, st["cp"], st["cu"],
                                                   st["d_comp"], st["d_window"], st["c_cap"])
    gen = torch.Generator().manual_seed(SEED)
    hidden = torch.randn(st["total"], 8, generator=gen).to(torch.bfloat16)  # row width 8: the kernel's vector path
    cu_t = st["cu_t"]
    commit, commit_from = megatron_commit(st["core_dir"])
    ev = {"megatron_file": st["path"], "megatron_commit": commit, "megatron_commit_from": commit_from,
          "packages": _stack_versions(), "load_s": round(st["load_s"], 4), "ratio": RATIO, "d_comp": d_comp,
          "d_window": d_window, "window": st["window"], "c_cap": c_cap, "sequence_lengths": st["lens"], "cp": cp,
          "rows_per_rank": ROWS_PER_RANK, "compressed_width": st["width"], "ranks": [],
          "index_modes_in_own_processes": bool(split)}
    failures, control_separates = [], False
    for r in range(cp):
        gs = r * ROWS_PER_RANK
        local = hidden[gs:gs + ROWS_PER_RANK].clone().to(device).requires_grad_(True)
        boundary_rows = [hidden[gs - d_window + j] if gs - d_window + j >= 0 else torch.zeros(8, dtype=torch.bfloat16)
                         for j in range(d_window)]
        boundary = torch.stack(boundary_rows).to(device).requires_grad_(True)
        (out, ids), first = _timed(torch, device, _named(compact_fn, "CompressorInputCompact.forward"), local,
                                   boundary, cu_t, gs, RATIO, d_comp, c_cap)
        want, want_ids = ref.compressor_input_compact(torch, hidden[gs:gs + ROWS_PER_RANK],
                                                      torch.stack(boundary_rows), cu, gs, RATIO, d_comp, c_cap)
        fwd_ok = torch.equal(out.detach().cpu(), want) and torch.equal(ids.cpu().to(torch.int32), want_ids)
        grad = torch.randn(out.shape, generator=gen).to(out.dtype).to(device)
        _, backward_s = _timed(torch, device, _named(out.backward, "CompressorInputCompact.backward"), grad)
        g_local, g_boundary = ref.compressor_input_compact_grad(torch, grad, ROWS_PER_RANK, d_window, cu, gs, RATIO,
                                                                d_comp, c_cap)
        bwd_ok = torch.equal(local.grad.cpu(), g_local) and torch.equal(boundary.grad.cpu(), g_boundary)
        # The negative control: the same reference for a rank shifted by one group must not match.
        shifted, _ = ref.compressor_input_compact(torch, hidden[gs:gs + ROWS_PER_RANK], torch.stack(boundary_rows),
                                                  cu, gs + RATIO, RATIO, d_comp, c_cap)
        control_separates = control_separates or not torch.equal(out.detach().cpu(), shifted)
        groups = ref.compressed_groups(cu, gs, ROWS_PER_RANK, RATIO, d_comp)
        ev["ranks"].append({"rank": r, "global_start": gs, "groups": len(groups), "compact_forward_exact": fwd_ok,
                            "compact_backward_exact": bwd_ok, "attention_indices_exact": {},
                            "call_s": {"compact_forward": round(first, 4), "compact_backward": round(backward_s, 4)}})
    t1 = time.monotonic()
    compact_fn(local.detach(), boundary.detach(), cu_t, gs, RATIO, d_comp, c_cap)
    sync(torch, device)
    ev["steady_s"] = round(time.monotonic() - t1, 5)
    if kids is None:
        for mode in INDEX_MODES:
            exact, call_s = _layout_indices(torch, device, st, mode)
            for row in ev["ranks"]:
                row["attention_indices_exact"][mode] = exact[row["rank"]]
                row["call_s"]["indices " + mode] = call_s[row["rank"]]
    else:
        parts = finish_index_modes(kids, deadline)
        ev["index_mode_processes"] = {}
        for mode, part in parts.items():
            body = part.get("evidence") or {}
            ran = (body.get("kernels_ran") or {}).get("kernels") or []
            ev["index_mode_processes"][mode] = {"status": part.get("status"), "wall_s": part.get("wall_s"),
                                                "total_s": part.get("total_s"),
                                                "torch_start_s": part.get("torch_start_s"), "kernels_ran": ran,
                                                "error": part.get("error")}
            if part.get("status") != "part":
                raise RuntimeError("build_attention_indices (%s) in its own process: %s %s" % (
                    mode, part.get("status") or "", part.get("summary") or part.get("error") or ""))
            for row in ev["ranks"]:
                row["attention_indices_exact"][mode] = bool(body["exact"].get(str(row["rank"])))
                row["call_s"]["indices " + mode] = body["call_s"].get(str(row["rank"]))
    for row in ev["ranks"]:
        if not (row["compact_forward_exact"] and row["compact_backward_exact"] and
                all(row["attention_indices_exact"].values())):
            failures.append(row)
    # Rank 0's calls are each kernel's first (each JIT-compiles its own); jit_s stays the compact forward's.
    ev["first_call_s"] = dict(ev["ranks"][0]["call_s"])
    ev["jit_s"] = ev["first_call_s"]["compact_forward"]
    ev["control_separates"] = control_separates
    if failures:
        bad = failures[0]
        parts_bad = [name for name, ok in (("CompressorInputCompact forward", bad["compact_forward_exact"]),
                                           ("its backward", bad["compact_backward_exact"])) if not ok]
        parts_bad += ["build_attention_indices (%s)" % m for m, ok in bad["attention_indices_exact"].items() if not ok]
        return "fail", ("Megatron's CP layout kernels differ from the reference on CP rank %d of %d: %s"
                        % (bad["rank"], cp, ", ".join(parts_bad))), ev
    if not control_separates:
        return "error", ("the negative control did not separate: a rank shifted by one group gives the same compact "
                         "buffer, so this comparison cannot tell right from wrong"), ev
    return "pass", ("Megatron's CP layout kernels are exact on all %d CP ranks (CompressorInputCompact forward and "
                    "backward, build_attention_indices in both modes)" % cp), ev


def _recent_topk(cu, gs, rows, ratio, k):
    """Per local row, the k most recent visible compressed ids, newest first, padded with -1 (as Megatron's test)."""
    out = []
    for r in range(rows):
        q = gs + r
        seq = next((s for s in range(len(cu) - 1) if cu[s] <= q < cu[s + 1]), None)
        visible = (q - cu[seq] + 1) // ratio if seq is not None else 0
        ids = list(range(visible - 1, max(-1, visible - 1 - k), -1))
        out.append(ids + [-1] * (k - len(ids)))
    return out
