"""Offline rollouts of any causal video model, batched over clips, for evaluation and benchmarks.

The engine's own step code (`streamer/chunk_steps.py`: denoise steps, then decode and commit)
without the server: each clip is a `Script` of per-chunk prompts and per-frame actions/controls
(held per chunk, as the engine applies them from the next chunk on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ...cache.kv_pool import KVCachePool
from ...chunk_steps import commit_noise, denoise_step, finish_chunk
from ..base import CausalVideoModel, Conditioning, PromptCond
from ..device import synchronize


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


def chunk_conditioning(model: CausalVideoModel, scripts: list[Script], c: int,
                       prompts: dict[str, PromptCond]) -> Conditioning:
    """Chunk `c`'s conditioning of every script; `prompts` keeps each text's encoding, and a text
    it lacks is encoded and added."""
    f = model.spec.frames_per_chunk
    texts = [s.prompts[c] for s in scripts]
    for text in set(texts) - set(prompts):
        prompts[text] = model.encode_prompt([text])[0]
    sl = slice(c * f, (c + 1) * f)
    return Conditioning(
        prompts=[prompts[t] for t in texts],
        actions=torch.from_numpy(np.stack([s.actions[sl] for s in scripts])).long(),
        controls=torch.from_numpy(np.stack([s.controls[sl] for s in scripts])).float(),
    )


def _rollout(model: CausalVideoModel, scripts: list[Script], steps: int | None, seed: int, sampler: str,
             pool: KVCachePool, slots: list[int]) -> RolloutResult:
    spec = model.spec
    f, b = spec.frames_per_chunk, len(scripts)
    t_total = scripts[0].frames
    if any(s.frames != t_total or len(s.prompts) * f != t_total for s in scripts):
        raise ValueError("every script needs the same length, with one prompt per chunk")
    schedule = spec.schedule(steps or spec.default_steps)
    gen = torch.Generator().manual_seed(seed)
    # The commit noise (a model with context_noise) has a stream of its own, so rollouts of one
    # seed start every chunk from the same noise whatever the context noise: paired comparisons.
    commit_gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 1]).generate_state(1)[0]))
    prompts: dict[str, PromptCond] = {}
    out = np.empty((b, t_total, spec.height, spec.width, 3), np.uint8)
    start = time.perf_counter()
    for c in range(t_total // f):
        sl = slice(c * f, (c + 1) * f)
        cond = chunk_conditioning(model, scripts, c, prompts)
        x = torch.randn(b, *spec.latent_shape, generator=gen)  # (B, F, C, h, w)
        for i in range(len(schedule)):
            x = denoise_step(model, pool, slots, x, [schedule] * b, [i] * b, cond, sampler,
                             lambda: torch.randn(b, *spec.latent_shape, generator=gen))
        out[:, sl] = finish_chunk(model, pool, slots, x, cond, commit_noise(spec, b, commit_gen))
    synchronize(model.device)  # the last commit's device work belongs to the rollout's time
    return RolloutResult(out, time.perf_counter() - start)
