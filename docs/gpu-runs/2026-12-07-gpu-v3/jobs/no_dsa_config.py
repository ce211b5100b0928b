"""A DSv4 Megatron job's model config with dsa_kernel_backend=cudnn where the cuDNN frontend's DSA namespace does not
import. HIDE_MODULES (env, comma-separated; the case sets "cudnn") hides installed top-level packages the way the
import system itself blocks one: a None entry in sys.modules makes every `import cudnn` / `from cudnn import DSA`
raise ModuleNotFoundError, as on a node where nvidia-cudnn-frontend is not installed. Megatron d48bd6be's own check
then decides (TransformerConfig.__post_init__ -> utils._validate_dsa_kernel_backend_dependencies, which catches the
ImportError and raises ValueError). Nothing here prints an error text itself."""

import os
import sys

for name in filter(None, os.environ.get("HIDE_MODULES", "").split(",")):
    sys.modules[name] = None  # type: ignore[assignment]  # the import system's documented block

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

rank = int(os.environ.get("RANK", "0"))
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
import transformer_engine.pytorch  # noqa: E402,F401
from megatron.core import parallel_state  # noqa: E402
from megatron.core.transformer.transformer_config import MLATransformerConfig  # noqa: E402

dist.init_process_group("nccl")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
print(f"rank {rank}: building the DSv4 model config (experimental_attention_variant=dsv4_hybrid, "
      f"dsa_kernel_backend=cudnn)", flush=True)
config = MLATransformerConfig(
    num_layers=1, hidden_size=512, num_attention_heads=64, num_query_groups=64, kv_channels=512,
    use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16, add_bias_linear=False, q_lora_rank=128,
    kv_lora_rank=448, qk_head_dim=448, qk_pos_emb_head_dim=64, v_head_dim=512, o_groups=4, o_lora_rank=128,
    rope_type="rope", rotary_base=10000, rotary_percent=1.0, multi_latent_attention=True,
    experimental_attention_variant="dsv4_hybrid", csa_compress_ratios=[4], csa_window_size=128,
    dsa_indexer_n_heads=64, dsa_indexer_head_dim=128, dsa_indexer_topk=128, dsa_indexer_loss_coeff=0.01,
    dsa_indexer_use_sparse_loss=True, dsa_kernel_backend="cudnn", apply_rope_fusion=False, normalization="RMSNorm",
    qk_layernorm=True, layernorm_epsilon=1e-6, gradient_accumulation_fusion=False)
print(f"rank {rank}: config built: dsa_kernel_backend={config.dsa_kernel_backend}", flush=True)
dist.destroy_process_group()
