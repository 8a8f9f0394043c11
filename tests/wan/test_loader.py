"""Loading a local checkpoint folder: diffusers layout, original layout, and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from streamer.engine_factory import build_model  # noqa: E402
from streamer.models.wan.config import WanLoadError  # noqa: E402
from streamer.models.wan.convert import to_original  # noqa: E402
from streamer.models.wan.model import WanCausalModel  # noqa: E402
from tests.wan.helpers import cond, tiny  # noqa: E402

pytestmark = pytest.mark.wan

WORDS = "a red fox running through snow city street at night".split()


def save_tokenizer(folder: Path) -> None:
    """A tiny word-level tokenizer, built and saved locally (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(folder))


def save_folder(model: WanCausalModel, root: Path, original_layout: bool = False) -> Path:
    net = model.net.net
    if original_layout:
        (root / "transformer").mkdir(parents=True)
        (root / "transformer" / "config.json").write_text(json.dumps(dict(net.config)))
        state = {f"model.{k}": v for k, v in to_original(net.state_dict()).items()}
        torch.save({"generator_ema": state}, root / "transformer" / "self_forcing_dmd.pt")
    else:
        net.save_pretrained(str(root / "transformer"))
    model.vae.vae.save_pretrained(str(root / "vae"))
    model.text.encoder.save_pretrained(str(root / "text_encoder"))
    save_tokenizer(root / "tokenizer")
    (root / "streamer.json").write_text(json.dumps(model.cfg.to_json()))
    return root


@pytest.fixture(scope="module")
def source() -> WanCausalModel:
    return tiny()


@pytest.fixture(scope="module")
def folder(source, tmp_path_factory) -> Path:
    return save_folder(source, tmp_path_factory.mktemp("wan") / "ckpt")


def assert_same_weights(a: WanCausalModel, b: WanCausalModel) -> None:
    for ma, mb in ((a.net.net, b.net.net), (a.vae.vae, b.vae.vae)):
        sa, sb = ma.state_dict(), mb.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("original_layout", [False, True])
def test_folder_loads_and_generates(source, tmp_path, original_layout):
    root = save_folder(source, tmp_path / "ckpt", original_layout)
    model = WanCausalModel.load(root, device="cpu")
    assert_same_weights(source, model)
    assert model.cfg == source.cfg and model.spec == source.spec
    prompts = model.encode_prompt(["a red fox running through snow", "an unknown word"])
    assert prompts[0].tensors["text"].shape == (model.cfg.text_len, 16)
    assert prompts[0].unknown_words == []
    pool = model.new_pool(1)
    slot = pool.allocate()
    x = torch.randn(1, *model.spec.latent_shape)
    x0 = model.denoise(x, torch.tensor([1.0]), cond(model, prompts[:1]), pool.batch([slot]))
    assert torch.isfinite(x0).all()


def test_engine_factory_loads_weights_folder(folder):
    model = build_model("wan-causal", None, str(folder))
    assert isinstance(model, WanCausalModel) and model.spec.name == "wan-causal"


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda r: (r / "transformer" / "config.json").unlink(), r"missing file: .*transformer/config\.json"),
        (lambda r: (r / "transformer" / "diffusion_pytorch_model.safetensors").unlink(),
         r"missing file: .*transformer/diffusion_pytorch_model\.safetensors"),
        (lambda r: (r / "vae" / "diffusion_pytorch_model.safetensors").unlink(),
         r"missing file: .*vae/diffusion_pytorch_model\.safetensors"),
        (lambda r: shutil.rmtree(r / "tokenizer"), r"missing folder: .*tokenizer"),
        (lambda r: (r / "streamer.json").write_text('{"chunk": 3}'), r"streamer\.json: unknown field 'chunk'"),
        (lambda r: (r / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"junk"),
         r"transformer/diffusion_pytorch_model\.safetensors: cannot read weights"),
    ],
)
def test_broken_folder_names_the_file(folder, tmp_path, breakage, message):
    root = tmp_path / "ckpt"
    shutil.copytree(folder, root)
    breakage(root)
    with pytest.raises(WanLoadError, match=message):
        WanCausalModel.load(root, device="cpu")


def _edit_transformer(root: Path, edit) -> None:
    from safetensors.torch import load_file

    path = root / "transformer" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(path))
    edit(state)
    save_file(state, str(path))


def test_missing_key_is_named(folder, tmp_path):
    root = tmp_path / "ckpt"
    shutil.copytree(folder, root)
    _edit_transformer(root, lambda s: s.pop("blocks.1.attn2.to_k.weight"))
    with pytest.raises(WanLoadError, match=r"diffusion_pytorch_model\.safetensors: missing key 'blocks\.1\.attn2\.to_k\.weight'"):
        WanCausalModel.load(root, device="cpu")


def test_mismatched_shape_is_named(folder, tmp_path):
    root = tmp_path / "ckpt"
    shutil.copytree(folder, root)
    _edit_transformer(root, lambda s: s.update({"proj_out.weight": torch.zeros(3, 3)}))
    with pytest.raises(WanLoadError, match=r"key 'proj_out\.weight' has shape \(3, 3\), its config expects"):
        WanCausalModel.load(root, device="cpu")


def test_unexpected_original_key_is_named(source, tmp_path):
    root = save_folder(source, tmp_path / "ckpt", original_layout=True)
    path = root / "transformer" / "self_forcing_dmd.pt"
    ckpt = torch.load(path, weights_only=True)
    ckpt["generator_ema"]["model.blocks.0.self_attn.lora_A.weight"] = torch.zeros(2, 2)
    torch.save(ckpt, path)
    with pytest.raises(WanLoadError, match=r"self_forcing_dmd\.pt: key 'blocks\.0\.self_attn\.lora_A\.weight'"):
        WanCausalModel.load(root, device="cpu")


def test_not_a_folder(tmp_path):
    with pytest.raises(WanLoadError, match="checkpoint folder not found"):
        WanCausalModel.load(tmp_path / "nowhere", device="cpu")
