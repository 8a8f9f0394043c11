"""The KV pool's chunk writes: the GPU's one scatter lands where the CPU's slice copies do."""

import torch

from streamer.cache.kv_pool import KVCachePool, PoolLayout


def test_scatter_writes_what_the_slice_copies_write():
    lo = PoolLayout(layers=2, heads=3, head_dim=8, tokens_per_frame=4, sink_frames=1, window_frames=4,
                    frames_per_chunk=2)  # fmt: skip
    pool = KVCachePool(lo, num_slots=5)
    slots = [pool.allocate() for _ in range(5)][1:4]  # not 0..B-1: the scatter must follow the slots
    pool.k.normal_()  # history that must survive around the writes
    history = (0, 3, 5)  # frames held: empty, part-filled, a full window
    for slot, frames in zip(slots, history, strict=True):
        pool.frames[slot] = frames
    new = torch.randn(3, lo.heads, lo.frames_per_chunk * lo.tokens_per_frame, lo.head_dim)
    expected = pool.k[1].clone()
    for i, (slot, frames) in enumerate(zip(slots, history, strict=True)):
        start = frames * lo.tokens_per_frame
        expected[slot, :, start : start + new.shape[2]] = new[i]
    untouched = pool.k[0].clone()
    pool.batch(slots).scatter(pool.k[1], new)
    assert torch.equal(pool.k[1], expected)
    assert torch.equal(pool.k[0], untouched)
