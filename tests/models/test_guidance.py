"""Classifier-free guidance in the embedded model: vu + s * (vc - vu) on the rows it guides."""

import pytest
import torch

from streamer.models.base import Conditioning
from tests.models.test_causal_equivalence import tiny_model

PROMPTS = ["a red ball moving left on grass", "a blue square moving up on sea"]


def setup(model, history: int = 1):
    """Two slots with `history` committed chunks each, and one chunk's inputs at two times."""
    pool = model.new_pool(2)
    slots = [pool.allocate() for _ in range(2)]
    latent, f = model.spec.latent_shape, model.spec.frames_per_chunk
    cond = Conditioning(model.encode_prompt(PROMPTS), torch.randint(0, 5, (2, f)), torch.rand(2, f, 2))
    for _ in range(history):
        model.commit(torch.randn(2, *latent), cond, pool.batch(slots, commit=True))
    return pool, slots, cond, torch.randn(2, *latent), torch.tensor([1.0, 0.5])


def velocity(model, x, t, cond, batch):
    return (x - model.denoise(x, t, cond, batch)) / t.view(-1, 1, 1, 1, 1)


def test_scale_one_is_the_unguided_model():
    model = tiny_model()
    pool, slots, cond, x, t = setup(model)
    plain = model.denoise(x, t, cond, pool.batch(slots))
    model.configure_guidance(1.0, 0.0)
    torch.testing.assert_close(model.denoise(x, t, cond, pool.batch(slots)), plain)


def test_guided_rows_extrapolate_from_the_empty_prompt_and_others_are_untouched():
    model = tiny_model()
    pool, slots, cond, x, t = setup(model)
    v_cond = velocity(model, x, t, cond, pool.batch(slots))
    empty = Conditioning(model.encode_prompt([""] * 2), cond.actions, cond.controls)
    v_uncond = velocity(model, x, t, empty, pool.batch(slots))
    assert not torch.allclose(v_cond, v_uncond, atol=1e-3)  # the prompt matters in this model

    model.configure_guidance(3.0, 0.75)  # guides the row at t = 1 only
    v = velocity(model, x, t, cond, pool.batch(slots))
    torch.testing.assert_close(v[0], v_uncond[0] + 3.0 * (v_cond[0] - v_uncond[0]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(v[1], v_cond[1], atol=1e-5, rtol=1e-5)


def test_scratch_keeps_the_conditional_keys_for_commit_reuse():
    """The unconditional pass writes the scratch frames first; the conditional pass overwrites them."""
    model = tiny_model()
    pool, slots, cond, x, t = setup(model)
    model.denoise(x, t, cond, pool.batch(slots))
    unguided = [k.clone() for k in pool.k]
    model.configure_guidance(2.0, 0.0)
    model.denoise(x, t, cond, pool.batch(slots))
    for before, after in zip(unguided, pool.k, strict=True):
        torch.testing.assert_close(after, before)


@pytest.mark.parametrize("scale, min_t", [(0.0, 0.0), (-1.0, 0.0), (2.0, 1.5), (2.0, -0.1)])
def test_bad_guidance_is_refused(scale, min_t):
    model = tiny_model()
    with pytest.raises(ValueError, match="guidance"):
        model.configure_guidance(scale, min_t)
