"""Whoever times model calls waits for the model's device before reading the clock: the engine
(seconds per batch, which its cost model learns per batch kind), calibration, and offline
rollouts. On a GPU a call can return with its work still queued: a commit hands nothing back to
wait for, while denoise and decode wait, since their results move to the CPU. `QueuedCommits`
fakes that device; a clock read while a commit's work is queued is a measurement that missed it."""

from __future__ import annotations

import time
import types

import numpy as np
import torch

from streamer import calibration
from streamer.engine import Engine, EngineConfig
from streamer.models.embedded import rollout as rollout_module
from streamer.protocol import StartMessage
from tests.engine_helpers import TinyWrapper, run_sessions


class QueuedCommits(TinyWrapper):
    """The tiny embedded model on a fake device where commits stay queued until `synchronize`."""

    def __init__(self) -> None:
        super().__init__()
        self.queued = False
        self.commits = 0
        self.early_reads = 0  # clock reads while a commit's work was queued

    def denoise(self, x, t, cond, cache):
        self.queued = False
        return self.inner.denoise(x, t, cond, cache)

    def decode(self, x0):
        self.queued = False
        return self.inner.decode(x0)

    def commit(self, x0, cond, cache, noise=None):
        self.inner.commit(x0, cond, cache, noise)
        self.commits += 1
        self.queued = True

    def synchronize(self, device: torch.device) -> None:
        assert device == self.inner.device
        self.queued = False

    def read(self) -> float:
        self.early_reads += self.queued
        return time.monotonic()


async def test_the_engine_waits_for_the_device_before_timing_a_batch(monkeypatch):
    model = QueuedCommits()
    monkeypatch.setattr("streamer.engine.synchronize", model.synchronize)
    engine = Engine(model, EngineConfig(max_sessions=2, calibrate=False), clock=model.read)  # type: ignore[arg-type]
    await run_sessions(engine, [StartMessage(prompt="a red ball", seed=1)], 3)
    assert model.commits >= 3
    assert model.early_reads == 0


def test_calibration_waits_for_the_device_around_each_timed_call(monkeypatch):
    model = QueuedCommits()
    monkeypatch.setattr(calibration, "synchronize", model.synchronize)
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=model.read))
    calibration.calibrate(model, model.new_pool(2), steps=4, repeats=2)  # type: ignore[arg-type]
    assert model.commits > 0
    assert model.early_reads == 0


def test_a_rollout_waits_for_its_last_commit(monkeypatch):
    model = QueuedCommits()
    monkeypatch.setattr(rollout_module, "synchronize", model.synchronize)
    monkeypatch.setattr(rollout_module, "time", types.SimpleNamespace(perf_counter=model.read))
    f = model.spec.frames_per_chunk
    script = rollout_module.Script(["a red ball"] * 2, np.zeros(2 * f, np.int64), np.zeros((2 * f, 2), np.float32))
    rollout_module.rollout(model, [script])  # type: ignore[arg-type]
    assert model.commits == 2
    assert model.early_reads == 0
