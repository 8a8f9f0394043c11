"""The engine's Prometheus metrics: every batch by kind, the scheduler's own time, chunk slack."""

from __future__ import annotations

import logging
import time

from streamer import metrics
from streamer.engine import Engine, EngineConfig
from streamer.engine_factory import tiny_embedded
from streamer.protocol import StartMessage
from tests.engine_helpers import Collector, TinyWrapper, run_sessions


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def counts() -> dict[str, float]:
    return {
        "chunks": sample("streamer_chunks_total"),
        "slack": sample("streamer_chunk_slack_seconds_count"),
        "denoise": sample("streamer_step_seconds_count", kind="denoise"),
        "commit": sample("streamer_step_seconds_count", kind="commit"),
        "commit_sizes": sample("streamer_batch_size_count", kind="commit"),
        "schedule": sample("streamer_scheduler_seconds_count", phase="schedule"),
        "update": sample("streamer_scheduler_seconds_count", phase="update"),
    }


async def test_batches_are_counted_by_kind_and_slack_skips_each_sessions_first_chunk() -> None:
    before = counts()
    engine = Engine(tiny_embedded(), EngineConfig(max_sessions=2, calibrate=False, fps=8.0, utilisation_bound=1e9))
    await run_sessions(engine, [StartMessage(prompt="a red ball", seed=s) for s in (1, 2)], 3)
    d = {k: v - before[k] for k, v in counts().items()}
    assert d["chunks"] >= 6
    # A chunk ends with its commit; each session's first chunk is due at arrival, so has no slack.
    assert d["commit"] == d["commit_sizes"] <= d["chunks"]
    assert d["slack"] == d["chunks"] - 2
    assert d["denoise"] >= d["chunks"] * engine.steps / 2  # two sessions may share each step
    assert d["update"] == d["denoise"] + d["commit"]
    assert d["schedule"] >= d["update"]


class SlowModel(TinyWrapper):
    """Denoising steps far slower than the rate asked for: every chunk misses until degraded."""

    def denoise(self, *args, **kw):
        time.sleep(0.03)
        return self.inner.denoise(*args, **kw)


async def test_a_degrade_is_logged_and_exported_and_undone_when_the_last_session_leaves(caplog) -> None:
    caplog.set_level(logging.INFO, logger="streamer.engine")
    engine = Engine(SlowModel(), EngineConfig(max_sessions=2, calibrate=False, fps=24.0, utilisation_bound=1e9))
    await engine.start()
    try:
        sink = Collector()
        h = await engine.open_session(StartMessage(prompt="a red ball", seed=0), sink)
        while not sink.chunks or sink.chunks[-1].fps == 24.0:
            await sink.wait_chunks(len(sink.chunks) + 1)
        assert sample("streamer_degrade_level") == engine.scheduler.degrade_level > 0
        await engine.close_session(h.id, "stopped")
        assert sample("streamer_degrade_level") == 0
    finally:
        await engine.stop()
    changes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("overload policy")]
    assert changes[0].startswith("overload policy: level 0 -> ") and changes[-1].endswith(
        "-> 0 (0 denoising steps fewer, chunk period x1.00)")
