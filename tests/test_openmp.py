"""torch's CPU work runs on the engine thread only, and the caller's OpenMP pool is released."""

from __future__ import annotations

import threading

import pytest
import torch

from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.openmp import release_caller_pool


def test_release_caller_pool_frees_this_threads_workers():
    if not torch.backends.openmp.is_available():
        pytest.skip("torch built without OpenMP")
    result: list[bool] = []

    def work() -> None:
        torch.randn(512, 512) @ torch.randn(512, 512)  # a parallel region: this thread gets a pool
        result.append(release_caller_pool())
        torch.randn(64, 64).sum()  # torch still works after the release (a new pool if needed)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert result == [True]


async def test_calibration_runs_on_the_model_thread_after_the_caller_releases_its_pool(monkeypatch):
    seen: dict[str, str] = {}

    def fake_calibrate(model, pool, steps):
        seen["calibrate"] = threading.current_thread().name
        return {("denoise", 1): 0.01, ("commit", 1): 0.01}

    monkeypatch.setattr("streamer.engine.calibrate", fake_calibrate)
    monkeypatch.setattr("streamer.engine.release_caller_pool",
                        lambda: seen.setdefault("release", threading.current_thread().name) and True)
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=1, calibrate=True))
    await engine.start()
    try:
        assert engine.calibration == {("denoise", 1): 0.01, ("commit", 1): 0.01}
        assert engine.fps > 0
    finally:
        await engine.stop()
    assert seen == {"release": threading.current_thread().name, "calibrate": "streamer-engine"}


async def test_a_failed_calibration_stops_the_model_thread(monkeypatch):
    def broken(model, pool, steps):
        raise RuntimeError("calibration failed")

    monkeypatch.setattr("streamer.engine.calibrate", broken)
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=1, calibrate=True))
    with pytest.raises(RuntimeError, match="calibration failed"):
        await engine.start()
    assert not engine.ready()
    assert engine._thread is not None and not engine._thread.is_alive()
