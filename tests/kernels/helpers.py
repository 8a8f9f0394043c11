"""Shared inputs and tolerances for the kernel tests."""

from __future__ import annotations

import torch

# (rtol, atol) of a kernel's output against the fp32 reference of the same (rounded) inputs.
# fp32: summation order only. fp16/bf16: one rounding of P before P.V and of the output; the
# interpreter also rounds fp32 -> bf16 by truncation (a GPU rounds to nearest): up to 2^-7.
TOL = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (3e-3, 3e-3),
    torch.bfloat16: (2e-2, 2e-2),
}


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    rtol, atol = TOL[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.float(), rtol=rtol, atol=atol)


def slotted_inputs(b, h, nq, d, lengths, *, dtype=torch.float32, slots_total=None, layers=2, layer=1):
    """q and a pool-shaped cache (layers, slots, H, capacity, D) whose unused tails hold large junk.

    Returns q, k_pool[layer], v_pool[layer], slots: the views a KV pool would pass.
    """
    slots_total = slots_total or b + 2
    cap = max(lengths) + 5
    q = torch.randn(b, h, nq, d)
    k = torch.randn(layers, slots_total, h, cap, d) * 100  # junk: must never be read
    v = torch.randn(layers, slots_total, h, cap, d) * 100
    slots = torch.randperm(slots_total)[:b].tolist()
    for s, n in zip(slots, lengths, strict=True):
        k[layer, s, :, :n] = torch.randn(h, n, d) + 0.5  # nonzero mean: smoothing matters
        v[layer, s, :, :n] = torch.randn(h, n, d)
    return q.to(dtype), k[layer].to(dtype), v[layer].to(dtype), slots


def pack(k_slots, v_slots, slots, lengths):
    """Slotted -> packed (total_keys, H, D) + cu_seqlens."""
    ks = [k_slots[s, :, :n].transpose(0, 1) for s, n in zip(slots, lengths, strict=True)]
    vs = [v_slots[s, :, :n].transpose(0, 1) for s, n in zip(slots, lengths, strict=True)]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return torch.cat(ks).contiguous(), torch.cat(vs).contiguous(), cu
