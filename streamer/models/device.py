"""Which torch device a model runs on, checked before any weight is moved there.

`torch.device("cuda")` without a usable GPU fails only at the first copy, deep inside torch and
with a message about how torch was built. `resolve_device` fails first, with a `DeviceError`
(a ValueError, so `streamer serve` and the benchmarks report it and exit 2) that says what is
missing.
"""

from __future__ import annotations

import torch

DEVICE_CHOICES = ("cpu", "cuda")


class DeviceError(ValueError):
    """The requested device does not exist on this machine."""


def resolve_device(device: str | torch.device | None, default: str = "cpu") -> torch.device:
    """`device` (or `default` when None) as a torch.device that this process can use."""
    dev = torch.device(device if device is not None else default)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "no CUDA GPU is visible to this process")  # fmt: skip
            raise DeviceError(f"device {str(dev)!r} requested, but CUDA is not available: {why} "
                              f"(torch {torch.__version__}); use --device cpu")  # fmt: skip
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device {str(dev)!r} requested, but only {torch.cuda.device_count()} "
                              "CUDA device(s) are visible")  # fmt: skip
    elif dev.type != "cpu":
        raise DeviceError(f"device {str(dev)!r}: choose one of {', '.join(DEVICE_CHOICES)}")
    return dev


def synchronize(device: torch.device) -> None:
    """Wait for queued work on `device` (no-op on CPU), so wall-clock timers see its real cost."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
