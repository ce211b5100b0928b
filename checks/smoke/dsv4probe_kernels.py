"""The kernel smoke probe: one of the DSv4 stack's own CP kernels, called the way Megatron calls it, against an
independent float32/int reference (dsv4ref.py), with a negative control that proves the comparison can fail.

Sub-runs (the request's "subrun"; each runs in its own probe process, so a crash in one costs only that one):
  dsa       the cuDNN frontend's DSA indexer forward (cudnn.DSA.indexer_forward_wrapper), THD with q_causal_offsets,
            laid out per contiguous CP rank as Megatron's cp_utils._build_cp_indexer_layout does; at least 2 ranks.
  layout    Megatron's CuTe-DSL CP layout kernels (csa_utils/cp_layout_kernels.py, loaded by file path without
            importing megatron.core): CompressorInputCompact forward and backward, build_attention_indices.
  csa       the frontend's fused CSA compressor (cudnn.csa.compressor), forward.
  flashmla  FlashMLA's flash_mla_sparse_fwd called as Megatron d48bd6be calls it (indexer_topk=0), unpacked as
            (out, max_logits, lse): finite, right shapes; without indexer_topk (a build from main) a skip.

Answer: {"status": pass|fail|error|skip, "summary": ..., "rule": ..., "package": ..., "evidence": {...},
"error": {...}}. A missing entry point is a skip; "rule" names the rule that reports it where this probe knows, and
"error" (with "missing_module" for an ImportError) lets the doctor pick the rule of a missing module (the mapping tier 2
uses, kept doctor-side). An entry point that raises is a fail naming the exception. On the CPU (--device cpu) the same
entry points get CPU tensors: the real kernels refuse them ("needs CUDA", a skip), CPU stand-ins with the upstream
signatures compute, which is how the whole path is tested without a GPU.
Stdlib besides torch (and the stack under test). Run as `python dsv4probe_kernels.py OUT REQUEST_JSON`.
"""

import os
import sys

# Before any other import: nothing beside a probe script is the job's (dsv4probe_common's docstring says why).
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != HERE]
if getattr(sys.modules.get("dsv4probe_common"), "PROBE_COMMON", None) is not True:
    import importlib.util

    _spec = importlib.util.spec_from_file_location("dsv4probe_common", os.path.join(
        os.environ.get("DSV4_DOCTOR_PROBE_LIB") or HERE, "dsv4probe_common.py"))
    sys.modules["dsv4probe_common"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["dsv4probe_common"])
from dsv4probe_common import LIB, error_info, load_module, serve

import importlib.util
import inspect
import json
import time

for _part in ("dsv4ref", "dsv4probe_files"):
    load_module(_part, HERE)
# The modules just loaded by path, read from sys.modules (never looked up on sys.path):
import dsv4ref as ref
from dsv4probe_files import COMMIT, git_head

ROWS_PER_RANK = 128
RATIO = 4  # the ratio-4 CSA layers are the ones with an indexer
# DSv4's indexer has 64 heads (one KV head, head dim 128). Frontend 1.27.0's SM90 indexer accepts H in {16, 32, 64},
# 1.26.0's only {32, 64} (16 raised "qhead_per_kv_head must be one of (32, 64), got 16" on an H200: a shape this
# doctor chose, not a kernel defect), and the SM100 path {32, 64}: 64 runs everywhere. q is 128 x 64 x 128 bf16 (2 MiB).
HEADS, HEAD_DIM = 64, 128
SCORE_TOLERANCE = 1e-2  # absolute, on float32 scores of magnitude ~10-20 from bf16 inputs (observed 2.9e-6 at 16 heads)
SEED = 4321


class Skip(Exception):
    """A sub-run that cannot run here: why, the rule that reports it (where known), the exception behind it."""

    def __init__(self, why, rule=None, exc=None):
        Exception.__init__(self, why)
        self.rule, self.exc = rule, exc


def _needs_cuda(exc):
    """A real kernel refusing CPU tensors. A missing module is never that, though its name may say cuda
    ("No module named 'cuda'" is a missing cuda-python: the rule of that module reports it)."""
    if isinstance(exc, ImportError):
        return False
    text = "%s: %s" % (type(exc).__name__, exc)
    return "CUDA" in text or "cuda" in text


def layout(n_ranks, rows=ROWS_PER_RANK):
    """A packed THD buffer for contiguous ranks: a sequence shorter than a rank, one crossing a rank boundary, one
    spanning several ranks (when there are 3 or more), tail padding. Ragged lengths (as Megatron's own test's), so
    that sequence starts and rank boundaries fall inside compressed groups. Returns (lens, cu, total)."""
    total = n_ranks * rows
    wanted = [23, rows + 61, 2 * rows + 5, 51, 37]
    lens = []
    for n in wanted:
        if sum(lens) + n <= total - 16:
            lens.append(n)
    return lens, ref.cumsum(lens), total


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------ what ran: each kernel's calls and the DSL cache

CALLS = []  # (kernel name, seconds, CuTe DSL file-cache events during the call)
CACHE_EVENTS = []  # ("load-hit" | "load-miss" | "write" | "compile" | "compile-no-cache", module hash prefix)


def _kernel_name(fn):
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        name = "%s.%s" % (getattr(owner, "__name__", type(owner).__name__), getattr(fn, "__name__", name))
    return str(name)[:120]


def _named(fn, name):
    """fn under the name the evidence lists it by (one function compiling two kernels gets two names)."""
    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    call.__qualname__ = call.__name__ = name
    return call


def _timed(torch, device, fn, *args, **kwargs):
    seen = len(CACHE_EVENTS)
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    _sync(torch, device)
    took = time.monotonic() - t0
    CALLS.append((_kernel_name(fn), took, list(CACHE_EVENTS[seen:])))
    return out, took


def _wrap_cache_functions(dsl):
    """Count the CuTe DSL's file-cache reads and writes (cutlass/base_dsl/dsl.py resolves load_cache_from_path and
    dump_cache_to_path from its own globals at each compile); the kernels are called and compared as always."""
    load, dump = getattr(dsl, "load_cache_from_path", None), getattr(dsl, "dump_cache_to_path", None)
    if load is None or dump is None or getattr(load, "_dsv4_doctor", False):
        return

    def counted_load(dsl_name, file, *a, **k):
        fn = load(dsl_name, file, *a, **k)
        CACHE_EVENTS.append(("load-hit" if fn is not None else "load-miss", str(file)[:16]))
        return fn

    def counted_dump(dsl_name, jit_function, file, *a, **k):
        CACHE_EVENTS.append(("write", str(file)[:16]))
        return dump(dsl_name, jit_function, file, *a, **k)

    counted_load._dsv4_doctor = True
    dsl.load_cache_from_path, dsl.dump_cache_to_path = counted_load, counted_dump
    _wrap_compile(getattr(dsl, "BaseDSL", None))


def _wrap_compile(base):
    """Count each CuTe DSL compile and whether it bypassed the file cache: `cute.compile` passes no_cache=True
    (nvidia-cutlass-dsl 4.5.2 cutlass/base_dsl/compiler.py L604-605) and BaseDSL.compile_and_cache reads and writes
    the file cache only without it (dsl.py L1642, L1729), so such a kernel is compiled in-process at every run."""
    compile_and_cache = getattr(base, "compile_and_cache", None)
    if compile_and_cache is None or getattr(compile_and_cache, "_dsv4_doctor", False):
        return
    try:
        signature = inspect.signature(compile_and_cache)
    except (TypeError, ValueError):
        return

    def counted_compile(self, *args, **kwargs):
        try:
            no_cache = bool(signature.bind_partial(self, *args, **kwargs).arguments.get("no_cache"))
        except TypeError:
            no_cache = None
        CACHE_EVENTS.append(("compile-no-cache" if no_cache else "compile", ""))
        return compile_and_cache(self, *args, **kwargs)

    counted_compile._dsv4_doctor = True
    base.compile_and_cache = counted_compile


class _CacheWatch:
    """Wraps the DSL's cache functions once cutlass.base_dsl.dsl is imported (by whichever kernel needs it), so a
    sub-run that never uses the CuTe DSL does not pay its import."""

    TARGET = "cutlass.base_dsl.dsl"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            try:
                _wrap_cache_functions(module)
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec


def watch_cute_dsl_cache():
    if "cutlass.base_dsl.dsl" in sys.modules:
        _wrap_cache_functions(sys.modules["cutlass.base_dsl.dsl"])
    else:
        sys.meta_path.insert(0, _CacheWatch())


def _cache_files(directory):
    try:
        return sum(1 for e in os.scandir(directory) if e.name.endswith(".mlir"))
    except OSError:
        return None


CUTE_COMPILE_BYPASS = ("compiled in-process, every run: %d module(s) by cute.compile, which bypasses the CuTe DSL "
                       "file cache (no_cache=True, nvidia-cutlass-dsl cutlass/base_dsl/compiler.py), so no kernel "
                       "cache can serve it")


def kernels_ran(cache_dir, files_before):
    """Every kernel called, in order of first call: its first-call and steady (fastest later) times, and whether the
    first call's CuTe DSL modules came from the file cache."""
    rows, order = {}, []
    for name, took, events in CALLS:
        if name not in rows:
            order.append(name)
            hits = sum(1 for e in events if e[0] == "load-hit")
            writes = sum(1 for e in events if e[0] == "write")
            bypassed = sum(1 for e in events if e[0] == "compile-no-cache")
            lookups = sum(1 for e in events if e[0] in ("load-hit", "load-miss"))
            cache = ("not a CuTe DSL compile (no DSL compile or cache lookup)" if not events else
                     "from the CuTe DSL file cache (%d module(s) read, none compiled)" % hits if hits and not writes
                     and not bypassed else "compiled (%d module(s) written to the cache%s)" % (
                         writes, ", %d read" % hits if hits else "") if writes and not bypassed else
                     CUTE_COMPILE_BYPASS % bypassed if bypassed and not (hits or writes) else
                     "compiled: %d by cute.compile (file cache bypassed), %d written, %d read" % (
                         bypassed, writes, hits) if bypassed else
                     "looked up, neither read nor written (%d miss(es); file caching off?)" % lookups)
            rows[name] = {"kernel": name, "first_call_s": round(took, 4), "steady_s": None, "calls": 1,
                          "cache": cache, "from_cache": hits > 0 and writes == 0 and bypassed == 0,
                          "cache_bypassed": bypassed > 0}
        else:
            row = rows[name]
            row["calls"] += 1
            row["steady_s"] = round(took, 5) if row["steady_s"] is None else min(row["steady_s"], round(took, 5))
    return {"kernels": [rows[n] for n in order], "cute_dsl_cache_dir": cache_dir,
            "cache_files_before": files_before, "cache_files_after": _cache_files(cache_dir) if cache_dir else None}


def _version(module_name):
    try:
        from importlib import metadata
        return metadata.version(module_name)
    except Exception:
        return None


# The seed incident's packages besides the frontend (an H100 job went NaN until the frontend and tvm-ffi were
# reinstalled; the CuTe DSL compiles both the frontend's DSA kernels and Megatron's layout kernels).
STACK_PACKAGES = ("apache-tvm-ffi", "nvidia-cutlass-dsl")


def _stack_versions():
    return {name: _version(name) for name in STACK_PACKAGES}


def megatron_commit(core_dir):
    """(commit, where it was read) for the Megatron tree holding `core_dir` (.../megatron/core): the tree's git HEAD,
    else the installed megatron-core's direct_url.json when that distribution is this tree; ("unknown", None) else."""
    tree = os.path.dirname(os.path.dirname(core_dir))
    sha = git_head(tree)
    if sha:
        return sha, os.path.join(tree, ".git")
    try:
        from importlib import metadata
        dist = metadata.distribution("megatron-core")
        if os.path.realpath(str(dist.locate_file(os.path.join("megatron", "core")))) == os.path.realpath(core_dir):
            vcs = json.loads(dist.read_text("direct_url.json") or "{}").get("vcs_info") or {}
            sha = vcs.get("commit_id") if isinstance(vcs, dict) else None
            if isinstance(sha, str) and COMMIT.match(sha):
                return sha, "direct_url.json"
    except Exception:
        pass
    return "unknown", None


# ------------------------------------------------------------------------------------------------- the DSA indexer

def run_dsa(torch, device, request):
    try:
        import cudnn
    except ImportError as exc:
        raise Skip("the cuDNN frontend does not import (%s)" % exc, "cudnn-fe.version", exc)
    try:
        wrapper = cudnn.DSA.indexer_forward_wrapper
    except Exception as exc:
        raise Skip("cudnn.DSA.indexer_forward_wrapper does not resolve (%s: %s)" % (type(exc).__name__, exc),
                   "cudnn-fe.dsa", exc)
    n_ranks = max(2, int(request.get("cp", 1)))  # a crossing sequence with a nonzero offset exists even at CP 1
    lens, cu, total = layout(n_ranks)
    cu_comp = ref.cumsum([n // RATIO for n in lens])
    max_q = max(lens)
    max_k = max_q // RATIO
    gen = torch.Generator().manual_seed(SEED)
    q_all = torch.randn(total, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    k_all = torch.randn(cu_comp[-1], 1, HEAD_DIM, generator=gen).to(torch.bfloat16)
    w_all = (torch.rand(total, HEADS, generator=gen) * HEADS ** -0.5).to(torch.bfloat16)
    k_dev = k_all.to(device)
    ev = {"frontend": getattr(cudnn, "__version__", None) or _version("nvidia-cudnn-frontend"),
          "packages": _stack_versions(),
          "kernel": "cudnn.DSA.indexer_forward_wrapper", "shapes": {"q": [ROWS_PER_RANK, HEADS, HEAD_DIM],
          "k": list(k_all.shape), "w": [ROWS_PER_RANK, HEADS]}, "ratio": RATIO, "sequence_lengths": lens,
          "ranks_simulated": n_ranks, "rows_per_rank": ROWS_PER_RANK, "max_seqlen_q": max_q, "max_seqlen_k": max_k,
          "ranks": []}
    worst, mismatches, control = 0.0, [], None
    for r in range(n_ranks):
        gs = r * ROWS_PER_RANK
        cu_q, cu_k, offsets = ref.indexer_layout(cu, gs, ROWS_PER_RANK, cu_comp)
        q, w = q_all[gs:gs + ROWS_PER_RANK], w_all[gs:gs + ROWS_PER_RANK]
        args = dict(ratio=RATIO, cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32, device=device),
                    cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32, device=device), max_seqlen_q=max_q,
                    max_seqlen_k=max_k)
        offs = torch.tensor(offsets, dtype=torch.int32, device=device)
        qd, wd = q.to(device), w.to(device)
        out, first = _timed(torch, device, wrapper, qd, k_dev, wd, q_causal_offsets=offs, **args)
        out, steady = _timed(torch, device, wrapper, qd, k_dev, wd, q_causal_offsets=offs, **args)
        got = out["scores"].float().cpu()[:, :max_k]
        want = ref.indexer_scores(torch, q, k_all, w, cu_q, cu_k, offsets, RATIO, max_k)
        nan = bool(torch.isnan(got).any().item())
        same_mask = bool(torch.equal(torch.isinf(got), torch.isinf(want)))
        finite = torch.isfinite(want) & torch.isfinite(got)
        err = float((got[finite] - want[finite]).abs().max().item()) if finite.any() else 0.0
        worst = max(worst, err)
        row = {"rank": r, "global_rows": [gs, gs + ROWS_PER_RANK], "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k,
               "q_causal_offsets": offsets, "first_call_s": round(first, 4), "steady_s": round(steady, 5),
               "max_abs_error": err, "masks_identical": same_mask, "nan": nan,
               "finite_scores": int(torch.isfinite(want).sum().item())}
        if nan or not same_mask or err > SCORE_TOLERANCE:
            mismatches.append(row)
        if control is None and any(o > 0 for o in offsets):
            # Zeros, not None: the frontend's compile key includes whether offsets are given.
            zero = torch.zeros_like(offs)
            ctl = wrapper(qd, k_dev, wd, q_causal_offsets=zero, **args)["scores"].float().cpu()[:, :max_k]
            control = {"rank": r, "offsets": offsets, "finite_with_offsets": row["finite_scores"],
                       "finite_with_zero_offsets": int(torch.isfinite(ctl).sum().item()),
                       "masks_differ": not bool(torch.equal(torch.isinf(ctl), torch.isinf(got)))}
            row["control"] = control
        ev["ranks"].append(row)
    ev.update(max_abs_error=worst, tolerance=SCORE_TOLERANCE, control=control,
              jit_s=ev["ranks"][0]["first_call_s"], steady_s=ev["ranks"][0]["steady_s"])
    if mismatches:
        bad = mismatches[0]
        what = "NaN scores" if bad["nan"] else ("a different -inf mask" if not bad["masks_identical"] else
                                                "scores off by %.3g (> %g)" % (bad["max_abs_error"], SCORE_TOLERANCE))
        return "fail", ("the DSA indexer forward gives %s on CP rank %d of %d (q_causal_offsets %s)"
                        % (what, bad["rank"], n_ranks, bad["q_causal_offsets"])), ev
    if control is None or not control["masks_differ"]:
        return "error", ("the negative control did not separate: with zero q_causal_offsets the indexer gives the "
                         "same mask, so this comparison cannot tell right from wrong"), ev
    return "pass", ("DSA indexer forward matches the float32 reference on %d contiguous CP ranks (max |err| %.1e, "
                    "identical -inf masks, no NaN; zero offsets change %d -> %d finite scores)"
                    % (n_ranks, worst, control["finite_with_offsets"], control["finite_with_zero_offsets"])), ev


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
        kids[mode] = (subprocess.Popen([sys.executable, os.path.abspath(__file__), out, json.dumps(req)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       env=dict(os.environ, DSV4_DOCTOR_PROBE_LIB=LIB)), out, time.monotonic())
    return kids


def finish_index_modes(kids, deadline):
    results = {}
    for mode, (proc, out, started) in kids.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with open(out) as fh:
                results[mode] = json.load(fh)
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
    _sync(torch, device)
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
                                                "total_s": part.get("total_s"), "kernels_ran": ran,
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


# ------------------------------------------------------------------------------------- the fused CSA compressor

def run_csa(torch, device, request):
    if device.type == "cuda" and tuple(torch.cuda.get_device_capability(device)) != (10, 0):
        # The profile may be for a B200 (--gpu-arch 10.0) while this host has another GPU: run what it supports.
        raise Skip("the fused CSA compressor runs only on CC 10.0; this GPU is %d.%d, so this sub-run follows the "
                   "visible GPU, not the profile" % tuple(torch.cuda.get_device_capability(device)))
    try:
        from cudnn.csa import compressor
        fwd = compressor.csa_compressor_forward_wrapper
    except Exception as exc:
        raise Skip("cudnn.csa does not load (%s: %s)" % (type(exc).__name__, exc), "cudnn-fe.csa", exc)
    ratio, head_dim, coff = 4, 128, 2
    lens = [12, 37, 64, 9]
    cu = ref.cumsum(lens)
    cu_comp = ref.cumsum([n // ratio for n in lens])
    gen = torch.Generator().manual_seed(SEED)
    kv = torch.randn(cu[-1], coff * head_dim, generator=gen).to(torch.bfloat16)
    score = torch.randn(cu[-1], coff * head_dim, generator=gen).to(torch.bfloat16)
    ape = torch.randn(ratio, coff * head_dim, generator=gen)
    cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
    cu_comp_t = torch.tensor(cu_comp, dtype=torch.int32, device=device)
    kw = dict(ratio=ratio, head_dim=head_dim, coff=coff, total_comp=cu_comp[-1])  # as Megatron's fused_compressor.py
    args = (kv.to(device), score.to(device), ape.to(device), cu_t, cu_comp_t)
    out, first = _timed(torch, device, fwd, *args, **kw)
    _, steady = _timed(torch, device, fwd, *args, **kw)
    got = out["out"].float().cpu().reshape(cu_comp[-1], head_dim)
    want = ref.csa_compress(torch, kv, score, ape, cu, ratio, head_dim, coff)
    err = float((got - want).abs().max().item()) if got.numel() else 0.0
    # The negative control, on the kernel: without the position embedding its output must change (a kernel that keeps
    # a cached result, or ignores an input, cannot be told apart from a right one otherwise).
    zero = fwd(args[0], args[1], torch.zeros_like(args[2]), cu_t, cu_comp_t, **kw)["out"].float().cpu()
    zero = zero.reshape(cu_comp[-1], head_dim)
    ev = {"frontend": _version("nvidia-cudnn-frontend"),
          "kernel": "cudnn.csa.compressor.csa_compressor_forward_wrapper",
          "ratio": ratio, "head_dim": head_dim, "coff": coff, "sequence_lengths": lens, "max_abs_error": err,
          "tolerance": 2e-2, "jit_s": round(first, 4), "steady_s": round(steady, 5),
          "control_error": float((got - zero).abs().max().item()) if got.numel() else 0.0}
    if not bool(torch.isfinite(got).all().item()):
        return "fail", "the fused CSA compressor gives non-finite output", ev
    if err > 2e-2:
        return "fail", "the fused CSA compressor differs from the eager reference by %.3g (> 0.02)" % err, ev
    if ev["control_error"] <= 2e-2:
        return "error", ("the negative control did not separate: without the position embedding the fused CSA "
                         "compressor gives the same output, so this comparison cannot tell right from wrong"), ev
    return "pass", ("the fused CSA compressor matches the eager reference (max |err| %.1e; zeroing the position "
                    "embedding changes it by %.2f)" % (err, ev["control_error"])), ev


# --------------------------------------------------------------------------------------------------------- FlashMLA

def _takes(fn, name):
    """Whether fn takes keyword `name` (True/False), or None when its signature cannot be read (a C builtin)."""
    try:
        import inspect
        params = inspect.signature(fn).parameters
    except Exception:
        return None
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def run_flashmla(torch, device, request):
    try:
        from flash_mla import flash_mla_sparse_fwd
    except Exception as exc:
        raise Skip("FlashMLA does not import (%s: %s)" % (type(exc).__name__, exc), "kernels.flash-mla", exc)
    no_topk = ("this FlashMLA's flash_mla_sparse_fwd takes no indexer_topk (a build from main, not nv_dev), which "
               "Megatron passes at every sparse attention call")
    if _takes(flash_mla_sparse_fwd, "indexer_topk") is False:
        raise Skip(no_topk, "kernels.flash-mla")
    # As Megatron d48bd6be calls it (csa_utils/fused_sparse_attention.py _csa_fwd_flash_mla, dsa_cudnn_kernels.py):
    # flat q (S_q, H, 576), kv (S_kv, 1, 576), indices (S_q, 1, TopK) int32 with TopK padded to the GPU's alignment
    # (128 on SM90, 64 on SM100), d_v 512, an f32 sink per head, topk_length None and indexer_topk=0 (the training
    # paths all pass 0; only >0 returns a fourth tensor), unpacked as (out, max_logits, lse).
    s_q, h_q, d_qk, d_v, s_kv = 4, 64, 576, 512, 128
    topk = 128 if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 10 else 64
    gen = torch.Generator().manual_seed(SEED)
    q = torch.randn(s_q, h_q, d_qk, generator=gen).to(torch.bfloat16).to(device)
    kv = torch.randn(s_kv, 1, d_qk, generator=gen).to(torch.bfloat16).to(device)
    idx = torch.randint(0, s_kv, (s_q, 1, topk), generator=gen, dtype=torch.int32).to(device)
    sink = torch.zeros(h_q, dtype=torch.float32, device=device)
    try:
        res, first = _timed(torch, device, flash_mla_sparse_fwd, q, kv, idx, d_qk ** -0.5, d_v=d_v, attn_sink=sink,
                            topk_length=None, indexer_topk=0)
    except TypeError as exc:
        if "indexer_topk" in str(exc):
            raise Skip(no_topk, "kernels.flash-mla", exc)
        raise
    ev = {"package": _version("flash-mla") or _version("flash_mla"), "indexer_topk": 0, "topk": topk,
          "expected_shape": [s_q, h_q, d_v], "jit_s": round(first, 4),
          "returned": len(res) if isinstance(res, (tuple, list)) else type(res).__name__}
    if not isinstance(res, (tuple, list)) or len(res) != 3:
        return "fail", ("flash_mla_sparse_fwd(indexer_topk=0) returned %s, not the (out, max_logits, lse) Megatron "
                        "unpacks" % (("%d values" % len(res)) if isinstance(res, (tuple, list)) else
                                     type(res).__name__)), ev
    out, _max_logits, lse = res
    ev.update(shape=list(out.shape), lse_shape=list(lse.shape))
    if list(out.shape) != [s_q, h_q, d_v]:
        return "fail", "flash_mla_sparse_fwd returned shape %s, not %s" % (list(out.shape), [s_q, h_q, d_v]), ev
    if list(lse.shape) != [s_q, h_q]:  # Megatron slices lse[:, :heads]
        return "fail", "flash_mla_sparse_fwd returned an lse of shape %s, not %s" % (list(lse.shape), [s_q, h_q]), ev
    if not bool(torch.isfinite(out.float()).all().item()) or not bool(torch.isfinite(lse.float()).all().item()):
        return "fail", "flash_mla_sparse_fwd returned non-finite output", ev
    return "pass", ("flash_mla_sparse_fwd(indexer_topk=0), called as Megatron calls it, returns (out, max_logits, "
                    "lse), finite and of the right shapes"), ev


SUBRUNS = {"dsa": (run_dsa, "nvidia-cudnn-frontend"), "layout": (run_layout, "megatron-core"),
           "csa": (run_csa, "nvidia-cudnn-frontend"), "flashmla": (run_flashmla, "flash-mla")}


def answer(request):
    name = request["subrun"]
    fn, package = SUBRUNS[name]
    if name == "layout" and request.get("layout_part") in INDEX_MODES:
        fn = run_layout_part
    start = time.monotonic()
    try:
        import torch
    except BaseException as exc:
        return {"status": "skip", "summary": "torch does not import", "rule": "torch.install", "error": error_info(exc)}
    want = request.get("device", "auto")
    has_cuda = False
    try:
        has_cuda = torch.cuda.is_available()
    except Exception:
        pass
    if want == "cuda" and not has_cuda:
        return {"status": "skip", "summary": "--device cuda but torch sees no GPU", "package": package}
    index = int(request.get("device_index", 0) or 0)
    device = torch.device("cuda", index % max(1, torch.cuda.device_count())) if want != "cpu" and has_cuda \
        else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)
    out = {"package": package, "device": {"type": device.type, "capability": "%d.%d" %
                                          torch.cuda.get_device_capability(device) if device.type == "cuda" else None,
                                          "name": torch.cuda.get_device_name(device) if device.type == "cuda"
                                          else "cpu"}}
    cache_dir = os.environ.get("CUTE_DSL_CACHE_DIR")
    files_before = _cache_files(cache_dir) if cache_dir else None
    watch_cute_dsl_cache()
    try:
        status, summary, evidence = fn(torch, device, request)
        if isinstance(evidence, dict):
            evidence["kernels_ran"] = ran = kernels_ran(cache_dir, files_before)
            for mode, part in (evidence.get("index_mode_processes") or {}).items():
                ran["kernels"].extend(dict(k, process="its own (%s)" % mode) for k in part.get("kernels_ran") or [])
        out.update(status=status, summary=summary, evidence=evidence)
    except Skip as why:
        out.update(status="skip", summary=str(why), rule=why.rule)
        if why.exc is not None:
            out["error"] = error_info(why.exc)
    except BaseException as exc:
        err = error_info(exc, frames=6)
        if device.type != "cuda" and _needs_cuda(exc):
            out.update(status="skip", summary="needs CUDA: the real kernel refuses CPU tensors (%s: %s)"
                       % (err["type"], err["message"][:200]), error=err)
        else:
            out.update(status="fail", summary="%s raised %s: %s" % (name, err["type"], err["message"]), error=err)
    if device.type == "cuda":
        out["gpu_memory_peak_mib"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 20, 2)
    out["total_s"] = round(time.monotonic() - start, 3)
    return out


if __name__ == "__main__":
    serve(answer)
