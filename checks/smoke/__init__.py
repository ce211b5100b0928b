"""The smoke forward: kernels run on the GPU (or the CPU) against independent float32 references.

One module per tier: `thd_cp` (contiguous-CP THD attention with torch's kernels, and the real DSv4 layer when
Megatron is installed). The probe script that runs in the target interpreter lives beside them.
"""

from .thd_cp import CHECKS as _THD_CP

CHECKS = [*_THD_CP]
