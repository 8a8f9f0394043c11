"""Committing the past slightly noisy (`context_noise`): the commit pass runs on the chunk noised
to that time with the caller's noise, the noise comes from each session's own random stream, a
recache commits each chunk with the noise it had, and a model that commits clean draws nothing."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from scheduler.types import PlanItem, StepPlan
from streamer.batch_runner import recache, run_batch
from streamer.chunk_steps import commit_noise
from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.models.base import Conditioning
from streamer.models.embedded.config import ConfigError
from streamer.models.embedded.model import EmbeddedModel
from streamer.session import Session

T_C = 0.2


def noisy(model: EmbeddedModel, t_c: float = T_C) -> EmbeddedModel:
    """The same weights, committing at flow time `t_c`."""
    return EmbeddedModel(dataclasses.replace(model.cfg, context_noise=t_c), model.ae, model.dit, max_batch=8)


def cond(model: EmbeddedModel, b: int = 1) -> Conditioning:
    f = model.spec.frames_per_chunk
    return Conditioning(model.encode_prompt(["a red ball moving left on grass"]) * b,
                        torch.zeros(b, f, dtype=torch.long), torch.zeros(b, f, 2))


def committed_keys(model: EmbeddedModel, pool, slot: int) -> torch.Tensor:
    return pool.k[:, slot, :, : model.spec.frames_per_chunk * model.layout.tokens_per_frame].clone()


def test_the_commit_pass_runs_on_the_chunk_noised_to_the_context_time():
    base = tiny_embedded()
    model, reusing = noisy(base), noisy(base)
    reusing.configure_caching(None, commit_reuse=True)
    x0, noise = torch.randn(2, 1, *base.spec.latent_shape)
    keys = []
    for m in (model, reusing):
        pool = m.new_pool(1)
        slot = pool.allocate()
        if m is reusing:  # a denoise pass on the noised chunk at T_C writes the keys commit reuse keeps
            m.denoise(torch.lerp(x0, noise, T_C), torch.tensor([T_C]), cond(m), pool.batch([slot]))
        m.commit(x0, cond(m), pool.batch([slot], commit=True), noise)
        keys.append(committed_keys(m, pool, slot))
    torch.testing.assert_close(keys[0], keys[1])

    pool = base.new_pool(1)
    slot = pool.allocate()
    base.commit(x0, cond(base), pool.batch([slot], commit=True), noise)  # commits clean: noise unused
    assert not torch.allclose(committed_keys(base, pool, slot), keys[0])


def test_commit_without_noise_is_refused_and_a_clean_model_draws_none():
    model = noisy(tiny_embedded())
    pool = model.new_pool(1)
    x0 = torch.randn(1, *model.spec.latent_shape)
    with pytest.raises(ValueError, match="context_noise 0.2 needs noise of x0's shape"):
        model.commit(x0, cond(model), pool.batch([pool.allocate()], commit=True))
    gen = torch.Generator().manual_seed(0)
    assert commit_noise(tiny_embedded().spec, 3, gen) is None
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(0).get_state())  # nothing drawn
    assert commit_noise(model.spec, 3, gen).shape == (3, *model.spec.latent_shape)


def test_context_noise_out_of_range_names_the_file_and_the_field(tmp_path):
    tiny_embedded().save(tmp_path)
    cfg = json.loads((tmp_path / "embedded.json").read_text())
    cfg["context_noise"] = 1.0
    (tmp_path / "embedded.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"embedded.json: field 'context_noise' must be in \[0, 1\), got 1.0"):
        EmbeddedModel.load(tmp_path)


def chunks_of(engine: Engine, session: Session, n: int) -> None:
    """Run `n` whole chunks of `session` through the batch runner, as the engine would."""
    for c in range(n):
        for i in range(session.steps + 1):
            kind = "denoise" if i < session.steps else "commit"
            run_batch(engine, StepPlan((PlanItem(session.id, c, kind, i, session.steps),), kind, 0.0, 0.0))


def test_sessions_draw_commit_noise_from_their_own_seed_and_a_recache_reuses_it():
    model = noisy(tiny_embedded())
    engine = Engine(model, EngineConfig(max_sessions=2))
    prompt = model.encode_prompt(["a red ball moving left on grass"])[0]
    a, b = (Session(name, "token", engine.pool.allocate(), model.spec, prompt, seed=7, steps=2) for name in "ab")
    engine.sessions.update({"a": a, "b": b})
    chunks_of(engine, a, 3)
    chunks_of(engine, b, 3)
    assert all(w.commit_noise is not None for w in a.history)
    for wa, wb in zip(a.history, b.history, strict=True):  # one seed, one stream: the same draws
        torch.testing.assert_close(wa.commit_noise, wb.commit_noise)
    torch.testing.assert_close(committed_keys(model, engine.pool, a.slot), committed_keys(model, engine.pool, b.slot))

    frames = engine.pool.frames[a.slot]
    before = engine.pool.k[:, a.slot, :, : frames * model.layout.tokens_per_frame].clone()
    recache(engine, a)  # the same prompt: the window comes back as it was
    assert engine.pool.frames[a.slot] == frames
    torch.testing.assert_close(engine.pool.k[:, a.slot, :, : frames * model.layout.tokens_per_frame], before)
