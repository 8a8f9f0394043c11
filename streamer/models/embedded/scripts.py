"""Scripted rollouts of each kind of scene: the prompts, actions and controls of every frame.

The evaluator scores them, the sample sheets draw them, and the benchmarks time them; each
builder returns the scripts and the world specs they were described from (the ground truth).
"""

from __future__ import annotations

import numpy as np

from . import vocab
from .rollout import Script


def held(values: list, f: int) -> np.ndarray:
    """One value per chunk -> one per frame (each repeated over the chunk's f frames)."""
    return np.repeat(np.asarray(values), f, axis=0)


def story_scripts(rng: np.random.Generator, n: int, chunks: int, f: int,
                  two_objects: float = vocab.TWO_OBJECT_SHARE) -> tuple[list[Script], list]:
    specs = [vocab.random_spec(rng, "story", two_objects) for _ in range(n)]
    scripts = [Script([vocab.describe(s)] * chunks, np.zeros(chunks * f, np.int64),
                      held([[0.0, 1.0]] * chunks, f).astype(np.float32)) for s in specs]
    return scripts, specs


def game_scripts(rng: np.random.Generator, n: int, chunks: int, f: int) -> tuple[list[Script], list]:
    scripts, specs = [], []
    for _ in range(n):
        spec = vocab.random_spec(rng, "game")
        # Keys change at chunk boundaries (the engine applies an action from the next chunk):
        # hold a direction 3 chunks, then release 1 chunk, so every press is a fresh trial.
        acts: list[int] = []
        while len(acts) < chunks:
            acts += [int(rng.integers(1, 5))] * 3 + [0]
        scripts.append(Script([vocab.describe(spec)] * chunks, held(acts[:chunks], f).astype(np.int64),
                              held([[0.0, 1.0]] * chunks, f).astype(np.float32)))
        specs.append(spec)
    return scripts, specs


def avatar_scripts(rng: np.random.Generator, n: int, chunks: int, f: int) -> tuple[list[Script], list]:
    scripts, specs = [], []
    for _ in range(n):
        spec = vocab.random_spec(rng, "avatar")
        mouth = np.clip(rng.random(chunks) * 1.2 - 0.1, 0, 1)  # a new mouth value every chunk
        ctrl = np.stack([mouth, np.ones(chunks)], 1)
        scripts.append(Script([vocab.describe(spec)] * chunks, np.zeros(chunks * f, np.int64),
                              held(ctrl.tolist(), f).astype(np.float32)))
        specs.append(spec)
    return scripts, specs
