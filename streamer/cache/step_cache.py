"""Step-reuse cache (FirstBlockCache-style): skip the deep blocks when a sample barely changed.

After the first block runs, each sample's first-block residual is compared with the one its
session had the last time the deep blocks ran for it (same slot, same chunk position in the
schedule is not required). When the relative L1 change is below `threshold`, the sample
reuses the residual the deep blocks added then, and the deep blocks run only on the others.
The decision is made per session inside a batch.

State is kept per KV cache pool and slot: a model may serve several pools (an engine's, a
calibration's, an offline rollout's), whose slot numbers overlap. Each entry is tagged with
its slot's generation, so a new session on a reused slot starts clean.

On a CPU the per-sample decision costs nothing (there is no device to stall). On a GPU the
subset size is data-dependent, which would need a host sync, so models use it on the CPU
only; see docs/caching.md for the measured trade-off.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch

from .kv_pool import CacheBatch, KVCachePool


@dataclass
class _Entry:
    generation: int
    first_residual: torch.Tensor  # (T, P, D) first block's residual when the deep blocks last ran
    deep_residual: torch.Tensor  # (T, P, D) what the deep blocks added then


class FirstBlockCache:
    def __init__(self, threshold: float):
        if math.isnan(threshold) or threshold < 0:
            raise ValueError(f"step reuse threshold must be a number >= 0, got {threshold}")
        self.threshold = threshold
        self._entries: WeakKeyDictionary[KVCachePool, dict[int, _Entry]] = WeakKeyDictionary()
        self.hits = self.calls = 0

    def runner(self, cache: CacheBatch) -> Callable[[Callable[..., torch.Tensor], torch.Tensor, int], torch.Tensor]:
        pool, slots = cache.pool, cache.slots
        entries = self._entries.setdefault(pool, {})

        def valid(slot: int) -> _Entry | None:
            entry = entries.get(slot)
            return entry if entry is not None and entry.generation == pool.generation[slot] else None

        def run(run_blocks: Callable[..., torch.Tensor], tokens: torch.Tensor, depth: int) -> torch.Tensor:
            h1 = run_blocks(tokens, 0, 1)
            r1 = h1 - tokens  # (B, T, P, D)
            reuse: list[int] = []
            for i, slot in enumerate(slots):
                entry = valid(slot)
                if entry is not None and entry.first_residual.shape == r1[i].shape:
                    change = (r1[i] - entry.first_residual).abs().mean() / (entry.first_residual.abs().mean() + 1e-8)
                    if float(change) < self.threshold:
                        reuse.append(i)
            self.calls += len(slots)
            self.hits += len(reuse)
            out = torch.empty_like(h1)
            compute = [i for i in range(len(slots)) if i not in reuse]
            if compute:
                deep = run_blocks(h1[compute], 1, depth, compute if reuse else None)
                out[compute] = deep
                for j, i in enumerate(compute):
                    entries[slots[i]] = _Entry(pool.generation[slots[i]], r1[i].clone(), (deep[j] - h1[i]).clone())
            for i in reuse:
                out[i] = h1[i] + entries[slots[i]].deep_residual
            return out

        return run

    @property
    def hit_rate(self) -> float:
        return self.hits / self.calls if self.calls else 0.0
