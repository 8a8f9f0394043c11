"""Which implementation a kernel call runs: the Triton kernel or its PyTorch reference.

Default: Triton when it is installed, the tensors are on a CUDA device and the call's shape
is one where the kernel measured faster (`use_triton(..., pays=)`); the reference everywhere
else (a CPU never takes the interpreter by default: it is 100-3000x slower), and inside code
that torch.compile traces (inductor compiles the reference's ops).
`STREAMER_KERNELS=reference|triton` forces one. Forcing `triton` on CPU tensors needs
`TRITON_INTERPRET=1` (Triton's interpreter, used by the tests); without it the call raises
instead of failing deep inside Triton with "0 active drivers". Whatever the choice, a call
whose inputs need gradients runs the reference: the Triton kernels have no backward.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from ._triton import HAS_TRITON, INSTALL_HINT, interpreting, triton_version

ENV = "STREAMER_KERNELS"
CHOICES = ("reference", "triton")


class Choice(NamedTuple):
    name: str  # "reference" or "triton"
    reason: str


def backend(device: torch.device | str | None = None) -> Choice:
    """The implementation dispatch picks for tensors on `device` (default: CUDA if present), and why."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    forced = os.environ.get(ENV, "").strip().lower()
    if forced and forced not in CHOICES:
        raise ValueError(f"{ENV}={forced!r}: expected one of {', '.join(CHOICES)} (or unset)")
    if forced == "reference":
        return Choice("reference", f"forced by {ENV}=reference")
    if forced == "triton":
        if not HAS_TRITON:
            raise ImportError(f"{ENV}=triton: {INSTALL_HINT}")
        if dev.type != "cuda" and not interpreting():
            raise RuntimeError(
                f"{ENV}=triton with tensors on {dev.type}: Triton needs a CUDA device, "
                "or TRITON_INTERPRET=1 to run its (very slow) interpreter on CPU"
            )
        mode = "interpreter, TRITON_INTERPRET=1" if interpreting() else "compiled"
        return Choice("triton", f"forced by {ENV}=triton ({mode})")
    if dev.type != "cuda":
        return Choice("reference", f"tensors on {dev.type}: Triton kernels run on CUDA devices only")
    if not HAS_TRITON:
        return Choice("reference", INSTALL_HINT)
    return Choice("triton", f"tensors on {dev} and Triton {triton_version()} installed")


def use_triton(*tensors: torch.Tensor, pays: bool = True) -> bool:
    """Run the Triton kernel for this call? Never when autograd needs gradients through it:
    the kernels are forward-only (inference), the references are differentiable. Never while
    torch.compile traces the call either: inductor fuses the reference's torch ops with their
    neighbours (and records them in its CUDA graphs), where a hand-written launch stays opaque.

    `pays`: whether the call's shape is one where the kernel measured faster than the torch
    path on a GPU (each kernel's caller decides, kernels/__init__.py). By default a call where
    it does not pay takes the torch path; STREAMER_KERNELS=triton runs Triton whatever the shape.
    """
    if torch.compiler.is_compiling():
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if backend(tensors[0].device).name != "triton":
        return False
    return pays or os.environ.get(ENV, "").strip().lower() == "triton"
