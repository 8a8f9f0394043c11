"""Attribute binding in the prompt encoder: an auxiliary loss of base training (`train --bind W`).

In two-object prompts the model draws each object's shape on the other object about as often
as on its own (docs/model.md, "Binding"): the diffusion loss barely tells a square from a ball,
so the prompt encoder learns to say which shapes a scene holds but hardly which colour each
belongs to, and cross-attention spreads both shapes over both objects. This loss asks every
word of a story object (its colour, shape or motion word) to name the whole object, through a
fixed random linear readout of the encoder's features: an image token that attends to an
object's colour word then also reads that object's shape and motion there.

The readout is fixed (seeded, never trained) so the loss needs no state of its own: the encoder
learns to put each object's attributes along its directions. The clips of a batch hold about one
two-object prompt, too few to learn from, so the sampler also draws `BIND_PROMPTS` two-object
prompts a step for this loss alone (`ClipSampler(bind_prompts=)`).
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from . import vocab
from .dit import TextEncoder
from .model import BOS

GROUPS = (tuple(vocab.COLORS), vocab.SHAPES, vocab.MOTIONS)  # what each word names of its object
BIND_PROMPTS = 32
_READOUT_SEED = 20261206


@lru_cache(maxsize=4096)
def _row_targets(ids: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """Token ids of one prompt (BOS, words, padding) -> per position (colour, shape, motion) index
    of the object its word describes, -1s where it describes none."""
    words = [vocab.WORDS[i - 1] for i in ids if 0 < i < BOS]
    parsed = vocab.parse_prompt(" ".join(words))
    none = (-1, -1, -1)
    out = [none] * len(ids)
    for j, obj in enumerate(parsed.token_objects):
        if obj >= 0 and j + 1 < len(ids):  # position 0 is BOS
            o = parsed.spec.objects[obj]
            out[j + 1] = (GROUPS[0].index(o.color), GROUPS[1].index(o.shape), GROUPS[2].index(o.motion))
    return tuple(out)


def binding_targets(tokens: torch.Tensor) -> torch.Tensor:
    """tokens (N, L) -> (N, L, 3) int64 targets: each word's object's colour, shape and motion
    index, -1 for tokens that describe no story object (fillers, backgrounds, padding, games)."""
    return torch.tensor([_row_targets(tuple(row)) for row in tokens.tolist()], dtype=torch.int64).reshape(
        *tokens.shape, len(GROUPS))


def readout(dim: int) -> torch.Tensor:
    """The fixed (sum of group sizes, dim) readout, the same for every run of a width."""
    gen = torch.Generator().manual_seed(_READOUT_SEED)
    return torch.randn(sum(len(g) for g in GROUPS), dim, generator=gen) / dim**0.5


def binding_loss(text: TextEncoder, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of every object word's readout against its object's colour, shape and
    motion; tokens (..., L), each distinct prompt encoded once. Zero when no token names an object."""
    uniq = torch.unique(tokens.reshape(-1, tokens.shape[-1]), dim=0)
    targets = binding_targets(uniq)
    feats, _ = text(uniq)
    logits = feats @ readout(feats.shape[-1]).to(feats).T
    parts = logits.split([len(g) for g in GROUPS], dim=-1)
    total = sum(F.cross_entropy(part.flatten(0, -2), targets[..., g].flatten(), ignore_index=-1, reduction="sum")
                for g, part in enumerate(parts))
    n = (targets[..., 0] >= 0).sum()
    return total / (n * len(GROUPS)).clamp(min=1)
