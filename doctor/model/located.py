"""Where the job imports a module from, as the static probe's locator found it (probes/dsv4probe_static_locate.py),
typed: the probe's answer is untrusted."""

from __future__ import annotations

# Each stack distribution and the module the job imports it as (canonical names, as pip normalises them).
STACK_MODULE_OF = {
    "nvidia-cudnn-frontend": "cudnn", "apache-tvm-ffi": "tvm_ffi", "nvidia-cutlass-dsl": "cutlass",
    "torch-c-dlpack-ext": "torch_c_dlpack_ext", "transformer-engine": "transformer_engine",
    "transformer-engine-torch": "transformer_engine", "transformer-engine-cu12": "transformer_engine",
    "transformer-engine-cu13": "transformer_engine", "flash-mla": "flash_mla",
    "fast-hadamard-transform": "fast_hadamard_transform", "megatron-core": "megatron.core", "verl": "verl",
    "megatron-bridge": "megatron.bridge",
}
# Not cuda-python: since 12.6 it is a meta distribution, and `cuda` a namespace package that cuda-bindings, cuda-core
# and cuda-pathfinder fill. No copy of `cuda` is cuda-python's, so its version is its metadata's (mapping it to `cuda`
# read as "owner not known": no version, and a fix plan that never converged on `pip install cuda-python`).

# Distributions that install a stack distribution's module in its stead, each pinned `==` by it: the meta wheel
# nvidia-cutlass-dsl holds no code (4.5.x's `cutlass` is in -libs-base, 4.8.x's in -libs-core, beside a .pth file
# of the meta wheel's). The version of the copy the job imports is then theirs.
INSTALLED_BY = {"nvidia-cutlass-dsl": ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core")}


def _text_or_none(value):
    return value if isinstance(value, str) else None


def copy_of(m: dict) -> dict:
    """The copy a module entry of the static answer describes, typed: found, why (in words: "from the script's
    folder", "PYTHONPATH entry 1", "editable megatron-core 0.19.0 -> CHECKOUT"), place (job, pythonpath,
    user-site, site, pth,
    editable, finder, other), root (the sys.path entry or checkout it lies in), entry, pythonpath_index, owner
    (the distribution that installed it: name, version, path, editable, checkout; None for a checkout on the
    path, and where it is not known), owner_not_known (why: several distributions install its top-level name and
    their RECORDs do not tell which installed its file; else None), version (the owner's, else what the files
    state), version_from ("metadata", "files" or None), git (root, commit, ref), others (every shadowed copy: path,
    why, place, version, distribution), shared_top (where other distributions in its entry install into its top-level
    folder too: top, parts, whole, others [name, version, path, parts, whole]; else None)."""
    owner = m.get("owner") if isinstance(m.get("owner"), dict) else None
    owner = {"name": _text_or_none(owner.get("name")), "version": _text_or_none(owner.get("version")),
             "path": _text_or_none(owner.get("path")), "editable": owner.get("editable") is True,
             "checkout": _text_or_none(owner.get("checkout"))} if owner else None
    raw_stated, raw_others = m.get("files_version"), m.get("others")
    stated: dict = raw_stated if isinstance(raw_stated, dict) else {}
    listed: list = raw_others if isinstance(raw_others, list) else []
    git = m.get("git") if isinstance(m.get("git"), dict) else None
    git = {k: _text_or_none(git.get(k)) for k in ("root", "commit", "ref")} if git else None
    index = m.get("pythonpath_index")
    others = [{k: _text_or_none(o.get(k)) for k in ("path", "why", "place", "version", "distribution")}
              for o in listed if isinstance(o, dict)]
    version = (owner or {}).get("version") or _text_or_none(stated.get("version"))
    return {"found": m.get("found") is True, "why": _text_or_none(m.get("why")), "place": _text_or_none(m.get("place")),
            "root": _text_or_none(m.get("root")), "entry": _text_or_none(m.get("entry")),
            "pythonpath_index": index if isinstance(index, int) and not isinstance(index, bool) else None,
            "owner": owner, "owner_not_known": None if owner else _text_or_none(m.get("owner_not_known")),
            "version": version,
            "version_from": "metadata" if (owner or {}).get("version") else ("files" if version else None),
            "git": git, "others": others, "shared_top": _shared_top(m.get("shared_top"))}


def _names(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _shared_top(raw) -> dict | None:
    """The static probe's shared_top, typed (untrusted: a part is kept only as the probe may write it)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("top"), str) or not isinstance(raw.get("others"), list):
        return None
    others = [{"name": _text_or_none(o.get("name")), "version": _text_or_none(o.get("version")),
               "path": _text_or_none(o.get("path")), "parts": _names(o.get("parts")), "whole": o.get("whole") is True}
              for o in raw["others"] if isinstance(o, dict)]
    return {"top": raw["top"], "parts": _names(raw.get("parts")), "whole": raw.get("whole") is True,
            "others": others} if others else None
