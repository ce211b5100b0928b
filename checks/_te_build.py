"""TE's build as te.version and te.import read it: its distributions, the release installed and the rebuild that cures
a mismatch; and what a failed `import transformer_engine` means: the undefined symbol and its library (a TE built
against another torch or CUDA), the arch list of its build, a missing dependency, each with the rebuild or install
that cures it."""

from __future__ import annotations

import re
from dsv4_doctor.api import (Context, Fix, Phase, Probe, Result, at_least, canonical, failed, requirements,
                             safe_specifier, version)
from .fixes import catalogue as fixes
from ._archs import NO_KERNEL_IMAGE, judge

TE_DISTS = ("transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13", "transformer-engine-torch")


def _installed_release(static) -> str | None:
    """The installed TE release (public version) when it reads and passes the packing gate, else None."""
    for name in TE_DISTS:
        v = static.version(name)
        if v and at_least(v, fixes.TE_MIN_VERSION):
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
    # TE writes the package name in backticks (`transformer-engine`); the stable words are its T3 text's parts.
    if "version mismatch" in message or ("Found empty " in message and " meta package installed" in message):
        return "inconsistent TE packages", [fixes.te_reinstall(ctx.static, cuda_major)], {}
    if "libcudnn" in message or "CUDNN_STATUS" in message:
        return ("TE cannot load cuDNN: keep one cuDNN and point CUDNN_PATH / LD_LIBRARY_PATH at it",
                [fixes.cudnn_wheel(cuda_major)], {})
    if "cannot open shared object file" in message or "shared object not found" in message:
        return (f"a CUDA library TE needs is missing; TE's core must match torch's CUDA {cuda_major}",
                [fixes.te_reinstall(ctx.static, cuda_major)], {})
    return "TE's PyTorch extension does not import", [_rebuild(ctx.static, cuda_major)], {}
