"""The settings probe's inputs: what the stack reads of the GPU (supplied inside the probe's process where none is
visible) and the model's config.json (a local folder or the local Hugging Face cache only; never the network, never
the model's own code). A part of dsv4probe_settings, loaded by path."""

import os
import re
import sys

from dsv4probe_common import decode_json, read_bounded

CONFIG_LIMIT = 4 << 20  # of a model's config.json
FUSED_DSA_MODULES = {"cudnn": "DSA", "flash_mla": "flash_mla_sparse_fwd"}  # the two imports, module -> name
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


# ------------------------------------------------------------------------------------------- the GPU facts


class _ImportOutcome:
    """A meta-path finder for the two fused-DSA imports, in this process only: an outcome "missing" makes the
    import fail as a missing module; "present" keeps the real module where it imports and otherwise supplies one
    holding the imported name (recorded as supplied)."""

    def __init__(self, present):
        self.present = present

    def find_spec(self, name, path=None, target=None):
        if name in FUSED_DSA_MODULES and not self.present:
            raise ModuleNotFoundError("No module named %r (the probe's supplied outcome)" % name, name=name)
        return None


class GpuFacts:
    """What the stack reads of the GPU, supplied where no GPU is visible: torch.cuda's capability and the outcome
    of the fused-DSA imports."""

    def __init__(self, request):
        facts = request.get("gpu") if isinstance(request.get("gpu"), dict) else {}
        cc = facts.get("cc")
        self.cc = tuple(int(x) for x in cc[:2]) if isinstance(cc, list) and len(cc) >= 2 else None
        self.imports = facts.get("fused_dsa_imports")  # True, False or None (not known)
        self.real = False
        self.supplied = {}
        self.undo = []

    def apply(self):
        import torch

        self.real = bool(torch.cuda.is_available())
        if self.real:  # a GPU here: its capability and the imports are real
            self.cc = tuple(torch.cuda.get_device_capability())
            self.imports = all(_imports(m, n) for m, n in FUSED_DSA_MODULES.items())
            return
        if self.cc is None:
            raise NotBuilt("the GPU's compute capability is not known here (no GPU visible and no --gpu-arch): "
                           "the stack's own decision reads it")
        if self.imports is None:  # not given: the two imports, run here (the job's interpreter)
            self.imports = imports_here()
        if self.imports is None:
            raise NotBuilt("whether the fused DSA kernels import (`from cudnn import DSA`, FlashMLA's "
                           "flash_mla_sparse_fwd) is not known without a GPU: one needs the driver's libraries")
        cc = self.cc
        self._patch(torch.cuda, "is_available", lambda: True)
        self._patch(torch.cuda, "get_device_capability", lambda device=None: cc)
        finder = _ImportOutcome(bool(self.imports))
        sys.meta_path.insert(0, finder)
        self.undo.append(lambda: sys.meta_path.remove(finder))
        for module, name in FUSED_DSA_MODULES.items():
            if not self.imports:
                sys.modules.pop(module, None)
            elif not _imports(module, name):
                import types

                stand_in = types.ModuleType(module)
                setattr(stand_in, name, type(name, (), {}))
                sys.modules[module] = stand_in
                # Undone with the rest: the next job of a batch finds the import as it is here.
                self.undo.append(lambda module=module, stand_in=stand_in: sys.modules.pop(module, None)
                                 if sys.modules.get(module) is stand_in else None)
                self.supplied[module] = "supplied (it does not import here)"
        self.supplied.update(cc="%d.%d" % cc, fused_dsa_imports=bool(self.imports))
        import torch.distributed

        self._patch(torch.distributed, "get_rank", lambda group=None: 0)  # no process group

    def _patch(self, owner, name, value):
        old = getattr(owner, name)
        setattr(owner, name, value)
        self.undo.append(lambda: setattr(owner, name, old))

    def describe(self):
        if self.real:
            return {"gpu": "visible", "cc": "%d.%d" % self.cc, "fused_dsa_imports": self.imports}
        return dict(self.supplied, gpu="supplied")


def _imports(module, name):
    try:
        loaded = __import__(module, fromlist=[name])
        getattr(loaded, name)
        return True
    except BaseException:
        return False


HOST_LIBRARY = re.compile(r"cannot open shared object file|libcuda\.so|libnvidia-", re.I)


def imports_here():
    """Whether both fused-DSA imports succeed here, with no GPU visible: False when one is missing or fails as the
    bridge sees it (ImportError), None when one fails to load a driver library this machine lacks (on the GPU node
    it may load: not known), as the doctor's bridge rule reads an import probe (doctor/job/bridge_rule.py)."""
    for module, name in FUSED_DSA_MODULES.items():
        try:
            getattr(__import__(module, fromlist=[name]), name)
        except ModuleNotFoundError:
            return False
        except BaseException as exc:
            return None if HOST_LIBRARY.search(str(exc)[:4000]) else False
    return True


class NotBuilt(Exception):
    """The stack's code cannot be run for this job here: why, in words."""


# ---------------------------------------------------------------------------------------------- the model


def hub_cache_dirs():
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            yield os.environ[variable]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    yield os.path.join(home, "hub")


def local_model(path):
    """(the model's local folder holding config.json, its config as read, how it was found). NotBuilt when the
    config is not local or needs the model's own code."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise NotBuilt("the job's model.path is not stated")
    folder = None
    if os.path.isdir(path):
        folder, how = path, "the local folder %s" % path
    elif REPO_ID.match(path):
        for cache in hub_cache_dirs():
            repo = os.path.join(cache, "models--" + path.replace("/", "--"))
            try:
                ref = read_bounded(os.path.join(repo, "refs", "main"), 200)[0].decode("ascii", "replace").strip()
            except OSError:
                continue
            candidate = os.path.join(repo, "snapshots", ref)
            if re.match(r"^[0-9a-f]{6,64}$", ref) and os.path.isfile(os.path.join(candidate, "config.json")):
                folder, how = candidate, "the local Hugging Face cache (%s)" % path
                break
    if folder is None:
        raise NotBuilt("the model's config.json is not local: model.path %r is neither a folder nor in the local "
                       "Hugging Face cache (the probe never reaches the network)" % path[:200])
    try:
        config = decode_json(read_bounded(os.path.join(folder, "config.json"), CONFIG_LIMIT)[0])
    except OSError as exc:
        raise NotBuilt("the model's config.json is not read: %s" % exc)
    if not isinstance(config, dict):
        raise NotBuilt("the model's config.json holds no object")
    if config.get("auto_map"):
        raise NotBuilt("the model's config needs its own code (auto_map in its config.json): the probe never "
                       "runs it (no trust_remote_code)")
    return folder, config, how
