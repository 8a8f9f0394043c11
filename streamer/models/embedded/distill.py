"""Guidance distillation: teach the model to give, in one pass, what guidance gives in two.

Classifier-free guidance runs the model twice per step (under the prompt and under the empty
prompt) and extrapolates, v = vu + s (vc - vu). It is what makes the embedded model follow its
prompt, and it halves the frame rate. Distillation (Meng et al., "On Distillation of Guided
Diffusion Models", 2023) trains a student, started from the teacher's own weights, to predict
the teacher's guided velocity directly; the distilled model then runs unguided at full speed.

The target is computed in the shape of inference: a clean past (the cache holds chunks
committed at t = 0) and a current chunk at a sampling time. Only the last chunk of a clip gets
a target, because the unconditional pass at inference swaps the prompt of the current chunk
only: its context stays under the prompt it was committed with. Making the current chunk the
last one keeps the earlier chunks' features identical in both teacher passes.
"""

from __future__ import annotations

import torch

from .config import EmbeddedConfig
from .dit import CausalDiT
from .masks import block_causal_context
from .model import prompt_tokens


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


def guided_velocity(teacher: CausalDiT, x_t: torch.Tensor, t_frame: torch.Tensor, data: dict[str, torch.Tensor],
                    cfg: EmbeddedConfig, scale: float) -> torch.Tensor:
    """The teacher's guided velocity vu + s (vc - vu) on the last chunk of a clip -> (B, F, C, h, w).

    Both passes run in one batch: under the clip's prompts, and with the last chunk's prompt
    swapped for the empty one (the earlier chunks keep theirs, as the cache does at inference).
    """
    b, t = x_t.shape[:2]
    f = cfg.frames_per_chunk
    tokens = data["tokens"]
    uncond_tokens = tokens.clone()
    uncond_tokens[:, -f:] = prompt_tokens("", cfg.dit.max_tokens)[0]
    with torch.no_grad():
        v = teacher(x_t.repeat(2, 1, 1, 1, 1), t_frame.repeat(2, 1),
                    clip_text(teacher, torch.cat([tokens, uncond_tokens])),
                    data["actions"].repeat(2, 1), data["controls"].repeat(2, 1, 1),
                    block_causal_context(2 * b, t, f, cfg.dit.tokens_per_frame))[:, -f:]
    return torch.lerp(v[b:], v[:b], scale)


def guidance_distill_loss(student: CausalDiT, teacher: CausalDiT, data: dict[str, torch.Tensor],
                          cfg: EmbeddedConfig, scale: float) -> torch.Tensor:
    """Mean squared error between the student's velocity and the teacher's guided one, on the last chunk."""
    x0 = data["x0"]
    b, t = x0.shape[:2]
    f = cfg.frames_per_chunk
    t_frame = torch.rand(b, t) * 0.05  # the clean past, with the training's small-noise augmentation
    t_frame[:, -f:] = sample_times(cfg, (b, 1))
    bc = (..., None, None, None)
    x_t = (1 - t_frame[bc]) * x0 + t_frame[bc] * torch.randn_like(x0)
    target = guided_velocity(teacher, x_t, t_frame, data, cfg, scale)
    ctx = block_causal_context(b, t, f, cfg.dit.tokens_per_frame)
    pred = student(x_t, t_frame, clip_text(student, data["tokens"]), data["actions"], data["controls"], ctx)
    return ((pred[:, -f:] - target) ** 2).mean()
