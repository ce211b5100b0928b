"""One training step of the smallest DSv4 hybrid attention layer, fused DSA (dsa_kernel_backend=cudnn: the cuDNN
frontend's indexer and FlashMLA), wrapped in Megatron d48bd6be's DistributedDataParallel with
check_for_nan_in_grad=True, as a Megatron job runs it (--check-for-nan-in-loss-and-grad). The layer's settings are the
doctor's fused tier-2 build (checks/smoke/dsv4probe_smoke_tolerances.py fused_config), which ran on this GPU. One
element of the layer's input (the hidden states entering the fused DSA path) is set to NaN at INJECT_TOKEN
(env, default 100; "off" injects nothing). The NaN reaches the gradients; Megatron's own check
(distributed/param_and_grad_buffer.py check_grads -> rerun_state_machine.validate_result) raises before the
data-parallel collective. Nothing here prints an error text itself."""

import logging
import os

import torch
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
rank = int(os.environ.get("RANK", "0"))
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
device = torch.device("cuda")

import transformer_engine.pytorch  # noqa: E402,F401  (Megatron's TE classes are Mock stand-ins without it)
from megatron.core import parallel_state  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider  # noqa: E402
from megatron.core.models.gpt.experimental_attention_variant_module_specs import (  # noqa: E402
    get_dsv4_hybrid_module_spec_for_backend)
from megatron.core.packed_seq_params import PackedSeqParams  # noqa: E402
from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer.spec_utils import build_module  # noqa: E402
from megatron.core.transformer.transformer_config import MLATransformerConfig  # noqa: E402

dist.init_process_group("nccl")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
torch.manual_seed(1234)
model_parallel_cuda_manual_seed(1234)
HIDDEN, LENS = 512, [256, 128, 384]
config = MLATransformerConfig(
    num_layers=1, hidden_size=HIDDEN, num_attention_heads=64, num_query_groups=64, kv_channels=512,
    use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16, add_bias_linear=False, q_lora_rank=128,
    kv_lora_rank=448, qk_head_dim=448, qk_pos_emb_head_dim=64, v_head_dim=512, o_groups=4, o_lora_rank=128,
    rope_type="rope", rotary_base=10000, rotary_percent=1.0, multi_latent_attention=True,
    experimental_attention_variant="dsv4_hybrid", csa_compress_ratios=[4], csa_window_size=128,
    dsa_indexer_n_heads=64, dsa_indexer_head_dim=128, dsa_indexer_topk=128, dsa_indexer_loss_coeff=0.01,
    dsa_indexer_use_sparse_loss=True, dsa_kernel_backend="cudnn", apply_rope_fusion=False, normalization="RMSNorm",
    qk_layernorm=True, layernorm_epsilon=1e-6, gradient_accumulation_fusion=False)
spec = get_dsv4_hybrid_module_spec_for_backend(config=config, backend=TESpecProvider())
layer = build_module(spec, config=config, layer_number=1,
                     pg_collection=ProcessGroupCollection.use_mpu_process_groups()).to(device)
model = DistributedDataParallel(config=config, ddp_config=DistributedDataParallelConfig(check_for_nan_in_grad=True),
                                module=layer)
model.train()
print(f"rank {rank}: DSv4 hybrid attention layer (dsa_kernel_backend=cudnn) in Megatron DDP, "
      f"check_for_nan_in_grad=True", flush=True)

cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], dtype=torch.int32, device=device)
packed = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu,
                         cu_seqlens_kv_padded=cu, max_seqlen_q=max(LENS), max_seqlen_kv=max(LENS),
                         cp_partition_mode="contiguous")
gen = torch.Generator().manual_seed(1235)
hidden = torch.randn(sum(LENS), 1, HIDDEN, generator=gen).to(torch.bfloat16).to(device)
inject = os.environ.get("INJECT_TOKEN", "100")
if inject != "off":
    hidden[int(inject), 0, 7] = float("nan")  # the fused DSA path's input: one token's hidden state
hidden.requires_grad_(True)
for iteration in (1, 2):
    model.zero_grad_buffer()
    output, _ = model(hidden_states=hidden, attention_mask=None, packed_seq_params=packed)
    loss = output.float().pow(2).mean()
    print(f"rank {rank}: iteration {iteration}: forward done", flush=True)
    loss.backward()
    model.finish_grad_sync()  # Megatron's gradient check runs here, before the data-parallel collective
    # the loss is logged after the step, as Megatron's training_log does (a NaN loss line never comes first)
    print(f"rank {rank}: iteration {iteration}: loss {loss.item():.6f}; grad sync done", flush=True)
dist.destroy_process_group()
