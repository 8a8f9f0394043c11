"""`benchmarks/wan_gpu.py` on the tiny random Wan, on the CPU: what it times is the engine's step
code (its chunks are `rollout`'s, which shares `streamer/chunk_steps.py` with the batch runner),
and `--smoke` writes the JSON keys outside scripts read. Its GPU figures are not tested here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

from benchmarks import wan_gpu  # noqa: E402
from streamer.models.embedded.rollout import Script, rollout  # noqa: E402
from tests.wan.helpers import tiny  # noqa: E402

pytestmark = pytest.mark.wan
ROOT = Path(__file__).resolve().parents[2]


@torch.no_grad()
def test_run_chunk_makes_the_chunks_rollout_makes():
    model = tiny()
    pool = model.new_pool(1)
    slot = pool.allocate()
    prompt = model.encode_prompt([wan_gpu.PROMPT])[0]
    gen = torch.Generator().manual_seed(5)
    timer = wan_gpu.Timer(model.device)
    chunks = [wan_gpu.run_chunk(model, pool, [slot], [prompt], gen, timer) for _ in range(2)]
    pool.release(slot)

    f = model.spec.frames_per_chunk
    script = Script([wan_gpu.PROMPT] * 2, np.zeros(2 * f, np.int64), np.zeros((2 * f, 0), np.float32))
    expected = rollout(model, [script], seed=5, sampler="renoise").frames[0]
    np.testing.assert_array_equal(np.concatenate([frames[0] for frames, _ in chunks]), expected)
    for _, phases in chunks:
        assert all(phases[k] > 0 for k in ("denoise_s", "decode_s", "commit_s"))
        assert phases["chunk_s"] == pytest.approx(phases["denoise_s"] + phases["decode_s"] + phases["commit_s"])


def test_smoke_writes_the_documented_keys(tmp_path):
    out = tmp_path / "wan.json"
    proc = subprocess.run([sys.executable, "benchmarks/wan_gpu.py", "--smoke", "--streams", "1,2", "--chunks", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    result = json.loads(out.read_text())
    assert set(result) == {"benchmark", "gpu", "note", "versions", "config", "build_s", "prompt_encode_s",
                           "time_to_first_chunk_s", "first_chunk", "streams", "peak_memory_gib", "kv_pool_gib",
                           "anchors", "goals"}  # fmt: skip
    assert [row["streams"] for row in result["streams"]] == [1, 2]
    assert set(result["streams"][0]) == {"streams", "denoise_s", "decode_s", "commit_s", "chunk_s", "denoise_step_s",
                                         "fps_aggregate", "fps_per_stream", "peak_memory_gib"}  # fmt: skip
    assert set(result["first_chunk"]) == {"denoise_s", "decode_s", "commit_s", "chunk_s"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_without_cuda_exits_2_and_says_so():
    proc = subprocess.run([sys.executable, "benchmarks/wan_gpu.py", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "--smoke" in proc.stderr
