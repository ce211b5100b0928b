"""Pinned upstream locations the rules cite (the snapshots the knowledge base was verified against)."""

from dsv4_doctor.api import Source

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


def mlm_at(commit: str, path: str, title: str) -> Source:
    """A Megatron-LM file at another commit than MLM_DEV (verl's tested fd1121b8)."""
    return Source(title, f"https://github.com/NVIDIA/Megatron-LM/blob/{commit}/{path}")


def mlm_change(ref: str, title: str) -> Source:
    """A Megatron-LM commit (hex) or pull request (digits)."""
    what = f"pull/{ref}" if ref.isdigit() else f"commit/{ref}"
    return Source(title, f"https://github.com/NVIDIA/Megatron-LM/{what}")


def measured(path: str, title: str) -> Source:
    """A measurement recorded in this repository (docs/gpu-runs: the commands, logs and reports of a GPU session)."""
    return Source(title, path)


def fe_at(version: str, path: str, line: int) -> Source:
    """A file of the published cuDNN frontend (`cudnn/<path>` in the wheel; `python/cudnn/<path>` in its repository)."""
    return Source(f"nvidia-cudnn-frontend {version} cudnn/{path} L{line}",
                  f"https://github.com/NVIDIA/cudnn-frontend/blob/v{version}/python/cudnn/{path}#L{line}")


def verl_at(path: str, line: int) -> Source:
    """A file of the published verl 0.9.1 (the wheel holds the repository's `verl/` tree)."""
    return Source(f"verl 0.9.1 {path} L{line}", f"https://github.com/verl-project/verl/blob/v0.9.1/{path}#L{line}")


def te_at(path: str, title: str, branch: str = "release_v2.20") -> Source:
    """A file of Transformer Engine on a release branch; `path` under transformer_engine/."""
    return Source(f"TransformerEngine {branch} {title}",
                  f"https://github.com/NVIDIA/TransformerEngine/blob/{branch}/transformer_engine/{path}")
