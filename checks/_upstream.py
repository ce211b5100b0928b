"""Pinned upstream locations the rules cite (the snapshots the knowledge base was verified against)."""

from dsv4_doctor.model import Fix, Source

MLM_DEV = "d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1"  # NVIDIA/Megatron-LM dev, 2026-08-21
MLM_VERL_TESTED = "fd1121b8ff7e3a4f83a28d35aed172d7bc0260e1"  # the dev commit verl's DSv4 example was tested with
EAV = "megatron/core/transformer/experimental_attention_variant/"
VERL = "1dda039b"  # verl-project/verl main snapshot


def mlm(path: str, lines: str = "", title: str | None = None) -> Source:
    anchor = f"#L{lines.replace('-', '-L')}" if lines else ""
    return Source(title or f"Megatron-LM dev {path}" + (f" L{lines}" if lines else ""),
                  f"https://github.com/NVIDIA/Megatron-LM/blob/{MLM_DEV}/{path}{anchor}")


def gh(repo: str, what: str, title: str) -> Source:
    return Source(title, f"https://github.com/{repo}/{what}")


def pypi(project: str, version: str, title: str) -> Source:
    return Source(title, f"https://pypi.org/project/{project}/{version}/")


MLM_INSTALL = (
    f'pip install --no-deps "megatron-core @ git+https://github.com/NVIDIA/Megatron-LM.git@{MLM_VERL_TESTED}"'
)
TE_INSTALL = 'pip install --no-build-isolation "transformer-engine[pytorch,core_cu13]==2.16.1"'
FE_INSTALL = "pip install --force-reinstall --no-deps nvidia-cudnn-frontend==1.27.0"
TVM_FFI_INSTALL = "pip install --no-deps apache-tvm-ffi==0.1.11"
CUTLASS_INSTALL = 'pip install "nvidia-cutlass-dsl[cu13]==4.5.2"'

# Not a command: a job setting. Every fused-DSA rule can offer it.
FIX_BACKEND_NONE = Fix("Or set dsa_kernel_backend=none (Megatron's PyTorch fallback; check again with --dsa-backend "
                       "none)", [])
