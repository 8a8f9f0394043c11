"""KV cache pool: every session's attention cache in one preallocated, accounted block.

Layout per slot and layer: `sink_frames` permanent frames, then a rolling window of
`window_frames`, then `frames_per_chunk` of scratch where the chunk being denoised writes its
keys/values. Attention for a sample is one contiguous view `[: (n + F) * P]` of its slot, so a
batch of sessions with different cache lengths needs no padding and no gather copy: the
per-sample attention loop reads straight from the pool (the variable-length layout).

Keys are stored already rotated (RoPE) at their position in the view. When the window rolls,
the surviving window frames move down by F positions, and their keys are rotated back by F
frames once, so the view is always positions 0..n-1 followed by the chunk. Sink frames keep
positions 0..S-1 forever, which is what the model saw in training, however long the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import kernels
from kernels.varlen import host_to


class PoolFull(RuntimeError):
    """No free cache slot: admission should have refused the session."""


@dataclass(frozen=True)
class PoolLayout:
    layers: int
    heads: int
    head_dim: int
    tokens_per_frame: int
    sink_frames: int
    window_frames: int
    frames_per_chunk: int

    @property
    def max_frames(self) -> int:
        return self.sink_frames + self.window_frames + self.frames_per_chunk

    @property
    def context_frames(self) -> int:
        return self.sink_frames + self.window_frames


class KVCachePool:
    def __init__(self, layout: PoolLayout, num_slots: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        lo = layout
        shape = (lo.layers, num_slots, lo.heads, lo.max_frames * lo.tokens_per_frame, lo.head_dim)
        self.layout = layout
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.frames = [0] * num_slots  # committed frames held by each slot
        # Bumped on release/reset: per-slot side caches (streamer/cache/step_cache.py) compare
        # it to drop state left by the slot's previous session.
        self.generation = [0] * num_slots
        # Per slot: the scratch frames hold keys/values a denoise pass wrote for the chunk being
        # made, not yet committed. Commit reuse may keep only those (a recache commits kept
        # latents, for which no denoise pass ran).
        self.scratch_denoised = [False] * num_slots
        self._free = list(range(num_slots - 1, -1, -1))
        self._used: set[int] = set()

    # -- accounting -------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return len(self.frames)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.k[:, 0].numel() * self.k.element_size()

    @property
    def bytes_total(self) -> int:
        return self.bytes_per_slot * self.num_slots

    def allocate(self) -> int:
        if not self._free:
            raise PoolFull(f"all {self.num_slots} KV cache slots are in use")
        slot = self._free.pop()
        self._used.add(slot)
        self.frames[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        if slot not in self._used:
            raise KeyError(f"cache slot {slot} is not allocated")
        self._used.remove(slot)
        self.frames[slot] = 0
        self.generation[slot] += 1
        self.scratch_denoised[slot] = False
        self._free.append(slot)

    def reset(self, slot: int) -> None:
        """Forget a slot's history (a new seed, or a cut to an unrelated scene)."""
        self.frames[slot] = 0
        self.generation[slot] += 1
        self.scratch_denoised[slot] = False

    def batch(self, slots: list[int], *, commit: bool = False) -> CacheBatch:
        for s in slots:
            if s not in self._used:
                raise KeyError(f"cache slot {s} is not allocated")
        return CacheBatch(self, list(slots), commit)


class CacheBatch:
    """The attention context of one batched model call over cache slots.

    In denoise mode the chunk's keys/values go to the scratch frames only; in commit mode
    `finish()` then makes them part of the history (rolling the window when it is full).
    """

    def __init__(self, pool: KVCachePool, slots: list[int], commit: bool):
        self.pool, self.slots, self.commit = pool, slots, commit
        self.frames_per_chunk = pool.layout.frames_per_chunk
        # History length of each sample, fixed for the whole model call (only finish() moves it):
        # read once here rather than in every layer's attend().
        self.history = [pool.frames[s] for s in slots]
        p = pool.layout.tokens_per_frame
        self._starts = [n * p for n in self.history]
        self._lengths = [start + self.frames_per_chunk * p for start in self._starts]
        # (slot rows, token columns) of the chunk's writes, on the pool's device: built on the
        # first scatter, then shared by every layer of the call.
        self._scatter_index: tuple[torch.Tensor, torch.Tensor] | None = None

    def subset(self, rows: list[int]) -> CacheBatch:
        return CacheBatch(self.pool, [self.slots[i] for i in rows], self.commit)

    def frame_positions(self) -> torch.Tensor:
        starts = torch.tensor(self.history)
        return starts[:, None] + torch.arange(self.frames_per_chunk)[None, :]  # (B, F)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v (B, H, F*P, Dh) for the chunk -> attention over [history, chunk]."""
        kc, vc = self.pool.k[layer], self.pool.v[layer]  # (slots, H, max_tokens, Dh)
        if kc.device.type == "cuda":
            # On a GPU every copy is a kernel launch, and launches are what a step of a small
            # model costs there (docs/benchmarks.md, GPU session): one scatter each for K and V.
            self.scatter(kc, k)
            self.scatter(vc, v)
        else:
            # On a CPU B slice copies (memcpy) beat one scatter: 42 against 86 us at batch 8, one thread.
            for i, (slot, start, end) in enumerate(zip(self.slots, self._starts, self._lengths, strict=True)):
                kc[slot, :, start:end] = k[i]
                vc[slot, :, start:end] = v[i]
        for slot in self.slots:
            self.pool.scratch_denoised[slot] = not self.commit
        # Variable-length attention over the pool's layout (kernels/: on a GPU Triton, or one
        # masked SDPA, for several sessions; elsewhere a per-sample SDPA loop over views).
        return kernels.chunk_attention(q, kc, vc, slots=self.slots, lengths=self._lengths)

    def scatter(self, cache: torch.Tensor, new: torch.Tensor) -> None:
        """Write the chunk's keys or values `new` (B, H, F*P, Dh) into each sample's scratch frames
        of `cache` (slots, H, max_tokens, Dh), as one indexed write."""
        if self._scatter_index is None:  # the pool's device, so the same for every layer
            rows = torch.tensor(self.slots)[:, None]  # (B, 1)
            cols = torch.tensor(self._starts)[:, None] + torch.arange(new.shape[2])[None, :]  # (B, F*P)
            self._scatter_index = (host_to(rows, cache.device), host_to(cols, cache.device))
        rows, cols = self._scatter_index
        cache.transpose(1, 2)[rows, cols] = new.transpose(1, 2)  # (B, F*P, H, Dh) at [slot, token]

    def finish(self, rotate_back: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
        """After a commit pass: keep the chunk, rolling the window if the slot is full.

        rotate_back(keys (..., Dh), frames) re-indexes keys `frames` positions earlier.
        """
        if not self.commit:
            raise RuntimeError("finish() is only for commit batches")
        lo, pool = self.pool.layout, self.pool
        p, f = lo.tokens_per_frame, lo.frames_per_chunk
        for slot in self.slots:
            n = pool.frames[slot] + f
            if n > lo.context_frames:
                drop = n - lo.context_frames  # oldest window frames to forget
                src = slice((lo.sink_frames + drop) * p, n * p)
                dst = slice(lo.sink_frames * p, (n - drop) * p)
                for cache in (pool.k, pool.v):
                    moved = cache[:, slot, :, src].clone()
                    cache[:, slot, :, dst] = rotate_back(moved, drop) if cache is pool.k else moved
                n = lo.context_frames
            pool.frames[slot] = n
            pool.scratch_denoised[slot] = False
