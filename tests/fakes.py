"""Environments for the rule tests: real published wheels where a release shows the state, fakes otherwise.

An `Env` is an ordered set of components, each in its own site directory, joined into PYTHONPATH. `Env.apply(cmd)`
carries out a printed fix command on it: a real cached wheel where one exists, else the fake a real install would
stand for (TE, Megatron dev, the CuTe DSL, torch, kernels), so a test can check that the fix turns the check green.
"""

from __future__ import annotations

import re
import shlex
import shutil
import textwrap
from pathlib import Path

from packaging.requirements import Requirement

from conftest import FakeSite, run_doctor
from wheels import WHEELS, ensure

# A permissive stand-in for a GPU library's Python API, for states no CPU machine shows (cutlass, cuda.bindings
# and a CUDA torch importable). Real cuDNN frontend wheels import against it, decorators and all.
ANYTHING = '''
import importlib.abc, importlib.machinery, sys, types


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Meta(name, (Anything,), {})

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _Meta):
            return args[0]
        return super().__call__(*args, **kwargs)


class Anything(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything()

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return Anything()

    def __getitem__(self, item):
        return Anything()

    def __iter__(self):
        return iter(())

    def __int__(self):
        return 0

    __index__ = __int__

    def _same(self, *a):
        return Anything()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = _same
    __lshift__ = __rshift__ = __and__ = __or__ = __xor__ = __neg__ = __mod__ = _same


def module_getattr(name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return getattr(Anything, name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, prefix):
        self.prefix = prefix

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(self.prefix + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__getattr__ = module_getattr
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


def install(prefix):
    if not any(getattr(f, "prefix", None) == prefix for f in sys.meta_path):
        sys.meta_path.append(_Finder(prefix))
'''

MAGIC_INIT = '''
import _fake_anything
_fake_anything.install(__name__)
{extra}
def __getattr__(name):
    return _fake_anything.module_getattr(name)
'''


def _magic_package(site: FakeSite, name: str, extra: str = "") -> None:
    site.file("_fake_anything.py", ANYTHING)
    site.file(f"{name.replace('.', '/')}/__init__.py", MAGIC_INIT.format(extra=textwrap.dedent(extra)))


def fake_torch(site: FakeSite, version: str = "2.11.0+cu130", cuda: str | None = "13.0",
               requires: tuple[str, ...] = ()) -> None:
    """A CUDA build of torch on a host without GPUs, enough for the torch probe and the frontend's imports."""
    site.dist("torch", version, requires=requires)
    _magic_package(site, "torch", f'''
        import types
        __version__ = {version!r}
        version = types.SimpleNamespace(cuda={cuda!r}, hip=None, git_version="fake")

        class _Cudnn(_fake_anything.Anything):
            @staticmethod
            def is_available():
                return True

            @staticmethod
            def version():
                return 91900

        class _Backends(_fake_anything.Anything):
            cudnn = _Cudnn()

        backends = _Backends()

        class _Cuda(_fake_anything.Anything):
            nccl = types.SimpleNamespace(version=lambda: (2, 27, 3))

            @staticmethod
            def is_available():
                return False

            @staticmethod
            def device_count():
                return 0

        cuda = _Cuda()
    ''')


def fake_cutedsl(site: FakeSite, version: str = "4.5.2") -> None:
    """nvidia-cutlass-dsl and cuda-python, importable (no release imports on a CPU-only machine)."""
    for dist, v in (("nvidia-cutlass-dsl", version), ("nvidia-cutlass-dsl-libs-base", version),
                    ("cuda-python", "13.0.3"), ("cuda-bindings", "13.0.3")):
        site.dist(dist, v)
    _magic_package(site, "cutlass", f"__version__ = {version!r}")
    site.file("cuda/__init__.py", "")
    _magic_package(site, "cuda.bindings")


def fake_te(site: FakeSite, version: str = "2.16.1", *, dists: dict | None = None, import_error: str | None = None,
            needs: str | None = None, imports: str | None = None, requires: dict | None = None) -> None:
    """Transformer Engine as PyPI ships it (metapackage + core + torch extension) or with chosen versions.

    `import_error` makes `transformer_engine.pytorch` raise; `needs` names a module whose absence raises it, so a fix
    that installs that module turns the import green, as on a real machine.
    """
    dists = dists or {"transformer-engine": version, "transformer-engine-cu13": version,
                      "transformer-engine-torch": version}
    for name, v in dists.items():
        site.dist(name, v, requires=tuple((requires or {}).get(name, ())))
    site.file("transformer_engine/__init__.py", f"__version__ = {version!r}\n")
    body = "def fp8_autocast(*a, **k):\n    return None\n"
    if imports:  # a module TE's own code imports (e.g. pydantic, which a --no-deps install leaves out)
        body = f"import {imports}\n" + body
    if import_error and needs:
        body = (f"import importlib.util\nif importlib.util.find_spec({needs!r}) is None:\n"
                f"    raise OSError({import_error!r})\n" + body)
    elif import_error:
        body = f"raise ImportError({import_error!r})\n" + body
    site.file("transformer_engine/pytorch/__init__.py", body)


def fake_megatron_dev(site: FakeSite, *, cp_partition_mode: bool = True, backend_knob: str = "dsa_kernel_backend",
                      commit: str = "fd1121b8ff7e3a4f83a28d35aed172d7bc0260e1", kwargs_init: bool = False,
                      compressor_gate: str = "d48bd6be") -> None:
    """A Megatron-LM dev tree: the files and dataclass fields the rules read (dev reports 0.19.0). `compressor_gate`:
    the fused compressor's CC gate as d48bd6be (`== (10, 0)`, non-pre-grouped input only) or 88a285f0 (major >= 10,
    CP pre-grouped buffers too) write it."""
    d = site.dist("megatron-core", "0.19.0")
    (d / "direct_url.json").write_text(
        '{"url": "https://github.com/NVIDIA/Megatron-LM.git", "vcs_info": {"vcs": "git", "commit_id": "%s"}}' % commit)
    site.file("megatron/core/__init__.py", "raise RuntimeError('the doctor must never import megatron.core')\n")
    site.file("megatron/core/package_info.py", "MAJOR = 0\nMINOR = 19\nPATCH = 0\n")
    psp_field = '    cp_partition_mode: Literal["zigzag", "contiguous"] = "zigzag"\n' if cp_partition_mode else ""
    init = "    def __init__(self, qkv_format=None, **kwargs):\n        pass\n" if kwargs_init else ""
    site.file("megatron/core/packed_seq_params.py", (
        "from dataclasses import dataclass\nfrom typing import Literal\n\n\n@dataclass\nclass PackedSeqParams:\n"
        "    qkv_format: str = None\n    cu_seqlens_q: object = None\n" + psp_field + init))
    site.file("megatron/core/model_parallel_config.py", """
        from dataclasses import dataclass
        from typing import Literal, Optional


        @dataclass
        class ModelParallelConfig:
            context_parallel_size: int = 1
            max_seqlen_per_dp_cp_rank: Optional[int] = None
            sequence_packing_scheduler: Optional[Literal['dp_balanced', 'default_dynamic_cp']] = None
    """)
    knob = {"dsa_kernel_backend": 'dsa_kernel_backend: Literal["none", "tilelang", "cudnn"] = "none"',
            "apply_dsa_kernel_fusion": "apply_dsa_kernel_fusion: bool = False", None: "pass"}[backend_knob]
    site.file("megatron/core/transformer/transformer_config.py", f"""
        from dataclasses import dataclass
        from typing import Literal

        from megatron.core.model_parallel_config import ModelParallelConfig


        @dataclass
        class TransformerConfig(ModelParallelConfig):
            cp_partition_mode: Literal["zigzag", "contiguous"] = "zigzag"
            {knob}


        @dataclass
        class MLATransformerConfig(TransformerConfig):
            multi_latent_attention: bool = True
    """)
    eav = "megatron/core/transformer/experimental_attention_variant/"
    site.file(eav + "deepseek_v4_hybrid_attention.py", "class DSv4HybridAttention:\n    pass\n")
    site.file(eav + "csa.py", "class CompressedSparseAttention:\n    pass\n")
    site.file(eav + "csa_utils/__init__.py", "")
    site.file(eav + "csa_utils/cp_layout_kernels.py", "_CUTE_AVAILABLE = False\n")
    site.file(eav + "csa_utils/fused_compressor.py", FUSED_COMPRESSOR_GATES[compressor_gate])
    site.file("megatron/core/context_parallel_layout/__init__.py", "")


# The lines of Megatron-LM's csa_utils/fused_compressor.py that gate the fused path, verbatim (d48bd6be: L21, L74,
# L146; 88a285f0: its docstring's CP sentence, the constant and the comparison).
FUSED_COMPRESSOR_GATES = {
    "d48bd6be": '''"""Dispatch shim for the fused CSA/HCA ``Compressor`` gated-pooling kernels.

details): for the THD packed, non-pre-grouped path, the chain gather-index build ->
"""
import torch

_SUPPORTED_COMPUTE_CAPABILITY = (10, 0)


def fused_compressor_available(device=None):
    index = torch.cuda.current_device()
    supported = torch.cuda.get_device_capability(index) == _SUPPORTED_COMPUTE_CAPABILITY
    return supported
''',
    "88a285f0": '''"""Dispatch shim for the fused CSA/HCA ``Compressor`` gated-pooling kernels.

zero-init) instead of ~40 forward / ~50 backward eager launches. CP pre-grouped buffers
reuse the same API with local token/group prefixes emitted by their compaction kernel;
"""
import torch

_MINIMUM_COMPUTE_CAPABILITY_MAJOR = 10


def fused_compressor_available(device=None):
    index = torch.cuda.current_device()
    capability = torch.cuda.get_device_capability(index)
    supported = capability[0] >= _MINIMUM_COMPUTE_CAPABILITY_MAJOR
    return supported
''',
}


def fake_kernel(site: FakeSite, module: str, dist: str, attr: str | None, version: str = "1.0.0") -> None:
    site.dist(dist, version)
    site.file(f"{module}/__init__.py", f"def {attr}(*a, **k):\n    return None\n" if attr else "")


FAKE_SPARSE_FWD = '''
    import torch
    # FlashMLA b7643bd5 csrc/api/sparse_fwd.h: only two head tiles and two q/k head dims exist, SM90 and SM100 alike
    if q.shape[1] not in (64, 128):
        raise RuntimeError("Unsupported h_q: %d" % q.shape[1])
    if q.shape[2] not in (512, 576):
        raise RuntimeError("Unsupported d_qk: %d" % q.shape[2])
    idx = indices[:, 0, :].long()  # (s_q, topk); -1 marks an unused slot
    keys = kv[:, 0, :].float()[idx.clamp_min(0)]  # (s_q, topk, d_qk): K = V
    logits = torch.einsum("shd,std->sht", q.float(), keys) * sm_scale
    logits = logits.masked_fill((idx < 0)[:, None, :], float("-inf"))
    max_logits, lse = logits.amax(-1), torch.logsumexp(logits, -1)
    p = torch.exp(logits - lse[..., None])
    if attn_sink is not None:  # the sink joins the softmax denominator only
        p = p * torch.sigmoid(lse - attn_sink.float())[..., None]
    out = torch.einsum("sht,std->shd", p, keys[..., :d_v]).to(q.dtype)
'''


def fake_flash_mla(site: FakeSite, branch: str = "nv_dev") -> None:
    """FlashMLA as its branches define flash_mla_sparse_fwd (flash_mla/flash_mla_interface.py): nv_dev takes
    indexer_topk (and returns out, max_logits, lse, plus lse_indexer when indexer_topk > 0), main does not (out,
    max_logits, lse). Both compute the sparse attention on CPU tensors (torch imported at the call)."""
    site.dist("flash-mla", "1.0.0")
    nv_dev = branch == "nv_dev"
    extra = ", indexer_topk: int = 0" if nv_dev else ""
    tail = ("    if indexer_topk > 0:\n        return out, max_logits, lse, lse.clone()\n" if nv_dev else "")
    site.file("flash_mla/__init__.py", "from flash_mla.flash_mla_interface import flash_mla_sparse_fwd\n")
    site.file("flash_mla/flash_mla_interface.py", "from typing import Optional\n\n\n"
              "def flash_mla_sparse_fwd(q, kv, indices, sm_scale: float, d_v: int = 512, attn_sink=None,\n"
              f"                         topk_length=None{extra}):\n"
              + textwrap.dedent(FAKE_SPARSE_FWD).replace("\n", "\n    ").rstrip() + "\n" + tail
              + "    return out, max_logits, lse\n")


def fake_mbridge(site: FakeSite, default_dispatcher: str = "flex", dsv4: bool = True) -> None:
    """Megatron-Bridge from git (models/deepseek/deepseek_v4_bridge.py; main defaults the dispatcher to flex)."""
    site.dist("megatron-bridge", "0.4.0rc0")
    site.file("megatron/bridge/__init__.py", "")
    site.file("megatron/bridge/models/__init__.py", "")
    site.file("megatron/bridge/models/deepseek/__init__.py", "")
    if dsv4:
        # main's fused-DSA rule (as in 0.6.x and 060349395): CC major >= 10 and both kernels import.
        site.file("megatron/bridge/models/deepseek/deepseek_v4_bridge.py", f"""
            import torch


            def deepseek_v4_supports_blackwell_fused_kernels() -> bool:
                if not torch.cuda.is_available():
                    return False
                major, _minor = torch.cuda.get_device_capability()
                return major >= 10


            def deepseek_v4_supports_fused_dsa_kernels() -> bool:
                try:
                    from cudnn import DSA  # noqa: F401
                    from flash_mla import flash_mla_sparse_fwd  # noqa: F401
                except ImportError:
                    return False
                return True


            class DeepSeekV4Bridge:
                def provider_bridge(self, provider):
                    use_blackwell_fused_kernels = deepseek_v4_supports_blackwell_fused_kernels()
                    use_dsa_kernel_fusion = use_blackwell_fused_kernels and deepseek_v4_supports_fused_dsa_kernels()
                    provider.apply_dsa_kernel_fusion = use_dsa_kernel_fusion
                    provider.moe_token_dispatcher_type = "{default_dispatcher}"
                    return provider
        """)


def fake_old_verl(site: FakeSite) -> None:
    """verl from before PR #7221: no cp_layout argument, no layout helpers."""
    site.dist("verl", "0.8.0")
    site.file("verl/__init__.py", "")
    site.file("verl/models/mcore/util.py", "def preprocess_thd_engine(input_ids, attention_mask):\n    pass\n\n"
              "def postprocess_thd_engine(output, packed_seq_params):\n    pass\n")
    site.file("verl/workers/engine/megatron/transformer_impl.py", "class MegatronEngine:\n    pass\n")
    site.file("verl/utils/megatron/router_replay_utils.py", "x = torch.uint8\n")


# Components a fix command can install, by distribution name.
FAKE_BUILDERS = {
    "transformer-engine": lambda site, v: fake_te(site, v or "2.16.1"),
    "megatron-core": lambda site, v: fake_megatron_dev(site),
    "nvidia-cutlass-dsl": lambda site, v: fake_cutedsl(site, v or "4.5.2"),
    "torch": lambda site, v: fake_torch(site, v or "2.11.0+cu130"),
    "flash-mla": lambda site, v: fake_flash_mla(site),
    "flash_mla": lambda site, v: fake_flash_mla(site),
    "megatron-bridge": lambda site, v: fake_mbridge(site),
    "fast-hadamard-transform": lambda site, v: fake_kernel(site, "fast_hadamard_transform", "fast-hadamard-transform",
                                                           "hadamard_transform", "1.0.4.post1"),
    "triton": lambda site, v: fake_kernel(site, "triton", "triton", None, "3.5.0"),
    "nvidia-cudnn-cu13": lambda site, v: fake_kernel(site, "nvidia_cudnn_fake", "nvidia-cudnn-cu13", None, "9.19.0.56"),
    "nvidia-cudnn-cu12": lambda site, v: fake_kernel(site, "nvidia_cudnn_fake", "nvidia-cudnn-cu12", None, "9.19.0.56"),
}
# Which component a distribution lives in (uninstalling or reinstalling it replaces that component).
COMPONENT_OF = {
    "transformer-engine": "te", "transformer-engine-cu12": "te", "transformer-engine-cu13": "te",
    "transformer-engine-torch": "te", "nvidia-cudnn-frontend": "fe", "apache-tvm-ffi": "tvm",
    "megatron-core": "megatron", "verl": "verl", "nvidia-cutlass-dsl": "cutedsl", "torch": "torch",
    "flash-mla": "flash_mla", "flash_mla": "flash_mla", "fast-hadamard-transform": "hadamard", "triton": "triton",
    "megatron-bridge": "mbridge",
    "nvidia-cudnn-cu13": "cudnn_libs", "nvidia-cudnn-cu12": "cudnn_libs",
}


class Env:
    """Components in their own site directories; real wheels are shared read-only from the cache."""

    def __init__(self, root: Path):
        self.root = root
        self.sites: dict[str, Path] = {}
        # Probe answers for in-process judging (tests/probed.py), by interpreter, the files installed and probe.
        self.probe_answers: dict = {}

    def fake(self, component: str, build, *args, **kwargs) -> Env:
        path = self.root / component
        shutil.rmtree(path, ignore_errors=True)
        build(FakeSite(path), *args, **kwargs)
        self.sites[component] = path
        return self

    def wheel(self, component: str, key: str) -> Env:
        self.sites[component] = ensure(key)
        return self

    def drop(self, component: str) -> Env:
        path = self.sites.pop(component, None)
        if path is not None and self.root in path.parents:
            shutil.rmtree(path, ignore_errors=True)
        return self

    def _installed(self, name: str) -> bool:
        prefix = name.replace("-", "_") + "-"
        return any(d.name.lower().startswith(prefix) for site in self.sites.values() for d in site.glob("*.dist-info"))

    def doctor(self, *args: str, python: str, **kwargs):
        return run_doctor(*args, sites=tuple(self.sites.values()), python=python, **kwargs)

    def apply(self, command: str) -> None:
        """Carry out one printed fix command on this environment."""
        words = shlex.split(command)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            words.pop(0)  # the environment a build step runs with (FlashMLA's CPLUS_INCLUDE_PATH, SM flags)
        assert words[0] == "pip", command
        # --target: each component is its own site folder on PYTHONPATH, the folder a `--target` step names.
        takes_value = {"--index-url", "--extra-index-url", "-c", "--constraint", "--target", "-t"}
        names = [w for i, w in enumerate(words[2:], 2) if not w.startswith("-") and words[i - 1] not in takes_value]
        if words[1] == "uninstall":
            for name in names:
                comp = COMPONENT_OF.get(name)
                if comp:
                    self.drop(comp)
            return
        assert words[1] == "install", command
        for spec in names:
            req = Requirement(spec)
            name = req.name.lower().replace("_", "-")
            # An exact pin, or the lowest version a lower bound accepts (what a resolver may pick: the least it may).
            pinned = next((s.version for s in req.specifier if s.operator == "=="), None) or \
                next((s.version for s in req.specifier if s.operator == ">="), None)
            key = f"{name}-{pinned}"
            if name not in COMPONENT_OF and self._installed(name) and not pinned:
                continue  # pip: "Requirement already satisfied" (cuda-python, brought by the CuTe DSL 4.5.2)
            comp = COMPONENT_OF[name]
            self.drop(comp)
            # The real nvidia-cutlass-dsl wheel here is the meta wheel alone (its libraries are 150 MB): the
            # importable stand-in is what an install of the whole thing stands for.
            if key in WHEELS and name != "nvidia-cutlass-dsl":
                self.wheel(comp, key)
            else:
                self.fake(comp, FAKE_BUILDERS[name], pinned)


def healthy(root: Path, te_version: str = "2.16.1") -> Env:
    """Everything a DSv4 CP job needs, real wheels where they exist."""
    env = Env(root)
    env.fake("torch", fake_torch)
    env.fake("te", fake_te, te_version)
    env.wheel("fe", "nvidia-cudnn-frontend-1.27.0")
    env.wheel("tvm", "apache-tvm-ffi-0.1.11")
    env.wheel("typing_extensions", "typing-extensions-4.16.0")
    env.fake("cutedsl", fake_cutedsl)
    env.fake("megatron", fake_megatron_dev)
    env.wheel("verl", "verl-0.9.0")
    env.fake("flash_mla", fake_flash_mla)
    env.fake("mbridge", fake_mbridge)
    env.fake("dlpack", lambda s: s.dist("torch-c-dlpack-ext", "0.1.5"))
    env.fake("hadamard", lambda s: fake_kernel(s, "fast_hadamard_transform", "fast-hadamard-transform",
                                               "hadamard_transform", "1.0.4.post1"))
    env.fake("triton", lambda s: fake_kernel(s, "triton", "triton", None, "3.5.0"))
    return env


def fake_megatron_importable(site: FakeSite, *, mode: str = "ok") -> None:
    """A Megatron dev tree whose DSv4 layer API imports and runs on the CPU, mimicking upstream's signatures.

    mode: "ok"; "nan" (the layer returns NaN); "zigzag-only" (the config rejects CP like a Megatron whose DSv4 CP
    needs cp_partition_mode='contiguous' but receives the default); "no-te" (the spec provider imports a module the
    image lacks); "leaky" (attention crosses packed-sequence boundaries); "no-field" (a release's PackedSeqParams,
    without cp_partition_mode). With dsa_kernel_backend='cudnn' (the fused kernels): "fused-drift" (the output is off
    by 10 %), "fused-nan-grad" (the backward gives NaN), "fused-hang" (the backward never returns, as cudnn-frontend
    #676 reports on empty top-k rows); "slow-start" (importing megatron.core never ends, for every backend).
    """
    fake_megatron_dev(site)
    site.file("megatron/core/__init__.py", "")
    site.file("megatron/core/parallel_state.py", f"""
        import torch.distributed as dist
        _STATE = {{}}
        if {mode == "slow-start"!r}:  # an import that outlasts the build's time limit (a cold TE + megatron.core)
            import time
            time.sleep(3600)

        def initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                      context_parallel_size=1):
            assert dist.is_initialized(), "torch.distributed is not initialized"
            assert dist.get_world_size() % context_parallel_size == 0
            _STATE["cp"] = context_parallel_size

        def destroy_model_parallel():
            _STATE.clear()
    """)
    site.file("megatron/core/tensor_parallel/__init__.py", "")
    site.file("megatron/core/tensor_parallel/random.py", """
        import torch

        def model_parallel_cuda_manual_seed(seed):
            torch.manual_seed(seed)
    """)
    site.file("megatron/core/process_groups_config.py", """
        import torch.distributed as dist

        class ProcessGroupCollection:
            @classmethod
            def use_mpu_process_groups(cls):
                pg = cls()
                pg.cp = dist.group.WORLD
                return pg
    """)
    site.file("megatron/core/packed_seq_params.py", """
        from dataclasses import dataclass
        from typing import Literal

        @dataclass
        class PackedSeqParams:
            qkv_format: str = None
            cu_seqlens_q: object = None
            cu_seqlens_kv: object = None
            cu_seqlens_q_padded: object = None
            cu_seqlens_kv_padded: object = None
            max_seqlen_q: int = None
            max_seqlen_kv: int = None
    """ + ("" if mode == "no-field" else """
            cp_partition_mode: Literal["zigzag", "contiguous"] = "zigzag"
    """))
    # A config that rejects CP whatever it is told stands for a Megatron whose field does not take effect.
    rejects = "True" if mode == "zigzag-only" else 'self.cp_partition_mode != "contiguous"'
    site.file("megatron/core/transformer/transformer_config.py", (
        "class MLATransformerConfig:\n"
        "    def __init__(self, **kwargs):\n"
        "        self.context_parallel_size = 1\n"
        "        self.cp_partition_mode = 'zigzag'\n"
        "        self.__dict__.update(kwargs)\n"
        f"        if self.context_parallel_size > 1 and ({rejects}):\n"
        "            raise ValueError(\"DSv4 Hybrid with context parallelism requires \"\n"
        "                             \"cp_partition_mode='contiguous'.\")\n"
    ))
    site.file("megatron/core/extensions/__init__.py", "")
    site.file("megatron/core/extensions/transformer_engine_spec_provider.py",
              ("import transformer_engine_missing_in_this_image\n" if mode == "no-te"
               else "import transformer_engine\n")
              + "class TESpecProvider:\n    pass\n")
    site.file("megatron/core/models/__init__.py", "")
    site.file("megatron/core/models/gpt/__init__.py", "")
    site.file("megatron/core/models/gpt/experimental_attention_variant_module_specs.py", """
        def get_dsv4_hybrid_module_spec_for_backend(config, backend):
            assert config.multi_latent_attention
            return ("dsv4_hybrid", backend)
    """)
    # The layer mixes tokens like causal attention does, within each packed sequence only (the cumulative mean of a
    # projection), so that packing and the merged-sequences control mean something. Under CP it gathers the ranks'
    # contiguous chunks, computes the whole batch and keeps its own rows: a correct contiguous-CP layer.
    leak = mode == "leaky"
    site.file("megatron/core/transformer/spec_utils.py", f"""
        import torch
        import torch.distributed as dist

        class _DSv4Layer(torch.nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)

            def forward(self, hidden_states, attention_mask, packed_seq_params=None, **kwargs):
                cp = self.config.context_parallel_size
                if cp > 1 and packed_seq_params.cp_partition_mode != "contiguous":
                    raise ValueError("DSv4 THD CP requires a contiguous CP partition.")
                local = hidden_states
                if cp > 1:
                    parts = [torch.empty_like(local) for _ in range(cp)]
                    dist.all_gather(parts, local.contiguous())
                    hidden_states = torch.cat(parts)
                h = self.proj(hidden_states.float())
                bounds = [int(x) for x in packed_seq_params.cu_seqlens_q_padded.tolist()]
                if {leak!r}:
                    bounds = [bounds[0], bounds[-1]]  # one sequence: tokens see across packed boundaries
                out = torch.empty_like(h)
                for start, end in zip(bounds[:-1], bounds[1:]):
                    chunk = h[start:end]
                    steps = torch.arange(1, end - start + 1, dtype=h.dtype).view(-1, 1, 1)
                    out[start:end] = chunk.cumsum(0) / steps
                out = torch.tanh(out).to(local.dtype)
                if cp > 1:
                    rank = dist.get_rank() % cp
                    out = out[rank * local.shape[0]:(rank + 1) * local.shape[0]]
                if {mode == "nan"!r}:
                    out = out * float("nan")
                fused = getattr(self.config, "dsa_kernel_backend", "none") == "cudnn"
                if fused and {mode == "fused-drift"!r}:
                    out = out * 1.1
                if fused and out.requires_grad and {mode in ("fused-nan-grad", "fused-hang")!r}:
                    out.register_hook(_broken_backward)
                return out, None

        def _broken_backward(grad):
            if {mode == "fused-hang"!r}:
                import time
                time.sleep(3600)
            return grad * float("nan")

        def build_module(spec, config, layer_number, pg_collection):
            return _DSv4Layer(config)
    """)
    site.file("megatron/core/transformer/__init__.py", "")


# --- CPU stand-ins for the stack's own CP kernels (smoke.dsv4-kernels) ------------------------------------------------
# They have the upstream signatures and compute the documented semantics on CPU tensors, in code of their own (not the
# doctor's references), and can be broken in the ways the kernel smoke must catch.

FAKE_INDEXER = '''
import torch

_SEEN = {}


class DSA:
    @staticmethod
    def indexer_forward_wrapper(q, k, w, ratio=4, qhead_per_kv_head=None, m_block_size=128, n_block_size=128,
                                q_stage=2, kv_stage=4, sm_scale=1.0, out=None, stream=None, cu_seqlens_q=None,
                                cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, q_causal_offsets=None,
                                precision="bf16", **kwargs):
        mode = MODE
        if mode == "tvm":
            raise ModuleNotFoundError("No module named 'tvm_ffi'", name="tvm_ffi")
        if mode == "sm90-1.26":  # frontend 1.26.0's _interface_sm90.py: _SUPPORTED_QHPKV = (32, 64)
            if qhead_per_kv_head is None:
                qhead_per_kv_head = q.shape[1] // k.shape[1]
            assert qhead_per_kv_head in (32, 64), f"qhead_per_kv_head must be one of (32, 64), got {qhead_per_kv_head}"
        if mode == "none-recompiles" and q_causal_offsets is None:  # a None compiles a second kernel (seconds of JIT)
            raise RuntimeError("the stand-in refuses q_causal_offsets=None: a control must pass zeros")
        offsets = q_causal_offsets
        if mode == "no-offsets" or offsets is None:
            offsets = torch.zeros(cu_seqlens_q.numel() - 1, dtype=torch.int32)
        if mode == "sticky-offsets":  # a compile cache keyed wrongly: the first offsets it saw stay
            offsets = _SEEN.setdefault(tuple(cu_seqlens_q.tolist()), offsets.clone())
        width = -(-max_seqlen_k // 4) * 4
        scores = torch.full((q.shape[0], width), float("-inf"))
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(cq) - 1):
            qs, ks = q[cq[b]:cq[b + 1]].float(), k[ck[b]:ck[b + 1], 0].float()
            if qs.shape[0] == 0 or ks.shape[0] == 0:
                continue
            ws = w[cq[b]:cq[b + 1]].float()[..., None]
            s = sm_scale * (torch.relu(torch.einsum("nhd,md->nhm", qs, ks)) * ws).sum(1)
            i = torch.arange(qs.shape[0]).view(-1, 1)
            j = torch.arange(ks.shape[0]).view(1, -1)
            visible = j < (int(offsets[b]) + i + 1) // ratio
            scores[cq[b]:cq[b + 1], :ks.shape[0]] = torch.where(visible, s, torch.tensor(float("-inf")))
        if mode == "nan":
            finite = torch.isfinite(scores)
            if finite.any():
                scores[finite.nonzero()[0].tolist()[0], finite.nonzero()[0].tolist()[1]] = float("nan")
        return {"scores": scores.to(q.device)}
'''


# Frontend 1.27.0's fused CSA compressor entry point (cudnn/csa/compressor/api.py), with the wheel's signature;
# it computes the gated pooling its docstring states (out[b, j] = sum_k kv[w(b,k), c(k,j)] *
# softmax_k(score[w(b,k), c(k,j)] + ape[k % ratio, c(k,j)]), the coff == 2 window being the previous block's first
# head_dim channels, invalid at a segment's first block, then this block's second head_dim channels), vectorised
# per segment, unlike the doctor's per-group reference.
FAKE_CSA = '''
import torch

_FIRST_APE = []


def csa_compressor_forward_wrapper(kv, score, ape, cu_seqlens, cu_seqlens_comp, ratio=4, head_dim=None, coff=2,
                                   total_comp=None, stream=None):
    if head_dim is None:
        head_dim = kv.shape[1] // coff
    if total_comp is None:
        total_comp = int(cu_seqlens_comp[-1].item())
    if MODE == "sticky-ape":  # a compile cache keyed wrongly: the first position embedding it saw stays
        _FIRST_APE[:] = _FIRST_APE or [ape.clone()]
        ape = _FIRST_APE[0]
    out = torch.zeros(int(total_comp), head_dim)
    cu, cc = cu_seqlens.tolist(), cu_seqlens_comp.tolist()
    for b in range(len(cu) - 1):
        n = cc[b + 1] - cc[b]
        if n <= 0:
            continue
        x = kv[cu[b]:cu[b] + n * ratio].float().reshape(n, ratio, coff * head_dim)
        s = score[cu[b]:cu[b] + n * ratio].float().reshape(n, ratio, coff * head_dim) + ape.float()
        if coff == 2:
            first_x = torch.zeros(1, ratio, head_dim)
            first_s = torch.full((1, ratio, head_dim), float("-inf"))
            prev_x = torch.cat([first_x, x[:-1, :, :head_dim]])
            prev_s = torch.cat([first_s, s[:-1, :, :head_dim]])
            if MODE == "no-overlap":  # drops the previous block's half window everywhere
                prev_s = torch.full_like(prev_s, float("-inf"))
            x = torch.cat([prev_x, x[:, :, head_dim:]], dim=1)
            s = torch.cat([prev_s, s[:, :, head_dim:]], dim=1)
        out[cc[b]:cc[b] + n] = (torch.softmax(s, dim=1) * x).sum(dim=1)
    return {"out": out.to(torch.bfloat16)}


def csa_compressor_backward_wrapper(kv, score, ape, cu_seqlens, cu_seqlens_comp, grad_out, ratio=4, head_dim=None,
                                    coff=2, stream=None):
    raise NotImplementedError("the stand-in has no backward")
'''


def fake_cudnn_dsa(site: FakeSite, mode: str = "ok", version: str = "1.27.0", csa: str | None = None) -> None:
    """The cuDNN frontend's DSA indexer (cudnn.DSA.indexer_forward_wrapper) on CPU tensors. mode: ok; no-offsets
    (ignores q_causal_offsets); nan (one finite score becomes NaN); sticky-offsets (keeps the first offsets it saw, so
    zero offsets change nothing: the control cannot separate); tvm (the first call needs tvm_ffi, absent); sm90-1.26
    (frontend 1.26.0's SM90 head rule: 32 or 64 query heads per KV head); none-recompiles (raises on
    q_causal_offsets=None, which on the real frontend compiles a second kernel).
    csa: also the fused CSA compressor (cudnn.csa.compressor, 1.27.0's layout): ok; no-overlap (a wrong result: no
    previous-block half window); sticky-ape (keeps the first position embedding it saw: the control is dead)."""
    site.dist("nvidia-cudnn-frontend", version)
    site.file("cudnn/__init__.py", f"__version__ = {version!r}\nMODE = {mode!r}\n" + FAKE_INDEXER)
    if csa:
        site.file("cudnn/csa/__init__.py", "")
        site.file("cudnn/csa/compressor/__init__.py", "from .api import csa_compressor_backward_wrapper, "
                  "csa_compressor_forward_wrapper  # noqa: F401\n")
        site.file("cudnn/csa/compressor/api.py", f"MODE = {csa!r}\n" + FAKE_CSA)


FAKE_LAYOUT = '''
import torch

_CUTE_AVAILABLE = True


def _groups(cu, global_start, l_local, ratio, d_comp):
    out = []
    global_end = global_start + l_local
    for s in range(len(cu) - 1):
        lo, hi = max(cu[s], global_start), min(cu[s + 1], global_end)
        if lo >= hi:
            continue
        need = global_start - d_comp - cu[s]
        first = (need + ratio - 1) // ratio if need > 0 else 0
        if MODE == "off-by-one":
            first = max(0, need // ratio)  # floor instead of ceil: one group too many at a rank boundary
        last = min((hi - cu[s]) // ratio, (cu[s + 1] - cu[s]) // ratio)
        out.extend((s, g) for g in range(first, last))
    return out


class CompressorInputCompact(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_local, boundary_hidden, cu_seqlens, global_start, ratio, d_comp, c_cap):
        if MODE == "tvm":  # compiled with --enable-tvm-ffi: the first call imports tvm_ffi (H200, 2026-12-01)
            raise ModuleNotFoundError("No module named 'tvm_ffi'", name="tvm_ffi")
        cu = cu_seqlens.tolist()
        d_window = boundary_hidden.shape[0]
        source = torch.cat([boundary_hidden, hidden_local])  # row 0 is global row global_start - d_window
        groups = _groups(cu, global_start, hidden_local.shape[0], ratio, d_comp)[:c_cap]
        index = torch.tensor([cu[s] + g * ratio + t - (global_start - d_window) for s, g in groups
                              for t in range(ratio)], dtype=torch.long)
        compact = source.new_zeros((c_cap * ratio,) + tuple(source.shape[1:]))
        if index.numel():
            compact[:index.numel()] = source[index]
        ids = torch.full((c_cap,), -1, dtype=torch.int32)
        ids[:len(groups)] = torch.tensor([g for _, g in groups], dtype=torch.int32)
        ctx.save_for_backward(index)
        ctx.shapes = (d_window, hidden_local.shape[0])
        ctx.mark_non_differentiable(ids)
        return compact, ids

    @staticmethod
    def backward(ctx, grad_compact, _grad_ids):
        (index,) = ctx.saved_tensors
        d_window, l_local = ctx.shapes
        grad = grad_compact.new_zeros((d_window + l_local,) + tuple(grad_compact.shape[1:]))
        if index.numel():
            grad[index] = grad_compact[:index.numel()]
        return grad[d_window:], grad[:d_window], None, None, None, None, None


def build_attention_indices(cu_seqlens, global_start, l_local, d_window, window_size, ratio, compressed_width,
                            compressed_topk=None, cu_seqlens_compressed=None, seq_to_rank_row=None,
                            for_indexer_loss=False):
    cu = cu_seqlens.tolist()
    cu_comp = (cu_seqlens_compressed if cu_seqlens_compressed is not None else cu_seqlens).tolist()
    row_map = seq_to_rank_row.tolist() if seq_to_rank_row is not None else []
    width = window_size + compressed_width
    idx = torch.full((l_local, width), -1, dtype=torch.int32)
    length = torch.zeros((l_local,), dtype=torch.int32)
    base = d_window + l_local
    for r in range(l_local):
        q = global_start + r
        hits = [s for s in range(len(cu) - 1) if cu[s] <= q < cu[s + 1]]
        if not hits:
            idx[r, 0], length[r] = 0, 1
            continue
        s = hits[0]
        cs, clen = cu_comp[s], cu_comp[s + 1] - cu_comp[s]
        vals = list(range(max(q - window_size + 1, cu[s]) - global_start + d_window, q - global_start + d_window + 1))

        def mapped(i):
            ok = 0 <= i < clen and cs + i < len(row_map) and row_map[cs + i] >= 0
            return base + row_map[cs + i] if ok else None

        if compressed_topk is None:
            n = min((q - cu[s] + 1) // ratio, compressed_width, clen) if ratio > 1 and compressed_width > 0 else 0
            vals += [mapped(i) if mapped(i) is not None else -1 for i in range(n)]
        else:
            vals += [m for m in (mapped(int(i)) for i in compressed_topk[r].tolist()) if m is not None]
        idx[r, :len(vals)] = torch.tensor(vals, dtype=torch.int32)
        length[r] = len(vals)
    return idx, length, None
'''


def fake_layout_kernels(site: FakeSite, mode: str = "ok", old_path: bool = False) -> None:
    """A Megatron dev tree whose csa_utils/cp_layout_kernels.py computes on CPU tensors (mode ok; off-by-one: a
    compressed group too many at a rank boundary; tvm: the first call needs tvm_ffi, absent, as the real kernels,
    compiled with --enable-tvm-ffi, did on the H200). old_path: the fd1121b8 location, EAV/csa_cp_layout_kernels.py."""
    fake_megatron_dev(site)
    eav = "megatron/core/transformer/experimental_attention_variant/"
    path = eav + ("csa_cp_layout_kernels.py" if old_path else "csa_utils/cp_layout_kernels.py")
    if old_path:
        (site.root / eav / "csa_utils" / "cp_layout_kernels.py").unlink()
    site.file(path, f"MODE = {mode!r}\n" + FAKE_LAYOUT)
