"""Attention of a chunk's queries over each session's [sink + window + chunk] keys: reference and Triton.

Every session in a batch has the same number of chunk queries `Nq` but its own number of
visible keys. Attention is full (non-causal) over those keys, with softmax scale
1/sqrt(D) by default. Keys/values are addressed through `KVLayout` (kernels/varlen.py): the
pool's slots directly (no gather copy, no padding) or flash-attention's packed layout.

The Triton kernel is flash-attention forward: one program per (BLOCK_M queries, sample, head)
walks that sample's keys in BLOCK_N tiles with an online softmax in fp32 (exp2, scale folded
with log2 e), masking the ragged last tile, so a short session costs only its own tiles. The
same kernel serves the int8 path (kernels/int8_attention.py): with INT8 set, Q is quantised
per BLOCK_M block in registers and K comes pre-quantised per BLOCK_N block with its scales.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ._triton import cdiv, interpreting, jit, next_pow2, tl
from .varlen import KVLayout, host_to

LOG2E = 1.4426950408889634


def chunk_attention_reference(q: torch.Tensor, kv: KVLayout, scale: float | None = None) -> torch.Tensor:
    """q (B, H, Nq, D) -> (B, H, Nq, D): per-sample SDPA over views of the keys (no copy)."""
    out = torch.zeros_like(q)  # a sample with no keys gets zeros
    for i, k, v in kv.samples():  # k, v: (H, n, D) views
        # 4-D inputs: with 3-D ones torch's CPU dispatch falls back to the math kernel.
        out[i : i + 1] = F.scaled_dot_product_attention(q[i : i + 1], k[None], v[None], scale=scale)
    return out


def chunk_attention_padded(q: torch.Tensor, kv: KVLayout, scale: float | None = None) -> torch.Tensor:
    """q (B, H, Nq, D) -> (B, H, Nq, D): one SDPA call over keys gathered to the longest length, masked.

    For a GPU where Triton does not run (absent, or STREAMER_KERNELS=reference): the reference
    makes B SDPA launches and B copies, this one gather per K and V, one index copy and one SDPA. Padding
    positions repeat the sample's own last key (masked out), so nothing outside what a sample
    sees is read: a stale slot tail, even one holding NaN, cannot leak into the softmax.
    Needs the layout's indices on the host (`index_device="cpu"`) and every length >= 1.
    """
    b = kv.batch
    rows, starts, lengths = kv.rows.tolist(), kv.starts.tolist(), kv.lengths.tolist()
    if min(lengths) < 1:
        raise ValueError(f"padded attention needs every sample to see a key, got lengths {lengths}")
    span = torch.arange(max(lengths))
    n = torch.tensor(lengths)[:, None]
    index = torch.stack([
        torch.tensor(rows)[:, None].expand(b, span.shape[0]),  # slot row of each padded key
        torch.tensor(starts)[:, None] + torch.minimum(span[None, :], n - 1),  # its position
        (span[None, :] < n).long(),  # 1 where the key is real
    ])  # fmt: skip
    row, pos, real = host_to(index, q.device).unbind(0)
    k = kv.k.transpose(1, 2)[row, pos].transpose(1, 2)  # (B, H, L, D)
    v = kv.v.transpose(1, 2)[row, pos].transpose(1, 2)
    mask = real.bool()[:, None, None, :]  # (B, 1, 1, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class LaunchConfig(NamedTuple):
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


def launch_config(
    d: int, dtype: torch.dtype, *, int8: bool = False, block_m: int | None = None, block_n: int | None = None
) -> LaunchConfig:
    """Tile sizes and launch settings (FA2-style choices for Hopper; not autotuned yet).

    block_m/block_n override the tiles (the tests use 16 to cover several tiles on tiny shapes).
    """
    if dtype == torch.float32 and not int8:
        cfg = LaunchConfig(64, 32, 4, 2)
    elif d <= 64:
        cfg = LaunchConfig(64, 64, 4, 3)
    else:
        cfg = LaunchConfig(128, 64, 8, 3)
    return cfg._replace(block_m=block_m or cfg.block_m, block_n=block_n or cfg.block_n)


def launch_attention(
    q: torch.Tensor,  # (B, H, Nq, D)
    kv: KVLayout,
    scale: float | None,
    cfg: LaunchConfig,
    *,
    k_int8: torch.Tensor | None = None,  # (B, H, >= max_len, D) int8, for the INT8 path
    k_scales: torch.Tensor | None = None,  # (B, H, blocks) fp32 per cfg.block_n keys
) -> torch.Tensor:
    """The one launch of `_attention_kernel`, for the exact path and (with k_int8) the int8 one."""
    b, h, nq, d = q.shape
    out = torch.empty_like(q)
    sm_scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E
    int8 = k_int8 is not None and k_scales is not None
    k = k_int8 if k_int8 is not None else kv.k
    ks = k_scales if k_scales is not None else out  # unused placeholder when not INT8
    block_d = max(next_pow2(d), 32 if int8 else 16)  # tl.dot needs K >= 16 (>= 32 for int8)
    grid = (cdiv(nq, cfg.block_m), b * h)
    _attention_kernel[grid](
        q, k, kv.v, out, ks,
        kv.rows, kv.starts, kv.lengths,
        sm_scale,
        *q.stride(), *k.stride(), *kv.v.stride(), *out.stride(),
        ks.stride(0), ks.stride(1),
        h, nq, d,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=block_d,
        INT8=int8,
        # Triton 3.9's interpreter multiplies bf16 tiles as raw uint16 bits (garbage): there,
        # dot bf16 tiles upcast to fp32, which is what the MMA does (exact products, fp32 sums).
        BF16_DOT_IN_FP32=interpreting() and q.dtype == torch.bfloat16,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  # fp32 stays fp32: no TF32
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out


def chunk_attention_triton(
    q: torch.Tensor,
    kv: KVLayout,
    scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """q (B, H, Nq, D) -> (B, H, Nq, D) with the Triton kernel (block sizes overridable for tests)."""
    cfg = launch_config(q.shape[-1], q.dtype, block_m=block_m, block_n=block_n)
    return launch_attention(q, kv, scale, cfg)


@jit
def _attention_kernel(
    Q, K, V, Out, KS,
    rows, starts, lengths,
    sm_scale,
    s_qb, s_qh, s_qm, s_qd,
    s_kr, s_kh, s_kn, s_kd,
    s_vr, s_vh, s_vn, s_vd,
    s_ob, s_oh, s_om, s_od,
    s_sb, s_sh,
    H, NQ, D,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INT8: tl.constexpr, BF16_DOT_IN_FP32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    row = tl.load(rows + b).to(tl.int64)
    start = tl.load(starts + b).to(tl.int64)
    length = tl.load(lengths + b)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < NQ
    d_ok = offs_d < D

    q = tl.load(
        Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
        mask=m_ok[:, None] & d_ok[None, :],
        other=0,
    )  # (BLOCK_M, BLOCK_D)
    if INT8:
        # One symmetric scale per BLOCK_M rows of Q (padding rows are zero and do not count).
        qf = q.to(tl.float32)
        q_scale = tl.maximum(tl.max(tl.max(tl.abs(qf), 1), 0), 1e-30) / 127.0
        qf = qf / q_scale
        q = tl.where(qf >= 0, qf + 0.5, qf - 0.5).to(tl.int8)  # round half away from zero
        k_base = K + b * s_kr + h * s_kh  # pre-quantised K: (B, H, keys, D), from key 0
    else:
        if BF16_DOT_IN_FP32:
            q = q.to(tl.float32)
        k_base = K + row * s_kr + h * s_kh + start * s_kn
    v_base = V + row * s_vr + h * s_vh + start * s_vn

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, length, BLOCK_N):
        n = n0 + offs_n
        n_ok = n < length
        k = tl.load(
            k_base + n[:, None] * s_kn + offs_d[None, :] * s_kd,
            mask=n_ok[:, None] & d_ok[None, :],
            other=0,
        )  # (BLOCK_N, BLOCK_D); used transposed, as in Triton's fused-attention tutorial
        if INT8:
            k_scale = tl.load(KS + b * s_sb + h * s_sh + n0 // BLOCK_N)
            s = tl.dot(q, tl.trans(k)).to(tl.float32) * (q_scale * k_scale * sm_scale)
        else:
            if BF16_DOT_IN_FP32:
                k = k.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale
        s = tl.where(n_ok[None, :], s, float("-inf"))  # ragged tail
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every tile holds at least one key
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + n[:, None] * s_vn + offs_d[None, :] * s_vd,
            mask=n_ok[:, None] & d_ok[None, :],
            other=0,
        )  # (BLOCK_N, BLOCK_D)
        p = p.to(v.dtype)  # P.V on the tensor cores in the input dtype, fp32 accumulation
        if BF16_DOT_IN_FP32:
            p, v = p.to(tl.float32), v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # a sample with no keys gets zeros
    tl.store(
        Out + b * s_ob + h * s_oh + offs_m[:, None] * s_om + offs_d[None, :] * s_od,
        out.to(Out.dtype.element_ty),
        mask=m_ok[:, None] & d_ok[None, :],
    )
