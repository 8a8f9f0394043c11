"""The model contract: what the engine needs from any causal video model.

A model makes one chunk of `F` latent frames at a time in a few denoising steps, attending
to the KV cache of the chunks its session already made. Every call is batched over
sessions, each at its own timestep and cache length. The engine never looks inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..cache.kv_pool import CacheBatch, KVCachePool


def warp(s: float, shift: float) -> float:
    """Flow-matching time shift (Wan, Self-Forcing): sigma = shift * s / (1 + (shift - 1) * s)."""
    return shift * s / (1.0 + (shift - 1.0) * s)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    # Video frames a chunk decodes to (what the scheduler and clients count). It can differ from
    # latent_shape[0]: Wan's VAE decodes each latent frame to 4 video frames.
    frames_per_chunk: int
    height: int
    width: int
    fps: float
    latent_shape: tuple[int, int, int, int]  # per chunk: (F, C, h, w)
    default_steps: int
    timesteps: tuple[float, ...]  # default descending schedule in (0, 1], len == default_steps
    sink_frames: int  # in video frames, like frames_per_chunk
    window_frames: int
    conditioning: tuple[str, ...]  # subset of ("text", "action", "control")
    num_actions: int
    control_dim: int
    max_batch: int
    max_prompt_chars: int = 500
    # The fewest denoising steps the overload policy may cut a session to; None: never cut, shed
    # load by frame rate only. A few-step model that was not distilled for fewer steps loses its
    # picture when cut (the embedded model at 3 of 4 steps finds its game character in 26 % of
    # frames instead of 58 %, at 2 steps in none; measured before fewer steps kept the shift), so no
    # model here sets it yet.
    degrade_min_steps: int | None = None
    # The flow shift of the model's schedules (1: evenly spaced): another step count than the
    # default keeps it, so 8 steps spend their extra passes where the default 4 spend theirs.
    shift: float = 1.0
    # The flow time a finished chunk enters the cache at (0: clean). Above 0 the model commits
    # the chunk noised to that time, so its own past reads as slightly uncertain and its errors
    # compound less over a rollout (Diffusion Forcing's stabilisation; Self-Forcing's
    # `context_noise`). The caller then hands `commit` the noise, drawn from each session's
    # random stream (`commit_noise` in streamer/chunk_steps.py).
    context_noise: float = 0.0

    def schedule(self, steps: int) -> tuple[float, ...]:
        """The timestep schedule for `steps` steps: the default one, or evenly spaced steps in
        (0, 1] (the first at pure noise) warped by the model's `shift`."""
        if steps == self.default_steps:
            return self.timesteps
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        return tuple(warp(1.0 - i / steps, self.shift) for i in range(steps))

    def step_floor(self, steps: int) -> int:
        """The `min_steps` of a session that runs `steps` steps (see `degrade_min_steps`)."""
        return steps if self.degrade_min_steps is None else min(steps, self.degrade_min_steps)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "frames_per_chunk": self.frames_per_chunk,
            "height": self.height,
            "width": self.width,
            "fps": self.fps,
            "latent_shape": list(self.latent_shape),
            "default_steps": self.default_steps,
            "timesteps": list(self.timesteps),
            "sink_frames": self.sink_frames,
            "window_frames": self.window_frames,
            "conditioning": list(self.conditioning),
            "num_actions": self.num_actions,
            "control_dim": self.control_dim,
            "max_batch": self.max_batch,
            "degrade_min_steps": self.degrade_min_steps,
            "context_noise": self.context_noise,
        }


@dataclass
class PromptCond:
    """Conditioning for one prompt, computed once and shared by every session using it."""

    text: str
    tensors: dict[str, torch.Tensor]  # model-specific, e.g. per-layer cross-attention K/V
    unknown_words: list[str] = field(default_factory=list)

    def blend(self, other: PromptCond, alpha: float) -> PromptCond:
        """Linear interpolation towards `other` (used for smooth redirects)."""
        mixed = {k: torch.lerp(v, other.tensors[k], alpha) for k, v in self.tensors.items()}
        return PromptCond(text=f"{self.text} -> {other.text} @{alpha:.2f}", tensors=mixed)


@dataclass
class Conditioning:
    """The batched conditioning of one model call."""

    prompts: list[PromptCond]  # one per sample
    actions: torch.Tensor  # (B, F) int64
    controls: torch.Tensor  # (B, F, control_dim) float32


class CausalVideoModel(Protocol):
    spec: ModelSpec

    @property
    def device(self) -> torch.device:
        """Where the model computes. Its calls may return before the device has finished (a commit
        hands nothing back to wait for), so whoever times them synchronizes this device first."""
        ...

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype its matmuls run in (what a FLOPs-utilisation figure divides by the peak of)."""
        ...

    @property
    def records_batch_sizes(self) -> bool:
        """Whether the first calls at each new batch size record something slow (CUDA graphs):
        then the start-up calibration runs every size it may serve, not only the timed ones."""
        ...

    def new_pool(self, num_slots: int) -> KVCachePool: ...

    def encode_prompt(self, texts: list[str]) -> list[PromptCond]: ...

    def denoise(
        self, x: torch.Tensor, t: torch.Tensor, cond: Conditioning, cache: CacheBatch
    ) -> torch.Tensor: ...

    def commit(self, x0: torch.Tensor, cond: Conditioning, cache: CacheBatch,
               noise: torch.Tensor | None = None) -> None:
        """Write the finished chunks x0 (B, F, C, h, w) into their slots' histories. `noise`
        (standard normal, x0's shape) is required when `spec.context_noise` > 0, ignored otherwise."""
        ...

    def decode(self, x0: torch.Tensor) -> torch.Tensor: ...

    def configure_caching(self, step_reuse: float | None, commit_reuse: bool) -> None:
        """Switch the acceleration techniques of docs/caching.md: `step_reuse` is the step-reuse
        threshold (None: off), `commit_reuse` keeps the last step's keys instead of a clean commit
        pass. A technique the model does not support is a ValueError, raised here (at engine
        start), never on a later step."""
        ...

    def caching_stats(self) -> dict[str, float]:
        """Counters of the techniques switched on (e.g. step reuse's hits), for the engine's info."""
        ...
