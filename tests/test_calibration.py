"""Calibration: warm-up before timing, interleaved rounds, and the fps `serve` picks from it."""

from __future__ import annotations

import pytest

from streamer.calibration import calibrate, sustainable_fps
from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded


class CountingModel:
    """The tiny model, recording the batch size of every denoise call in order."""

    def __init__(self) -> None:
        self.inner = tiny_embedded()
        self.spec = self.inner.spec
        self.denoised: list[int] = []
        self.times: set[float] = set()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

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


def test_steps_are_timed_at_the_schedules_first_time() -> None:
    # t = 1 is guided whenever any step is (guidance_min_t guides the high-noise steps), so a
    # partly guided schedule is timed at its dearer step, never at a cheap unguided one.
    model = CountingModel()
    calibrate(model, model.new_pool(2), steps=3, repeats=1, warmup=1)  # type: ignore[arg-type]
    assert model.times == {model.spec.schedule(3)[0]} == {1.0}


@pytest.mark.parametrize(
    ("denoise_s", "commit_s", "expected"),
    [
        (0.010, 0.010, 24.0),  # 50 ms a chunk: one stream holds 34 fps at 0.85, so the model's 24
        (0.040, 0.040, 8.0),  # 200 ms a chunk: 8.5 fps holdable, served at the even 8
        (1.0, 1.0, 2.0),  # hopeless hardware still gets 2 fps, not a refusal
    ],
)
def test_sustainable_fps(denoise_s: float, commit_s: float, expected: float) -> None:
    table = {("denoise", 1): denoise_s, ("commit", 1): commit_s}
    assert sustainable_fps(table, 4, 2, 24.0, 0.85) == expected


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
