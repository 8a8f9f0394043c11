"""The cached, chunk-by-chunk Wan must equal one block-causal forward over the whole clip."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402

from tests.wan.helpers import TOL, commit, cond, tiny  # noqa: E402

pytestmark = pytest.mark.wan


def reference_x0(model, clip, t_last, prompt, block):
    """x0 of the clip's last chunk from one block-causal forward: earlier chunks clean (t = 0)."""
    n, f = clip.shape[1], model.cfg.frames_per_chunk
    t = torch.zeros(1, n)
    t[:, n - f :] = t_last
    with torch.no_grad():
        v = model.net(clip, t, model._text([prompt]), block_frames=block)[:, n - f :]
    return clip[:, n - f :] - t_last * v


def test_processor_and_rope_leave_diffusers_forward_unchanged():
    """With no plan (positions 0..F-1, bidirectional) our processor/RoPE give diffusers' exact output."""
    model = tiny()
    stock = WanTransformer3DModel.from_config(model.net.net.config).eval()
    stock.load_state_dict(model.net.net.state_dict())
    x = torch.randn(2, 4, 5, 4, 6)  # (B, C, F, h, w)
    t = torch.tensor([700.0, 30.0])
    text = torch.randn(2, 16, 16)
    with torch.no_grad():
        ours = model.net.net(x, t, text, return_dict=False)[0]
        theirs = stock(x, t, text, return_dict=False)[0]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_cached_rollout_equals_block_causal_forward():
    """Commit chunks 0..k-1 (t = 0) then denoise chunk k: equals the whole-clip block-causal forward."""
    model = tiny(sink_frames=3, window_frames=6)  # 3 chunks of context: 4 chunks fit without eviction
    f, chunks = model.cfg.frames_per_chunk, 4
    torch.manual_seed(1)
    clip = torch.randn(1, f * chunks, *model.spec.latent_shape[1:])
    prompt = model.encode_prompt(["a red fox running through snow"])[0]
    pool = model.new_pool(2)
    slot = pool.allocate()
    for k in range(chunks):
        t_k = torch.rand(1) * 0.9 + 0.05
        expected = reference_x0(model, clip[:, : (k + 1) * f], t_k, prompt, block=f)
        chunk = clip[:, k * f : (k + 1) * f]
        x0 = model.denoise(chunk, t_k, cond(model, [prompt]), pool.batch([slot]))
        torch.testing.assert_close(x0, expected, atol=TOL, rtol=TOL)
        commit(model, pool, slot, chunk, prompt)
    assert pool.frames[slot] == model.layout.context_frames


def test_eviction_and_rotate_back_match_a_fresh_clip():
    """One layer: cached K/V depend on each frame alone, so after the window rolls the cache must be
    exactly [sink chunk, last window chunk] at positions 0..5, and denoise must equal a block-causal
    forward over that short clip. Checks the sink, the roll, and the re-rotation of kept keys."""
    model = tiny(layers=1, sink_frames=3, window_frames=3)
    f = model.cfg.frames_per_chunk
    torch.manual_seed(2)
    chunks = [torch.randn(1, *model.spec.latent_shape) for _ in range(5)]
    prompt = model.encode_prompt(["waves on a beach"])[0]
    pool = model.new_pool(2)
    long_slot, short_slot = pool.allocate(), pool.allocate()
    for c in chunks[:4]:  # chunk 0 is the sink; 1 and 2 get evicted in turn
        commit(model, pool, long_slot, c, prompt)
    for c in (chunks[0], chunks[3]):
        commit(model, pool, short_slot, c, prompt)
    n = model.layout.context_frames * model.layout.tokens_per_frame
    torch.testing.assert_close(pool.k[:, long_slot, :, :n], pool.k[:, short_slot, :, :n], atol=TOL, rtol=TOL)
    torch.testing.assert_close(pool.v[:, long_slot, :, :n], pool.v[:, short_slot, :, :n], atol=0, rtol=0)
    t = torch.tensor([0.6])
    x0 = model.denoise(chunks[4], t, cond(model, [prompt]), pool.batch([long_slot]))
    clip = torch.cat([chunks[0], chunks[3], chunks[4]], 1)
    torch.testing.assert_close(x0, reference_x0(model, clip, t, prompt, block=f), atol=TOL, rtol=TOL)


def test_batched_denoise_equals_each_session_alone():
    model = tiny(sink_frames=3, window_frames=6)
    pool = model.new_pool(4)
    slots = [pool.allocate() for _ in range(3)]
    texts = ["a red fox running through snow", "a city street at night, neon", "a sailing boat, storm"]
    prompts = model.encode_prompt(texts)
    torch.manual_seed(3)
    for slot, history, prompt in zip(slots, [0, 1, 4], prompts, strict=True):  # 4: one past the window
        for _ in range(history):
            commit(model, pool, slot, torch.randn(1, *model.spec.latent_shape), prompt)
    x = torch.randn(3, *model.spec.latent_shape)
    t = torch.tensor([1.0, 0.9375, 0.625])
    batched = model.denoise(x, t, cond(model, prompts), pool.batch(slots))
    for i, slot in enumerate(slots):
        alone = model.denoise(x[i : i + 1], t[i : i + 1], cond(model, [prompts[i]]), pool.batch([slot]))
        torch.testing.assert_close(batched[i : i + 1], alone, atol=TOL, rtol=TOL)


def test_batched_commit_equals_each_session_alone():
    model = tiny(sink_frames=3, window_frames=3)
    prompts = model.encode_prompt(["a", "b"])
    torch.manual_seed(4)
    chunks = [torch.randn(2, *model.spec.latent_shape) for _ in range(3)]  # three commits: one roll
    together, alone = model.new_pool(2), model.new_pool(2)
    ts = [together.allocate(), together.allocate()]
    al = [alone.allocate(), alone.allocate()]
    for c in chunks:
        model.commit(c, cond(model, prompts), together.batch(ts, commit=True))
        for i in range(2):
            commit(model, alone, al[i], c[i : i + 1], prompts[i])
    for i in range(2):
        torch.testing.assert_close(together.k[:, ts[i]], alone.k[:, al[i]], atol=TOL, rtol=TOL)
        torch.testing.assert_close(together.v[:, ts[i]], alone.v[:, al[i]], atol=TOL, rtol=TOL)
