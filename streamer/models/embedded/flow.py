"""Flow-matching training inputs shared by training (train.py) and distillation (distill.py).

x_t = (1 - t) x0 + t noise, velocity target noise - x0; each frame carries its own t and prompt.
"""

from __future__ import annotations

import torch

from .config import EmbeddedConfig
from .dit import CausalDiT
from .masks import block_causal_context

# Noise levels a recycled past is re-estimated from (`recycled_past`): from a mild blur to a guess.
RECYCLE_TIMES = (0.25, 0.75)


def clip_text(dit: CausalDiT, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """tokens (B, T, L), each frame's prompt -> per-frame text conditioning, each prompt encoded once."""
    b, t = tokens.shape[:2]
    uniq, inverse = torch.unique(tokens.reshape(b * t, -1), dim=0, return_inverse=True)
    enc = dit.encode_text(uniq)
    return {k: v[inverse].reshape(b, t, *v.shape[1:]) for k, v in enc.items()}


def clip_velocity(net: CausalDiT, x_t: torch.Tensor, t_frame: torch.Tensor, data: dict[str, torch.Tensor],
                  cfg: EmbeddedConfig) -> torch.Tensor:
    """`net`'s velocity for every frame of clips x_t (B, T, C, h, w) at per-frame times t_frame,
    under the clips' own prompts, actions and controls and the block-causal mask."""
    b, t = x_t.shape[:2]
    return net(x_t, t_frame, clip_text(net, data["tokens"]), data["actions"], data["controls"],
               block_causal_context(b, t, cfg.frames_per_chunk, cfg.dit.tokens_per_frame))


def sample_times(cfg: EmbeddedConfig, shape: tuple[int, ...]) -> torch.Tensor:
    """Flow times for chunks being denoised: half on the sampling schedule, half logit-normal.

    Logit-normal leans to mid times and almost never draws t near 1, yet inference starts every
    chunk at t = 1 and visits only the schedule's few times; the layout (where objects are, which
    face) is decided at that first step.
    """
    grid = torch.tensor(cfg.timesteps)
    on_grid = grid[torch.randint(len(grid), shape)]
    return torch.where(torch.rand(shape) < 0.5, on_grid, torch.sigmoid(torch.randn(shape) * 1.2))


def noised(x0: torch.Tensor, t_frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 (B, T, C, h, w) at per-frame times t_frame (B, T) -> (x_t, the noise drawn)."""
    noise = torch.randn_like(x0)
    t = t_frame[..., None, None, None]
    return (1 - t) * x0 + t * noise, noise


def recycled_past(dit: CausalDiT, x0: torch.Tensor, frames: torch.Tensor, data: dict[str, torch.Tensor],
                  cfg: EmbeddedConfig) -> torch.Tensor:
    """x0 (B, T, C, h, w) with the frames `frames` (B, T, bool) replaced by `dit`'s own estimate
    of them: each chunk noised to a time in RECYCLE_TIMES and denoised in one pass.

    At inference a chunk's past is the model's own output, with its errors (a square gone round,
    an object off its track); trained on the real past only, the model has never seen them, and
    rollouts lose motion that the same model given the real past keeps (docs/model.md, "Where the
    motion is lost"). Error recycling (Stable Video Infinity, Li et al. 2025) trains on pasts that
    carry the model's own errors while the target stays what it was.
    """
    rows = frames.any(1).nonzero().flatten()
    if len(rows) == 0:
        return x0
    b, t = len(rows), x0.shape[1]
    f = cfg.frames_per_chunk
    lo, hi = RECYCLE_TIMES
    t_r = (lo + (hi - lo) * torch.rand(b, t // f)).repeat_interleave(f, 1)
    x_r, _ = noised(x0[rows], t_r)
    with torch.no_grad():
        v = clip_velocity(dit, x_r, t_r, {k: data[k][rows] for k in ("tokens", "actions", "controls")}, cfg)
    out = x0.clone()
    est = x_r - t_r[..., None, None, None] * v
    out[rows] = torch.where(frames[rows][..., None, None, None], est, x0[rows])
    return out
