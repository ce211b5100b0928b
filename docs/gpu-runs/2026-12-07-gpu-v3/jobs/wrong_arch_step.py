"""A DSv4 sparse-attention step through FlashMLA, as Megatron d48bd6be calls it (csa_utils/fused_sparse_attention.py
_csa_fwd_flash_mla): flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=..., topk_length=None,
indexer_topk=0). The failure case runs it with a FlashMLA built for SM100 only (FLASH_MLA_DISABLE_SM90=1) first on
PYTHONPATH, on an SM90 GPU: its first kernel launch has no kernel image (FlashMLA's CHECK_CUDA prints the CUDA error;
on 2026-12-04 the process then died of SIGSEGV). Nothing here prints an error text itself."""

import os

import torch
import flash_mla
from flash_mla import flash_mla_sparse_fwd

rank = int(os.environ.get("RANK", "0"))
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
print(f"rank {rank}: torch {torch.__version__}, GPU {torch.cuda.get_device_name()} "
      f"(CC {'.'.join(map(str, torch.cuda.get_device_capability()))}), flash_mla from {flash_mla.__file__}", flush=True)

s_q, h_q, d_qk, d_v, s_kv, topk = 64, 64, 576, 512, 512, 128  # DSv4's shapes; top-k padded to 128 on SM90
gen = torch.Generator().manual_seed(1234)
q = torch.randn(s_q, h_q, d_qk, generator=gen).to(torch.bfloat16).cuda()
kv = torch.randn(s_kv, 1, d_qk, generator=gen).to(torch.bfloat16).cuda()
indices = torch.randint(0, s_kv, (s_q, 1, topk), generator=gen, dtype=torch.int32).cuda()
sink = torch.zeros(h_q, dtype=torch.float32, device="cuda")
print(f"rank {rank}: step 1: sparse attention forward", flush=True)
out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, d_qk ** -0.5, d_v=d_v, attn_sink=sink, topk_length=None,
                                            indexer_topk=0)
torch.cuda.synchronize()
print(f"rank {rank}: step 1 done: out {tuple(out.shape)}, finite {bool(torch.isfinite(out.float()).all())}",
      flush=True)
