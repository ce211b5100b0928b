"""The upstream texts of a missing module (`No module named '...'`), declared with the rule of the package it
belongs to. The module path is the anchor: the longest declared path that a message names wins (the registry ranks
the text with more literal characters first), so a missing `megatron.bridge` is mbridge.dsv4's and not
mcore.dsv4's, and a missing `cudnn.csa` is cudnn-fe.csa's and not cudnn-fe.version's."""

from dsv4_doctor.api import Source, UpstreamText

IMPORT_SYSTEM = Source("Python's import system: ModuleNotFoundError names the module path that was not found",
                       "https://docs.python.org/3/library/exceptions.html#ModuleNotFoundError")

# Python's own words where a caller passes a keyword the installed callee does not take (an older release).
UNEXPECTED_KEYWORD = Source("Python's TypeError where the installed callee lacks a keyword argument its caller passes",
                            "https://docs.python.org/3/library/exceptions.html#TypeError")


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



# The undefined symbols whose kind names a cause: a torch symbol (the extension was built against another torch), or a
# symbol version of another library (built against a newer one: cuBLAS's `, version libcublasLt.so.13`). A symbol of
# the package's own names none the doctor knows (a broken build of its own).
SYMBOL_KINDS = (("c10", "_ZN3c10{more}", "_ZN3c10"), ("at", "_ZN2at{more}", "_ZN2at"),
                ("torch", "_ZN5torch{more}", "_ZN5torch"),
                ("versioned", "{symbol}, version lib{library}", ", version lib"))


def undefined_symbols(text_id: str, library: str, title: str, url: str) -> tuple[UpstreamText, ...]:
    """A library of `library`'s package that needs a symbol no loaded library provides (the dynamic loader's
    ImportError), one text per kind of symbol that names a cause: the package's own library is the anchor, so the
    rule is that package's."""
    return tuple(UpstreamText(f"{text_id}-{kind}", f"{{path}}{library}{{rest}}: undefined symbol: {shown}",
                              Source(title, url), "ImportError", match=(library, ": undefined symbol: ", anchor))
                 for kind, shown, anchor in SYMBOL_KINDS)
