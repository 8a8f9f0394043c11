"""`benchmarks/engine.py` as a command: the device check (no model is built on a machine without
the device asked for). Its figures are not tested here; docs/benchmarks.md records them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_device_cuda_without_cuda_exits_2_with_a_clear_message():
    proc = subprocess.run([sys.executable, "benchmarks/engine.py", "--quick", "--json", "--device", "cuda"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "CUDA is not available" in proc.stderr and "--device cpu" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""  # no result line: nothing ran


def test_flop_counter_counts_the_cpus_fused_attention():
    """MFU's numerator: on the CPU, SDPA runs as `_scaled_dot_product_flash_attention_for_cpu`,
    which torch's own counter scores as 0 FLOPs."""
    import torch.nn.functional as F

    from benchmarks.engine import flop_counter

    b, h, nq, nk, d = 2, 2, 8, 24, 16
    q, k = torch.randn(b, h, nq, d), torch.randn(b, h, nk, d)
    with flop_counter() as counter:
        F.scaled_dot_product_attention(q, k, k)
    assert counter.get_total_flops() == 2 * (2 * b * h * nq * nk * d)  # Q K^T, then P V
