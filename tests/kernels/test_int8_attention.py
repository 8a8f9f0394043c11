"""int8 Q.K^T chunk attention: Triton (interpreted) against its torch emulation, and the error against exact attention."""

import pytest
import torch

import kernels
from kernels.chunk_attention import chunk_attention_reference
from kernels.error import error_stats
from kernels.int8_attention import int8_chunk_attention_reference, int8_chunk_attention_triton
from kernels.varlen import kv_layout

from .conftest import needs_triton
from .helpers import pack, slotted_inputs

pytestmark = pytest.mark.kernels

# Triton against the emulation: same arithmetic, so only summation order and the rare rounding
# boundary flip of one int8 value differ (tiles 16 x 16).
TOL_EMULATION = {torch.float32: 1e-3, torch.float16: 3e-3, torch.bfloat16: 2e-2}
# The emulation against exact attention, unit-variance inputs: stated bounds for the approximation.
MAX_ABS, MEAN_ABS, MIN_COSINE = 0.05, 0.01, 0.999

CASES = [
    (1, 2, 7, 32, [5]),
    (3, 2, 20, 64, [37, 1, 50]),
    (2, 1, 33, 16, [48, 17]),
]


@needs_triton
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}Nq{c[2]}D{c[3]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_triton_matches_emulation(case, dtype):
    b, h, nq, d, lengths = case
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths, dtype=dtype)
    kv = kv_layout(q, k, v, slots=slots, lengths=lengths)
    out = int8_chunk_attention_triton(q, kv, block_m=16, block_n=16)
    ref = int8_chunk_attention_reference(q, kv, block_m=16, block_n=16)
    tol = TOL_EMULATION[dtype]
    torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=tol)


@needs_triton
def test_triton_packed_form_and_fp16():
    b, h, nq, d, lengths = 2, 2, 20, 32, [37, 50]
    q, k, v, slots = slotted_inputs(b, h, nq, d, lengths, dtype=torch.float16)
    kp, vp, cu = pack(k, v, slots, lengths)
    kv = kv_layout(q, kp, vp, cu_seqlens=cu, max_seqlen=max(lengths))
    out = int8_chunk_attention_triton(q, kv, block_m=16, block_n=16)
    ref = int8_chunk_attention_reference(q, kv, block_m=16, block_n=16)
    torch.testing.assert_close(out.float(), ref.float(), rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("d", [16, 32, 64])
def test_error_against_exact_attention(d):
    """The figure to judge int8 by: stated bounds, printed (pytest -s) for docs/kernels.md."""
    lengths = [200, 77]
    q, k, v, slots = slotted_inputs(2, 2, 64, d, lengths)
    k[slots[0]] += 4.0 * torch.randn(d)  # a channel-wise offset in K, as real models have
    kv = kv_layout(q, k, v, slots=slots, lengths=lengths)
    exact = chunk_attention_reference(q, kv)
    err = error_stats(int8_chunk_attention_reference(q, kv, block_m=64, block_n=64), exact)
    print(f"int8 vs exact, D={d}: {err}")
    assert err.max_abs < MAX_ABS and err.mean_abs < MEAN_ABS and err.cosine > MIN_COSINE, err


def test_smoothing_makes_a_shared_key_offset_harmless():
    """Adding one vector to all of a sample's keys leaves softmax unchanged; smoothed int8 too."""
    lengths = [40, 23]
    q, k, v, slots = slotted_inputs(2, 2, 16, 32, lengths)
    kv = kv_layout(q, k, v, slots=slots, lengths=lengths)
    base = int8_chunk_attention_reference(q, kv, block_m=16, block_n=16)
    k2 = k.clone()
    k2[slots[0], :, : lengths[0]] += 20.0 * torch.randn(32)  # 20x the keys' own spread
    shifted = int8_chunk_attention_reference(
        q, kv_layout(q, k2, v, slots=slots, lengths=lengths), block_m=16, block_n=16
    )
    assert error_stats(shifted, base).max_abs < 1e-3


def test_dispatch_reference_on_cpu():
    lengths = [30, 9]
    q, k, v, slots = slotted_inputs(2, 2, 16, 32, lengths)
    out = kernels.int8_chunk_attention(q, k, v, slots=slots, lengths=lengths)
    exact = kernels.chunk_attention(q, k, v, slots=slots, lengths=lengths)
    assert error_stats(out, exact).cosine > MIN_COSINE
