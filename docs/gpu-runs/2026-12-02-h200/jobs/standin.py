"""A stand-in for the training job: proves that preflight exec'd it (same pid as the doctor, its argv, its env)."""
import os
import sys

print(f"stand-in job started: pid {os.getpid()}, argv {sys.argv[1:]}, "
      f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}, "
      f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}", flush=True)
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
