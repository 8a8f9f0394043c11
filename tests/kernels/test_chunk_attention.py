"""Variable-length chunk attention: Triton (interpreted) against the reference, the reference against SDPA."""

import math

import pytest
import torch

import kernels
from kernels.chunk_attention import chunk_attention_padded, chunk_attention_reference, chunk_attention_triton
from kernels.varlen import kv_layout

from .conftest import needs_triton
from .helpers import assert_close, pack, slotted_inputs

pytestmark = pytest.mark.kernels

# (B, H, Nq, D, lengths): block multiples, Nq and lengths below one tile, ragged tails, a
# one-key session, B = 1 and B > 1, D = 16 / 32 / 64. Tiles are 16 x 16 unless stated.
CASES = [
    (1, 1, 16, 16, [32]),
    (1, 2, 7, 32, [5]),
    (3, 2, 20, 64, [37, 1, 50]),
    (2, 3, 33, 16, [48, 17]),
]


def naive(q, k_list, v_list, scale=None):
    """softmax(q k^T * scale) v per sample in float64. k_list[b] (H, n, D)."""
    outs = []
    for i, (k, v) in enumerate(zip(k_list, v_list, strict=True)):
        s = q[i].double() @ k.double().transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
        outs.append(torch.softmax(s, -1) @ v.double())
    return torch.stack(outs)


@needs_triton
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}Nq{c[2]}D{c[3]}L{'-'.join(map(str, c[4]))}"
)
@pytest.mark.parametrize("form", ["slotted", "packed"])
def test_triton_matches_reference_fp32(case, form):
    b, h, nq, d, lengths = case
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths)
    if form == "slotted":
        kv = kv_layout(q, k, v, slots=slots, lengths=lengths)
    else:
        kp, vp, cu = pack(k, v, slots, lengths)
        kv = kv_layout(q, kp, vp, cu_seqlens=cu)
    ref = chunk_attention_reference(q, kv)
    out = chunk_attention_triton(q, kv, block_m=16, block_n=16)
    assert_close(out, ref, torch.float32)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_triton_low_precision_inputs(dtype):
    b, h, nq, d, lengths = 2, 2, 20, 32, [37, 50]
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths, dtype=dtype)
    out = chunk_attention_triton(q, kv_layout(q, k, v, slots=slots, lengths=lengths), block_m=16, block_n=16)
    kv32 = kv_layout(q.float(), k.float(), v.float(), slots=slots, lengths=lengths)
    assert_close(out, chunk_attention_reference(q.float(), kv32), dtype)


@needs_triton
def test_triton_default_tiles_and_strided_queries():
    """The launch config's own tiles (64), and q as a transposed (B, N, H, D) view."""
    b, h, nq, d, lengths = 2, 2, 70, 32, [130, 75]
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # (B, H, Nq, D) with non-standard strides
    kv = kv_layout(q, k, v, slots=slots, lengths=lengths)
    assert_close(chunk_attention_triton(q, kv), chunk_attention_reference(q, kv), torch.float32)


@needs_triton
def test_dispatch_forced_triton_runs_triton(monkeypatch):
    monkeypatch.setenv("STREAMER_KERNELS", "triton")
    q, k, v, slots = slotted_inputs(2, 1, 16, 16, [20, 9])
    out = kernels.chunk_attention(q, k, v, slots=slots, lengths=[20, 9], scale=0.3)
    ref = chunk_attention_reference(q, kv_layout(q, k, v, slots=slots, lengths=[20, 9]), scale=0.3)
    assert_close(out, ref, torch.float32)


@pytest.mark.parametrize("case", CASES[1:3])
def test_reference_matches_naive_softmax(case):
    b, h, nq, d, lengths = case
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths)
    out = chunk_attention_reference(q, kv_layout(q, k, v, slots=slots, lengths=lengths))
    ks = [k[s, :, :n] for s, n in zip(slots, lengths, strict=True)]
    vs = [v[s, :, :n] for s, n in zip(slots, lengths, strict=True)]
    torch.testing.assert_close(out.double(), naive(q, ks, vs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}L{'-'.join(map(str, c[4]))}")
@pytest.mark.parametrize("form", ["slotted", "packed"])
def test_padded_matches_reference(case, form):
    """The GPU's torch path (one masked SDPA over gathered keys) against the per-sample loop."""
    b, h, nq, d, lengths = case
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths)
    if form == "packed":
        k, v, cu = pack(k, v, slots, lengths)
        kv = kv_layout(q, k, v, cu_seqlens=cu)
    else:
        kv = kv_layout(q, k, v, slots=slots, lengths=lengths)
    torch.testing.assert_close(chunk_attention_padded(q, kv, 0.3), chunk_attention_reference(q, kv, 0.3),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


def test_padded_never_reads_past_a_samples_keys():
    """A stale slot tail holding NaN (e.g. left by a failed session) must not reach the softmax."""
    lengths = [5, 40]
    q, k, v, slots = slotted_inputs(2, 2, 8, 16, lengths)
    want = chunk_attention_reference(q, kv_layout(q, k, v, slots=slots, lengths=lengths))
    k[slots[0], :, lengths[0] :] = float("nan")
    v[slots[0], :, lengths[0] :] = float("nan")
    out = chunk_attention_padded(q, kv_layout(q, k, v, slots=slots, lengths=lengths))
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


def test_reference_packed_equals_slotted():
    b, h, nq, d, lengths = 3, 2, 9, 16, [4, 30, 11]
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths)
    kp, vp, cu = pack(k, v, slots, lengths)
    a = kernels.chunk_attention(q, k, v, slots=slots, lengths=lengths)
    c = kernels.chunk_attention(q, kp, vp, cu_seqlens=cu)
    torch.testing.assert_close(a, c, rtol=0, atol=1e-6)


def test_layout_validation():
    q, k, v, slots = slotted_inputs(2, 2, 4, 16, [3, 5])
    with pytest.raises(ValueError, match="lengths"):
        kv_layout(q, k, v, slots=slots, lengths=[0, 5])
    with pytest.raises(ValueError, match="either"):
        kv_layout(q, k, v, slots=slots, lengths=[3, 5], cu_seqlens=[0, 3, 8])
    with pytest.raises(ValueError, match="one entry per sample"):
        kv_layout(q, k, v, slots=slots[:1], lengths=[3])
    with pytest.raises(ValueError, match="packed"):
        kv_layout(q, k, v, cu_seqlens=[0, 3, 8])
