"""Adaptive-norm modulation of DiT blocks, per frame: reference and Triton.

- `modulate(x, shift, scale)` = LayerNorm(x, no affine, eps) * (1 + scale) + shift
- `gated_residual(x, gate, y)` = x + gate * y

x, y (B, T, P, C): P tokens of each of T frames; shift, scale, gate (B, T, 1, C): one vector
per frame, broadcast over its tokens (any broadcastable shape and strides, e.g. the chunks
of one `ada(c)` projection, are taken without a copy). Unfused, torch reads and writes the
(B, T, P, C) activations four times for `modulate` (norm, *, +, and the 1 + scale); the
kernel reads x once and writes once, with the statistics and arithmetic in fp32.

Each Triton program owns ROWS token rows of C channels (ROWS = 1 is row-per-program; more
rows per program when C is small keeps programs busy and the interpreter quick).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._triton import jit, next_pow2, tl

EPS = 1e-6


def modulate_reference(
    x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float = EPS
) -> torch.Tensor:
    """The unfused torch code of streamer/models/embedded/dit.py."""
    return F.layer_norm(x, x.shape[-1:], eps=eps) * (1 + scale) + shift


def gated_residual_reference(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + gate * y


def _frame_vectors(x: torch.Tensor, *vecs: torch.Tensor) -> list[torch.Tensor]:
    b, t, _, c = x.shape
    out = []
    for v in vecs:
        if v.dtype != x.dtype or v.device != x.device:
            raise ValueError(
                f"per-frame vectors must match x ({x.dtype}, {x.device}), got {v.dtype}, {v.device}"
            )
        try:
            v = v.expand(b, t, 1, c)  # (B, T, 1, C), strides 0 where broadcast
        except RuntimeError as e:
            raise ValueError(
                f"per-frame vector {tuple(v.shape)} does not broadcast to (B, T, 1, C) = {(b, t, 1, c)}"
            ) from e
        out.append(v if v.stride(3) == 1 else v.contiguous())
    return out


def _rows_config(c: int) -> tuple[int, int]:
    block_c = next_pow2(c)
    rows = max(1, min(16, 2048 // block_c))
    return block_c, rows


def _launch(kernel, x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b_: torch.Tensor, eps: float):
    if x.dim() != 4:
        raise ValueError(f"x must be (B, T, P, C), got {tuple(x.shape)}")
    x = x if x.stride(3) == 1 else x.contiguous()
    y = y if y.stride(3) == 1 else y.contiguous()
    bsz, t, p, c = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # contiguous (B, T, P, C)
    block_c, rows = _rows_config(c)
    n_rows = bsz * t * p
    kernel[(-(-n_rows // rows),)](
        x, y, a, b_, out,
        *x.stride()[:3], *y.stride()[:3], *a.stride()[:2], *b_.stride()[:2],
        t, p, c, n_rows, eps,
        ROWS=rows, BLOCK_C=block_c, num_warps=4 if block_c >= 1024 else 2,
    )  # fmt: skip
    return out


def modulate_triton(
    x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, eps: float = EPS
) -> torch.Tensor:
    shift, scale = _frame_vectors(x, shift, scale)
    return _launch(_modulate_kernel, x, x, shift, scale, eps)


def gated_residual_triton(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if y.shape != x.shape or y.dtype != x.dtype:
        raise ValueError(f"y {tuple(y.shape)} {y.dtype} must match x {tuple(x.shape)} {x.dtype}")
    (gate,) = _frame_vectors(x, gate)
    return _launch(_gated_residual_kernel, x, y, gate, gate, 0.0)


@jit
def _modulate_kernel(
    X, Y, SHIFT, SCALE, OUT,
    s_xb, s_xt, s_xp, s_yb, s_yt, s_yp, s_ab, s_at, s_bb, s_bt,
    T, P, C, N_ROWS, eps,
    ROWS: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # token rows of (B*T*P)
    c = tl.arange(0, BLOCK_C)
    r_ok = r < N_ROWS
    c_ok = c < C
    ok = r_ok[:, None] & c_ok[None, :]
    p = r % P
    t = (r // P) % T
    b = r // (P * T)
    x = tl.load(X + (b * s_xb + t * s_xt + p * s_xp)[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
    mean = tl.sum(x, 1) / C
    xc = tl.where(ok, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / C + eps)
    shift = tl.load(SHIFT + (b * s_ab + t * s_at)[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
    scale = tl.load(SCALE + (b * s_bb + t * s_bt)[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
    out = xc * rstd[:, None] * (1.0 + scale) + shift
    tl.store(OUT + r[:, None] * C + c[None, :], out.to(OUT.dtype.element_ty), mask=ok)


@jit
def _gated_residual_kernel(
    X, Y, GATE, _UNUSED, OUT,
    s_xb, s_xt, s_xp, s_yb, s_yt, s_yp, s_gb, s_gt, s_ub, s_ut,
    T, P, C, N_ROWS, eps,
    ROWS: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK_C)
    ok = (r < N_ROWS)[:, None] & (c < C)[None, :]
    p = r % P
    t = (r // P) % T
    b = r // (P * T)
    x = tl.load(X + (b * s_xb + t * s_xt + p * s_xp)[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
    y = tl.load(Y + (b * s_yb + t * s_yt + p * s_yp)[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
    gate = tl.load(GATE + (b * s_gb + t * s_gt)[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + r[:, None] * C + c[None, :], (x + gate * y).to(OUT.dtype.element_ty), mask=ok)
