"""Kernel tests run the Triton kernels through Triton's CPU interpreter (TRITON_INTERPRET=1).

The interpreter is 100-3000x slower than torch, so every shape here is tiny; the GPU
figures come from benchmarks/kernels_gpu.py.
"""

import pytest
import torch

from kernels._triton import HAS_TRITON, INSTALL_HINT

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason=INSTALL_HINT)


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    # kernels/_triton.py's jit reads the mode at launch, so setting it here is enough whatever
    # imported `kernels` first; the default dispatch must not see it (tests select explicitly).
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("STREAMER_KERNELS", raising=False)
    torch.manual_seed(0)
