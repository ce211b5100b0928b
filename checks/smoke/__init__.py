"""The smoke forward: kernels run on the GPU (or the CPU) against independent float32 references.

One module per tier: `thd_cp` (contiguous-CP THD attention with torch's kernels, and the real DSv4 layer when
Megatron is installed) and `kernels` (the DSv4 stack's own CP kernels: the cuDNN frontend's DSA indexer, Megatron's
CuTe-DSL CP layout kernels, the fused CSA compressor, FlashMLA). Beside them: `_tier2` judges tier 2's answer,
`_causes` maps a failure to the check that reports its cause, and the probe scripts that run in the target interpreter
with their references (dsv4ref.py). The checks import only dsv4_doctor.api and the rulebook's own modules; the probe
scripts import nothing of the doctor (they run in the target interpreter, started by the launcher).
"""

from .kernels import CHECKS as _KERNELS
from .thd_cp import CHECKS as _THD_CP

CHECKS = [*_THD_CP, *_KERNELS]
