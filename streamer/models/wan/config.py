"""The causal settings of a Wan checkpoint: what diffusers' configs do not say.

A diffusers folder describes the networks (transformer/, vae/, text_encoder/ configs) but not how
the causal family runs them: latent frames per chunk, the KV window and sink, the few-step
timestep list and its flow shift, the output size and rate. `CausalConfig` holds those, with the
defaults of Self-Forcing's released 1.3B checkpoint; a folder may override them in
`streamer.json`. The model hands `shift` to its `ModelSpec`, so thinned schedules keep it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..base import warp

NUM_TRAIN_TIMESTEPS = 1000  # Wan's timestep scale: t in [0, 1] is fed as t * 1000


class WanLoadError(ValueError):
    """A checkpoint folder is missing a file, or a file does not match its config (names both)."""


def shifted_schedule(steps: tuple[int, ...], shift: float) -> tuple[float, ...]:
    """A denoising step list on the 1000 scale (e.g. 1000, 750, 500, 250) -> times in (0, 1].

    Self-Forcing's `warp_denoising_step`: step k picks the shifted scheduler's timestep at index
    1000 - k of linspace(1, 0, 1001), i.e. sigma = warp(k / 1000).
    """
    return tuple(warp(k / NUM_TRAIN_TIMESTEPS, shift) for k in steps)


@dataclass(frozen=True)
class CausalConfig:
    frames_per_chunk: int = 3  # latent frames per chunk (the family's "num_frame_per_block")
    sink_frames: int = 3  # latent frames kept forever (LongLive's frame sink: the first chunk)
    window_frames: int = 15  # rolling latent frames; sink + window + chunk = 21, Self-Forcing's context
    denoising_steps: tuple[int, ...] = (1000, 750, 500, 250)
    shift: float = 5.0
    fps: float = 16.0
    height: int = 480
    width: int = 832
    text_len: int = 512  # UMT5 tokens; Wan pads every prompt to 512
    max_batch: int = 8
    checkpoint_key: str | None = None  # entry of an original-layout training checkpoint (default: EMA first)

    def __post_init__(self) -> None:
        f = self.frames_per_chunk
        if f < 1:
            raise WanLoadError(f"frames_per_chunk must be >= 1, got {f}")
        # Sessions keep whole chunks of history to recompute the cache ("recache").
        if self.sink_frames % f or self.window_frames % f:
            raise WanLoadError(
                f"sink_frames ({self.sink_frames}) and window_frames ({self.window_frames}) must be "
                f"multiples of frames_per_chunk ({f})"
            )
        if not self.denoising_steps or any(not 0 < k <= NUM_TRAIN_TIMESTEPS for k in self.denoising_steps):
            raise WanLoadError(f"denoising_steps must be in (0, 1000], got {list(self.denoising_steps)}")

    @property
    def timesteps(self) -> tuple[float, ...]:
        return shifted_schedule(self.denoising_steps, self.shift)

    @classmethod
    def load(cls, path: Path) -> CausalConfig:
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise WanLoadError(f"{path}: cannot read JSON ({exc})") from exc
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise WanLoadError(f"{path}: unknown field '{unknown[0]}' (known: {sorted(known)})")
        if "denoising_steps" in raw:
            raw["denoising_steps"] = tuple(raw["denoising_steps"])
        try:
            return cls(**raw)
        except WanLoadError as exc:
            raise WanLoadError(f"{path}: {exc}") from exc
        except TypeError as exc:
            raise WanLoadError(f"{path}: {exc}") from exc

    def to_json(self) -> dict:
        out = asdict(self)
        out["denoising_steps"] = list(self.denoising_steps)
        return out
