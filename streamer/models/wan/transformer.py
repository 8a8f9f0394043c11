"""Block-causal, KV-cached Wan: diffusers' `WanTransformer3DModel` run through our attention processor.

Nothing of diffusers' model file is copied; its forward runs unchanged. Two parts of an instance
are swapped:
- `rope` becomes `FramePositionRope`: Wan's 3-axis RoPE at each sample's own temporal positions
  (the frame's index in its cache view), where diffusers always starts every clip at frame 0;
- every block's self-attention (`attn1`) gets `CausalSelfAttention`, which rotates q/k and then
  either attends through a KV cache (`CacheBatch.attend`: the chunk's keys/values go into the
  session's slot, the chunk attends over [history, chunk]) or, for a whole clip, with a
  block-causal mask (each chunk sees itself and earlier chunks): the reference the cache must equal.
Cross-attention, modulation, FFN and head are diffusers' own. Per-sample timesteps use diffusers'
(B,) timestep path; per-frame ones its per-token (B, seq_len) path (Wan 2.2's).

Keys enter the cache already rotated at their view position (see streamer/cache/kv_pool.py);
`WanRope.shift_time` re-indexes them when the window rolls.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from diffusers import WanTransformer3DModel
from torch import nn

from ...cache.kv_pool import CacheBatch
from .config import NUM_TRAIN_TIMESTEPS


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of x (..., Dh) by angles with cos/sin (..., Dh/2)."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2).type_as(x)


class WanRope:
    """Wan's RoPE: head_dim split into (time, row, column) parts, as diffusers and the original lay it out."""

    def __init__(self, head_dim: int, theta: float = 10000.0):
        hw = 2 * (head_dim // 6)
        self.dims = (head_dim - 2 * hw, hw, hw)
        # float64 like diffusers' table, so angles at large positions stay exact before cos/sin.
        self.inv_freq = [1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d) for d in self.dims]

    def cos_sin(self, frames: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        """frames (B, F) temporal positions -> cos, sin (B, F*rows*cols, 1, Dh/2) float32."""
        dev = frames.device
        inv_t, inv_h, inv_w = (f.to(dev) for f in self.inv_freq)
        b, f = frames.shape
        t = frames.double()[..., None] * inv_t  # (B, F, t/2)
        h = torch.arange(rows, device=dev, dtype=torch.float64)[:, None] * inv_h  # (rows, h/2)
        w = torch.arange(cols, device=dev, dtype=torch.float64)[:, None] * inv_w  # (cols, w/2)
        shape = (b, f, rows, cols)
        ang = torch.cat([
            t[:, :, None, None].expand(*shape, -1),
            h[None, None, :, None].expand(*shape, -1),
            w[None, None, None, :].expand(*shape, -1),
        ], dim=-1).reshape(b, f * rows * cols, 1, -1)  # fmt: skip
        return ang.cos().float(), ang.sin().float()

    def shift_time(self, x: torch.Tensor, frames: float) -> torch.Tensor:
        """Re-index rotated keys x (..., Dh) by `frames` positions in time (negative: earlier)."""
        inv_t = self.inv_freq[0].to(x.device)
        ang = torch.cat([frames * inv_t, inv_t.new_zeros((self.dims[1] + self.dims[2]) // 2)])
        return apply_rope(x, ang.cos().float(), ang.sin().float())


@dataclass
class AttentionPlan:
    """How the self-attention of one forward sees its context."""

    frames: torch.Tensor  # (B, F) temporal RoPE positions of the input's frames
    cache: CacheBatch | None = None  # attend over each sample's cache slot
    mask: torch.Tensor | None = None  # (N, N) bool, True = may attend (whole-clip forward)


class _PlanBox:
    """The plan of the forward in progress, shared by the RoPE module and the processors."""

    plan: AttentionPlan | None = None


class FramePositionRope(nn.Module):
    """Replaces diffusers' `rope`: cos/sin at the plan's frame positions (0..F-1 without a plan)."""

    def __init__(self, rope: WanRope, patch_size: tuple[int, int, int], box: _PlanBox):
        super().__init__()
        self.rope, self.patch_size, self.box = rope, tuple(patch_size), box

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, _, f, h, w = hidden_states.shape  # (B, C, F, h, w) latents
        pt, ph, pw = self.patch_size
        plan = self.box.plan
        frames = plan.frames if plan is not None else torch.arange(f // pt).expand(b, -1)
        return self.rope.cos_sin(frames.to(hidden_states.device), h // ph, w // pw)


class CausalSelfAttention:
    """Attention processor for a block's attn1: RoPE at cache positions, then cache or mask attention."""

    def __init__(self, layer: int, box: _PlanBox):
        self.layer, self.box = layer, box

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        if getattr(attn, "fused_projections", False):
            raise RuntimeError("CausalSelfAttention needs unfused q/k/v projections")
        heads = attn.heads
        q = attn.norm_q(attn.to_q(hidden_states)).unflatten(2, (heads, -1))  # (B, N, H, Dh)
        k = attn.norm_k(attn.to_k(hidden_states)).unflatten(2, (heads, -1))
        v = attn.to_v(hidden_states).unflatten(2, (heads, -1))
        if rotary_emb is not None:
            q, k = apply_rope(q, *rotary_emb), apply_rope(k, *rotary_emb)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, N, Dh)
        plan = self.box.plan
        if plan is not None and plan.cache is not None:
            out = plan.cache.attend(self.layer, q, k, v)
        else:
            mask = plan.mask if plan is not None else None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.transpose(1, 2).flatten(2).type_as(q)  # (B, N, H*Dh)
        return attn.to_out[1](attn.to_out[0](out))


def block_causal_mask(frames: int, block: int, tokens_per_frame: int, device=None) -> torch.Tensor:
    """(N, N) bool for a clip of `frames` frames: a token sees every token of its own and earlier blocks."""
    chunk = torch.arange(frames, device=device) // block
    allowed = chunk[None, :] <= chunk[:, None]  # (F, F) query frame x key frame
    return allowed.repeat_interleave(tokens_per_frame, 0).repeat_interleave(tokens_per_frame, 1)


class CausalWanTransformer:
    """A diffusers Wan transformer made block-causal; call it on (B, F, C, h, w) latents."""

    def __init__(self, net: WanTransformer3DModel):
        cfg = net.config
        if cfg.image_dim is not None or cfg.added_kv_proj_dim is not None:
            raise ValueError("image-to-video Wan transformers are not supported (text-to-video only)")
        self.net = net
        self.patch_size = tuple(cfg.patch_size)
        self.rope = WanRope(cfg.attention_head_dim)
        self._box = _PlanBox()
        net.rope = FramePositionRope(self.rope, self.patch_size, self._box)
        for i, block in enumerate(net.blocks):
            block.attn1.set_processor(CausalSelfAttention(i, self._box))

    @property
    def device(self) -> torch.device:
        return self.net.patch_embedding.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.net.patch_embedding.weight.dtype

    def tokens_per_frame(self, h: int, w: int) -> int:
        return (h // self.patch_size[1]) * (w // self.patch_size[2])

    def rotate_back(self, keys: torch.Tensor, frames: int) -> torch.Tensor:
        """The pool's re-indexing hook: keys (..., Dh) move `frames` positions earlier."""
        return self.rope.shift_time(keys, -float(frames))

    def __call__(self, x: torch.Tensor, t: torch.Tensor, text: torch.Tensor, *, cache: CacheBatch | None = None,
                 block_frames: int | None = None) -> torch.Tensor:
        """Flow prediction for latents x (B, F, C, h, w) at times t (B,) or (B, F) in [0, 1].

        text (B, L, text_dim): encoder states. With `cache`, x is one chunk at the cache's positions;
        without, x is a whole clip from frame 0, block-causal over `block_frames`-frame chunks (None: the
        whole clip is one block, i.e. diffusers' bidirectional Wan).
        """
        b, f, _, h, w = x.shape
        dev, dtype = self.device, self.dtype
        p = self.tokens_per_frame(h, w)
        if cache is not None:
            plan = AttentionPlan(frames=cache.frame_positions().to(dev), cache=cache)
        else:
            mask = block_causal_mask(f, block_frames or f, p, dev) if block_frames else None
            plan = AttentionPlan(frames=torch.arange(f, device=dev).expand(b, -1), mask=mask)
        t = t.to(dev, torch.float32) * NUM_TRAIN_TIMESTEPS
        if t.ndim == 2:  # per frame: one value per sample is diffusers' cheap path
            t = t[:, 0] if bool((t == t[:, :1]).all()) else t.repeat_interleave(p, dim=1)  # (B,) | (B, F*P)
        self._box.plan = plan
        try:
            out = self.net(
                hidden_states=x.to(dev, dtype).permute(0, 2, 1, 3, 4),  # (B, C, F, h, w)
                timestep=t,
                encoder_hidden_states=text.to(dev, dtype),
                return_dict=False,
            )[0]
        finally:
            self._box.plan = None
        return out.permute(0, 2, 1, 3, 4)  # (B, F, C, h, w)
