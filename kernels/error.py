"""Error of an approximate (or reordered) kernel output against an exact one, as the tests and benchmark report it."""

from __future__ import annotations

from typing import NamedTuple

import torch


class ErrorStats(NamedTuple):
    max_abs: float
    mean_abs: float
    cosine: float  # of the flattened outputs; 1.0 is identical direction

    def __str__(self) -> str:
        return f"max abs {self.max_abs:.3g}, mean abs {self.mean_abs:.3g}, cosine {self.cosine:.6f}"


def error_stats(out: torch.Tensor, ref: torch.Tensor) -> ErrorStats:
    a, b = out.detach().double().flatten(), ref.detach().double().flatten()
    diff = (a - b).abs()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=0)
    return ErrorStats(float(diff.max()), float(diff.mean()), float(cos))
