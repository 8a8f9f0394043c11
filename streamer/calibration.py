"""Calibration run: measured seconds per batch for each kind and batch size.

The scheduler's cost model starts from these figures and keeps learning online. Slots are
filled to a full cache window first, because that is the steady state of a stream.

The figures must describe the steady state, not the first seconds of a process. So every
(kind, size) call runs `warmup` times untimed first: the first calls of a new shape pay for
allocation and kernel selection, and on the 2-core CPU they kept getting faster for several
rounds (with 2 warm-up rounds the embedded model's first calibration in a process read 25-30 %
slower than the next ones, with 10 at most 8 %; 10 cost about 3 s more at start-up). The timed
repeats are interleaved across sizes, round by round, so that a slow spell of a shared machine
lands on every size alike instead of making one size look dear. Each figure is the median of
its rounds: unlike a minimum, it does not promise the best moment of a busy machine; unlike a
mean, one spike does not move it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from .cache.kv_pool import KVCachePool
from .chunk_steps import commit_noise, finish_chunk
from .models.base import CausalVideoModel, Conditioning
from .models.device import synchronize


def _sizes(limit: int) -> list[int]:
    sizes, b = [], 1
    while b <= limit:
        sizes.append(b)
        b *= 2
    return sizes


def _timed(fn: Callable[[], None], device: torch.device) -> float:
    # Model calls may return with device work still queued: wait for the work queued before the
    # call (not its cost) and for the call's own (its cost) before reading the clock.
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


@torch.no_grad()
def calibrate(
    model: CausalVideoModel, pool: KVCachePool, steps: int, repeats: int = 5, warmup: int = 10
) -> dict[tuple[str, int], float]:
    spec = model.spec
    limit = min(spec.max_batch, pool.free_slots)
    slots = [pool.allocate() for _ in range(limit)]
    try:
        prompt = model.encode_prompt(["calibration"])[0]
        f = spec.frames_per_chunk

        def cond(b: int) -> Conditioning:
            return Conditioning([prompt] * b, torch.zeros(b, f, dtype=torch.int64), torch.zeros(b, f, spec.control_dim))

        # The schedule's first time: a model that guides only its high-noise steps guides that
        # one, so a partly guided schedule is over- rather than under-estimated (admission errs
        # safe) and the cost model learns the real mix of steps online.
        first_t = spec.schedule(steps)[0]
        fill = (spec.sink_frames + spec.window_frames) // f
        for _ in range(fill):
            model.commit(torch.randn(limit, *spec.latent_shape), cond(limit), pool.batch(slots, commit=True),
                         commit_noise(spec, limit))
        calls: dict[tuple[str, int], Callable[[], None]] = {}
        for b in _sizes(limit):
            x = torch.randn(b, *spec.latent_shape)  # (B, F, C, h, w)
            t = torch.full((b,), first_t)
            c, batch, noise = cond(b), slots[:b], commit_noise(spec, b)
            # A new input for every call: a step cache (streamer/cache/step_cache.py) would serve
            # a repeat from its cache, and the calibration would time the cheap path.
            inputs = iter(torch.randn(warmup + repeats, b, *spec.latent_shape))

            def denoise(inputs=inputs, t=t, c=c, batch=batch) -> None:
                model.denoise(next(inputs), t, c, pool.batch(batch))

            def commit(x=x, c=c, batch=batch, noise=noise) -> None:
                finish_chunk(model, pool, batch, x, c, noise)  # decode, then commit: the engine's commit batch

            calls[("denoise", b)], calls[("commit", b)] = denoise, commit
        for _ in range(warmup):
            for fn in calls.values():
                fn()
        if model.records_batch_sizes:
            # A size first met while serving would be recorded then: session 15's GPU run learned
            # 29-33 ms steps for what calibrated at 8-9, and admitted 3 sessions of 8. Recording
            # needs a warm-up call and a recording call; a guided model's unconditional pass runs
            # a subset of the rows, a size this loop covers too.
            for b in sorted(set(range(1, limit + 1)) - set(_sizes(limit))):
                inputs = iter(torch.randn(2, b, *spec.latent_shape))
                for _ in range(2):
                    model.denoise(next(inputs), torch.full((b,), first_t), cond(b), pool.batch(slots[:b]))
                    finish_chunk(model, pool, slots[:b], torch.randn(b, *spec.latent_shape), cond(b))
        samples: dict[tuple[str, int], list[float]] = {key: [] for key in calls}
        for _ in range(repeats):
            for key, fn in calls.items():
                samples[key].append(_timed(fn, model.device))
        return {key: statistics.median(times) for key, times in samples.items()}
    finally:
        for s in slots:
            pool.release(s)
