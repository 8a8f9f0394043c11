"""The student's own rollout as the past it is step-distilled on (`train --distill-steps T --self-rollout P`).

Shown a real past, the model continues a motion well; after its own past it does not (docs/model.md,
"Where the motion is lost"). Error recycling (flow.recycled_past) trains on one-pass estimates of a
real past, which keep the real layout. Self-Forcing (Huang et al. 2025) goes the whole way: the
generator rolls itself out, chunk by chunk over its KV cache as at inference, and is trained on
what it made. Here a share of each batch's clips get such a past, and the chunk being trained
starts where the student's own sampling puts it at the step being trained; the teacher's two steps
from there (distill.step_distill_loss) are the target. The student so learns what its teacher does
with the student's own past, at the states it visits.

The rollout runs through the inference path (EmbeddedModel.denoise and commit on a KV-cache pool),
so it is the rollout a session makes: `depth` chunks, of which the clip's past keeps the first
(sink) chunks and the last window chunks, as the rolling cache holds them at the end.

Measured (docs/model.md, "Distilled on its own rollouts"): on the 3-step large student it cost
6 points of colour and lengthened redirects, since a teacher shown the student's past continues its
errors; a distribution-matching loss, as Self-Forcing's, would not regress onto them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...chunk_steps import commit_noise
from ...sampling import next_latent
from ..base import Conditioning
from .model import EmbeddedModel

# A rollout is this many chunks at most (at least the clip's past); sessions live longer, but the
# cache holds only sink and window, and the cost of a training step grows with the depth.
MAX_CHUNKS = 10


@dataclass
class RolledClips:
    rows: torch.Tensor  # (R,) int64: the clips of the batch that were rolled out
    x0: torch.Tensor  # (B, T, C, h, w): the batch, those rows' past (every chunk but the last) their rollout's
    # (R, steps + 1, F, C, h, w): each rolled clip's last chunk as the student's own sampling
    # makes it after that past, at each time of its schedule (0: the starting noise), then clean.
    states: torch.Tensor


def source_chunks(depth: int, sink: int, window: int) -> list[int]:
    """Which chunk of a training clip (sink chunks, window chunks, current chunk) conditions each
    of a rollout's `depth` chunks: the chunks the cache keeps at the end are the clip's own past
    ones; those it has dropped by then take the first window chunk's prompt, actions and controls."""
    if depth < sink + window:
        raise ValueError(f"a rollout of {depth} chunks cannot fill {sink} sink and {window} window chunks")
    return [*range(sink), *[sink] * (depth - sink - window), *range(sink, sink + window)]


class SelfRollout:
    """Rolls out a share of a batch's clips with `model` (whose `dit` is the student being trained)."""

    def __init__(self, model: EmbeddedModel, share: float, max_chunks: int = MAX_CHUNKS):
        cfg = model.cfg
        f = cfg.frames_per_chunk
        self.model, self.share = model, share
        self.sink, self.window = cfg.sink_frames // f, cfg.window_frames // f
        self.depths = (self.sink + self.window, max(max_chunks, self.sink + self.window))

    def __call__(self, data: dict[str, torch.Tensor]) -> RolledClips | None:
        """Draws (torch's global generator) which clips and how deep; None when no clip was drawn."""
        x0 = data["x0"]
        rows = (torch.rand(x0.shape[0]) < self.share).nonzero().flatten()
        if len(rows) == 0:
            return None
        depth = int(torch.randint(self.depths[0], self.depths[1] + 1, ()))
        past, states = self.rollout({k: v[rows] for k, v in data.items()}, depth)
        out = x0.clone()
        out[rows, : past.shape[1]] = past
        return RolledClips(rows, out, states)

    @torch.no_grad()
    def rollout(self, clips: dict[str, torch.Tensor], depth: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Roll out `clips` (a batch of training clips) for `depth` chunks, then sample their last
        chunk -> (the past the cache holds at the end (R, T - F, C, h, w), RolledClips.states).

        Noise comes from `generator` (None: torch's global one): each chunk's starting noise, then
        its commit noise (for a model whose context_noise is above 0)."""
        model, spec = self.model, self.model.spec
        f, r = spec.frames_per_chunk, clips["x0"].shape[0]
        schedule = spec.timesteps
        pool = model.new_pool(r)
        slots = [pool.allocate() for _ in range(r)]

        def conditioning(c: int) -> Conditioning:
            sl = slice(c * f, (c + 1) * f)
            return Conditioning(model.encode_tokens(clips["tokens"][:, c * f]), clips["actions"][:, sl],
                                clips["controls"][:, sl])

        def sample(cond: Conditioning) -> list[torch.Tensor]:
            x = torch.randn(r, *spec.latent_shape, generator=generator)
            states = [x]
            for i, t in enumerate(schedule):
                t_next = schedule[i + 1] if i + 1 < len(schedule) else 0.0
                x = next_latent(x, model.denoise(x, torch.full((r,), t), cond, pool.batch(slots)),
                                torch.full((r,), t), torch.full((r,), t_next))
                states.append(x)
            return states  # the start, each step's result; the last is the clean chunk

        try:
            chunks = []
            for c in source_chunks(depth, self.sink, self.window):
                cond = conditioning(c)
                chunk = sample(cond)[-1]
                model.commit(chunk, cond, pool.batch(slots, commit=True), commit_noise(spec, r, generator))
                chunks.append(chunk)
            states = sample(conditioning(self.sink + self.window))
        finally:
            for s in slots:
                pool.release(s)
        past = torch.cat(chunks[: self.sink] + chunks[depth - self.window :], 1)
        return past, torch.stack(states, 1)
