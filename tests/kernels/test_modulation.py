"""Fused adaptive-norm modulation and gated residual: Triton (interpreted) against the unfused torch code."""

import pytest
import torch
from torch import nn

import kernels
from kernels.modulation import (
    gated_residual_reference,
    gated_residual_triton,
    modulate_reference,
    modulate_triton,
)

from .conftest import needs_triton
from .helpers import assert_close

pytestmark = pytest.mark.kernels

# (B, T, P, C): single token, C not a power of two, the embedded model's P = 64 and C = 128,
# C over one 128 tile.
SHAPES = [(1, 1, 1, 16), (2, 3, 5, 48), (1, 2, 64, 128), (2, 1, 3, 200)]


def inputs(b, t, p, c, dtype=torch.float32):
    """x with a nonzero mean and spread per token; per-frame vectors as chunks of one projection."""
    x = torch.randn(b, t, p, c) * 2.0 + torch.randn(b, t, p, 1)
    mods = torch.randn(b, t, 1, 3 * c) * 0.5  # (B, T, 1, 3C), as dit.py's ada(c)[:, :, None]
    shift, scale, gate = mods.chunk(3, dim=-1)  # strided views, not copies
    y = torch.randn(b, t, p, c)
    return [z.to(dtype) for z in (x, shift, scale, gate, y)]


@needs_triton
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_modulate_triton(shape, dtype):
    x, shift, scale, _, _ = inputs(*shape, dtype=dtype)
    ref = modulate_reference(x.float(), shift.float(), scale.float())
    assert_close(modulate_triton(x, shift, scale), ref, dtype)


@needs_triton
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gated_residual_triton(shape, dtype):
    x, _, _, gate, y = inputs(*shape, dtype=dtype)
    ref = gated_residual_reference(x.float(), gate.float(), y.float())
    assert_close(gated_residual_triton(x, gate, y), ref, dtype)


@needs_triton
def test_broadcast_frame_vectors_and_forced_dispatch(monkeypatch):
    """One vector per sample (B, 1, 1, C) broadcast over frames; x a non-contiguous view."""
    monkeypatch.setenv("STREAMER_KERNELS", "triton")
    x, shift, scale, gate, y = inputs(2, 3, 4, 32)
    x = x.transpose(1, 2).contiguous().transpose(1, 2)
    shift, scale, gate = shift[:, :1], scale[:, :1], gate[:, :1]
    assert_close(kernels.modulate(x, shift, scale), modulate_reference(x, shift, scale), torch.float32)
    assert_close(kernels.gated_residual(x, gate, y), gated_residual_reference(x, gate, y), torch.float32)


def test_references_are_the_dit_code():
    """modulate/gated_residual references = Block.forward's unfused lines, bit for bit."""
    x, shift, scale, gate, y = inputs(2, 3, 5, 48)
    norm = nn.LayerNorm(48, elementwise_affine=False, eps=1e-6)
    assert torch.equal(kernels.modulate(x, shift, scale), norm(x) * (1 + scale) + shift)
    assert torch.equal(kernels.gated_residual(x, gate, y), x + gate * y)


def test_bad_frame_vector_shape():
    x, shift, scale, _, _ = inputs(1, 2, 3, 16)
    with pytest.raises(ValueError, match="broadcast"):
        modulate_triton(x, shift[..., :8], scale)
