"""A Megatron dev tree whose RoPE modules compute on CPU tensors with the upstream signatures (Megatron-LM d48bd6be):
fusions/fused_mla_yarn_rope_apply.py (fused_mla_rope_inplace: the triton kernel's arithmetic, in torch),
models/common/embeddings (RotaryEmbedding, YarnRotaryEmbedding without yarn's ramp, rope_utils.apply_rotary_pos_emb's
THD path) and csa_utils/cp_utils.py (the two CP RoPE wrappers). The real kernel needs triton and a GPU: these are the
fakes the kernel smoke's rope sub-run is tested against on the CPU (states no release shows: a NaN, an off-by-one
position)."""

from __future__ import annotations

from conftest import FakeSite

EMB = '''
import torch


class RotaryEmbedding(torch.nn.Module):
    def __init__(self, kv_channels, rotary_percent, rotary_interleaved=False, seq_len_interpolation_factor=None,
                 rotary_base=10000, rope_scaling=False, rope_scaling_factor=8.0, use_cpu_initialization=False,
                 cp_group=None):
        super().__init__()
        dim = kv_channels
        if rotary_percent < 1.0:
            dim = int(dim * rotary_percent)
        self.inv_freq = 1.0 / (rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))

    def get_emb(self, max_seq_len, offset=0):
        seq = torch.arange(max_seq_len, dtype=torch.float32) + offset
        freqs = torch.outer(seq, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]

    def forward(self, max_seq_len, offset=0, packed_seq=False, cp_group=None):
        return self.get_emb(max_seq_len, offset)

    def get_cached_cos_sin(self, seq_len, offset=0, dtype=torch.float32, packed_seq=False, cp_group=None,
                           mscale=None):
        emb = self.get_emb(seq_len, offset)
        return emb.cos().to(dtype).contiguous(), emb.sin().to(dtype).contiguous()


class YarnRotaryEmbedding(RotaryEmbedding):
    def __init__(self, kv_channels, rotary_percent=1.0, rotary_interleaved=False, seq_len_interpolation_factor=None,
                 rotary_base=10000.0, use_cpu_initialization=False, scaling_factor=1.0,
                 original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                 mscale_all_dim=0.0, correction_range_round_to_int=True, cp_group=None):
        RotaryEmbedding.__init__(self, kv_channels, 1.0, rotary_base=rotary_base)
        self.inv_freq = self.inv_freq / scaling_factor

    def forward(self, max_seq_len, offset=0, packed_seq=False, cp_group=None):
        return self.get_emb(max_seq_len, offset), 1.0
'''

ROPE_UTILS = '''
import torch


def _apply_rotary_pos_emb_bshd(t, freqs, rotary_interleaved=False, mla_rotary_interleaved=False, mscale=1.0,
                               inverse=False, mla_output_remove_interleaving=False, multi_latent_attention=None):
    if freqs.dim() == t.dim() + 1 and freqs.size(-2) == 1:
        freqs = freqs.squeeze(-2)
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    if mla_rotary_interleaved:
        t = torch.cat((t[..., 0::2], t[..., 1::2]), dim=-1)
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)
    if inverse:
        sin_ = -sin_
    x1, x2 = torch.chunk(t, 2, dim=-1)
    t = (t * cos_) + (torch.cat((-x2, x1), dim=-1) * sin_)
    if mla_rotary_interleaved and mla_output_remove_interleaving:
        x1, x2 = torch.chunk(t, 2, dim=-1)
        t = torch.stack((x1, x2), dim=-1).flatten(start_dim=-2)
    return torch.cat((t, t_pass), dim=-1)


def apply_rotary_pos_emb(t, freqs, config, cu_seqlens=None, mscale=1.0, cp_group=None, mla_rotary_interleaved=False,
                         inverse=False, mla_output_remove_interleaving=False, max_seqlen=None):
    assert not config.apply_rope_fusion and cu_seqlens is not None and cp_group.size() == 1
    assert max_seqlen is not None
    cu = cu_seqlens.to(torch.int64)
    pos = torch.arange(t.shape[0], dtype=torch.int64)
    seq = (torch.searchsorted(cu, pos, right=True) - 1).clamp(min=0, max=cu.shape[0] - 2)
    freq_pos = (pos - cu[seq]).clamp(min=0, max=freqs.shape[0] - 1)
    return _apply_rotary_pos_emb_bshd(t.unsqueeze(1), freqs[freq_pos], rotary_interleaved=config.rotary_interleaved,
                                      mla_rotary_interleaved=mla_rotary_interleaved, mscale=mscale, inverse=inverse,
                                      mla_output_remove_interleaving=mla_output_remove_interleaving).squeeze(1)
'''

FUSED = '''
import torch

HAVE_TRITON = True
MODE = {mode!r}


def _positions(total, cu_seqlens, position_ids):
    if position_ids is not None:
        return position_ids.to(torch.int64)
    cu = cu_seqlens.to(torch.int64)
    pos = torch.arange(total, dtype=torch.int64)
    seq = (torch.searchsorted(cu, pos, right=True) - 1).clamp(min=0, max=cu.shape[0] - 2)
    return pos - cu[seq]


def fused_mla_rope_inplace(t, cos, sin, nope_dim, emb_dim, cu_seqlens_q=None, cp_rank=0, cp_size=1,
                           rotary_interleaved=False, inverse=False, remove_interleaving=False, position_ids=None):
    # The kernel's arithmetic (_mla_rope_fwd_inplace_kernel), differentiable instead of its own backward kernel.
    assert t.dim() == 3 and cu_seqlens_q is not None and cp_size == 1 and remove_interleaving
    assert t.shape[-1] == nope_dim + emb_dim and emb_dim % 4 == 0
    pos = _positions(t.shape[0], cu_seqlens_q, position_ids)
    if MODE == "off-by-one":
        pos = (pos + 1).clamp(max=cos.shape[0] - 1)
    c = cos.reshape(cos.shape[0], -1)[pos][:, None, :]
    s = sin.reshape(sin.shape[0], -1)[pos][:, None, :]
    if inverse:
        s = -s
    half = emb_dim // 2
    x1, x2 = t[..., nope_dim::2], t[..., nope_dim + 1::2]
    left = x1 * c[..., :half] - x2 * s[..., :half]
    right = x2 * c[..., half:] + x1 * s[..., half:]
    if MODE == "nan":
        left = left.clone()
        left[7, 0, 3] = float("nan")
    rotated = torch.stack((left, right), dim=-1).flatten(start_dim=-2)
    return torch.cat((t[..., :nope_dim], rotated), dim=-1)
'''

CP_UTILS = '''
import torch

from megatron.core.fusions.fused_mla_yarn_rope_apply import fused_mla_rope_inplace
from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd


def _thd_cp_position_ids(cu_seqlens_padded, global_start, local_rows):
    rows = torch.arange(int(global_start), int(global_start) + int(local_rows), dtype=cu_seqlens_padded.dtype)
    ids = torch.bucketize(rows, cu_seqlens_padded[1:], out_int32=True, right=True).clamp_max(
        cu_seqlens_padded.shape[0] - 2)
    starts, ends = cu_seqlens_padded[ids], cu_seqlens_padded[ids + 1]
    return torch.where((rows >= starts) & (rows < ends), rows - starts, 0)


def apply_thd_cp_local_rope_fused(x, cos, sin, nope_dim, pos_dim, cu_seqlens_padded, global_start, inverse=False):
    position_ids = _thd_cp_position_ids(cu_seqlens_padded, global_start, x.shape[0])
    return fused_mla_rope_inplace(x, cos, sin, nope_dim, pos_dim, cu_seqlens_q=cu_seqlens_padded, inverse=inverse,
                                  remove_interleaving=True, position_ids=position_ids)


def apply_thd_cp_local_rope_unfused(x, rotary_pos_emb, nope_dim, pos_dim, cu_seqlens_padded, global_start, config,
                                    inverse=False):
    position_ids = _thd_cp_position_ids(cu_seqlens_padded, global_start, x.shape[0])
    freqs = torch.index_select(rotary_pos_emb, 0, position_ids.long())
    content, rotary = torch.split(x, [nope_dim, pos_dim], dim=-1)
    rotary = _apply_rotary_pos_emb_bshd(rotary, freqs, rotary_interleaved=config.rotary_interleaved, mscale=1.0,
                                        mla_rotary_interleaved=True, inverse=inverse,
                                        mla_output_remove_interleaving=True)
    return torch.cat((content, rotary), dim=-1)
'''


def fake_megatron_rope(site: FakeSite, mode: str = "ok") -> None:
    """mode: "ok"; "nan" (one NaN in the fused output); "off-by-one" (the fused kernel reads the next position's
    cos/sin row, as a kernel reading the wrong table row would); "no-triton" (HAVE_TRITON false, as Megatron's
    module sets it without triton)."""
    site.dist("megatron-core", "0.19.0")
    eav = "megatron/core/transformer/experimental_attention_variant/"
    for package in ("megatron", "megatron/core", "megatron/core/fusions", "megatron/core/models",
                    "megatron/core/models/common", "megatron/core/transformer", eav, eav + "csa_utils"):
        site.file(package.rstrip("/") + "/__init__.py", "")
    site.file("megatron/core/models/common/embeddings/__init__.py", "from .rotary import RotaryEmbedding, "
              "YarnRotaryEmbedding\nfrom .rope_utils import apply_rotary_pos_emb\n")
    site.file("megatron/core/models/common/embeddings/rotary.py", EMB)
    site.file("megatron/core/models/common/embeddings/rope_utils.py", ROPE_UTILS)
    fused = FUSED.replace("{mode!r}", repr(mode))
    if mode == "no-triton":
        fused = fused.replace("HAVE_TRITON = True", "HAVE_TRITON = False")
    site.file("megatron/core/fusions/fused_mla_yarn_rope_apply.py", fused)
    site.file(eav + "csa_utils/cp_utils.py", CP_UTILS)
