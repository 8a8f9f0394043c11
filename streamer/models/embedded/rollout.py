"""Offline rollouts of any causal video model, batched over clips, for evaluation and benchmarks.

The same contract calls the engine makes (denoise steps, commit, decode) without the server:
each clip is a `Script` of per-chunk prompts and per-frame actions/controls (held per chunk,
as the engine applies them from the next chunk on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ...cache.kv_pool import KVCachePool
from ...sampling import next_latent
from ..base import CausalVideoModel, Conditioning, PromptCond


@dataclass
class Script:
    prompts: list[str]  # one per chunk
    actions: np.ndarray  # (T,) int
    controls: np.ndarray  # (T, 2) float

    @property
    def frames(self) -> int:
        return len(self.actions)


@dataclass
class RolloutResult:
    frames: np.ndarray  # (B, T, H, W, 3) uint8
    seconds: float  # wall time of the whole rollout (denoise + commit + decode)


@torch.no_grad()
def rollout(model: CausalVideoModel, scripts: list[Script], steps: int | None = None, seed: int = 0,
            sampler: str = "euler", pool: KVCachePool | None = None) -> RolloutResult:
    """Generate every script's frames; `pool` (default: a fresh one) lends the cache slots."""
    pool = pool if pool is not None else model.new_pool(len(scripts))
    slots = [pool.allocate() for _ in scripts]
    try:
        return _rollout(model, scripts, steps, seed, sampler, pool, slots)
    finally:
        for s in slots:
            pool.release(s)


def _rollout(model: CausalVideoModel, scripts: list[Script], steps: int | None, seed: int, sampler: str,
             pool: KVCachePool, slots: list[int]) -> RolloutResult:
    spec = model.spec
    f, b = spec.frames_per_chunk, len(scripts)
    t_total = scripts[0].frames
    if any(s.frames != t_total or len(s.prompts) * f != t_total for s in scripts):
        raise ValueError("every script needs the same length, with one prompt per chunk")
    schedule = spec.schedule(steps or spec.default_steps)
    gen = torch.Generator().manual_seed(seed)
    prompts: dict[str, PromptCond] = {}
    out = np.empty((b, t_total, spec.height, spec.width, 3), np.uint8)
    start = time.perf_counter()
    for c in range(t_total // f):
        texts = [s.prompts[c] for s in scripts]
        for text in set(texts) - set(prompts):
            prompts[text] = model.encode_prompt([text])[0]
        sl = slice(c * f, (c + 1) * f)
        cond = Conditioning(
            prompts=[prompts[t] for t in texts],
            actions=torch.from_numpy(np.stack([s.actions[sl] for s in scripts])).long(),
            controls=torch.from_numpy(np.stack([s.controls[sl] for s in scripts])).float(),
        )
        x = torch.randn(b, *spec.latent_shape, generator=gen)
        for i, t in enumerate(schedule):
            t_now = torch.full((b,), t)
            t_next = torch.full((b,), schedule[i + 1] if i + 1 < len(schedule) else 0.0)
            x0 = model.denoise(x, t_now, cond, pool.batch(slots))
            noise = torch.randn(b, *spec.latent_shape, generator=gen) if sampler == "renoise" else None
            x = next_latent(x, x0, t_now, t_next, sampler, noise)
        model.commit(x, cond, pool.batch(slots, commit=True))
        out[:, sl] = model.decode(x).numpy()
    return RolloutResult(out, time.perf_counter() - start)
