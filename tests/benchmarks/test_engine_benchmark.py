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


async def test_a_run_reports_what_its_cost_model_learned_beside_the_calibration():
    """`learned_ms` is how far the engine's batches ran from the start-up calibration (the GPU run
    of session 14 admitted 6 of 8 because its calibration was fast): it must be the run's own
    cost model, in the calibration's units, not the calibration again."""
    from benchmarks.engine import calibrate_once, ms_table, run_mode
    from streamer.engine_factory import tiny_embedded

    model = tiny_embedded()
    calibration = calibrate_once(model, model.spec.default_steps, 2)
    fake = {key: seconds * 3 for key, seconds in calibration.items()}  # a calibration 3x too slow
    run = await run_mode(model, "deadline", 2, 1.5, 8.0, 0.1, fake, {"step_reuse": None, "commit_reuse": False})
    assert run["admitted"] == 2 and run["chunks"] > 0
    learned, started = run["learned_ms"], ms_table(fake)
    assert set(learned) >= {"denoise@1", "commit@1"}
    # It moved off the table it started from, towards the real batches (how far depends on the
    # machine's load, which a test must not assert on), and stayed in its units (ms, not s).
    assert learned["denoise@1"] != started["denoise@1"]
    assert started["denoise@1"] / 100 < learned["denoise@1"] < started["denoise@1"] * 100
