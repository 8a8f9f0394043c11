"""Kernels for the hot paths of causal video models: Triton on CUDA, PyTorch references elsewhere.

    chunk_attention(q, k, v, slots=..., lengths=...)   # attention over each session's cache
    int8_chunk_attention(...)                           # the same with int8 Q.K^T (approximate)
    modulate(x, shift, scale)                           # LayerNorm(x) * (1 + scale) + shift
    gated_residual(x, gate, y)                          # x + gate * y
    backend(device)                                     # which implementation runs, and why

Each kernel module holds the Triton kernel beside the PyTorch reference its tests compare it
with; `kernels/dispatch.py` picks one per call (Triton for CUDA tensors when installed,
`STREAMER_KERNELS=reference|triton` to force). Without Triton, chunk attention on a GPU takes one
masked SDPA over the batch (`chunk_attention_padded`) rather than the reference's per-sample
loop. Triton is optional: `pip install -e .[triton]`.
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
    triton = use_triton(q, k, v)
    kv = kv_layout(
        q, k, v, slots=slots, lengths=lengths, cu_seqlens=cu_seqlens, index_device=_indices_at(q, triton)
    )
    if triton:
        return chunk_attention_triton(q, kv, scale)
    if q.device.type == "cuda" and kv.batch > 1:
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
    if use_triton(x, shift, scale):
        return modulate_triton(x, shift, scale, eps)
    return modulate_reference(x, shift, scale, eps)


def gated_residual(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + gate * y. x, y (B, T, P, C); gate (B, T, 1, C)."""
    if use_triton(x, gate, y):
        return gated_residual_triton(x, gate, y)
    return gated_residual_reference(x, gate, y)
