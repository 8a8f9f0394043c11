"""Calibration: warm-up before timing, interleaved rounds, and an engine reusing another's."""

from __future__ import annotations

import pytest

from streamer.calibration import calibrate
from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.protocol import StartMessage
from tests.engine_helpers import Collector, TinyWrapper


class CountingModel(TinyWrapper):
    """The tiny model, recording the batch size of every denoise call in order."""

    def __init__(self) -> None:
        super().__init__()
        self.denoised: list[int] = []
        self.times: set[float] = set()

    def denoise(self, x, t, cond, cache):
        self.denoised.append(x.shape[0])
        self.times.update(t.tolist())
        return self.inner.denoise(x, t, cond, cache)


def test_every_size_warms_up_then_is_timed_in_interleaved_rounds() -> None:
    model = CountingModel()
    pool = model.new_pool(8)
    table = calibrate(model, pool, steps=4, repeats=3, warmup=2)  # type: ignore[arg-type]
    sizes = [1, 2, 4, 8]
    assert sorted(table) == sorted((kind, b) for kind in ("denoise", "commit") for b in sizes)
    assert all(seconds > 0 for seconds in table.values())
    # 2 warm-up rounds and 3 timed rounds, each over every size: a slow spell hits all sizes.
    assert model.denoised == sizes * 5
    assert pool.free_slots == 8


class RecordingModel(CountingModel):
    """As a model whose compiled maths are recorded as CUDA graphs per batch size."""

    records_batch_sizes = True


def test_a_model_that_records_batch_sizes_meets_every_size_at_start_up() -> None:
    """Sizes the engine may batch but the calibration does not time (3, 5, 6, 7) still run, twice
    (a warm-up and a recording call), so none is first recorded while serving."""
    model = RecordingModel()
    table = calibrate(model, model.new_pool(8), steps=4, repeats=1, warmup=2)  # type: ignore[arg-type]
    assert sorted({b for _, b in table}) == [1, 2, 4, 8]  # timed: the same as any model
    assert model.denoised[:12] == [1, 2, 4, 8] * 2 + [3, 3, 5, 5]
    assert sorted(set(model.denoised)) == list(range(1, 9))
    assert all(model.denoised.count(b) == 2 for b in (3, 5, 6, 7))
    assert CountingModel().records_batch_sizes is False  # the tiny model records nothing


def test_steps_are_timed_at_the_schedules_first_time() -> None:
    # t = 1 is guided whenever any step is (guidance_min_t guides the high-noise steps), so a
    # partly guided schedule is timed at its dearer step, never at a cheap unguided one.
    model = CountingModel()
    calibrate(model, model.new_pool(2), steps=3, repeats=1, warmup=1)  # type: ignore[arg-type]
    assert model.times == {model.spec.schedule(3)[0]} == {1.0}


async def test_an_engine_can_reuse_another_engines_calibration(monkeypatch) -> None:
    table = {(kind, b): 0.040 for kind in ("denoise", "commit") for b in (1, 2, 4)}

    def no_run(*args, **kwargs):
        raise AssertionError("a given calibration must not be re-measured")

    monkeypatch.setattr("streamer.engine.calibrate", no_run)
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=2), calibration=table)
    await engine.start()
    try:
        assert engine.fps == 8.0  # picked from the given figures, as from its own run
        assert engine.scheduler.cost.measurements() == table
    finally:
        await engine.stop()


async def test_an_engine_serves_the_rate_its_fps_sessions_hold_together(monkeypatch) -> None:
    # 40 ms for one sample, 60 ms for two: two sessions need 5 batches of 60 ms per 2-frame chunk,
    # U = 0.15 fps, so they hold 5.7 fps together (one alone holds 8.5).
    table = {(kind, b): s for kind in ("denoise", "commit") for b, s in ((1, 0.040), (2, 0.060))}
    monkeypatch.setattr("streamer.engine.calibrate", lambda *a, **k: table)
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=2, fps_sessions=2))
    await engine.start()
    try:
        assert engine.fps == 5.0
    finally:
        await engine.stop()
    with pytest.raises(ValueError, match=r"fps_sessions must be in 1..max_sessions \(2\), got 3"):
        EngineConfig(max_sessions=2, fps_sessions=3)


async def test_a_new_session_gets_the_rate_the_cost_model_has_learned_since(monkeypatch) -> None:
    # Calibrated at 40 ms a call, one session holds 8.5 fps; measured at 80 ms, 4.25.
    table = {(kind, b): 0.040 for kind in ("denoise", "commit") for b in (1, 2)}
    monkeypatch.setattr("streamer.engine.calibrate", lambda *a, **k: table)
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=2))
    await engine.start()
    try:
        assert engine.fps == 8.0
        for _ in range(60):  # the machine turned out twice as slow as its start-up calibration
            for kind in ("denoise", "commit"):
                engine.scheduler.cost.observe(kind, 1, 0.080)
        handle = await engine.open_session(StartMessage(prompt="a red ball", seed=1), Collector())
        assert handle.fps == 4.0
    finally:
        await engine.stop()


class SlowModelClock(TinyWrapper):
    """The tiny model on a fake clock where every model call takes 80 ms, and every read of the
    clock 5 ms (so that an idle engine's wait for the next chunk's release ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def denoise(self, x, t, cond, cache):
        self.now += 0.080
        return self.inner.denoise(x, t, cond, cache)

    def commit(self, x0, cond, cache, noise=None):
        self.now += 0.080
        self.inner.commit(x0, cond, cache, noise)

    def read(self) -> float:
        self.now += 0.005
        return self.now


async def test_the_served_rate_in_info_follows_the_measured_batches(monkeypatch) -> None:
    # Calibrated at 40 ms a call (8 fps); the engine's own batches then take 80 ms each, so
    # `info()` (the rate a session opened now would get) falls without another session opening.
    table = {(kind, b): 0.040 for kind in ("denoise", "commit") for b in (1, 2)}
    monkeypatch.setattr("streamer.engine.calibrate", lambda *a, **k: table)
    model = SlowModelClock()
    engine = Engine(model, EngineConfig(max_sessions=2), clock=model.read)  # type: ignore[arg-type]
    await engine.start()
    try:
        assert engine.info()["fps"] == 8.0
        sink = Collector()
        await engine.open_session(StartMessage(prompt="a red ball", seed=1), sink)
        await sink.wait_chunks(3)
        assert engine.info()["fps"] < 8.0
    finally:
        await engine.stop()


async def test_a_fixed_fps_is_served_whatever_the_cost_model_learns(monkeypatch) -> None:
    table = {(kind, b): 0.040 for kind in ("denoise", "commit") for b in (1, 2)}
    monkeypatch.setattr("streamer.engine.calibrate", lambda *a, **k: table)
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=2, fps=6.0, utilisation_bound=1e9))
    await engine.start()
    try:
        for _ in range(60):
            engine.scheduler.cost.observe("denoise", 1, 0.080)
        handle = await engine.open_session(StartMessage(prompt="a red ball", seed=1), Collector())
        assert handle.fps == 6.0
    finally:
        await engine.stop()
