"""Kernels for the hot paths of causal video models: Triton on CUDA, PyTorch references elsewhere.

    chunk_attention(q, k, v, slots=..., lengths=...)   # attention over each session's cache
    int8_chunk_attention(...)                           # the same with int8 Q.K^T (approximate)
    modulate(x, shift, scale)                           # LayerNorm(x) * (1 + scale) + shift
    gated_residual(x, gate, y)                          # x + gate * y
    backend(device)                                     # which implementation runs, and why

Each kernel module holds the Triton kernel beside the PyTorch reference its tests compare it
with; `kernels/dispatch.py` picks one per call: Triton for CUDA tensors when it is installed
and the call's shape is one where it measured faster (the thresholds below),
`STREAMER_KERNELS=reference|triton` to force. Where Triton does not run, chunk attention over
several sessions on a GPU takes one masked SDPA (`chunk_attention_padded`) rather than the
reference's per-sample loop, while the keys it gathers are few. Triton is optional:
`pip install -e .[triton]`.
See docs/kernels.md.
"""

from __future__ import annotations

import torch

from .chunk_attention import chunk_attention_padded, chunk_attention_reference, chunk_attention_triton
from .dispatch import Choice, backend, use_triton
from .error import ErrorStats, error_stats
from .int8_attention import int8_chunk_attention_reference, int8_chunk_attention_triton
from .modulation import (
    EPS,
    gated_residual_reference,
    gated_residual_triton,
    modulate_reference,
    modulate_triton,
)
from .varlen import IntsLike, kv_layout

__all__ = [
    "Choice",
    "ErrorStats",
    "backend",
    "chunk_attention",
    "error_stats",
    "gated_residual",
    "int8_chunk_attention",
    "modulate",
]


# Where the Triton kernels beat the torch path on a GPU, by benchmarks/kernels_gpu.py on one
# H200 (benchmarks/results/kernels_gpu.json, docs/kernels.md "Dispatch by the figures"). A
# Triton launch from Python costs ~0.05 ms there, a torch op ~0.02, so small calls are won by
# whoever launches least: attention over several sessions' short chunks (one launch instead of
# one per session: 0.14-0.25 ms against 0.28-0.48 for one masked SDPA and 0.65-1.18 for the
# loop, batch 16, embedded shapes), but not a batch of one (0.13 against SDPA's 0.06), and
# not Wan's 4,680-query chunks, where SDPA's own kernels are faster (7.4 against 9.7 ms, batch
# 8). The modulations pay on large activations only (Wan, batch 8: 0.13 against 0.24-0.43 ms;
# 0.06 against 0.02-0.04 at the embedded model's).
ATTENTION_TRITON_MAX_QUERIES = 1024
MODULATION_TRITON_MIN_ELEMENTS = 1 << 23
# The one masked SDPA over gathered keys (no Triton, several sessions) copies every sample's keys
# to the longest length: worth it while that copy is small (the embedded model's at batch 16 are
# 2^20 elements; Wan's at batch 8, 2^28, made it 3x slower than the loop).
PADDED_MAX_ELEMENTS = 1 << 24


def _indices_at(q: torch.Tensor, triton: bool) -> torch.device:
    """Where the layout's indices go: the kernel's device for Triton, the host for the references."""
    return q.device if triton else torch.device("cpu")


def chunk_attention(
    q: torch.Tensor,  # (B, H, Nq, D)
    k: torch.Tensor,  # slotted (num_slots, H, max_keys, D) | packed (total_keys, H, D)
    v: torch.Tensor,  # same as k
    *,
    slots: IntsLike | None = None,  # (B,) slot of each sample (slotted form)
    lengths: IntsLike | None = None,  # (B,) visible keys of each sample, >= 1 (slotted form)
    cu_seqlens: IntsLike | None = None,  # (B+1,) int32 offsets into k/v (packed form)
    scale: float | None = None,  # softmax scale, default 1/sqrt(D)
) -> torch.Tensor:
    """Full attention of each sample's Nq queries over its own keys. -> (B, H, Nq, D), q's dtype.

    Slotted form: sample b sees `k[slots[b], :, :lengths[b]]` (the KV pool's layout, read in
    place). Packed form: sample b sees `k[cu_seqlens[b]:cu_seqlens[b+1]]`.
    """
    b, h, nq, d = q.shape
    triton = use_triton(q, k, v, pays=b > 1 and nq <= ATTENTION_TRITON_MAX_QUERIES)
    kv = kv_layout(
        q, k, v, slots=slots, lengths=lengths, cu_seqlens=cu_seqlens, index_device=_indices_at(q, triton)
    )
    if triton:
        return chunk_attention_triton(q, kv, scale)
    if q.device.type == "cuda" and b > 1 and b * h * max(kv.lengths.tolist()) * d <= PADDED_MAX_ELEMENTS:
        return chunk_attention_padded(q, kv, scale)  # on a GPU the reference's launches are the cost
    return chunk_attention_reference(q, kv, scale)


def int8_chunk_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    slots: IntsLike | None = None,
    lengths: IntsLike | None = None,
    cu_seqlens: IntsLike | None = None,
    max_seqlen: int | None = None,  # packed form: host bound on lengths (else one device sync)
    scale: float | None = None,
) -> torch.Tensor:
    """`chunk_attention` with int8 Q.K^T (per-block scales, K smoothed). Approximate: see docs/kernels.md.

    The reference emulates the kernel's arithmetic (same blocks as the Triton launch would
    use), so a CPU run shows the error a GPU run would have; it is slower than the exact path.
    """
    triton = use_triton(q, k, v)
    kv = kv_layout(q, k, v, slots=slots, lengths=lengths, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen,
                   index_device=_indices_at(q, triton))  # fmt: skip
    if triton:
        return int8_chunk_attention_triton(q, kv, scale)
    return int8_chunk_attention_reference(q, kv, scale)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """LayerNorm(x, no affine) * (1 + scale) + shift. x (B, T, P, C); shift, scale (B, T, 1, C)."""
    if use_triton(x, shift, scale, pays=x.numel() >= MODULATION_TRITON_MIN_ELEMENTS):
        return modulate_triton(x, shift, scale, eps)
    return modulate_reference(x, shift, scale, eps)


def gated_residual(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + gate * y. x, y (B, T, P, C); gate (B, T, 1, C)."""
    if use_triton(x, gate, y, pays=x.numel() >= MODULATION_TRITON_MIN_ELEMENTS):
        return gated_residual_triton(x, gate, y)
    return gated_residual_reference(x, gate, y)
