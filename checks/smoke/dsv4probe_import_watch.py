"""One import hook for the probes that wrap a part of the CuTe DSL (the kernel store wraps `cutlass.cute.compile`,
the kernel probe counts the DSL's file-cache calls): the wrap happens when the module is first imported, by whichever
kernel needs it, so a run that never uses the DSL does not pay its import.

A part of the kernel and smoke probes, loaded by path (dsv4probe_common.load_module). Standard library only.
"""

import importlib.util
import sys


def when_imported(target, wrap):
    """Call `wrap(module)` on the module named `target`: now when it is imported already, else right after its first
    import has run it. An error of `wrap` never breaks the import (the module is then used unwrapped)."""
    module = sys.modules.get(target)
    if module is not None:
        wrap(module)
    else:
        sys.meta_path.insert(0, _Watch(target, wrap))


class _Watch:
    """A finder that finds nothing itself: it looks `target` up with the others and wraps what their loader runs."""

    def __init__(self, target, wrap):
        self.target, self.wrap = target, wrap

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)  # out of the way of its own lookup; it stays out once the module is found
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            sys.meta_path.insert(0, self)  # not there yet: a later import (another sys.path) may find it
            return spec
        real_exec, wrap = spec.loader.exec_module, self.wrap

        def exec_module(module):
            real_exec(module)
            try:
                wrap(module)
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec
