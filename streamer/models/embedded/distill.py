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
from .flow import clip_text, noised, sample_times
from .masks import block_causal_context
from .model import prompt_tokens


def teacher_problem(cfg: EmbeddedConfig) -> str | None:
    """Why weights with this config cannot teach guidance distillation (None: they can).

    The student learns one guided velocity for every time, so the teacher must be guided on
    every step: a scale other than 1 and no unguided low-noise steps (guidance_min_t 0).
    """
    if cfg.guidance_scale == 1.0 or cfg.guidance_min_t > 0:
        return (f"guidance_scale {cfg.guidance_scale}, guidance_min_t {cfg.guidance_min_t}: "
                "distillation needs a teacher guided on every step")  # fmt: skip
    return None


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
    x_t, _ = noised(x0, t_frame)
    target = guided_velocity(teacher, x_t, t_frame, data, cfg, scale)
    ctx = block_causal_context(b, t, f, cfg.dit.tokens_per_frame)
    pred = student(x_t, t_frame, clip_text(student, data["tokens"]), data["actions"], data["controls"], ctx)
    return ((pred[:, -f:] - target) ** 2).mean()
