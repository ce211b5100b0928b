"""What the kernel smoke's sub-runs share: the THD layout per contiguous CP rank, the skip, the stack's
versions.

A part of the kernel smoke probe (dsv4probe_kernels.py), loaded by path (dsv4probe_common.load_module).
"""

import os

from dsv4probe_common import load_module  # in sys.modules: it loads this part

HERE = os.path.dirname(os.path.realpath(__file__))
load_module("dsv4ref", HERE)
import dsv4ref as ref  # just loaded by path, read from sys.modules

ROWS_PER_RANK = 128
RATIO = 4  # the ratio-4 CSA layers are the ones with an indexer
# DSv4's indexer has 64 heads (one KV head, head dim 128). Frontend 1.27.0's SM90 indexer accepts H in {16, 32, 64},
# 1.26.0's only {32, 64} (16 raised "qhead_per_kv_head must be one of (32, 64), got 16" on an H200: a shape this
# doctor chose, not a kernel defect), and the SM100 path {32, 64}: 64 runs everywhere. q is 128 x 64 x 128 bf16 (2 MiB).
HEADS, HEAD_DIM = 64, 128
SCORE_TOLERANCE = 1e-2  # absolute, on float32 scores of magnitude ~10-20 from bf16 inputs (observed 2.9e-6 at 16 heads)
SEED = 4321


class Skip(Exception):
    """A sub-run that cannot run here: why, the rule that reports it (where known), the exception behind it."""

    def __init__(self, why, rule=None, exc=None):
        Exception.__init__(self, why)
        self.rule, self.exc = rule, exc


def layout(n_ranks, rows=ROWS_PER_RANK):
    """A packed THD buffer for contiguous ranks: a sequence shorter than a rank, one crossing a rank boundary, one
    spanning several ranks (when there are 3 or more), tail padding. Ragged lengths (as Megatron's own test's), so
    that sequence starts and rank boundaries fall inside compressed groups. Returns (lens, cu, total)."""
    total = n_ranks * rows
    wanted = [23, rows + 61, 2 * rows + 5, 51, 37]
    lens = []
    for n in wanted:
        if sum(lens) + n <= total - 16:
            lens.append(n)
    return lens, ref.cumsum(lens), total


def _version(module_name):
    from dsv4probe_common import installed_version

    return installed_version(module_name)


# The seed incident's packages besides the frontend (an H100 job went NaN until the frontend and tvm-ffi were
# reinstalled; the CuTe DSL compiles both the frontend's DSA kernels and Megatron's layout kernels).
STACK_PACKAGES = ("apache-tvm-ffi", "nvidia-cutlass-dsl")


def _stack_versions():
    return {name: _version(name) for name in STACK_PACKAGES}
