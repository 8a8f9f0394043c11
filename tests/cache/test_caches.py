"""Prompt cache, step-reuse cache and commit reuse: switchable, exact when switched off, and
switched on in the engine through the model contract's `configure_caching`."""

import numpy as np
import pytest
import torch

from streamer.cache.step_cache import FirstBlockCache
from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.models.base import Conditioning
from streamer.models.embedded.model import _check_step_reuse_device
from streamer.prompt_cache import PromptCache
from streamer.protocol import StartMessage
from tests.engine_helpers import run_sessions


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

    model.configure_caching(0.0, commit_reuse=False)
    assert model.step_cache is not None
    assert torch.allclose(model.denoise(x, t, cond(model, 2), pool.batch(slots)), exact, atol=1e-5)
    assert model.step_cache.hits == 0

    model.configure_caching(1e9, commit_reuse=False)
    assert model.step_cache is not None
    model.denoise(x, t, cond(model, 2), pool.batch(slots))  # fills the cache
    y = x.clone()
    y[1] += 0.5  # session 1 changed, session 0 did not
    model.step_cache.threshold = 0.05
    out = model.denoise(y, t, cond(model, 2), pool.batch(slots))
    assert model.step_cache.hits == 1  # only the unchanged session reused
    torch.testing.assert_close(out[0], exact[0], atol=1e-5, rtol=1e-5)  # reused == what it computed
    model.configure_caching(None, commit_reuse=False)
    torch.testing.assert_close(out[1], model.denoise(y, t, cond(model, 2), pool.batch(slots))[1], atol=1e-5, rtol=1e-5)


def test_step_cache_forgets_a_released_slot():
    model = tiny_embedded()
    pool = model.new_pool(1)
    slot = pool.allocate()
    model.configure_caching(1e9, commit_reuse=False)
    assert model.step_cache is not None
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
    model.configure_caching(None, commit_reuse=True)
    model.commit(x, cond(model, 1), pool.batch([slot], commit=True))
    assert pool.frames[slot] == model.spec.frames_per_chunk
    torch.testing.assert_close(pool.k[:, slot, :, :n], scratch)


def test_step_cache_keeps_each_pools_slots_apart():
    model = tiny_embedded()
    model.configure_caching(1e9, commit_reuse=False)
    assert model.step_cache is not None
    a, b = model.new_pool(1), model.new_pool(1)
    x = torch.randn(1, *model.spec.latent_shape)
    model.denoise(x, torch.tensor([0.5]), cond(model, 1), a.batch([a.allocate()]))
    # Slot 0 of another pool (say, the calibration's) is another session: nothing to reuse.
    model.denoise(x, torch.tensor([0.5]), cond(model, 1), b.batch([b.allocate()]))
    assert model.step_cache.hits == 0
    model.denoise(x, torch.tensor([0.5]), cond(model, 1), a.batch([0]))
    assert model.step_cache.hits == 1


def test_commit_reuse_still_runs_the_clean_pass_for_a_recache():
    """A recache commits kept latents: no denoise pass wrote their keys, so there is nothing to reuse."""
    exact, reusing = tiny_embedded(), tiny_embedded()
    reusing.configure_caching(None, commit_reuse=True)
    x = torch.randn(1, *exact.spec.latent_shape)
    keys = []
    for model in (exact, reusing):
        pool = model.new_pool(1)
        slot = pool.allocate()
        model.denoise(torch.randn_like(x), torch.tensor([0.25]), cond(model, 1), pool.batch([slot]))
        pool.reset(slot)  # what batch_runner.recache does before committing the kept latents
        model.commit(x, cond(model, 1), pool.batch([slot], commit=True))
        keys.append(pool.k[:, slot, :, : model.spec.frames_per_chunk * model.layout.tokens_per_frame].clone())
    torch.testing.assert_close(keys[1], keys[0])


@pytest.mark.parametrize(("step_reuse", "commit_reuse", "message"), [
    (-0.1, False, "step reuse threshold must be a number >= 0, got -0.1"),
    (float("nan"), False, "step reuse threshold must be a number >= 0"),
    (0.4, True, "step reuse and commit reuse cannot be combined"),
])  # fmt: skip
def test_bad_caching_settings_fail_when_the_engine_is_built(step_reuse, commit_reuse, message):
    with pytest.raises(ValueError, match=message):
        Engine(tiny_embedded(), EngineConfig(step_reuse=step_reuse, commit_reuse=commit_reuse))


def test_step_reuse_is_refused_off_the_cpu():
    with pytest.raises(ValueError, match="step reuse runs on the CPU only"):
        _check_step_reuse_device(FirstBlockCache(0.4), torch.device("cuda"))
    _check_step_reuse_device(FirstBlockCache(0.4), torch.device("cpu"))
    _check_step_reuse_device(None, torch.device("cuda"))


async def test_engine_with_step_reuse_serves_every_session_and_reports_its_hits():
    starts = [StartMessage(prompt=p, seed=i) for i, p in
              enumerate(["a red ball moving left on grass", "game: a blue character on sand", "avatar: tan skin"])]
    cfg = dict(max_sessions=4, fps=8.0, degrade=False, utilisation_bound=1e9)
    # A threshold nothing stays under: every step after a session's first reuses its deep blocks.
    engine = Engine(tiny_embedded(), EngineConfig(**cfg, step_reuse=1e9))
    reused = await run_sessions(engine, starts, 3)
    info = engine.info()["caching"]
    assert info["step_reuse"] == 1e9 and info["commit_reuse"] is False
    assert info["step_reuse_hits"] > 0 and 0 < info["step_reuse_hit_rate"] < 1
    exact = await run_sessions(Engine(tiny_embedded(), EngineConfig(**cfg)), starts, 3)
    assert Engine(tiny_embedded(), EngineConfig(**cfg)).info()["caching"] == {"step_reuse": None, "commit_reuse": False}
    for r, e in zip(reused, exact, strict=True):
        assert len(r.chunks) >= 3 and not any(ev["type"] == "error" for ev in r.events)
        a, b = (np.concatenate([c.frames for c in s.chunks[:3]]) for s in (r, e))
        assert a.shape == b.shape and not np.array_equal(a, b)  # the reused steps changed the frames
