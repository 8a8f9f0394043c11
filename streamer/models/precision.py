"""The precision a model computes in, checked against the hardware before any weight is read.

`fp32` everywhere, or `bf16`: the forward passes under `torch.autocast` in bfloat16 (which
tensors a model keeps in fp32 is its own choice; the embedded model's is in docs/model.md).
bf16 pays only where the hardware has it: on a CPU without native bf16 (AVX512-BF16, AMX-BF16,
or Arm's BF16) torch emulates it, slower than fp32 while still losing precision. So such a
request is a `PrecisionError` (a ValueError: `streamer serve` reports it and exits 2), never a
quiet fp32.

`auto` (what `streamer serve` asks for by default) is bf16 where it has been measured to pay and
fp32 elsewhere: `resolve_precision` decides, and the server logs what it chose.
"""

from __future__ import annotations

import contextlib

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PRECISIONS = tuple(DTYPES)
AUTO = "auto"
# torch.cpu.get_capabilities() keys that mean bf16 dot products in hardware (x86, then arm64).
NATIVE_BF16_CPU_FEATURES = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16")
# ... and the ones `auto` takes bf16 on. AMX's tile units are where bf16 was measured to pay on a
# CPU: the embedded model's batches of 8-16 run 1.5-1.7x faster than in fp32, one stream at the
# same rate, with the same quality figures (docs/model.md, Precision). Other native-bf16 CPUs
# (AVX512-BF16 alone, Arm) have not been measured, so `auto` leaves them in fp32.
FAST_BF16_CPU_FEATURES = ("amx_bf16",)


class PrecisionError(ValueError):
    """An unknown precision, or one this device cannot compute in natively."""


def _cpu_has_any(features: tuple[str, ...]) -> bool:
    caps = torch.cpu.get_capabilities()
    return any(caps.get(name, False) for name in features)


def native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return _cpu_has_any(NATIVE_BF16_CPU_FEATURES)


def resolve_precision(precision: str, device: torch.device) -> str:
    """`precision`, with `auto` made concrete for `device`: bf16 on a CPU with AMX-BF16, fp32
    elsewhere. On a GPU the embedded model's bf16 has not been measured (its GPU figures are
    fp32, docs/benchmarks.md), so `auto` is fp32 there too."""
    if precision != AUTO:
        if precision not in PRECISIONS:
            raise PrecisionError(f"precision must be one of {AUTO}, {', '.join(PRECISIONS)}, got {precision!r}")
        return precision
    return "bf16" if device.type == "cpu" and _cpu_has_any(FAST_BF16_CPU_FEATURES) else "fp32"


def check_precision(precision: str, device: torch.device) -> None:
    """A PrecisionError unless `precision` is known and `device` computes in it natively."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "bf16" and not native_bf16(device):
        if device.type == "cuda":
            what, looked_for = torch.cuda.get_device_name(device), "compute capability 8.0 or later"
        else:
            arch = torch.cpu.get_capabilities().get("architecture", "unknown")
            what, looked_for = f"this CPU ({arch})", ", ".join(NATIVE_BF16_CPU_FEATURES)
        raise PrecisionError(f"precision 'bf16' requested, but {what} has no native bf16 (looked for "
                             f"{looked_for}); emulated bf16 would be slower than fp32: use precision fp32")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The compute context of a forward pass: bf16 autocast, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])
