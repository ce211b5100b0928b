"""The settings probe: the job's Megatron config as the stack's own code builds it, in the target, on the CPU.

Run by the job's interpreter, without weights, a GPU or a process group. Stdlib only at import; it imports the
target's Hydra, verl, Megatron-Bridge, Megatron-Core, torch and transformers inside `answer`, which is its point:

  compose   a verl job's config composed as its @hydra.main would (the composition probe's dsv4probe_hydra_compose);
  verl      verl's own validation: `omega_conf_to_dataclass` of each role's `megatron` node into McoreEngineConfig
            (its __post_init__ validates), and `validate_config` as main_ppo runs it before building;
  model     the model's config.json: `model.path` a local folder or the local Hugging Face cache (offline: the
            probe never reaches the network); a config with `auto_map` needs its own code and is not built (no
            `trust_remote_code`, nothing of the model's folder runs);
  build     verl's own `MegatronEngine._build_tf_config` on a stand-in engine: Megatron-Bridge's AutoBridge and
            DeepSeek-V4 provider (`to_megatron_provider(load_weights=False)`), verl's provider overrides, the
            command's override_transformer_config, then `apply_overrides_and_finalize`, which runs Megatron's
            TransformerConfig.__post_init__. Where verl's engine or the bridge does not import here, the named
            "direct" mode builds Megatron's MLATransformerConfig from the model's config with the bridge's
            decision supplied, and says that the bridge's provider did not run;
  megatron  a Megatron-LM command: Megatron's own parse_args/validate_args and core_transformer_config_from_args.

The GPU facts the stack reads (torch.cuda.is_available/get_device_capability, and the two imports Megatron-Bridge's
fused-DSA decision and Megatron's DSA backend validation run) are supplied inside this process only: the profile's
compute capability, and the imports' outcome as the request gives it, unless a GPU is visible here (then all is
real). Any exception is an answer: its type, message, the deepest frame inside the stack's packages, and the stage.
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_settings_build", HERE).answer)
