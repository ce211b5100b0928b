"""What the cudnn-fe checks share: what they read of the environment, Megatron's dependency and q_causal_offsets
texts, and when the frontend is not needed."""

from __future__ import annotations

from dsv4_doctor.api import Profile, StaticRequest
from ._cutedsl_stack import CUTEDSL_STACK, FE
from ._dsa_wrappers import DSA_OWNERS, MEGATRON_DSA_CALLERS
from ._gates import FE_COMPRESSOR, FUSED_COMPRESSOR


STATIC = StaticRequest(distributions=(FE, *CUTEDSL_STACK), modules=("cudnn", "cudnn.csa", "megatron.core", "flash_mla",
                                                                    *FUSED_COMPRESSOR),
                       # The frontend's own entry files too: their hashes are part of a fleet rank's fingerprint
                       # (fleet.drift), which must see a frontend edited in place, whose RECORD still matches.
                       # The compressor files on both sides hold the CC gates cudnn-fe.csa reads.
                       sources=(*MEGATRON_DSA_CALLERS, "cudnn", "cudnn.deepseek_sparse_attention",
                                "cudnn.deepseek_sparse_attention.utils.tensor_conversion", *FUSED_COMPRESSOR,
                                *FE_COMPRESSOR),
                       contains=("non-pre-grouped",), attributes_of=DSA_OWNERS)

# Megatron's dependency check (utils.py L509-548) raises one ValueError naming every fused-DSA package it lacks.
M8_FLASH_MLA = "flash_mla (https://github.com/deepseek-ai/FlashMLA/tree/nv_dev)"
M8_FRONTEND = "cudnn-frontend DSA (nvidia-cudnn-frontend[cutedsl])"


def m8(*items: str) -> str:
    return ("dsa_kernel_backend=cudnn requires fused DSA kernels, but the following packages are not available: "
            f"{', '.join(items)}. Install them or set dsa_kernel_backend=none to use the PyTorch fallback.")


M11 = ("DSv4 CP with ratio-4 fused DSA requires cuDNN Frontend wrappers with q_causal_offsets support; missing from: "
       "{missing}. Install a compatible cuDNN Frontend build or set dsa_kernel_backend='none'.")
R11 = ("CSA fused compressor is enabled and this device is supported, but cudnn-frontend's CSA compressor API is "
       "unavailable ({detail}); keeping the eager compressor.")


def _not_needed(profile: Profile) -> str | None:
    if profile.dsa_backend == "none":
        return "dsa_kernel_backend=none: Megatron uses its PyTorch fallback and never loads the cuDNN frontend"
    return None
