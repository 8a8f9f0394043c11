"""The step maths of one chunk, shared by the engine and offline rollouts.

`streamer/batch_runner.py` (serving) and `streamer/models/embedded/rollout.py` (evaluation,
benchmarks) both call these, so what the evaluator measures is the code that serves:
`denoise_step` once per timestep, then `finish_chunk`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from .sampling import next_latent

if TYPE_CHECKING:
    from .cache.kv_pool import KVCachePool
    from .models.base import CausalVideoModel, Conditioning, ModelSpec


def denoise_step(
    model: CausalVideoModel,
    pool: KVCachePool,
    slots: list[int],
    x: torch.Tensor,  # (B, F, C, h, w) latents, sample b at timesteps[b][index[b]]
    timesteps: Sequence[Sequence[float]],  # each sample's schedule
    index: Sequence[int],  # each sample's step in its schedule
    cond: Conditioning,
    sampler: str,
    draw_noise: Callable[[], torch.Tensor],  # fresh (B, F, C, h, w) noise, used by "renoise" only
) -> torch.Tensor:
    """One denoising step per sample; returns the next latents (B, F, C, h, w).

    After a sample's last step its next time is 0, so what comes back is its clean chunk.
    """
    steps = list(zip(timesteps, index, strict=True))
    t = torch.tensor([ts[i] for ts, i in steps])
    t_next = torch.tensor([ts[i + 1] if i + 1 < len(ts) else 0.0 for ts, i in steps])
    x0 = model.denoise(x, t, cond, pool.batch(slots))
    # Noise is drawn only once denoise has returned: the engine re-runs a failed batch item by
    # item, and a draw for the failed try would shift each session's random stream.
    noise = draw_noise() if sampler == "renoise" else None
    return next_latent(x, x0, t, t_next, sampler, noise)


def commit_noise(spec: ModelSpec, batch: int, generator: torch.Generator | None = None) -> torch.Tensor | None:
    """The noise `commit` takes for `batch` chunks (B, F, C, h, w), drawn from `generator` (None:
    torch's global one), or None (nothing drawn) for a model that commits clean (spec.context_noise 0)."""
    if spec.context_noise == 0:
        return None
    return torch.randn(batch, *spec.latent_shape, generator=generator)


def finish_chunk(
    model: CausalVideoModel, pool: KVCachePool, slots: list[int], x0: torch.Tensor, cond: Conditioning,
    noise: torch.Tensor | None = None,
) -> np.ndarray:
    """Decode the clean chunks x0 (B, F, C, h, w), then commit them to their slots' histories
    (with `noise`, from `commit_noise`, for a model whose spec.context_noise is above 0).

    Returns the frames (B, F, H, W, 3) uint8.
    """
    # Decode before commit: commit is the call that changes state (it appends the chunk to each
    # slot's history), so it must come last. A failed batch is re-run item by item, and a decode
    # failing after the commit would append every session's chunk to its cache twice.
    frames = model.decode(x0).numpy()
    model.commit(x0, cond, pool.batch(slots, commit=True), noise)
    return frames
