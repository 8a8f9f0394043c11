"""Low-precision chunk attention: int8 Q.K^T with per-block scales (SageAttention-style), reference and Triton.

Same interface and layouts as `chunk_attention` (kernels/varlen.py). The scores are computed
from int8 operands with one symmetric scale per BLOCK_M rows of Q and per BLOCK_N keys of K
(per sample, per head); P.V stays in the input dtype (fp16/bf16 on tensor cores, fp32 for
fp32 inputs) with fp32 accumulation. K is first smoothed by subtracting its mean over the
sample's keys: softmax is invariant to adding q.mean(K) to every score of a row, so the
result is unchanged in exact arithmetic, while the channel-wise outliers of K (shared by all
keys) no longer eat the int8 range.

Triton path, three launches: (1) per-block partial sums of K (deterministic, no atomics),
summed into the mean in torch; (2) smoothing + per-block quantisation of K into an int8
buffer (B, H, keys, D) with scales (B, H, blocks); (3) the attention kernel of
kernels/chunk_attention.py with INT8 set, which quantises each Q block in registers and
reads V straight from the caller's layout. The reference emulates the same arithmetic in
torch (integers held exactly in fp32), so CPU and GPU results agree to rounding.

Approximate by design: report its error against the exact kernel (kernels/error.py) before
turning it on.
"""

from __future__ import annotations

import torch

from ._triton import cdiv, jit, next_pow2, tl
from .chunk_attention import launch_attention, launch_config
from .varlen import KVLayout

SUM_BLOCK = 128  # keys per program when summing K


def quantize_blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (H, N, D) fp32 -> (integers in [-127, 127] as fp32 (H, N, D), scale per row (H, N, 1)).

    One symmetric scale per `block` consecutive rows (per head), rounding half away from zero.
    """
    h, n, d = x.shape
    nb = cdiv(n, block)
    padded = torch.nn.functional.pad(x, (0, 0, 0, nb * block - n))  # zeros do not move absmax
    absmax = padded.reshape(h, nb, block * d).abs().amax(-1)  # (H, nb)
    scale = absmax.clamp_min(1e-30) / 127.0
    rows = scale.repeat_interleave(block, dim=1)[:, :n, None]  # (H, N, 1)
    y = x / rows
    return torch.trunc(y + 0.5 * torch.sign(y)), rows


def int8_chunk_attention_reference(
    q: torch.Tensor,
    kv: KVLayout,
    scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Torch emulation of the int8 kernel's arithmetic. q (B, H, Nq, D) -> (B, H, Nq, D).

    Quantisation blocks default to the Triton launch's tiles, so the error is the one a GPU has.
    """
    d = q.shape[-1]
    cfg = launch_config(d, q.dtype, int8=True, block_m=block_m, block_n=block_n)
    sm_scale = d**-0.5 if scale is None else scale
    out = torch.zeros_like(q)  # a sample with no keys gets zeros
    for i, k, v in kv.samples():  # k, v: (H, n, D) views
        k = k.float()
        k = k - k.mean(dim=1, keepdim=True)
        qi, qs = quantize_blocks(q[i].float(), cfg.block_m)  # (H, Nq, D), (H, Nq, 1)
        ki, ks = quantize_blocks(k, cfg.block_n)  # (H, n, D), (H, n, 1)
        scores = (qi @ ki.transpose(1, 2)) * qs * ks.transpose(1, 2) * sm_scale  # (H, Nq, n)
        p = torch.exp(scores - scores.amax(-1, keepdim=True))
        # P rounded to V's dtype, as the kernel feeds it to the tensor cores; fp32 products/sums.
        out[i] = ((p.to(v.dtype).float() @ v.float()) / p.sum(-1, keepdim=True)).to(q.dtype)
    return out


def int8_chunk_attention_triton(
    q: torch.Tensor,
    kv: KVLayout,
    scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """q (B, H, Nq, D) -> (B, H, Nq, D). Needs kv.max_len (or syncs once to find it)."""
    b, h, _, d = q.shape
    cfg = launch_config(d, q.dtype, int8=True, block_m=block_m, block_n=block_n)
    bn = cfg.block_n
    max_len = kv.max_len if kv.max_len is not None else int(kv.lengths.max())
    blocks = max(1, cdiv(max_len, bn))
    sum_blocks = max(1, cdiv(max_len, SUM_BLOCK))
    block_d = next_pow2(d)
    dev = q.device

    k_int8 = torch.empty(b, h, blocks * bn, d, dtype=torch.int8, device=dev)
    k_scales = torch.empty(b, h, blocks, dtype=torch.float32, device=dev)
    lengths = kv.lengths.clamp_min(1).to(torch.float32)
    args = (kv.k, kv.rows, kv.starts, kv.lengths, *kv.k.stride(), h, d)

    # Programs past a sample's length write nothing; their partial sums must read as zero.
    partial = torch.zeros(b, h, sum_blocks, d, dtype=torch.float32, device=dev)
    _smooth_quant_k_kernel[(sum_blocks, b * h)](
        *args, partial, partial, partial, *partial.stride()[:3], 0, 0, 0, 0, 0, 0,
        BLOCK_N=SUM_BLOCK, BLOCK_D=block_d, QUANTIZE=False,
    )  # fmt: skip
    mean = partial.sum(2) / lengths[:, None, None]  # (B, H, D)
    _smooth_quant_k_kernel[(blocks, b * h)](
        *args, mean, k_int8, k_scales, *mean.stride()[:2], 0, *k_int8.stride(), *k_scales.stride()[:2],
        BLOCK_N=bn, BLOCK_D=block_d, QUANTIZE=True,
    )  # fmt: skip
    return launch_attention(q, kv, scale, cfg, k_int8=k_int8, k_scales=k_scales)


@jit
def _smooth_quant_k_kernel(
    K, rows, starts, lengths,
    s_kr, s_kh, s_kn, s_kd,
    H, D,
    MEAN, K8, KS,
    s_mb, s_mh, s_mx,  # MEAN (B, H, D) or, when summing, the partial sums (B, H, blocks, D)
    s_8b, s_8h, s_8n, s_8d,
    s_sb, s_sh,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, QUANTIZE: tl.constexpr,
):  # fmt: skip
    """QUANTIZE=False: MEAN[b, h, blk] = sum of block blk's keys (fp32).
    QUANTIZE=True: K8[b, h, blk keys] = int8(K - MEAN[b, h]), KS[b, h, blk] = its scale."""
    blk = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    length = tl.load(lengths + b)
    if blk * BLOCK_N < length:
        row = tl.load(rows + b).to(tl.int64)
        start = tl.load(starts + b).to(tl.int64)
        n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        ok = (n < length)[:, None] & (offs_d < D)[None, :]
        k = tl.load(
            K + row * s_kr + h * s_kh + (start + n[:, None]) * s_kn + offs_d[None, :] * s_kd, mask=ok, other=0
        ).to(tl.float32)  # (BLOCK_N, BLOCK_D)
        if QUANTIZE:
            mean = tl.load(MEAN + b * s_mb + h * s_mh + offs_d, mask=offs_d < D, other=0.0)
            k = tl.where(ok, k - mean[None, :], 0.0)
            scale = tl.maximum(tl.max(tl.max(tl.abs(k), 1), 0), 1e-30) / 127.0
            k = k / scale
            k8 = tl.where(k >= 0, k + 0.5, k - 0.5).to(tl.int8)  # round half away from zero
            tl.store(K8 + b * s_8b + h * s_8h + n[:, None] * s_8n + offs_d[None, :] * s_8d, k8, mask=ok)
            tl.store(KS + b * s_sb + h * s_sh + blk, scale)
        else:
            tl.store(MEAN + b * s_mb + h * s_mh + blk * s_mx + offs_d, tl.sum(k, 0), mask=offs_d < D)
