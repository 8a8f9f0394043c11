"""Where each session's keys and values sit: the two variable-length layouts, as one description.

Attention kernels take the keys/values of a batch of sessions with different lengths in
either of two forms, and both reduce to the same addressing
`key n of sample b, head h = k[rows[b], h, starts[b] + n]`, `0 <= n < lengths[b]`:

- **slotted** (the KV pool's native layout, zero copies): `k, v (num_slots, H, max_keys, D)`,
  e.g. `pool.k[layer]`, with `slots (B,)` and `lengths (B,)`; rows = slots, starts = 0.
- **packed** (flash-attention's varlen layout): `k, v (total_keys, H, D)` with
  `cu_seqlens (B+1,)` int32 offsets; viewed as `(1, H, total_keys, D)`, rows = 0,
  starts = cu_seqlens[:-1].
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

IntsLike = torch.Tensor | Sequence[int]


@dataclass(frozen=True)
class KVLayout:
    k: torch.Tensor  # (R, H, N, D), any strides
    v: torch.Tensor  # (R, H, N, D)
    rows: torch.Tensor  # (B,) int32, on k's device, or on the host for the references
    starts: torch.Tensor  # (B,) int32, likewise
    lengths: torch.Tensor  # (B,) int32, each >= 1 (a chunk always sees its own keys), likewise
    max_len: int | None  # host-side upper bound on lengths, when known without a device sync

    @property
    def batch(self) -> int:
        return self.rows.shape[0]

    def samples(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """(b, k, v) for each sample b with at least one key: views (H, n, D) of what it sees.

        For the torch references: a host loop over the spans. Built with `index_device="cpu"`
        from Python ints, reading them costs nothing; indices on a GPU are read back (a sync).
        """
        spans = zip(self.rows.tolist(), self.starts.tolist(), self.lengths.tolist(), strict=True)
        for b, (r, s, n) in enumerate(spans):
            if n > 0:
                yield b, self.k[r, :, s : s + n], self.v[r, :, s : s + n]


def host_to(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor (indices built from Python ints) on `device`. To a GPU it goes pinned and
    non-blocking: a plain copy from pageable memory waits for the GPU queue to drain."""
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def _ints(x: IntsLike, device: torch.device, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        if x.dim() != 1 or x.dtype.is_floating_point:
            raise ValueError(f"{name} must be a 1-D integer tensor, got {tuple(x.shape)} {x.dtype}")
        # A tensor stays where it is when the host is asked for: moving it would be the sync.
        return x.to(dtype=torch.int32) if device.type == "cpu" else x.to(device=device, dtype=torch.int32)
    return host_to(torch.tensor(list(x), dtype=torch.int32), device)


def kv_layout(
    q: torch.Tensor,  # (B, H, Nq, D)
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    slots: IntsLike | None = None,
    lengths: IntsLike | None = None,
    cu_seqlens: IntsLike | None = None,
    max_seqlen: int | None = None,
    index_device: torch.device | str | None = None,
) -> KVLayout:
    """Validate one of the two forms (see the module docstring) and describe it.

    The indices (rows, starts, lengths) go to `index_device`, default k's device: a Triton
    launch reads them there. The references loop over them on the host, so their callers pass
    "cpu": on a GPU, indices sent to the device would be read back by every call, a host-device
    sync that stalls the launch queue (three per call).
    """
    if q.dim() != 4:
        raise ValueError(f"q must be (B, H, Nq, D), got {tuple(q.shape)}")
    b, h, _, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")
    dev = q.device if index_device is None else torch.device(index_device)
    if cu_seqlens is not None:
        if slots is not None or lengths is not None:
            raise ValueError("pass either cu_seqlens (packed form) or slots + lengths (slotted form)")
        if k.dim() != 3 or k.shape[1:] != (h, d):
            raise ValueError(f"packed k/v must be (total_keys, {h}, {d}), got {tuple(k.shape)}")
        cu = _ints(cu_seqlens, dev, "cu_seqlens")
        if cu.shape[0] != b + 1:
            raise ValueError(f"cu_seqlens has {cu.shape[0]} entries for a batch of {b} (want {b + 1})")
        return KVLayout(
            k=k.permute(1, 0, 2).unsqueeze(0),
            v=v.permute(1, 0, 2).unsqueeze(0),
            rows=torch.zeros(b, dtype=torch.int32, device=dev),
            starts=cu[:-1],
            lengths=cu[1:] - cu[:-1],
            max_len=max_seqlen,
        )
    if slots is None or lengths is None:
        raise ValueError("pass cu_seqlens (packed form) or both slots and lengths (slotted form)")
    if k.dim() != 4 or k.shape[1] != h or k.shape[3] != d:
        raise ValueError(f"slotted k/v must be (num_slots, {h}, max_keys, {d}), got {tuple(k.shape)}")
    rows, lens = _ints(slots, dev, "slots"), _ints(lengths, dev, "lengths")
    if rows.shape[0] != b or lens.shape[0] != b:
        raise ValueError(
            f"slots ({rows.shape[0]}) and lengths ({lens.shape[0]}) must have one entry per sample ({b})"
        )
    if not isinstance(lengths, torch.Tensor) and any(not 0 < n <= k.shape[2] for n in lengths):
        raise ValueError(f"lengths {list(lengths)} must lie in [1, {k.shape[2]}]")
    return KVLayout(
        k=k,
        v=v,
        rows=rows,
        starts=torch.zeros(b, dtype=torch.int32, device=dev),
        lengths=lens,
        max_len=k.shape[2] if max_seqlen is None else max_seqlen,
    )
