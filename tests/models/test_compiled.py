"""`--compile`: the embedded model's blocks under torch.compile compute what the eager blocks do.

One test compiles a tiny model (about 15 s of inductor on the 2-core CI machine); speed is
measured in benchmarks/engine.py --compile, not here.
"""

from __future__ import annotations

import pytest
import torch

from streamer.engine_factory import build_model, tiny_embedded
from streamer.models.base import Conditioning
from streamer.models.compiled import CompileError

TOL = 1e-4  # fp32: inductor fuses and reorders the sums of norms and products, nothing else


def staggered_rollout(model, chunks: int = 5) -> list[torch.Tensor]:
    """Three sessions joining one chunk apart, so every batch mixes cache lengths (1, 2, 3 samples;
    windows roll after 3 chunks): per chunk one denoise pass, one commit, the decoded frames."""
    spec = model.spec
    gen = torch.Generator().manual_seed(0)
    pool = model.new_pool(3)
    slots = [pool.allocate() for _ in range(3)]
    prompts = model.encode_prompt(["a red ball moving left on grass", "a blue square moving up on sea",
                                   "a green ball bouncing on sand"])  # fmt: skip
    frames = []
    for k in range(chunks):
        n = min(3, k + 1)
        cond = Conditioning(prompts[:n], torch.randint(0, spec.num_actions, (n, spec.frames_per_chunk), generator=gen),
                            torch.rand(n, spec.frames_per_chunk, spec.control_dim, generator=gen))  # fmt: skip
        x = torch.randn(n, *spec.latent_shape, generator=gen)
        t = torch.tensor([0.9, 0.5, 0.75][:n])
        x0 = model.denoise(x, t, cond, pool.batch(slots[:n]))
        model.commit(x0, cond, pool.batch(slots[:n], commit=True))
        frames.append(x0)
    frames.append(model.decode(x0).float())
    return frames


def test_compiled_blocks_equal_eager_blocks_across_batch_sizes_and_cache_lengths():
    from torch._dynamo.utils import counters

    eager, comp = tiny_embedded(seed=3), tiny_embedded(seed=3)
    comp.compile()
    assert comp.compiled and not eager.compiled
    graphs = counters["stats"]["unique_graphs"]
    got = staggered_rollout(comp)
    assert counters["stats"]["unique_graphs"] > graphs  # the blocks did run compiled
    *latents, frames = got
    *want_latents, want_frames = staggered_rollout(eager)
    for g, want in zip(latents, want_latents, strict=True):
        torch.testing.assert_close(g, want, rtol=TOL, atol=TOL)
    # uint8 frames: a 1e-4 difference next to a rounding boundary flips one level (seen once in
    # 18,432 values on one host), so one level is the tolerance there.
    torch.testing.assert_close(frames, want_frames, rtol=0, atol=1)


def test_compile_without_a_cpp_compiler_is_a_clear_error(monkeypatch):
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config.cpp, "cxx", ("no-such-c++-compiler",))
    model = tiny_embedded()
    with pytest.raises(CompileError, match="C\\+\\+ compiler"):
        model.compile()
    assert not model.compiled


def test_compile_is_for_the_embedded_model_only():
    with pytest.raises(ValueError, match="--compile is for the embedded model"):
        build_model("wan-causal", "tiny-random", None, compile=True)


@pytest.mark.parametrize(("mode", "message"), [
    ("reduce-overhead", "needs a model on a GPU"),  # CUDA graphs: torch would skip them on a CPU, silently
    ("fastest", "expected one of"),
])  # fmt: skip
def test_a_mode_the_device_cannot_run_is_a_clear_error(mode, message):
    model = tiny_embedded()
    with pytest.raises(CompileError, match=message):
        model.compile(mode)
    assert not model.compiled
