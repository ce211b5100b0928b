"""dsv4-doctor: preflight checks for DeepSeek-V4 context-parallel training with verl and Megatron-Core."""

__version__ = "0.2.0"
