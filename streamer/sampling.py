"""Flow-matching samplers: turn a model's clean estimate into the next, less noisy latent.

The model contract returns x0 (see streamer/models/base.py); the schedule and the update
rule live here, so the same model runs with either rule.
- "euler": deterministic flow step, x_{t'} = (1 - t') x0 + t' * eps_hat.
- "renoise": the few-step rule of distilled causal models (Self-Forcing, CausVid), which
  re-noises x0 to t' with fresh noise from the session's own generator.
"""

from __future__ import annotations

import torch

SAMPLERS = ("euler", "renoise")


def next_latent(
    x: torch.Tensor,  # (B, F, C, h, w) current latents at times t
    x0: torch.Tensor,  # (B, F, C, h, w) the model's clean estimate
    t: torch.Tensor,  # (B,)
    t_next: torch.Tensor,  # (B,); 0 gives x0 itself
    sampler: str = "euler",
    noise: torch.Tensor | None = None,  # required for "renoise"
) -> torch.Tensor:
    bc = (slice(None), None, None, None, None)
    t, t_next = t.to(x.dtype)[bc], t_next.to(x.dtype)[bc]
    if sampler == "euler":
        eps = (x - (1 - t) * x0) / t.clamp(min=1e-4)
    elif sampler == "renoise":
        if noise is None:
            raise ValueError("the renoise sampler needs fresh noise")
        eps = noise
    else:
        raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
    return (1 - t_next) * x0 + t_next * eps
