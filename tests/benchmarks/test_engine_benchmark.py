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
