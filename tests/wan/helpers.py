"""Shared helpers for the Wan adapter tests: tiny models and conditioning."""

from __future__ import annotations

import dataclasses

import torch

from streamer.models.base import Conditioning, PromptCond
from streamer.models.wan.model import WanCausalModel
from streamer.models.wan.tiny import TINY_CAUSAL, TINY_TEXT, TINY_TRANSFORMER, TINY_VAE, build_random

TOL = 1e-5  # fp32; measured max 2.4e-7 (summation order: attention over a cache vs under a mask)


def tiny(layers: int = 2, **causal) -> WanCausalModel:
    cfg = dataclasses.replace(TINY_CAUSAL, **causal)
    return build_random(dict(TINY_TRANSFORMER, num_layers=layers), TINY_VAE, TINY_TEXT, cfg, "cpu", torch.float32)


def cond(model: WanCausalModel, prompts: list[PromptCond]) -> Conditioning:
    b, f = len(prompts), model.spec.frames_per_chunk
    return Conditioning(prompts, torch.zeros(b, f, dtype=torch.int64), torch.zeros(b, f, 0))


def commit(model: WanCausalModel, pool, slot: int, chunk: torch.Tensor, prompt: PromptCond) -> None:
    model.commit(chunk, cond(model, [prompt]), pool.batch([slot], commit=True))
