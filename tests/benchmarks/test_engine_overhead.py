"""`benchmarks/engine_overhead.py` on the tiny model: the per-chunk accounting adds up and the
ratios are against the same run's calibration. Its figures are in docs/benchmarks.md."""

from __future__ import annotations

import json

import pytest

from benchmarks import engine_overhead


def test_per_chunk_parts_fit_in_the_wall_time_and_ratios_use_the_calibration(tmp_path):
    out = tmp_path / "overhead.json"
    engine_overhead.main(["--config", "tiny-random", "--seconds", "1", "--threads", "1", "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["chunks"] > 0
    parts = r["per_chunk_ms"]
    assert set(parts) == {"schedule", "update", "denoise_batches", "commit_batches"}
    # One model thread does all of it in turn, so its parts cannot exceed the wall time.
    assert sum(parts.values()) <= r["wall_per_chunk_ms"]
    assert parts["denoise_batches"] == pytest.approx(r["steps"] * r["per_call_ms"]["denoise"], rel=0.3)
    assert r["ratios"]["denoise_engine_over_calibration"] == pytest.approx(
        r["per_call_ms"]["denoise"] / r["calibrated_ms"]["denoise"])
