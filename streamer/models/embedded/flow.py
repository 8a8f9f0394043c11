"""Flow-matching training inputs shared by training (train.py) and distillation (distill.py).

x_t = (1 - t) x0 + t noise, velocity target noise - x0; each frame carries its own t and prompt.
"""

from __future__ import annotations

import torch

from .config import EmbeddedConfig
from .dit import CausalDiT


def clip_text(dit: CausalDiT, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """tokens (B, T, L), each frame's prompt -> per-frame text conditioning, each prompt encoded once."""
    b, t = tokens.shape[:2]
    uniq, inverse = torch.unique(tokens.reshape(b * t, -1), dim=0, return_inverse=True)
    enc = dit.encode_text(uniq)
    return {k: v[inverse].reshape(b, t, *v.shape[1:]) for k, v in enc.items()}


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
