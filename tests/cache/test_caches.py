"""Prompt cache, step-reuse cache and commit reuse: switchable, and exact when switched off."""

import torch

from streamer.cache.step_cache import FirstBlockCache
from streamer.engine_factory import tiny_embedded
from streamer.models.base import Conditioning
from streamer.prompt_cache import PromptCache


def cond(model, b, text="a red ball moving left on grass"):
    f = model.spec.frames_per_chunk
    return Conditioning(model.encode_prompt([text]) * b, torch.zeros(b, f, dtype=torch.long), torch.zeros(b, f, 2))


def test_prompt_cache_shares_and_redirect_gets_new_conditioning():
    model = tiny_embedded()
    cache = PromptCache(model, capacity=2)
    a1, a2 = cache.get("a red ball"), cache.get("a red ball")
    assert a1 is a2 and cache.hits == 1 and cache.misses == 1
    b = cache.get("a blue square")
    assert b is not a1 and not torch.equal(b.tensors["pooled"], a1.tensors["pooled"])
    cache.get("a green triangle")  # capacity 2: the least recently used entry goes
    assert cache.get("a red ball") is not a1


def test_step_cache_threshold_zero_is_exact_and_huge_threshold_reuses_per_session():
    model = tiny_embedded()
    pool = model.new_pool(3)
    slots = [pool.allocate() for _ in range(2)]
    x = torch.randn(2, *model.spec.latent_shape)
    t = torch.tensor([0.5, 0.5])
    exact = model.denoise(x, t, cond(model, 2), pool.batch(slots))

    model.step_cache = FirstBlockCache(pool, threshold=0.0)
    assert torch.allclose(model.denoise(x, t, cond(model, 2), pool.batch(slots)), exact, atol=1e-5)
    assert model.step_cache.hits == 0

    model.step_cache = FirstBlockCache(pool, threshold=1e9)
    model.denoise(x, t, cond(model, 2), pool.batch(slots))  # fills the cache
    y = x.clone()
    y[1] += 0.5  # session 1 changed, session 0 did not
    model.step_cache.threshold = 0.05
    out = model.denoise(y, t, cond(model, 2), pool.batch(slots))
    assert model.step_cache.hits == 1  # only the unchanged session reused
    torch.testing.assert_close(out[0], exact[0], atol=1e-5, rtol=1e-5)  # reused == what it computed
    model.step_cache = None
    torch.testing.assert_close(out[1], model.denoise(y, t, cond(model, 2), pool.batch(slots))[1], atol=1e-5, rtol=1e-5)


def test_step_cache_forgets_a_released_slot():
    model = tiny_embedded()
    pool = model.new_pool(1)
    slot = pool.allocate()
    model.step_cache = FirstBlockCache(pool, threshold=1e9)
    x = torch.randn(1, *model.spec.latent_shape)
    model.denoise(x, torch.tensor([0.5]), cond(model, 1), pool.batch([slot]))
    pool.release(slot)
    slot = pool.allocate()  # a new session on the same slot must not inherit the old residuals
    model.denoise(x, torch.tensor([0.5]), cond(model, 1), pool.batch([slot]))
    assert model.step_cache.hits == 0


def test_commit_reuse_keeps_the_last_steps_keys():
    model = tiny_embedded()
    pool = model.new_pool(1)
    slot = pool.allocate()
    x = torch.randn(1, *model.spec.latent_shape)
    model.denoise(x, torch.tensor([0.25]), cond(model, 1), pool.batch([slot]))
    n = model.spec.frames_per_chunk * model.layout.tokens_per_frame
    scratch = pool.k[:, slot, :, :n].clone()
    model.commit_reuse = True
    model.commit(x, cond(model, 1), pool.batch([slot], commit=True))
    assert pool.frames[slot] == model.spec.frames_per_chunk
    torch.testing.assert_close(pool.k[:, slot, :, :n], scratch)
