"""Timed story rollouts of several models, interleaved round by round: what the precision and
DiT-shape benchmarks compare.

Every model rolls out the same scripts from the same seed, once untimed (the first calls of a
shape pay for allocation), then once per round in turn, so a slow spell of a shared machine lands
on all of them alike; the median round is each one's figure.
"""

from __future__ import annotations

import statistics

import numpy as np

from streamer.models.embedded.model import EmbeddedModel
from streamer.models.embedded.rollout import Script, rollout
from streamer.models.embedded.scripts import story_scripts


def timed_rollouts(models: dict[str, EmbeddedModel], batch: int, chunks: int,
                   rounds: int) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """-> (each model's frames/s in every round, its frames of the last round)."""
    f = next(iter(models.values())).spec.frames_per_chunk
    scripts, _ = story_scripts(np.random.default_rng(0), batch, chunks, f)
    warm = [Script(s.prompts[:2], s.actions[: 2 * f], s.controls[: 2 * f]) for s in scripts]
    for model in models.values():
        rollout(model, warm)
    fps: dict[str, list[float]] = {name: [] for name in models}
    frames: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        for name, model in models.items():
            res = rollout(model, scripts, seed=1)
            fps[name].append(batch * chunks * f / res.seconds)
            frames[name] = res.frames
    return fps, frames


def median_fps(fps: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(v) for name, v in fps.items()}
