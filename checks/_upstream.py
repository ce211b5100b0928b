"""Pinned upstream locations the rules cite (the snapshots the knowledge base was verified against)."""

from dsv4_doctor.model import Source

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
