#!/bin/sh
# dsv4-doctor 0.2.0 fix plan (cp=2 dsa_backend=cudnn gpu_arch=9.0).
# Review it before running it. Manual steps and job settings are comments: read them.
set -eu
PY=/opt/torch/.venv/bin/python3

# Job settings: for the training command and the job script; not run by this script or by --apply [job.cp-args, job.env]:
#   CP_ARGS for CP 2, in the training command's Hydra overrides (the full block; verl's DSv4 example):
#     ++actor_rollout_ref.actor.megatron.override_transformer_config.cp_partition_mode=contiguous
#     ++actor_rollout_ref.actor.megatron.override_transformer_config.sequence_packing_scheduler=dp_balanced
#     ++actor_rollout_ref.actor.megatron.override_transformer_config.max_seqlen_per_dp_cp_rank=6145
#   the command lacks 3 of them
#   max_seqlen_per_dp_cp_rank = ceil(12289 / 2) = 6145, from 2048 + 10241 (data.max_prompt_length + data.max_response_length)
#   verl's example script computes (max_prompt_length + max_response_length) / CP with shell division, which rounds down: when the sum is not a multiple of CP the longest sample does not fit; rounded up here
#   In the job script, before the training command:
#     export NCCL_NVLS_ENABLE=0
#     export CUDA_DEVICE_MAX_CONNECTIONS=1
