"""Transformer Engine: installed, consistent, new enough for sequence packing, and its torch extension imports."""

from __future__ import annotations

import re

from dsv4_doctor.api import (TORCH, Context, Fix, Phase, Probe, Result, Source, StaticRequest, UpstreamText, at_least,
                             canonical, check, error_text, errored, failed, import_probe, outcome, passed, requirements,
                             safe_specifier, skipped, version, warned)

from . import fixes
from ._archs import NO_KERNEL_IMAGE, RULES_SOURCE, judge
from ._anchors import missing_prefix, undefined_symbol
from ._upstream import measured, mlm, pypi, te_at

# PyPI splits TE into a metapackage, a CUDA-specific core and an sdist-only torch extension; an NGC or source build is
# one distribution, `transformer_engine` (importlib.metadata normalises it to the same name as transformer-engine).
TE_DISTS = ("transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13", "transformer-engine-torch")
# nvidia-cublas: which TE release a fix installs (TE >= 2.13 needs cuBLAS >= 13.2, fixes.te_choice).
STATIC = StaticRequest(distributions=(*TE_DISTS, "nvidia-cublas", "torch"), modules=("transformer_engine",),
                       device_code=("transformer_engine", "transformer_engine_torch"))
TE_IMPORT = import_probe("transformer_engine.pytorch")
PACKING_MIN = fixes.TE_MIN_VERSION
PACKING_EXCEPTION = "2.9.0.dev0+5b3092a"  # the one pre-release Megatron's gate accepts by name

INSTALL = fixes.TE
REINSTALL_CONSISTENT = fixes.TE_REINSTALL

TE_SOURCES = (
    mlm("megatron/core/transformer/transformer_config.py", "3672-3704",
        "Megatron-LM dev transformer_config.py L3672-3704: SFT sequence packing requires TE >= 2.9.0"),
    mlm("megatron/core/utils.py", "295-323", "Megatron-LM dev utils.py get_te_version / is_te_min_version"),
    Source("TransformerEngine transformer_engine/common/__init__.py (version-consistency assert)",
           "https://github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/common/__init__.py"),
    Source("TransformerEngine #1541 (mixed TE packages)", "https://github.com/NVIDIA/TransformerEngine/issues/1541"),
)


def _installed(static) -> dict:
    return {name: static.dist_copies(name) for name in TE_DISTS if static.dist_copies(name)}


VERSION_TEXTS = (
    UpstreamText("M7-any", "SFT sequence packing requires Transformer Engine >= {minimum} but got {version}",
                 mlm("megatron/core/transformer/transformer_config.py", "3680-3685"), "ValueError",
                 match=("SFT sequence packing requires Transformer Engine",)),
    UpstreamText("M7", "SFT sequence packing requires Transformer Engine >= 2.9.0 but got {version} (TE < 2.9.0 may "
                 "have convergence issues).", mlm("megatron/core/transformer/transformer_config.py", "3680-3685"),
                 "ValueError"),
    UpstreamText("T1", "Transformer Engine package version mismatch. Found {packages}.",
                 te_at("common/__init__.py", "common/__init__.py (version consistency)"),
                 "AssertionError"),
    UpstreamText("T2", "Transformer Engine package version mismatch. Found transformer_engine_torch v{torch_ext}, "
                 "{others}. Install transformer-engine using 'pip3 install --no-build-isolation "
                 "transformer-engine[pytorch]==VERSION'",
                 te_at("pytorch/__init__.py", "pytorch/__init__.py (torch extension version)"), "AssertionError",
                 match=("Transformer Engine package version mismatch. Found transformer_engine_torch v",
                        "Install transformer-engine using 'pip3 install --no-build-isolation "
                        "transformer-engine[pytorch]==")),
    UpstreamText("T3", "Found empty 'transformer-engine' meta package installed{rest}",
                 te_at("common/__init__.py", "common/__init__.py (meta package without a core)"),
                 "RuntimeError"),
    UpstreamText("T9", "No dot product attention backend is available for the provided inputs. Please run with "
                 "NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2{rest}",
                 te_at("pytorch/attention/dot_product_attention/dot_product_attention.py",
                       "dot_product_attention.py (no backend fits)"), "ValueError"),
    UpstreamText("T11", "thd format is not supported with hierarchical CP implementation yet",
                 te_at("pytorch/attention/dot_product_attention/context_parallel.py",
                       "context_parallel.py L5021-5023 (THD with a2a+p2p; gone from 2.19)", "release_v2.18"),
                 "AssertionError"),
)


@check(
    "te.version",
    "Transformer Engine installed, consistent and >= 2.9 for sequence packing",
    texts=VERSION_TEXTS,
    applies_when="always; >= 2.9.0 when CP > 1",
    detects="TE distribution versions (metadata), their agreement and duplicate copies",
    sources=TE_SOURCES,
    fixes=(INSTALL, REINSTALL_CONSISTENT),
    static=STATIC,
)
def te_version(ctx: Context) -> Result:
    """DSv4 layers are built with Megatron's TESpecProvider, so Transformer Engine must be installed. Every DSv4
    run with CP > 1 uses a sequence_packing_scheduler, and Megatron then requires TE >= 2.9.0 (it raises
    "SFT sequence packing requires Transformer Engine >= 2.9.0 but got ..." at config time; it compares plain
    versions, so 2.9.0+abc passes and 2.9.0.dev0 fails, except the one build 2.9.0.dev0+5b3092a). PyPI splits TE
    into transformer-engine, transformer-engine-cu12/-cu13 and transformer-engine-torch; their versions must
    agree or TE asserts at import. NGC and source builds are a single `transformer_engine` distribution with a
    `+git` local version, which is understood. The release a fix installs follows the installed cuBLAS: TE 2.13
    and later need cublasLtGroupedMatrixLayoutInit_internal, which nvidia-cublas exports only from 13.2 on,
    while torch 2.11.0's cuda-toolkit==13.0.2 pin installs 13.1.0.3; below 13.2 the fix pins TE 2.12.0 (it loads
    and passes there, measured on an H200) and says why, else 2.16.1 (the verl DSv4 image's).
    """
    static = ctx.static
    copies = _installed(static)
    module = static.module("transformer_engine")
    # Broken METADATA is deps.metadata's finding; the verdict here comes from the copies that read.
    readable = {name: [c for c in cs if not c.get("error") and c.get("version")] for name, cs in copies.items()}
    readable = {name: cs for name, cs in readable.items() if cs}
    unreadable = sorted(name for name, cs in copies.items() if any(c.get("error") for c in cs))
    first = {name: cs[0] for name, cs in readable.items()}
    evidence = {
        "distributions": {name: [c.get("version") for c in cs] for name, cs in copies.items()},
        "unreadable_metadata": unreadable,
        "module": module.get("origin") or module.get("locations"),
        "imported_copy": static.copy("transformer_engine")["why"],  # which copy the job imports, and why
        "cp": ctx.profile.cp,
    }
    note = f" (unreadable METADATA of {', '.join(unreadable)}: see deps.metadata)" if unreadable else ""
    if not copies:
        if module.get("found"):
            return warned("transformer_engine is importable but has no distribution metadata: its version is unknown",
                          "Megatron reads te.__version__ first; te.import reports whether it imports.",
                          fixes=[fixes.te_for(static)], evidence=evidence)
        return failed(
            "Transformer Engine is not installed",
            "Megatron's DSv4 layer spec is built with TESpecProvider; without TE, Megatron sets HAVE_TE=False "
            "silently and the model build fails.",
            fixes=[fixes.te_for(static)], evidence=evidence,
        )
    if not first:
        why = f"every Transformer Engine distribution's METADATA is unreadable ({', '.join(unreadable)})"
        if ctx.profile.cp > 1:
            return errored(f"cannot judge Megatron's TE >= 2.9.0 packing gate: {why}",
                           "Megatron reads the version with importlib.metadata too; see deps.metadata.",
                           evidence=evidence)
        return warned(f"Transformer Engine version unknown: {why}", fixes=[fixes.te_reinstall(static)],
                      evidence=evidence)
    doubled = {name: [c.get("path") for c in cs] for name, cs in copies.items() if len(cs) > 1}
    versions = {name: c.get("version") for name, c in first.items()}
    distinct = {str(version(v) or v) for v in versions.values()}
    if len(distinct) > 1:
        found = " and ".join(f"{n} v{v}" for n, v in versions.items())
        return failed(
            f"Transformer Engine package version mismatch. Found {found}.",
            "TE asserts this at import (AssertionError: Transformer Engine package version mismatch ...), or loads a "
            "torch extension built for another release." + note,
            fixes=[fixes.te_reinstall(static)], evidence=evidence,
        )
    te = next(iter(versions.values()))
    evidence["version"] = te
    packing_ok = at_least(te, PACKING_MIN) or te == PACKING_EXCEPTION
    if ctx.profile.cp > 1 and not packing_ok:
        return failed(
            f"SFT sequence packing requires Transformer Engine >= 2.9.0 but got {te} "
            "(TE < 2.9.0 may have convergence issues).",
            "CP > 1 DSv4 needs a sequence_packing_scheduler, and Megatron's TransformerConfig raises this ValueError "
            "at config time when TE is older than 2.9.0 (or does not import: then it says 'got 0.0.0')."
            + (" More than one copy of TE is installed, too." if doubled else "") + note,
            fixes=[fixes.te_reinstall(static) if doubled else fixes.te_for(static)], evidence=evidence,
        )
    if doubled:
        return warned(f"Transformer Engine {te}: more than one copy of "
                      + ", ".join(f"{n} ({', '.join(map(str, p))})" for n, p in doubled.items())
                      + "; the first on sys.path wins" + note,
                      fixes=[fixes.te_reinstall(static)], evidence=evidence)
    packing = "" if packing_ok else "; CP > 1 (sequence packing) will need >= 2.9.0"
    return passed(f"Transformer Engine {te} ({', '.join(first)}){packing}{note}", evidence=evidence)


def _installed_release(static) -> str | None:
    """The installed TE release (public version) when it reads and passes the packing gate, else None."""
    for name in TE_DISTS:
        v = static.version(name)
        if v and at_least(v, PACKING_MIN):
            return str(version(v).public) if version(v) else v
    return None


def _rebuild(static, cuda_major: str, force: bool = True) -> Fix:
    """Rebuild the installed release's torch extension alone (`force`; else install the release with its extension);
    but where the installed cuBLAS cannot load that release's core (TE >= 2.13 below cuBLAS 13.2) or no release reads,
    install the release the cuBLAS allows."""
    te = _installed_release(static)
    if te is None:
        return fixes.te_reinstall(static, cuda_major) if force else fixes.te_for(static, cuda_major)
    if fixes.te_choice(static, cuda_major)[1] and at_least(te, fixes.TE_NEEDS_NEW_CUBLAS):
        return fixes.te_for(static, cuda_major)
    return fixes.te_install(te, cuda_major, force=force)


UNDEFINED = re.compile(r"(?P<lib>[^\s:'\"]+\.so[^\s:'\"]*): undefined symbol: (?P<symbol>[^\s,]+)"
                       r"(?:, version (?P<version>[^\s,]+))?")
# A torch (or pybind11) symbol, mangled or not: the extension was built against another torch.
TORCH_SYMBOL = re.compile(r"^_ZN\d*(?:c10|at|torch|pybind11)|^_ZNK?\d*(?:c10|at|torch)|c10|torch|THP")


def _te_archs(ctx: Context, evidence: dict) -> Result | None:
    """A failure when TE's core or torch extension holds device code of which nothing runs on the target GPU."""
    verdicts = {m: judge(ctx.static.device_code(m), ctx.profile) for m in ("transformer_engine",
                                                                             "transformer_engine_torch")}
    evidence["device_code"] = verdicts
    dead = [v for v in verdicts.values() if v["state"] == "none-runs"]
    if not dead:
        return None
    cc = ctx.profile.cc or (0, 0)
    arch = f"{cc[0]}{cc[1]}"
    fix = Fix(f"Build Transformer Engine {_installed_release(ctx.static) or ''} from source for CC {cc[0]}.{cc[1]} "
              f"(NVTE_CUDA_ARCHS={arch} in the build's environment; the default is 70;80;89;90;100;120), against the "
              "installed torch", [], key=f"te-arch:{arch}", phase=Phase.BUILD, manual=True)
    return failed(f"Transformer Engine is built for the wrong GPU: {dead[0]['text']}",
                  f"It imports, but its first kernel launch fails with \"{NO_KERNEL_IMAGE}\".", fixes=[fix],
                  evidence=evidence)


def library_probe(soname: str, symbol: str, version: str | None) -> Probe:
    return Probe.beside(__file__, f"libs:{soname}:{symbol}", "dsv4probe_libs.py",
                        {"soname": soname, "symbol": symbol, "version": version})


def _undefined(ctx: Context, m: re.Match, cuda_major: str) -> tuple[str, list[Fix], dict]:
    """An undefined symbol: a torch symbol in TE's torch extension is an ABI mismatch; a versioned symbol of another
    library names that library, which is read to say who ships it and whether it has the symbol."""
    lib, symbol, tag = m.group("lib"), m.group("symbol"), m.group("version")
    # A torch symbol (whichever TE library misses it) is a torch ABI mismatch; a cuBLAS symbol missing from TE's torch
    # extension is not (otherwise: it was called one), so the library is judged by the symbol, not the file.
    if TORCH_SYMBOL.search(symbol) or (tag or "").startswith("libtorch"):
        return ("TE's torch extension was built for another torch (ABI mismatch: a torch symbol is missing)",
                [_rebuild(ctx.static, cuda_major)], {})
    if not tag or not re.fullmatch(r"lib[A-Za-z0-9_+-]+\.so(\.[0-9]+)*", tag):
        return (f"{lib} needs {symbol}, which no loaded library provides: a library it links against is older "
                "than the one it was built with", [_rebuild(ctx.static, cuda_major)], {})
    answer = ctx.probe(library_probe(tag, symbol, tag))
    copies = (answer.data or {}).get("copies", []) if answer.ok and isinstance(answer.data, dict) else []
    evidence = {"needs": {"symbol": symbol, "version": tag, "from": lib}, "providers": copies}
    shipped = []
    for c in copies:
        owner = c.get("owner") or {}
        who = f"{owner.get('distribution')} {owner.get('version')}" if owner else "no pip distribution"
        has = "exports it" if c.get("exports") else ("does not export it" if "exports" in c else
                                                     f"could not be read ({c.get('error')})")
        shipped.append(f"{c.get('path')} ({who}) {has}")
    lacking = [c for c in copies if c.get("exports") is False]
    where = "; ".join(shipped) or f"no copy of {tag} was found on sys.path, LD_LIBRARY_PATH or the system folders"
    cublas = tag.startswith("libcublas")
    lines = [f"TE's core library ({lib}) needs {symbol} from {tag}: {where} (read from its ELF dynamic symbol "
             "table)."]
    if lacking or not copies:
        lines.append("Ways out, with their costs:")
        lines.append(f"  1. A TE release built against the installed {'cuBLAS' if cublas else tag}: the fix below, "
                     f"Transformer Engine {fixes.TE_CUBLAS_SAFE}" + (" (verified: it loads and passes on torch "
                     "2.11.0's cuBLAS 13.1 on an H200)." if cublas else "."))
        if cublas:
            lines.append("  2. A cuBLAS that exports the symbol: pip install 'nvidia-cublas>=13.2'. It breaks "
                         "torch 2.11.0's cuda-toolkit==13.0.2 pin (pip check and deps.consistency will say so); "
                         "not verified here.")
            lines.append("  3. An image with a newer CUDA (cuBLAS >= 13.2, as in the Megatron-Lite contract's "
                         "CUDA 13.2 image); not verified here.")
            lines.append("  4. torch 2.15.0 from PyPI: it pins cuda-toolkit==13.2.2, which brings nvidia-cublas "
                         "13.4.1.3, whose libcublasLt exports the symbols TE 2.13-2.20 need (nm -D on the wheels). "
                         "Everything compiled against torch (TE's torch extension, FlashMLA, fast-hadamard) must then "
                         "be rebuilt; not verified on a GPU here.")
        return "\n".join(lines), [fixes.TE_FOR_INSTALLED_CUBLAS if cublas else _rebuild(ctx.static, cuda_major)], \
            evidence
    return ("\n".join(lines + ["A copy that exports the symbol exists, so the one that loads is another: check "
                               "LD_LIBRARY_PATH and libs.loaded."]), [fixes.cudnn_wheel(cuda_major)]
            if "cudnn" in tag else [], evidence)


def _missing_dependency(static, missing: str) -> tuple[str, list[Fix], dict] | None:
    """A module TE imports that is neither TE nor torch: one of TE's declared requirements is not installed (a
    --no-deps install). The fix installs that requirement, as the TE distribution that declares it spells it."""
    top = missing.split(".")[0]
    if not top or top.startswith("transformer_engine") or top == "torch":
        return None
    wanted = canonical(top)
    for name in TE_DISTS:
        for req in requirements(static.readable_dist(name)):
            if canonical(req.name) != wanted:
                continue
            spec = f"{req.name}{req.specifier}"
            dist = static.readable_dist(name) or {}
            hint = (f"{dist.get('name') or name} {dist.get('version')} requires {spec}, which is not installed (TE was "
                    "installed with --no-deps, or the requirement was removed): TE's own code imports it")
            # The one judge of a specifier from METADATA, as everywhere (its own regex here accepted `===`, which
            # takes any text); the name must be a plain one too.
            plain = safe_specifier(str(req.specifier)) if str(req.specifier) else ""
            if plain is None or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", req.name):
                return hint, [fixes.withheld(f"Install {req.name}", "its version specifier is not a plain value",
                                             phase=fixes.Phase.PIN, key=f"te-dep:{req.name}")], \
                    {"missing_requirement": spec}
            spec = req.name + plain
            return hint, [Fix(f"Install {spec}, which {dist.get('name') or name} requires",
                              [["pip", "install", spec]], key=f"te-dep:{spec}")], {"missing_requirement": spec}
    return (f"TE imports {top}, which is not installed and which no TE distribution here declares",
            [Fix(f"Install the Python module {top} that Transformer Engine imports (its distribution name is not "
                 "declared by TE's metadata here)", key=f"te-dep:{top}", phase=fixes.Phase.SETTING)],
            {"missing_module": top})


def _classify(ctx: Context, message: str, cuda_major: str, missing: str = "") -> tuple[str, list[Fix], dict]:
    if missing:
        found = _missing_dependency(ctx.static, missing)
        if found is not None:
            return found
    m = UNDEFINED.search(message)
    if m:
        return _undefined(ctx, m, cuda_major)
    if "Could not find shared object file for Transformer Engine torch lib" in message:
        return "TE was installed without its [pytorch] extra", [_rebuild(ctx.static, cuda_major, force=False)], {}
    if "version mismatch" in message or "empty 'transformer-engine' meta package" in message:
        return "inconsistent TE packages", [fixes.te_reinstall(ctx.static, cuda_major)], {}
    if "libcudnn" in message or "CUDNN_STATUS" in message:
        return ("TE cannot load cuDNN: keep one cuDNN and point CUDNN_PATH / LD_LIBRARY_PATH at it",
                [fixes.cudnn_wheel(cuda_major)], {})
    if "cannot open shared object file" in message or "shared object not found" in message:
        return (f"a CUDA library TE needs is missing; TE's core must match torch's CUDA {cuda_major}",
                [fixes.te_reinstall(ctx.static, cuda_major)], {})
    return "TE's PyTorch extension does not import", [_rebuild(ctx.static, cuda_major)], {}


IMPORT_TEXTS = (
    *missing_prefix("I-te", "transformer_engine"),
    # TE's undefined-symbol reader (_undefined): a symbol one of TE's own libraries needs and nothing loaded provides.
    undefined_symbol("T6-lib", "transformer_engine", "TransformerEngine #1192 / #1684 (undefined symbol)",
                     "https://github.com/NVIDIA/TransformerEngine/issues/1192"),
    UpstreamText("T4", "Could not find shared object file for Transformer Engine torch lib.",
                 Source("TransformerEngine #1981 (no [pytorch] extra) / #2505 (NVTE_RELEASE_BUILD=1)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1981"), "FileNotFoundError"),
    UpstreamText("T5", "module 'transformer_engine' has no attribute 'pytorch'",
                 Source("TransformerEngine #1379 (the extension's ImportError swallowed)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1379"), "AttributeError"),
    UpstreamText("T6", "undefined symbol: _ZN3c10", Source("TransformerEngine #1192 / #1684 (torch ABI mismatch)",
                 "https://github.com/NVIDIA/TransformerEngine/issues/1192"), "ImportError"),
    UpstreamText("T7", "Multiple files found: {files}",
                 te_at("common/__init__.py", "common/__init__.py (duplicate shared objects)"), "RuntimeError"),
    UpstreamText("T8", "{library} shared object not found.",
                 te_at("common/__init__.py", "common/__init__.py (library loader, >= 2.11)"), "RuntimeError"),
    UpstreamText("T8-adv", "libcudnn_adv.so.9: cannot open shared object file",
                 Source("TransformerEngine #1853 (a missing cuDNN sub-library)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1853"), "OSError"),
    UpstreamText("T8-status", "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
                 Source("TransformerEngine #1853 (a missing cuDNN sub-library)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/1853"), "RuntimeError"),
    UpstreamText("T10", "Precompiled wheel not found. Building from source...",
                 Source("TransformerEngine #2383 (no prebuilt torch extension wheel)",
                        "https://github.com/NVIDIA/TransformerEngine/issues/2383"), "log"),
)


@check(
    "te.import",
    "Transformer Engine's PyTorch extension imports",
    texts=IMPORT_TEXTS,
    applies_when="Transformer Engine installed",
    detects="import transformer_engine.pytorch in a subprocess",
    sources=(
        Source("TransformerEngine transformer_engine/pytorch/__init__.py",
               "https://github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/pytorch/__init__.py"),
        mlm("megatron/core/extensions/transformer_engine.py", "71-87",
            "Megatron-LM dev extensions/transformer_engine.py L71-87 (HAVE_TE=False on ImportError)"),
        Source("TransformerEngine #1192 / #1684 (undefined symbol: torch ABI mismatch)",
               "https://github.com/NVIDIA/TransformerEngine/issues/1192"),
        Source("TransformerEngine #1853 (libcudnn_adv.so.9 cannot be opened)",
               "https://github.com/NVIDIA/TransformerEngine/issues/1853"),
        measured("docs/gpu-runs/2026-12-01-h200/README.md", "Measured on an H200, 2026-12-01: TE "
                 "2.16.1 fails on torch 2.11.0 with undefined symbol cublasLtGroupedMatrixLayoutInit_internal, version "
                 "libcublasLt.so.13; TE 2.12.0 imports and passes there"),
        pypi("nvidia-cublas", "13.2.0.9", "nvidia-cublas 13.2.0.9: libcublasLt.so.13 exports "
             "cublasLtGroupedMatrixLayoutInit_internal (13.1.0.3 and 13.1.2.11 do not; nm -D on the wheels)"),
        pypi("torch", "2.11.0", "torch 2.11.0 METADATA: Requires-Dist cuda-toolkit[cublas,...]==13.0.2 (installs "
             "nvidia-cublas 13.1.0.3)"),
        pypi("torch", "2.15.0", "torch 2.15.0 METADATA: Requires-Dist cuda-toolkit==13.2.2 (nvidia-cublas 13.4.1.3 "
             "exports cublasLtGroupedMatrixLayoutInit_internal: a fourth way out)"),
        Source("TransformerEngine build_tools/utils.py cuda_archs() (NVTE_CUDA_ARCHS, default 70;80;89;90;100;120)",
               "https://github.com/NVIDIA/TransformerEngine/blob/main/build_tools/utils.py"),
        RULES_SOURCE,
    ),
    fixes=(INSTALL, REINSTALL_CONSISTENT),
    static=STATIC,
    probes=(TE_IMPORT, TORCH),
)
def te_import(ctx: Context) -> Result:
    """Imports `transformer_engine.pytorch` in an isolated probe and catches everything. TE's top-level package
    swallows extension import errors (the failure then shows up as "module 'transformer_engine' has no
    attribute 'pytorch'" on first use), and Megatron catches the ImportError and silently sets HAVE_TE=False,
    yet DSv4 needs TESpecProvider. The error is classified. An undefined torch symbol (in
    transformer_engine_torch) is an ABI mismatch: rebuild the extension alone against the installed torch
    (--no-deps: a forced reinstall of TE would re-pick torch too), or install 2.12.0 where the installed cuBLAS
    cannot load the installed release's core. An
    undefined symbol with a version tag names the library that should provide it (`undefined symbol:
    cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13`: TE 2.13 and later need cuBLAS 13.2,
    while torch 2.11.0 installs 13.1); a probe finds every copy of that library, the pip distribution that
    ships it and whether its ELF dynamic symbol table exports the symbol, and the fix is a TE built against the
    installed cuBLAS (2.12.0, verified on an H200), with the other ways out and their costs in the details. A
    missing libcudnn/libcublas is a library or CUDA major-version mismatch; a missing torch lib means the
    [pytorch] extra was not installed. A Python module TE's own code imports that is not installed (`No module
    named 'pydantic'` after a --no-deps install, seen on an H200 with TE 2.12.0) is the TE requirement that
    declares it, and the fix installs that requirement; a rebuild would not help. Most of TE's device code is
    in libtransformer_engine.so, beside its torch extension: the archs of both `.nv_fatbin` sections are compared
    with the target CC by CUDA's rules, and a build with nothing that runs there fails (its kernels cannot launch).
    """
    static = ctx.static
    if not _installed(static) and not static.module("transformer_engine").get("found"):
        return skipped("Transformer Engine is not installed (see te.version)")
    answer = ctx.require(TE_IMPORT)
    result = outcome(answer, "transformer_engine.pytorch")
    torch = ctx.probe(TORCH)
    cuda = (torch.data or {}).get("cuda_build") if torch.ok and isinstance(torch.data, dict) else None
    cuda_major = str(cuda).split(".")[0] if cuda else "13"
    evidence = {"origin": result.get("origin"), "torch_cuda": cuda, "import_s": result.get("duration_s"),
                "imported_copy": static.copy("transformer_engine")["why"]}  # the copy whose device code is read
    if result.get("ok"):
        return _te_archs(ctx, evidence) or passed(
            f"transformer_engine.pytorch imports ({float(result.get('duration_s') or 0):.1f} s)"
            + "".join(f"; {v['text']}, for {v['target_cc']}" for v in evidence["device_code"].values()
                      if v["state"] == "runs"), evidence=evidence)
    message = error_text(result)
    err = result.get("error") if isinstance(result.get("error"), dict) else {}
    evidence["error"] = err
    missing = err.get("missing_module") if err.get("type") == "ModuleNotFoundError" else ""
    from .smoke._causes import cause_of, crash_cause, crash_text

    if cause_of(message) in ("oom", "driver", "no-device", "illegal-access"):
        # A GPU state, not a broken install: no rebuild fixes it (TE touched CUDA while importing).
        cause = crash_cause(ctx, crash_text(message), what="import transformer_engine.pytorch", hint="te.import")
        if cause is not None:
            evidence["crash_text"] = crash_text(message)
            return errored(cause["summary"], evidence=evidence) if cause["cause"] == "oom" else failed(
                cause["summary"], fixes=cause["fixes"], evidence=evidence)
    hint, found, more = _classify(ctx, message, cuda_major, str(missing or ""))
    evidence.update(more)
    return failed(
        f"import transformer_engine.pytorch failed: {message}",
        f"{hint}\n`import transformer_engine` swallows this error and Megatron silently sets HAVE_TE=False, so the "
        "DSv4 model build (TESpecProvider) fails later with a less helpful message.\n"
        + "\n".join(map(str, err.get("where") or [])),
        fixes=found, evidence=evidence,
    )

CHECKS = [te_version, te_import]
