"""The original CausalWanModel key layout <-> diffusers, checked three ways: a synthetic state dict
written from the original module tree round-trips exactly, it fits diffusers' model (names and
shapes), and it agrees with diffusers' own single-file converter."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers  # noqa: E402

from streamer.models.wan.config import WanLoadError  # noqa: E402
from streamer.models.wan.convert import mapping_rows, to_diffusers, to_original, unwrap  # noqa: E402
from streamer.models.wan.loader import load_checked  # noqa: E402
from streamer.models.wan.tiny import TINY_TRANSFORMER  # noqa: E402

pytestmark = pytest.mark.wan


def original_layout(dim: int, ffn: int, layers: int, in_ch: int, out_ch: int, text_dim: int, freq_dim: int,
                    patch=(1, 2, 2)) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of Wan's `WanModel`/`CausalWanModel` (t2v), from its module tree."""
    shapes: dict[str, tuple[int, ...]] = {}

    def linear(name: str, n_in: int, n_out: int) -> None:
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (n_out, n_in), (n_out,)

    shapes["patch_embedding.weight"], shapes["patch_embedding.bias"] = (dim, in_ch, *patch), (dim,)
    linear("text_embedding.0", text_dim, dim)
    linear("text_embedding.2", dim, dim)
    linear("time_embedding.0", freq_dim, dim)
    linear("time_embedding.2", dim, dim)
    linear("time_projection.1", dim, 6 * dim)
    for i in range(layers):
        for attn in ("self_attn", "cross_attn"):
            for proj in "qkvo":
                linear(f"blocks.{i}.{attn}.{proj}", dim, dim)
            shapes[f"blocks.{i}.{attn}.norm_q.weight"] = shapes[f"blocks.{i}.{attn}.norm_k.weight"] = (dim,)
        shapes[f"blocks.{i}.norm3.weight"] = shapes[f"blocks.{i}.norm3.bias"] = (dim,)
        linear(f"blocks.{i}.ffn.0", dim, ffn)
        linear(f"blocks.{i}.ffn.2", ffn, dim)
        shapes[f"blocks.{i}.modulation"] = (1, 6, dim)
    linear("head.head", dim, out_ch * math.prod(patch))
    shapes["head.modulation"] = (1, 2, dim)
    return shapes


def synthetic_original(seed: int = 0) -> dict[str, torch.Tensor]:
    c = TINY_TRANSFORMER
    dim = c["num_attention_heads"] * c["attention_head_dim"]
    layout = original_layout(dim, c["ffn_dim"], c["num_layers"], c["in_channels"], c["out_channels"],
                             c["text_dim"], c["freq_dim"])
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shape, generator=g) for k, shape in layout.items()}


def test_round_trip_is_exact():
    original = synthetic_original()
    back = to_original(to_diffusers(original))
    assert back.keys() == original.keys()
    assert all(back[k] is original[k] for k in original)


def test_converted_keys_and_shapes_fit_diffusers_model():
    converted = to_diffusers(synthetic_original())
    model = WanTransformer3DModel(**TINY_TRANSFORMER)
    expected = model.state_dict()
    assert converted.keys() == expected.keys()
    assert all(converted[k].shape == expected[k].shape for k in expected)
    loaded = load_checked(WanTransformer3DModel, dict(model.config), converted, "synthetic")
    assert torch.equal(loaded.state_dict()["blocks.1.norm2.weight"], converted["blocks.1.norm2.weight"])


def test_mapping_agrees_with_diffusers_single_file_converter():
    """Same shapes cannot tell q from k or norm2 from norm3; diffusers' own converter can."""
    original = synthetic_original()
    ours = to_diffusers(original)
    theirs = convert_wan_transformer_to_diffusers(dict(original))
    assert ours.keys() == theirs.keys()
    assert all(ours[k] is theirs[k] for k in ours)


def test_training_checkpoint_is_unwrapped():
    original = synthetic_original()
    ckpt = {
        "generator": {f"model.{k}": torch.zeros_like(v) for k, v in original.items()},
        "generator_ema": {f"model._fsdp_wrapped_module.{k}": v for k, v in original.items()},
        "step": torch.tensor(1000),
    }
    state = unwrap(ckpt, "ckpt.pt")  # the EMA generator by default (Self-Forcing samples with it)
    assert state.keys() == original.keys() and all(state[k] is original[k] for k in state)
    plain = unwrap(ckpt, "ckpt.pt", key="generator")  # LongLive samples with the plain generator
    assert plain.keys() == original.keys() and all(not v.any() for v in plain.values())
    with pytest.raises(WanLoadError, match=r"ckpt\.pt: no state dict under key 'critic'"):
        unwrap(ckpt, "ckpt.pt", key="critic")


def test_unknown_key_is_named():
    original = synthetic_original()
    original["blocks.0.cross_attn.k_img.weight"] = torch.zeros(1)
    with pytest.raises(WanLoadError, match=r"ckpt\.pt: key 'blocks\.0\.cross_attn\.k_img\.weight'"):
        to_diffusers(original, "ckpt.pt")


def test_docs_table_lists_every_stem():
    rows = dict(mapping_rows())
    assert rows["blocks.N.norm3"] == "blocks.N.norm2"
    assert rows["head.modulation"] == "scale_shift_table"
    assert len(rows) == 24
