"""Engine behaviour with a tiny random model: batching changes nothing but speed, redirects
take effect from the next chunk, failures stay inside their own session."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.events import ControlError, Refused
from streamer.models.precision import native_bf16
from streamer.protocol import PauseMessage, PromptMessage, ResumeMessage, StartMessage
from tests.engine_helpers import Collector, run_sessions


def make_engine(precision: str = "fp32", **kw) -> Engine:
    # Admission by cache slots only: these tests are about behaviour, and a utilisation bound
    # would make them depend on how fast this (shared, noisy) machine runs the model today.
    cfg = dict(max_sessions=4, fps=8.0, degrade=False, calibrate=True, utilisation_bound=1e9)
    cfg.update(kw)
    return Engine(tiny_embedded(precision=precision), EngineConfig(**cfg))


def frames_of(sink: Collector, n: int) -> np.ndarray:
    return np.concatenate([c.frames for c in sink.chunks[:n]]).astype(np.int16)


@pytest.mark.parametrize(("scheduler", "precision"), [
    ("deadline", "fp32"), ("serial", "fp32"),
    pytest.param("deadline", "bf16", marks=pytest.mark.skipif(not native_bf16(torch.device("cpu")),
                                                              reason="this CPU has no native bf16")),
])  # fmt: skip
async def test_batched_sessions_equal_sessions_alone(scheduler, precision):
    starts = [StartMessage(prompt=p, seed=i) for i, p in
              enumerate(["a red ball moving left on grass", "game: a blue character on sand", "avatar: tan skin"])]
    together = await run_sessions(make_engine(precision, scheduler=scheduler), starts, 4)
    assert max(c.chunk_index for c in together[0].chunks[:4]) == 3
    for i, start in enumerate(starts):
        alone = await run_sessions(make_engine(precision), [start], 4)
        # Same seed, same prompt: batching may only change float summation order.
        diff = np.abs(frames_of(together[i], 4) - frames_of(alone[0], 4))
        assert diff.max() <= 2, f"session {i} differs by {diff.max()} levels when batched"
    # Different seeds give different streams (the comparison above can fail).
    assert np.abs(frames_of(together[0], 4) - frames_of(together[1], 4)).max() > 10


async def test_redirect_changes_the_next_chunk_only():
    engine = make_engine()
    await engine.start()
    try:
        sink = Collector()
        handle = await engine.open_session(StartMessage(prompt="a red ball moving left on grass", seed=3), sink)
        await sink.wait_chunks(2)
        ack = await engine.control(handle.id, PromptMessage(prompt="a blue square moving up on sea", transition="cut"))
        assert ack["type"] == "prompt" and ack["unknown_words"] == []
        first = ack["applies_from_chunk"]
        await sink.wait_chunks(first + 2)
    finally:
        await engine.stop()
    versions = {c.chunk_index: c.prompt_version for c in sink.chunks}
    assert all(v == 0 for i, v in versions.items() if i < first)
    assert all(v == 1 for i, v in versions.items() if i >= first)
    # The same stream without the redirect diverges exactly from that chunk on.
    ref = await run_sessions(make_engine(), [StartMessage(prompt="a red ball moving left on grass", seed=3)], first + 2)
    f = sink.chunks[0].frames.shape[0]
    a, b = frames_of(sink, first + 2), frames_of(ref[0], first + 2)
    assert np.abs(a[: first * f] - b[: first * f]).max() <= 2
    assert np.abs(a[first * f :] - b[first * f :]).max() > 10


async def test_unknown_words_are_reported_not_fatal():
    engine = make_engine()
    await engine.start()
    try:
        sink = Collector()
        h = await engine.open_session(StartMessage(prompt="a red zeppelin on grass", seed=1), sink)
        ack = await engine.control(h.id, PromptMessage(prompt="purple dragon near a zeppelin", transition="blend"))
        assert ack["unknown_words"] == ["dragon", "near", "zeppelin"]
        await sink.wait_chunks(3)
    finally:
        await engine.stop()
    assert any(e["type"] == "prompt" and "zeppelin" in e["unknown_words"] for e in sink.events)


async def test_stop_frees_slot_and_admission_refuses_beyond_capacity():
    engine = make_engine(max_sessions=2)
    await engine.start()
    try:
        sinks = [Collector() for _ in range(3)]
        h0 = await engine.open_session(StartMessage(seed=0), sinks[0])
        await engine.open_session(StartMessage(seed=1), sinks[1])
        assert engine.pool.free_slots == 0
        with pytest.raises(Refused) as refused:
            await engine.open_session(StartMessage(seed=2), sinks[2])
        assert "2" in refused.value.reason
        await sinks[1].wait_chunks(2)
        await engine.close_session(h0.id, "client left")
        assert engine.pool.free_slots == 1
        assert len(engine.sessions) == 1
        await engine.open_session(StartMessage(seed=2), sinks[2])
        await sinks[2].wait_chunks(1)
    finally:
        await engine.stop()
    assert all(s.events[-1] == {"type": "ended", "reason": "shutdown"} for s in sinks[1:])
    assert engine.pool.free_slots == 2


async def test_pause_and_resume_are_state_checked():
    engine = make_engine()
    await engine.start()
    try:
        sink = Collector()
        h = await engine.open_session(StartMessage(seed=0), sink)
        with pytest.raises(ControlError) as err:
            await engine.control(h.id, ResumeMessage())
        assert err.value.code == "invalid_state"
        await engine.control(h.id, PauseMessage())
        await engine.control(h.id, ResumeMessage())
        await sink.wait_chunks(2)
        with pytest.raises(KeyError):
            await engine.control("no-such-session", PauseMessage())
    finally:
        await engine.stop()


@pytest.mark.parametrize(("floor", "steps", "expected"), [(None, None, 4), (None, 3, 3), (2, None, 2), (2, 1, 1)])
async def test_overload_step_floor_comes_from_the_model(floor, steps, expected):
    """Sessions may only be cut to the model's `degrade_min_steps` (none: keep every step, shed fps)."""
    model = tiny_embedded()
    model.spec = dataclasses.replace(model.spec, degrade_min_steps=floor)
    engine = Engine(model, EngineConfig(max_sessions=2, fps=8.0, calibrate=True, utilisation_bound=1e9))
    await engine.start()
    try:
        h = await engine.open_session(StartMessage(seed=0, steps=steps), Collector())
        spec = engine.scheduler.session_spec(h.id)
        assert (spec.steps, spec.min_steps) == (steps or model.spec.default_steps, expected)
    finally:
        await engine.stop()


async def test_model_failure_fails_only_the_culprit_session():
    engine = make_engine()
    real = engine.model.denoise

    def flaky(x, t, cond, cache):
        if any(p.text == "poison" for p in cond.prompts):
            raise RuntimeError("injected failure")
        return real(x, t, cond, cache)

    engine.model.denoise = flaky  # type: ignore[method-assign]
    await engine.start()
    try:
        good, bad = Collector(), Collector()
        await engine.open_session(StartMessage(prompt="a red ball", seed=0), good)
        await good.wait_chunks(1)
        await engine.open_session(StartMessage(prompt="poison", seed=1), bad)
        await good.wait_chunks(6)
        await bad.wait_chunks(1)
        assert len(engine.sessions) == 1
    finally:
        await engine.stop()
    assert [e["type"] for e in bad.events] == ["prompt", "error", "ended"][-len(bad.events):]
    assert any(e["type"] == "error" and e["code"] == "model_error" for e in bad.events)
    assert bad.chunks == []
    assert len(good.chunks) >= 6
    assert engine.pool.free_slots == engine.pool.num_slots
