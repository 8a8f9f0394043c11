"""Calibration run: measured seconds per batch for each kind and batch size.

The scheduler's cost model starts from these figures and keeps learning online. Slots are
filled to a full cache window first, because that is the steady state of a stream.
"""

from __future__ import annotations

import time

import torch

from .cache.kv_pool import KVCachePool
from .models.base import CausalVideoModel, Conditioning


def _sizes(limit: int) -> list[int]:
    sizes, b = [], 1
    while b <= limit:
        sizes.append(b)
        b *= 2
    return sizes


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@torch.no_grad()
def calibrate(model: CausalVideoModel, pool: KVCachePool, steps: int, repeats: int = 3) -> dict[tuple[str, int], float]:
    spec = model.spec
    limit = min(spec.max_batch, pool.free_slots)
    slots = [pool.allocate() for _ in range(limit)]
    try:
        prompt = model.encode_prompt(["calibration"])[0]
        f = spec.frames_per_chunk

        def cond(b: int) -> Conditioning:
            return Conditioning([prompt] * b, torch.zeros(b, f, dtype=torch.int64), torch.zeros(b, f, spec.control_dim))

        warm = (spec.sink_frames + spec.window_frames) // f
        for _ in range(warm):
            model.commit(torch.randn(limit, *spec.latent_shape), cond(limit), pool.batch(slots, commit=True))
        out: dict[tuple[str, int], float] = {}
        for b in _sizes(limit):
            x = torch.randn(b, *spec.latent_shape)
            t = torch.full((b,), 0.5)
            c, batch = cond(b), slots[:b]

            def denoise(x=x, t=t, c=c, batch=batch) -> None:
                model.denoise(x, t, c, pool.batch(batch))

            def commit(x=x, c=c, batch=batch) -> None:
                model.commit(x, c, pool.batch(batch, commit=True))
                model.decode(x)

            # The minimum over repeats: a shared machine only ever adds time.
            denoise()  # warm-up
            out[("denoise", b)] = min(_timed(denoise) for _ in range(repeats))
            out[("commit", b)] = min(_timed(commit) for _ in range(repeats))
        return out
    finally:
        for s in slots:
            pool.release(s)
