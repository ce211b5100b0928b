"""The upstream texts of a missing module (`No module named '...'`), declared with the rule of the package it
belongs to. The module path is the anchor: the longest declared path that a message names wins (the registry ranks
the text with more literal characters first), so a missing `megatron.bridge` is mbridge.dsv4's and not
mcore.dsv4's, and a missing `cudnn.csa` is cudnn-fe.csa's and not cudnn-fe.version's."""

from dsv4_doctor.api import Source, UpstreamText

IMPORT_SYSTEM = Source("Python's import system: ModuleNotFoundError names the module path that was not found",
                       "https://docs.python.org/3/library/exceptions.html#ModuleNotFoundError")


def missing_module(text_id: str, module: str, submodules: bool = True) -> tuple[UpstreamText, ...]:
    """`No module named 'module'` and, with `submodules`, `No module named 'module.…'` (any module under it)."""
    exact = UpstreamText(text_id, f"No module named '{module}'", IMPORT_SYSTEM, "ModuleNotFoundError")
    if not submodules:
        return (exact,)
    under = UpstreamText(f"{text_id}.sub", f"No module named '{module}.{{submodule}}'", IMPORT_SYSTEM,
                         "ModuleNotFoundError", match=(f"No module named '{module}.",))
    return exact, under


def missing_prefix(text_id: str, prefix: str) -> tuple[UpstreamText, ...]:
    """`No module named 'prefix…'`: a package whose sibling modules share its name's start (transformer_engine,
    transformer_engine_torch; flash_mla, flash_mla_cuda)."""
    return (UpstreamText(text_id, f"No module named '{prefix}{{rest}}'", IMPORT_SYSTEM, "ModuleNotFoundError",
                         match=(f"No module named '{prefix}",)),)


CUDA_NO_KERNEL = Source("CUDA runtime API: cudaErrorNoKernelImageForDevice (the build holds no code for this GPU)",
                        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html")
# Declared alike by every rule that reads a build's archs: the text alone does not say which build it was (the smoke
# knows its sub-run; a job's log does not, so triage names no cause from it).
NO_KERNEL_IMAGE = "no kernel image is available for execution on the device"


def no_kernel_image(text_id: str) -> UpstreamText:
    return UpstreamText(text_id, NO_KERNEL_IMAGE, CUDA_NO_KERNEL, "RuntimeError",
                        match=("no kernel image is available",))


def undefined_symbol(text_id: str, library: str, title: str, url: str) -> UpstreamText:
    """A library of `library`'s package that needs a symbol no loaded library provides (the dynamic loader's
    ImportError): the package's own library is the anchor, so the rule is that package's."""
    return UpstreamText(text_id, f"{{path}}{library}{{rest}}: undefined symbol: {{symbol}}", Source(title, url),
                        "ImportError", match=(library, ": undefined symbol: "))
