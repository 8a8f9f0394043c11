"""Whole-clip attention context: the block-causal mask used in training and in the tests.

Every frame of chunk i may see all frames of chunks <= i (block-causal). In training each
chunk carries its own noise level (diffusion forcing), so the same forward teaches a chunk to
denoise under a clean-ish past (what the cache holds at inference: chunks committed at t = 0)
and to carry on from a past that is itself uncertain.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def block_causal_frame_mask(num_frames: int, frames_per_chunk: int) -> torch.Tensor:
    """-> bool (T, T): query frame (row) may attend to key frame (column)."""
    chunk = torch.arange(num_frames) // frames_per_chunk
    return chunk[None, :] <= chunk[:, None]


class MaskedContext:
    """Attention over a whole sequence with a frame-level mask, expanded to tokens."""

    def __init__(self, positions: torch.Tensor, frame_mask: torch.Tensor, tokens_per_frame: int):
        self.positions = positions  # (B, T)
        p = tokens_per_frame
        self.mask = frame_mask.repeat_interleave(p, 0).repeat_interleave(p, 1).to(positions.device)

    def frame_positions(self) -> torch.Tensor:
        return self.positions

    def subset(self, rows: list[int]) -> MaskedContext:
        sub = MaskedContext.__new__(MaskedContext)
        sub.positions, sub.mask = self.positions[rows], self.mask
        return sub

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


def block_causal_context(batch: int, num_frames: int, frames_per_chunk: int,
                         tokens_per_frame: int) -> MaskedContext:
    pos = torch.arange(num_frames)[None].expand(batch, -1)
    mask = block_causal_frame_mask(num_frames, frames_per_chunk)
    return MaskedContext(pos, mask, tokens_per_frame)
