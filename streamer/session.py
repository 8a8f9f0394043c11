"""One stream's state: conditioning, KV cache slot, RNG, position, and pending changes.

A session is an explicit state machine (STREAMING <-> PAUSED -> ENDED); an illegal transition
raises. Control changes never tear a chunk: they are recorded as pending and folded into the
conditioning snapshot taken when the next chunk starts denoising (`begin_chunk`). The session
knows nothing of transports or of the scheduler; the engine drives it on its model thread.

Redirect transitions (per prompt message):
- "cut": the new prompt conditions the next chunk outright;
- "blend": the prompt's conditioning is interpolated from old to new over `blend_chunks` chunks;
- "recache": LongLive's way: the cached window is recomputed under the new prompt before the
  next chunk, so the context stops pulling towards the old scene. The engine does the
  recomputation (`needs_recache`), because it owns the model.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from .chunk_steps import commit_noise
from .models.base import ModelSpec, PromptCond

TRANSITIONS = ("cut", "blend", "recache")


class SessionState(enum.Enum):
    STREAMING = "streaming"
    PAUSED = "paused"
    ENDED = "ended"


_ALLOWED = {
    SessionState.STREAMING: {SessionState.PAUSED, SessionState.ENDED},
    SessionState.PAUSED: {SessionState.STREAMING, SessionState.ENDED},
    SessionState.ENDED: set(),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class ChunkWork:
    """The chunk being made: its latents and the conditioning frozen when it started."""

    index: int
    steps: int
    timesteps: tuple[float, ...]
    x: torch.Tensor  # (F, C, h, w) current latents
    prompt: PromptCond
    actions: torch.Tensor  # (F,) int64
    controls: torch.Tensor  # (F, control_dim)
    prompt_version: int
    x0: torch.Tensor | None = None  # (F, C, h, w) once the last step ran
    # (F, C, h, w) the noise the chunk is committed with, drawn with its starting noise; kept so a
    # recache commits it again alike. None for a model that commits clean (spec.context_noise 0).
    commit_noise: torch.Tensor | None = None


class Session:
    def __init__(self, session_id: str, token: str, slot: int, spec: ModelSpec, prompt: PromptCond,
                 seed: int, steps: int, blend_chunks: int = 2):
        self.id, self.token, self.slot, self.spec = session_id, token, slot, spec
        self.state = SessionState.STREAMING
        self.steps = steps
        self.blend_chunks = blend_chunks
        self.generator = torch.Generator().manual_seed(seed)
        self.chunk_index = 0
        self.prompt = prompt  # what the stream is heading for
        self.prompt_version = 0
        self._blend_from: PromptCond | None = None
        self._blend_done = 0
        self.needs_recache = False
        self.action = 0
        self.controls = torch.tensor([0.0, 1.0])  # mouth closed, eyes open
        self.work: ChunkWork | None = None
        # Latents of the chunks in the cache's view, oldest first, to recompute it on "recache".
        self.history: list[ChunkWork] = []

    # -- state machine ------------------------------------------------------------------------
    def transition(self, new: SessionState) -> None:
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(f"session {self.id}: {self.state.value} -> {new.value} is not allowed")
        self.state = new

    # -- control (applied from the next chunk) --------------------------------------------------
    def redirect(self, prompt: PromptCond, transition: str = "blend") -> int:
        """Head for a new prompt; returns the index of the first chunk it conditions."""
        if transition not in TRANSITIONS:
            raise ValueError(f"transition must be one of {TRANSITIONS}, got {transition!r}")
        self._blend_from = self.current_prompt() if transition == "blend" else None
        self._blend_done = 0
        self.prompt = prompt
        self.prompt_version += 1
        self.needs_recache = transition == "recache"
        return self.next_chunk_index()

    def set_action(self, action: int) -> None:
        if not 0 <= action < self.spec.num_actions:
            raise ValueError(f"action must be in [0, {self.spec.num_actions}), got {action}")
        self.action = action

    def set_controls(self, mouth: float | None, eyes: float | None) -> None:
        if mouth is not None:
            self.controls[0] = float(mouth)
        if eyes is not None:
            self.controls[1] = float(eyes)

    def reseed(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def next_chunk_index(self) -> int:
        return self.chunk_index + (1 if self.work is not None else 0)

    # -- generation ------------------------------------------------------------------------------
    def current_prompt(self) -> PromptCond:
        """The conditioning the next chunk gets, blending from the old prompt if one is pending."""
        if self._blend_from is None:
            return self.prompt
        alpha = (self._blend_done + 1) / (self.blend_chunks + 1)
        return self._blend_from.blend(self.prompt, alpha)

    def begin_chunk(self, steps: int) -> ChunkWork:
        """Freeze the conditioning for the next chunk and draw its starting noise."""
        if self.work is not None:
            raise RuntimeError(f"session {self.id}: chunk {self.chunk_index} is already in progress")
        f = self.spec.frames_per_chunk
        prompt = self.current_prompt()
        if self._blend_from is not None:
            self._blend_done += 1
            if self._blend_done >= self.blend_chunks:
                self._blend_from = None
        noise = torch.randn(self.spec.latent_shape, generator=self.generator)
        for_commit = commit_noise(self.spec, 1, self.generator)
        self.work = ChunkWork(
            index=self.chunk_index, steps=steps, timesteps=self.spec.schedule(steps), x=noise,
            prompt=prompt, actions=torch.full((f,), self.action, dtype=torch.int64),
            controls=self.controls[None].repeat(f, 1), prompt_version=self.prompt_version,
            commit_noise=None if for_commit is None else for_commit[0],
        )
        return self.work

    def fresh_noise(self) -> torch.Tensor:
        return torch.randn(self.spec.latent_shape, generator=self.generator)

    def finish_chunk(self) -> ChunkWork:
        """Called after the commit pass: the chunk is in the cache; move on."""
        work = self.work
        if work is None or work.x0 is None:
            raise RuntimeError(f"session {self.id}: no denoised chunk to finish")
        self.history.append(work)
        keep = (self.spec.sink_frames + self.spec.window_frames) // self.spec.frames_per_chunk
        sink_chunks = self.spec.sink_frames // self.spec.frames_per_chunk
        if len(self.history) > keep:  # mirror the cache: sinks stay, the window rolls
            del self.history[sink_chunks]
        self.work = None
        self.chunk_index += 1
        return work
