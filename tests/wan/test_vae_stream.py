"""Streamed per-chunk VAE decode equals diffusers' decode of the whole clip, per stream."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

import torch  # noqa: E402

from tests.wan.helpers import cond, tiny  # noqa: E402

pytestmark = pytest.mark.wan
TOL = 1e-5


@pytest.fixture(scope="module")
def model():
    return tiny()


def whole_clip(model, latents: torch.Tensor) -> torch.Tensor:
    """diffusers' own decode of normalised latents (1, T, C, h, w) -> (3, 1 + 4 (T - 1), H, W)."""
    dec = model.vae
    z = latents.permute(0, 2, 1, 3, 4) * dec._std + dec._mean
    with torch.no_grad():
        return dec.vae.decode(z, return_dict=False)[0][0]


def test_chunked_batched_streams_equal_whole_clip_decode(model):
    """Two streams, the second one chunk behind, decoded together chunk by chunk."""
    dec = model.vae
    f = model.cfg.frames_per_chunk
    torch.manual_seed(0)
    clips = [torch.randn(1, 3 * f, *model.spec.latent_shape[1:]) for _ in range(2)]
    parts: list[list[torch.Tensor]] = [[], []]
    for step in range(4):
        active = [s for s in (0, 1) if 0 <= step - s < 3]  # stream s plays chunks at steps s..s+2
        rows = torch.cat([clips[s][:, (step - s) * f : (step - s + 1) * f] for s in active])
        for s, video in zip(active, dec.decode(rows, [f"stream{s}" for s in active]), strict=True):
            parts[s].append(video)
        dec.settle([f"stream{s}" for s in active])
    for s in (0, 1):
        assert [p.shape[1] for p in parts[s]] == [9, 12, 12]
        torch.testing.assert_close(torch.cat(parts[s], 1), whole_clip(model, clips[s]), atol=TOL, rtol=TOL)


def test_redecoding_before_settle_does_not_advance_the_stream(model):
    dec = model.vae
    torch.manual_seed(1)
    a, b = torch.randn(2, 1, *model.spec.latent_shape).unbind(0)
    first = dec.decode(a, ["s"])[0]
    again = dec.decode(a, ["s"])[0]  # the engine's per-item retry after a failed batch
    torch.testing.assert_close(again, first, atol=0, rtol=0)
    dec.settle(["s"])
    nxt = dec.decode(b, ["s"])[0]
    dec.settle(["s"])
    torch.testing.assert_close(torch.cat([first, nxt], 1), whole_clip(model, torch.cat([a, b], 1)), atol=TOL, rtol=TOL)
    dec.forget("s")


def test_decode_before_or_after_commit_gives_the_same_video(model):
    """The model finds each row's stream from its last estimate, in either call order."""
    prompt = model.encode_prompt(["a lighthouse at dusk"])[0]
    videos, latents = {}, []
    for order in ("commit-first", "decode-first"):
        pool = model.new_pool(1)
        slot = pool.allocate()
        torch.manual_seed(2)
        frames = []
        for _ in range(3):
            x = torch.randn(1, *model.spec.latent_shape)
            x0 = model.denoise(x, torch.tensor([1.0]), cond(model, [prompt]), pool.batch([slot]))
            batch = pool.batch([slot], commit=True)
            if order == "commit-first":
                model.commit(x0, cond(model, [prompt]), batch)
                frames.append(model.decode(x0))
            else:
                frames.append(model.decode(x0))
                model.commit(x0, cond(model, [prompt]), batch)
                latents.append(x0)
        videos[order] = torch.cat(frames, 1)  # (1, 36, H, W, 3)
    assert videos["commit-first"].shape == (1, 36, 32, 48, 3)
    assert torch.equal(videos["commit-first"], videos["decode-first"])
    clip = (whole_clip(model, torch.cat(latents, 1)) + 1) * 127.5  # (3, 33, H, W)
    expected = clip.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 3, 0)
    assert (videos["decode-first"][0, 3:].int() - expected.int()).abs().max() <= 1
    # The first chunk is padded at its start with its first frame: 12 frames per chunk throughout.
    assert all(torch.equal(videos["decode-first"][0, i], videos["decode-first"][0, 3]) for i in range(3))


def test_reused_slot_starts_a_fresh_stream(model):
    prompt = model.encode_prompt(["rain on a window"])[0]
    pool = model.new_pool(1)
    torch.manual_seed(3)
    x = torch.randn(1, *model.spec.latent_shape)
    slot = pool.allocate()
    for _ in range(2):
        x0 = model.denoise(x, torch.tensor([1.0]), cond(model, [prompt]), pool.batch([slot]))
        model.decode(x0)
        model.commit(x0, cond(model, [prompt]), pool.batch([slot], commit=True))
    pool.release(slot)
    slot = pool.allocate()
    x0 = model.denoise(x, torch.tensor([1.0]), cond(model, [prompt]), pool.batch([slot]))
    fresh = model.decode(x0)
    assert torch.equal(fresh, model.decode(x0, slots=[None]))  # as if never streamed
