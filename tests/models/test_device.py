"""Device placement of the embedded model: weights, prompts and the KV pool on the model's device,
inputs moved in and results handed back on the input's device and dtype (as the engine keeps its
tensors on the CPU). The CUDA tests run only where there is a GPU (`-m gpu`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streamer.engine_factory import tiny_embedded
from streamer.models.base import Conditioning
from streamer.models.device import DeviceError, resolve_device
from streamer.models.embedded.model import EmbeddedModel
from streamer.models.embedded.rollout import rollout
from streamer.models.embedded.scripts import story_scripts

PROMPTS = ["a red ball moving left on grass", "game: a blue character on sea"]


def cond_for(model: EmbeddedModel, b: int) -> Conditioning:
    spec, f = model.spec, model.spec.frames_per_chunk
    actions = torch.arange(b * f).reshape(b, f) % spec.num_actions
    controls = torch.linspace(0, 1, b * f * spec.control_dim).reshape(b, f, spec.control_dim)
    return Conditioning(model.encode_prompt(PROMPTS[:b]), actions, controls)


def roll(model: EmbeddedModel, chunks: int = 4, dtype: torch.dtype = torch.float32) -> dict[str, list]:
    """Every tensor the contract calls return over a few chunks (the window rolls), inputs on the CPU."""
    pool = model.new_pool(2)
    slots = [pool.allocate(), pool.allocate()]
    cond = cond_for(model, 2)
    gen = torch.Generator().manual_seed(0)
    out: dict[str, list] = {"x0": [], "frames": []}
    for _ in range(chunks):
        x = torch.randn(2, *model.spec.latent_shape, generator=gen).to(dtype)  # (B, F, C, h, w)
        for t in model.spec.timesteps:
            x0 = model.denoise(x, torch.full((2,), t), cond, pool.batch(slots))
            out["x0"].append(x0)
            x = x0 + 0.1 * t * (x - x0)
        out["frames"].append(model.decode(x))
        model.commit(x, cond, pool.batch(slots, commit=True))
    return out


def test_explicit_cpu_gives_bit_identical_frames():
    default, explicit = roll(tiny_embedded()), roll(tiny_embedded(device="cpu"))
    for key in default:
        for a, b in zip(default[key], explicit[key], strict=True):
            assert torch.equal(a, b)


def test_load_on_cpu_matches_default(tmp_path):
    tiny_embedded().save(tmp_path)
    a, b = EmbeddedModel.load(tmp_path), EmbeddedModel.load(tmp_path, device="cpu")
    assert a.device == b.device == torch.device("cpu")
    for x, y in zip(roll(a, chunks=2)["frames"], roll(b, chunks=2)["frames"], strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_results_on_the_inputs_device_and_dtype(dtype):
    model = tiny_embedded()
    out = roll(model, chunks=2, dtype=dtype)
    for x0 in out["x0"]:
        assert (x0.device, x0.dtype, x0.shape[1:]) == (torch.device("cpu"), dtype, model.spec.latent_shape)
    for frames in out["frames"]:
        assert (frames.device, frames.dtype) == (torch.device("cpu"), torch.uint8)
        assert frames.shape[1:] == (model.spec.frames_per_chunk, model.spec.height, model.spec.width, 3)


def test_state_lives_on_the_model_device():
    model = tiny_embedded(device="cpu")
    pool = model.new_pool(1)
    prompt = model.encode_prompt(PROMPTS[:1])[0]
    assert model.device == torch.device("cpu")
    assert {p.device for p in [*model.dit.parameters(), *model.ae.parameters()]} == {model.device}
    assert pool.k.device == pool.v.device == model.device
    assert {t.device for t in prompt.tensors.values()} == {model.device}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_cuda_without_cuda_is_a_clear_error(tmp_path):
    with pytest.raises(DeviceError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(DeviceError, match="CUDA is not available"):
        tiny_embedded(device="cuda")
    # Checked before any file is read: a missing GPU is not reported as missing weights.
    with pytest.raises(DeviceError, match="CUDA is not available"):
        EmbeddedModel.load(tmp_path / "nowhere", device="cuda")
    with pytest.raises(DeviceError, match="choose one of"):
        resolve_device("mps")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernels", ["default", "reference"])
def test_cuda_model_matches_cpu_and_returns_to_the_cpu(kernels, monkeypatch):
    """Default dispatch: Triton attention. `reference`: the torch path, on a GPU one masked SDPA
    over the batch (two sessions here) rather than the CPU's per-sample loop."""
    if kernels == "reference":
        monkeypatch.setenv("STREAMER_KERNELS", "reference")
    cpu, gpu = tiny_embedded(), tiny_embedded(device="cuda")
    assert gpu.new_pool(1).k.is_cuda
    # Plain fp32 convolutions (cuDNN may use TF32 by default), so only summation order differs.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        a, b = roll(cpu, chunks=2), roll(gpu, chunks=2)
    for x, y in zip(a["x0"], b["x0"], strict=True):
        assert y.device.type == "cpu" and y.dtype == torch.float32
        torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-3)  # GPU attention vs the CPU's SDPA loop
    for x, y in zip(a["frames"], b["frames"], strict=True):
        assert y.device.type == "cpu" and y.dtype == torch.uint8
        diff = (x.int() - y.int()).abs()
        assert diff.max() <= 3 and diff.float().mean() < 0.1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_evaluator_rollout_on_cuda_matches_cpu():
    """`streamer eval --device cuda`: the evaluator's rollouts run with the model on the GPU and
    hand back the CPU model's frames."""
    cpu, gpu = tiny_embedded(), tiny_embedded(device="cuda")
    scripts, _ = story_scripts(np.random.default_rng(0), 2, 3, cpu.spec.frames_per_chunk)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        a, b = rollout(cpu, scripts).frames, rollout(gpu, scripts).frames
    diff = np.abs(a.astype(int) - b.astype(int))
    assert diff.max() <= 3 and diff.mean() < 0.1
